"""The fleet recovery API: preview (read scope, changes nothing), run and undo (the `recover` scope), progress; a
token reaches its own project only, and bad input is a 4xx that changes nothing."""

from __future__ import annotations

import pytest

from checkpoints.audit import Actor
from checkpoints.models import AgentSession, AuditEvent, Checkpoint, Recovery
from checkpoints.services import create_api_token
from checkpoints.services.fleet import Reach, Selection, start_recovery
from checkpoints.services.targets import TargetRule

BODY = {"action": "restore", "target": {"rule": "last_good"}, "reason": "search API outage"}


@pytest.fixture
def broken(make_session, make_checkpoint):
    def make(external_id: str, *, project=None):
        session = make_session(external_id, in_project=project)
        make_checkpoint(session, {"ok": 1}, name="plan")
        make_checkpoint(session, {"ok": 2})
        make_checkpoint(session, {"down": 1}, status="failed")
        make_checkpoint(session, {"down": 2}, status="failed")
        return session

    return make


@pytest.fixture
def recover_api(project, api_as):
    return api_as(create_api_token(project, name="on-call", scopes=["read", "recover"])[1])


def fingerprint():
    return (
        Checkpoint.objects.count(),
        AuditEvent.objects.count(),
        Recovery.objects.count(),
        sorted(AgentSession.objects.values_list("pk", "head_id")),
    )


def test_the_preview_answers_a_row_per_session_and_changes_nothing(
    broken, read_only_api, make_session, make_checkpoint
):
    broken("run-a"), broken("run-b")
    fine = make_session("run-ok")
    make_checkpoint(fine, {"ok": 1})
    before = fingerprint()
    response = read_only_api.post("/recoveries/preview", BODY)
    assert response.status_code == 200, response.content
    assert fingerprint() == before
    rows = {row["session"]: row for row in response.json()["preview"]}
    assert rows["run-a"]["result"] == "restore" and rows["run-a"]["target"]["seq"] == 2
    assert rows["run-a"]["discarded_checkpoints"] == 2
    assert rows["run-ok"]["result"] == "skipped" and rows["run-ok"]["reason"].startswith("no_failure")
    assert response.json()["totals"] == {
        "sessions": 3, "recover": 2, "skipped": 1, "discarded_checkpoints": 4, "discarded_tool_calls": 0,
    }  # fmt: skip


def test_running_needs_the_recover_scope_and_writes_nothing_without_it(broken, api, read_only_api):
    broken("run-a")
    before = fingerprint()
    for client in (api, read_only_api):  # read+write, and read: neither holds recover
        response = client.post("/recoveries", BODY)
        assert response.status_code == 403 and "recover" in response.json()["detail"]
    assert fingerprint() == before


def test_a_run_restores_and_its_progress_and_undo_are_readable(broken, recover_api, django_capture_on_commit_callbacks):
    a = broken("run-a")
    with django_capture_on_commit_callbacks(execute=True):
        response = recover_api.post("/recoveries", {**BODY, "sessions": ["run-a"]})
    assert response.status_code == 202, response.content
    recovery_id = response.json()["id"]
    assert response.json()["state"] == "queued"
    body = recover_api.get(f"/recoveries/{recovery_id}").json()
    assert body["state"] == "finished" and body["counts"] == {"total": 1, "done": 1, "skipped": 0, "failed": 0}
    [item] = body["sessions"]
    a.refresh_from_db()
    assert item["result"] == "restored" and item["target"]["seq"] == 2 and item["new_head"]["id"] == a.head_id
    undo = recover_api.post(f"/recoveries/{recovery_id}/undo", {"reason": "wrong call"})
    assert undo.status_code == 200 and undo.json() == {"undone": 1, "archived": 0, "kept": []}
    assert recover_api.post(f"/recoveries/{recovery_id}/undo", {}).status_code == 409


def test_a_token_reaches_its_own_project_only(broken, other_project, recover_api, api_as, project):
    theirs = broken("run-b", project=other_project)
    before = fingerprint()
    named = recover_api.post("/recoveries", {**BODY, "sessions": ["run-b"]})  # another project's session
    assert named.status_code == 422 and "no session" in named.content.decode()
    assert recover_api.post("/recoveries/preview", {**BODY, "sessions": ["run-b"]}).status_code == 422
    assert fingerprint() == before
    row, secret = create_api_token(other_project, name="theirs", scopes=["read", "recover"])
    other_token = api_as(secret)
    foreign = start_recovery(
        Selection("restore", TargetRule()), Reach.for_token(row), actor=Actor.system(), reason="theirs",
        start=lambda pk: None,
    )  # fmt: skip
    assert recover_api.get(f"/recoveries/{foreign.pk}").status_code == 404
    assert recover_api.post(f"/recoveries/{foreign.pk}/undo", {}).status_code == 404
    assert other_token.get(f"/recoveries/{foreign.pk}").status_code == 200
    theirs.refresh_from_db()
    assert theirs.restore_generation == 0


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**BODY, "filter": {"alert_state": "sideways"}}, "alert_state"),
        # a kind no detector has, and one with a NUL (PostgreSQL refused it in the query: 500, found by schemathesis)
        ({**BODY, "filter": {"alert_kind": "wobble"}}, "alert_kind"),
        ({**BODY, "filter": {"alert_kind": "(\x00\u00a5"}}, "alert_kind"),
        ({**BODY, "filter": {"colour": "red"}}, "colour"),
        ({**BODY, "target": {"rule": "before"}}, "target.at"),
        ({**BODY, "target": {"rule": "named"}}, "target.name"),
        ({**BODY, "target": {"rule": "yesterday"}}, "rule"),
        ({**BODY, "action": "delete"}, "action"),
        ({**BODY, "sessions": []}, "sessions"),
        (
            {**BODY, "filter": {"opened_since": "2026-03-12T10:00:00Z", "opened_until": "2026-03-12T09:00:00Z"}},
            "opened_until",
        ),
        ({**BODY, "reason": ""}, "reason"),
    ],
)
def test_bad_input_is_a_4xx_naming_the_field_and_changes_nothing(broken, recover_api, body, field):
    broken("run-a")
    before = fingerprint()
    response = recover_api.post("/recoveries", body)
    assert 400 <= response.status_code < 500 and field in response.content.decode(), response.content
    assert fingerprint() == before
