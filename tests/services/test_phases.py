"""Phases: validation, sanitised markdown, reviewers' decisions, Haytham write-back and the agent-side API."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from checkpoints import services
from checkpoints.models import AgentOutput, AgentSession, AuditEvent, Phase, PhaseFeedback, PhaseStatus
from checkpoints.phases import (
    is_valid,
    render_markdown,
    sessions_waiting_for_approval,
    standing_approval,
    validate_phase,
    waiting_for_approval,
)
from checkpoints.services.file_import import import_path
from checkpoints.services.phases import FeedbackRefused, import_agent_output, record_feedback
from checkpoints.sources.formats import haytham
from tests.helpers import select, text

HAYTHAM = Path(__file__).resolve().parents[1] / "fixtures" / "haytham" / "handwritten"
T0 = datetime(2026, 6, 1, 10, 0, tzinfo=UTC)
SYSTEM = services.Actor.system("test")


@pytest.fixture
def make_phase(make_session):
    def make(number: int = 1, *, session=None, status: str = PhaseStatus.COMPLETED, outputs: int = 1, **fields):
        phase = Phase.objects.create(
            session=session or make_session(),
            number=number,
            name=fields.pop("name", "Concept Expansion"),
            status=status,
            started_at=T0,
            completed_at=T0 + timedelta(minutes=2) if status == PhaseStatus.COMPLETED else None,
            **fields,
        )
        for i in range(outputs):
            AgentOutput.objects.create(phase=phase, agent_name=f"agent_{i}", status="completed", content="# Done")
        return phase

    return make


# ---- validation ----------------------------------------------------------------------------------


def test_a_completed_phase_with_outputs_passes_every_check(make_phase):
    phase = make_phase()
    checks = validate_phase(phase, list(phase.outputs.all()))
    assert is_valid(checks)
    assert [check.label for check in checks][:2] == ["Phase has a name", "Status is completed"]


def test_missing_outputs_empty_content_errors_and_status_fail_their_checks(make_phase):
    phase = make_phase(status=PhaseStatus.IN_PROGRESS, outputs=0, errors=["timeout"])
    failing = {check.label for check in validate_phase(phase, []) if not check.ok}
    assert failing == {
        "Status is completed",
        "Start and completion times recorded",
        "Has agent outputs",
        "Every output has content",
        "No phase errors",
    }
    empty = AgentOutput(phase=phase, agent_name="writer", content="  ", error="model overloaded")
    checks = {check.label: check for check in validate_phase(phase, [empty])}
    assert not checks["Every output has content"].ok and "writer" in checks["Every output has content"].detail
    assert not checks["No agent errors"].ok


def test_an_agent_run_again_is_judged_by_its_latest_attempt(make_phase):
    phase = make_phase(outputs=0)
    first = import_agent_output(phase, agent_name="validator", status="failed", error="rate exceeded", content="")
    again = import_agent_output(phase, agent_name="validator", status="completed", content="# Valid")
    repeat = import_agent_output(phase, agent_name="validator", status="completed", content="# Valid")

    assert [(output.attempt, created) for output, created in (first, again, repeat)] == [
        (1, True),
        (2, True),
        (2, False),
    ]
    assert is_valid(validate_phase(phase, list(phase.outputs.all())))  # the failed first run was redone
    assert phase.outputs.count() == 2  # and is still there, beside the redo


# ---- markdown ------------------------------------------------------------------------------------


def test_markdown_renders_tables_lists_and_code():
    html = render_markdown("| a | b |\n|---|---|\n| 1 | 2 |\n\n- one\n- two\n\n```python\nx = 1\n```\n")
    assert [text(cell) for cell in select(html, "table td")] == ["1", "2"]
    assert [text(item) for item in select(html, "li")] == ["one", "two"]
    assert [text(code) for code in select(html, "pre > code")] == ["x = 1"]


def test_markdown_never_lets_a_script_or_handler_through():
    html = render_markdown(
        '<script>alert("x")</script>\n\n<img src=x onerror="alert(1)">\n\n[link](javascript:alert(1)) **bold**'
    )
    assert "<script" not in html and "<img" not in html
    assert "&lt;script&gt;" in html and "&lt;img" in html  # shown as text
    assert 'href="javascript' not in html
    assert [text(bold) for bold in select(html, "strong")] == ["bold"]


# ---- decisions -----------------------------------------------------------------------------------


def test_requesting_changes_counts_a_retry_keeps_history_and_audits(make_phase, alice):
    phase = make_phase()
    actor = services.Actor.for_user(alice)
    first = record_feedback(
        phase, actor=actor, action="retry_with_changes", comments="Too vague", requested_changes=["Add pricing", " "]
    )
    phase.refresh_from_db()
    assert (phase.retry_count, phase.status) == (1, PhaseStatus.REQUIRES_RETRY)
    assert (first.retry_count, first.requested_changes, first.approved) == (1, ["Add pricing"], False)
    assert first.reviewer == alice and first.reviewer_name == "alice"
    event = AuditEvent.objects.get(action="phase_feedback")
    assert event.details["action"] == "retry_with_changes" and event.session_id == phase.session_id
    Phase.objects.filter(pk=phase.pk).update(status=PhaseStatus.COMPLETED)
    record_feedback(phase, actor=actor, action="approved")
    assert PhaseFeedback.objects.filter(phase=phase).count() == 2
    assert phase.feedback.first().action == "approved"  # newest first


def test_requesting_changes_without_a_change_is_refused(make_phase):
    phase = make_phase()
    with pytest.raises(FeedbackRefused, match="at least one"):
        record_feedback(phase, actor=SYSTEM, action="retry_with_changes", requested_changes=["  "])
    assert not PhaseFeedback.objects.exists()


def test_approving_an_unfinished_or_invalid_phase_is_refused(make_phase, make_session):
    running = make_phase(status=PhaseStatus.IN_PROGRESS)
    with pytest.raises(FeedbackRefused, match="has not completed"):
        record_feedback(running, actor=SYSTEM, action="approved")
    empty = make_phase(2, session=running.session, outputs=0)
    with pytest.raises(FeedbackRefused, match="fails validation"):
        record_feedback(empty, actor=SYSTEM, action="approved")
    assert not PhaseFeedback.objects.exists() and not AuditEvent.objects.filter(action="phase_feedback").exists()


def test_an_approved_phase_is_not_approved_again_until_the_agent_completes_it_again(make_phase, carol):
    phase = make_phase()
    record_feedback(phase, actor=services.Actor.for_user(carol), action="approved", now=T0 + timedelta(hours=1))
    with pytest.raises(FeedbackRefused, match="already approved \\(by carol\\); it cannot be approved again"):
        record_feedback(phase, actor=SYSTEM, action="approved", now=T0 + timedelta(hours=2))
    assert PhaseFeedback.objects.count() == 1
    assert AuditEvent.objects.filter(action="phase_feedback").count() == 1
    Phase.objects.filter(pk=phase.pk).update(completed_at=T0 + timedelta(hours=3))  # the agent ran it again
    phase.refresh_from_db()
    assert standing_approval(phase) is None
    record_feedback(phase, actor=SYSTEM, action="approved", now=T0 + timedelta(hours=4))
    assert standing_approval(phase) == PhaseFeedback.objects.latest("created_at")


def test_a_later_decision_replaces_the_standing_approval(make_phase):
    phase = make_phase()
    record_feedback(phase, actor=SYSTEM, action="approved", now=T0 + timedelta(hours=1))
    record_feedback(phase, actor=SYSTEM, action="rejected", now=T0 + timedelta(hours=2))
    assert standing_approval(phase) is None


def test_skipping_marks_the_phase_skipped_and_rejecting_keeps_its_status(make_phase):
    phase = make_phase(status=PhaseStatus.IN_PROGRESS)
    record_feedback(phase, actor=SYSTEM, action="rejected", comments="wrong direction")
    phase.refresh_from_db()
    assert phase.status == PhaseStatus.IN_PROGRESS
    record_feedback(phase, actor=SYSTEM, action="skip_phase")
    phase.refresh_from_db()
    assert phase.status == PhaseStatus.SKIPPED


def test_the_queue_holds_completed_phases_without_a_later_decision(make_phase, make_session):
    session = make_session()
    waiting = make_phase(1, session=session)
    decided = make_phase(2, session=session)
    make_phase(3, session=session, status=PhaseStatus.IN_PROGRESS)
    record_feedback(decided, actor=SYSTEM, action="approved", now=T0 + timedelta(hours=1))
    assert list(waiting_for_approval(Phase.objects.all())) == [waiting]
    assert list(sessions_waiting_for_approval(AgentSession.objects.all())) == [session]
    record_feedback(waiting, actor=SYSTEM, action="approved", now=T0 + timedelta(hours=1))
    assert not sessions_waiting_for_approval(AgentSession.objects.all()).exists()


# ---- Haytham write-back --------------------------------------------------------------------------


def test_a_decision_is_written_to_the_phase_user_feedback_md(tmp_path, db, django_capture_on_commit_callbacks):
    tree = tmp_path / "haytham"
    shutil.copytree(HAYTHAM, tree)
    import_path(tree, fmt="haytham", project=services.get_or_create_project("p"), actor=SYSTEM, write_back=True)
    session = AgentSession.objects.get(external_id="session-456")
    assert (session.source_format, session.write_back) == ("haytham", True)
    phase = session.phases.get(number=1)
    folder = tree / "projects" / "project-123" / "sessions" / "session-456" / "phase_1_concept"
    before = (folder / "user_feedback.md").read_text()
    Phase.objects.filter(pk=phase.pk).update(status=PhaseStatus.COMPLETED)
    with django_capture_on_commit_callbacks(execute=True):
        record_feedback(
            phase, actor=SYSTEM, action="retry_with_changes", comments="Sharper", requested_changes=["Name a persona"]
        )
    written = haytham._feedback((folder / "user_feedback.md").read_text())
    assert (written.action, written.requested_changes, written.comments) == (
        "retry_with_changes",
        ["Name a persona"],
        "Sharper",
    )
    assert written.retry_count == phase.retry_count + 1
    history = folder.parent / haytham.HISTORY / folder.name
    assert [p.read_text() for p in history.glob("user_feedback.*.md")] == [before]  # kept, where Haytham never reads
    assert sorted(p.name for p in folder.iterdir()) == ["checkpoint.md", "concept_expansion.md", "user_feedback.md"]
    assert not [p for p in tree.rglob("*.tmp")]
    assert AuditEvent.objects.filter(action="write_back", session=session).exists()


def test_a_session_without_write_back_writes_no_file(tmp_path, db, django_capture_on_commit_callbacks):
    tree = tmp_path / "haytham"
    shutil.copytree(HAYTHAM, tree)
    import_path(tree, fmt="haytham", project=services.get_or_create_project("p"), actor=SYSTEM)
    session = AgentSession.objects.get(external_id="session-456")
    folder = tree / "projects" / "project-123" / "sessions" / "session-456" / "phase_1_concept"
    before = sorted(p.name for p in folder.iterdir())
    with django_capture_on_commit_callbacks(execute=True):
        record_feedback(session.phases.get(number=1), actor=SYSTEM, action="rejected")
    assert sorted(p.name for p in folder.iterdir()) == before


# ---- the agent-side API --------------------------------------------------------------------------


def test_agent_round_trip_report_output_review_and_poll(api, make_session, carol):
    make_session("idea-1")
    path = "/sessions/idea-1/phases/1"
    assert api.get(f"{path}/feedback").status_code == 404
    response = api.put(path, {"name": "Concept Expansion", "status": "in_progress", "started_at": "2026-06-01T10:00"})
    assert response.status_code == 201, response.content
    assert response.json()["started_at"].startswith("2026-06-01T10:00:00")
    output = api.post(
        f"{path}/outputs",
        {"agent_name": "concept_expansion", "status": "completed", "content": "## Idea\n- fridge", "tokens_in": 10},
    )
    assert output.status_code == 201 and output.json()["agent_name"] == "concept_expansion"
    done = api.put(
        path,
        {
            "status": "completed",
            "completed_at": "2026-06-01T10:05:00Z",
            "duration": 300,
            "cost": 0.0125,
            "tokens_out": 9,
        },
    )
    assert done.status_code == 200
    assert (done.json()["name"], done.json()["cost"], done.json()["tokens_out"]) == ("Concept Expansion", 0.0125, 9)
    none_yet = api.get(f"{path}/feedback")
    assert none_yet.status_code == 404 and "no feedback yet" in none_yet.json()["detail"]

    phase = Phase.objects.get(session__external_id="idea-1", number=1)
    record_feedback(phase, actor=services.Actor.for_user(carol), action="approved", comments="Good")

    feedback = api.get(f"{path}/feedback").json()
    assert (feedback["action"], feedback["approved"], feedback["comments"]) == ("approved", True, "Good")
    assert (feedback["requested_changes"], feedback["retry_count"], feedback["reviewer"]) == ([], 0, "carol")


def test_a_new_phase_needs_a_name_and_outputs_need_a_phase(api, make_session):
    make_session("idea-1")
    response = api.put("/sessions/idea-1/phases/2", {"status": "pending"})
    assert response.status_code == 422 and "name" in response.json()["detail"]
    assert api.post("/sessions/idea-1/phases/2/outputs", {"agent_name": "a"}).status_code == 404
    assert api.put("/sessions/idea-1/phases/2", {"name": "X", "bogus": 1}).status_code == 422
    assert api.put("/sessions/idea-1/phases/2", {"name": "X", "status": "done"}).status_code == 422
    assert api.put("/sessions/nope/phases/2", {"name": "X"}).status_code == 404


def test_reporting_phases_needs_the_write_scope(read_only_api, make_session):
    make_session("idea-1")
    response = read_only_api.put("/sessions/idea-1/phases/1", {"name": "Concept"})
    assert response.status_code == 403
    assert read_only_api.post("/sessions/idea-1/phases/1/outputs", {"agent_name": "a"}).status_code == 403
    assert not Phase.objects.exists()


def test_phases_of_another_project_are_not_found(api, make_session, other_project, make_phase):
    elsewhere = make_session("idea-1", in_project=other_project)
    make_phase(1, session=elsewhere)
    assert api.get("/sessions/idea-1/phases/1/feedback").status_code == 404
