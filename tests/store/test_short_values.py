"""Where the domain cuts a value to a line (`humanize.short_value`): API field errors, job errors, fork titles."""

from __future__ import annotations

from checkpoints import services
from checkpoints.models import AgentSession
from checkpoints.services.batches import ERROR_CHARS, Failures
from checkpoints.services.recovery import TITLE_MAX


def test_a_long_field_error_message_is_cut_to_300_characters(api):
    unknown = [f"{n:02d}" + "k" * 60 for n in range(11)]
    response = api.post("/sessions", {"external_id": "run-1", "agent": "agent-7", **dict.fromkeys(unknown, 1)})

    assert response.status_code == 422
    named = ", ".join(repr(key[:50]) for key in unknown[:10])
    assert response.json()["detail"][0]["msg"] == f"Value error, unknown field(s): {named} and 1 more"[:299] + "…"


def test_a_short_field_error_message_is_sent_as_it_is(api):
    response = api.post("/sessions", {"external_id": "run-1", "agent": "agent-7", "k0": 1})

    assert response.json()["detail"][0]["msg"] == "Value error, unknown field(s): 'k0'"


def test_a_failed_sessions_error_is_its_type_and_message_cut_to_error_chars(db):
    failures = Failures(label=str)
    failures.record(1, ValueError("x" * 1000))
    failures.record(2, ValueError("broken"))

    long, short = (error["error"] for error in failures.errors)
    assert long == "ValueError: " + "x" * (ERROR_CHARS - len("ValueError: ") - 1) + "…"
    assert short == "ValueError: broken"


def test_a_fork_of_a_long_titled_session_fills_the_title_column_exactly(make_session, make_checkpoint):
    source = make_session("run-1")
    AgentSession.objects.filter(pk=source.pk).update(title="t" * TITLE_MAX)
    checkpoint = make_checkpoint(source, {"step": 1})
    checkpoint.session.refresh_from_db()

    fork = services.fork_session(checkpoint, actor=services.Actor.system("test"))

    assert fork.title == "Fork of " + "t" * (TITLE_MAX - len("Fork of … at #1")) + "… at #1"
    assert len(fork.title) == TITLE_MAX
