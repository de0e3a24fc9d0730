from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from checkpoints.jobs import run_job
from checkpoints.models import (
    AlertSeverity,
    Channel,
    DriftAlert,
    Event,
    EventType,
    ImportJob,
    NotificationRule,
    PhaseStatus,
)
from checkpoints.outbox.webhooks import create_webhook
from checkpoints.services import (
    Actor,
    StateEdit,
    edit_state,
    fork_session,
    resolve_alert,
    restore_checkpoint,
    undo_restore,
)
from checkpoints.services.drift import Finding, sync_alerts
from checkpoints.services.phases import record_feedback, report_phase
from checkpoints.services.uploads import run_import_job

ALICE = Actor.system("alice")


@pytest.fixture
def everything(project, receiver):
    """An endpoint of the project subscribed to every event type."""
    return create_webhook(project, url=receiver.url, events=EventType.values, actor=ALICE)


@pytest.fixture
def sent(receiver, django_capture_on_commit_callbacks):
    """Run a block with its on-commit work (the first attempts), then the bodies received: `with sent() as got`."""

    class Sent:
        def __enter__(self):
            self.capture = django_capture_on_commit_callbacks(execute=True)
            self.capture.__enter__()
            self.before = len(receiver.received)
            return self

        def __exit__(self, *exc):
            self.capture.__exit__(*exc)
            self.bodies = [got.json for got in receiver.received[self.before :]]

        def types(self):
            return [body["type"] for body in self.bodies]

        def of(self, type):
            [body] = [body for body in self.bodies if body["type"] == type]
            return body["data"]

    return Sent


def test_restoring_announces_session_restored_with_the_target_and_who(everything, make_session, make_checkpoint, sent):
    session = make_session()
    first = make_checkpoint(session, {"n": 1}, name="one")
    make_checkpoint(session, {"n": 2})
    with sent() as got:
        restored = restore_checkpoint(first, actor=ALICE, reason="bad turn")
    data = got.of("session.restored")
    assert (data["checkpoint"]["id"], data["checkpoint"]["kind"]) == (restored.pk, "restore")
    assert (data["target"]["id"], data["target"]["name"]) == (first.pk, "one")
    assert data["actor"] == "alice"
    assert data["session"]["id"] == "run-1"

    with sent() as got:
        undo_restore(session, actor=ALICE)
    assert got.of("session.restored")["target"]["seq"] == 2


def test_an_edit_announces_session_restored_as_a_restore_does(everything, make_session, make_checkpoint, sent):
    session = make_session()
    first = make_checkpoint(session, {"n": 1}, name="one")
    make_checkpoint(session, {"n": 2})
    with sent() as got:
        edited = edit_state(first, [StateEdit("/n", 5)], actor=ALICE, reason="wrong count")
    data = got.of("session.restored")
    assert (data["checkpoint"]["id"], data["checkpoint"]["kind"]) == (edited.pk, "edit")
    assert (data["target"]["id"], data["actor"]) == (first.pk, "alice")
    assert data["session"]["id"] == "run-1"


def test_forking_announces_the_new_session_and_its_source(everything, make_session, make_checkpoint, sent):
    source = make_checkpoint(make_session(), {"n": 1})
    with sent() as got:
        fork = fork_session(source, actor=ALICE, title="try again")
    data = got.of("session.forked")
    assert (data["session"]["id"], data["session"]["title"]) == (fork.external_id, "try again")
    assert data["source_session"]["id"] == "run-1"
    assert data["source_checkpoint"]["id"] == source.pk


def test_an_alert_opening_escalating_and_resolving_is_announced_with_one_dedupe_key(
    everything, make_session, make_checkpoint, sent
):
    session = make_session()
    good = make_checkpoint(session, {"n": 1})
    bad = make_checkpoint(session, {"n": 2})
    seen = {c.pk: c for c in sync_seen(session)}

    def finding(severity):
        return Finding("stalled", severity, f"stalled ({severity})", {}, seen[bad.pk], seen[good.pk])

    with sent() as got:
        sync_alerts(session, [finding(AlertSeverity.WARNING)], kinds=["stalled"], now=bad.received_at)
        sync_alerts(session, [finding(AlertSeverity.CRITICAL)], kinds=["stalled"], now=bad.received_at)
        resolve_alert(DriftAlert.objects.get(), actor=ALICE, reason="fixed")
    assert got.types() == ["alert.opened", "alert.escalated", "alert.resolved"]
    opened = got.of("alert.opened")
    assert (opened["alert"]["kind"], opened["alert"]["severity"], opened["alert"]["state"]) == (
        "stalled",
        "warning",
        "open",
    )
    assert opened["alert"]["last_good"]["id"] == good.pk
    assert got.of("alert.escalated")["previous_severity"] == "warning"
    assert got.of("alert.resolved")["alert"]["state"] == "resolved"
    assert {e.dedupe_key for e in Event.objects.filter(type__startswith="alert.")} == {f"alert:{session.pk}:stalled"}


def test_a_failed_checkpoint_opens_an_alert_the_detectors_resolve_and_both_are_announced(
    everything, make_session, make_checkpoint, sent
):
    session = make_session()
    make_checkpoint(session, {"n": 1})
    with sent() as got:
        make_checkpoint(session, {"n": 2}, status="failed", status_reason="tool crashed")
    assert "alert.opened" in got.types()
    with sent() as got:
        make_checkpoint(session, {"n": 3})
    assert got.of("alert.resolved")["alert"]["kind"] == "failed"


def test_a_completed_phase_announces_that_it_waits_and_the_decision_is_announced(everything, make_session, sent):
    session = make_session()
    report_phase(session, 1, actor=ALICE, name="Plan", status=PhaseStatus.IN_PROGRESS)
    with sent() as got:
        phase, _ = report_phase(session, 1, actor=ALICE, status=PhaseStatus.COMPLETED)
        report_phase(session, 1, actor=ALICE, tokens_in=5)  # still completed: waiting already announced
    assert got.types() == ["phase.waiting"]
    waiting = got.of("phase.waiting")
    assert waiting["phase"]["number"] == 1
    assert waiting["phase"]["url"].endswith(f"/sessions/{session.pk}/phases/1/")
    assert Event.objects.get(type="phase.waiting").dedupe_key == f"phase:{session.pk}:1"

    with sent() as got:
        record_feedback(phase, actor=ALICE, action="rejected", comments="not this way")
    feedback = got.of("phase.feedback")["feedback"]
    assert (feedback["action"], feedback["approved"], feedback["comments"]) == ("rejected", False, "not this way")
    assert feedback["reviewer"] == "alice"


def test_a_failed_import_is_announced(project, everything, sent, tmp_path):
    job = ImportJob.objects.create(project=project, archive=str(tmp_path / "gone.zip"), original_name="day1.zip")
    with sent() as got:
        run_import_job(job.pk)
    data = got.of("import.failed")["import"]
    assert data["id"] == job.pk
    assert data["error"].startswith("The import stopped")


def test_a_failed_job_is_announced_to_whom_the_rules_say(project, receiver, sent):
    """job.failed belongs to no project: the notification rules of every project that ask for it receive it."""
    NotificationRule.objects.create(
        project=project, name="ops", events=["job.failed"], channel=Channel.WEBHOOK, target=receiver.url, secret="s"
    )
    with sent() as got, pytest.raises(ZeroDivisionError):
        run_job("gc", lambda: {"n": 1 // 0})
    job = got.of("job.failed")["job"]
    assert (job["name"], job["status"]) == ("gc", "failed")
    assert "ZeroDivisionError" in job["error"]
    assert Event.objects.get().dedupe_key == "job:gc"


def test_creating_checkpoints_costs_no_query_for_events_when_no_endpoint_or_rule_wants_them(
    project, make_session, make_checkpoint, receiver
):
    create_webhook(project, url=receiver.url, events=["alert.opened"], actor=ALICE)
    session = make_session()
    make_checkpoint(session, {"n": 0})  # the wanted list is read and cached here
    with CaptureQueriesContext(connection) as queries:
        make_checkpoint(session, {"n": 1})
    touched = [q["sql"] for q in queries if "webhook" in q["sql"] or "notification" in q["sql"] or "_event" in q["sql"]]
    assert touched == []
    assert not Event.objects.exists()


def test_a_batch_of_checkpoints_is_announced_one_event_each(everything, make_session, sent, api):
    api.post("/sessions", {"external_id": "run-1", "agent": "agent-7"})
    batch = {"checkpoints": [{"session": "run-1", "state": {"n": n}} for n in range(3)]}
    with sent() as got:
        assert api.post("/checkpoints/batch", batch).status_code == 201
    assert [data["data"]["checkpoint"]["seq"] for data in got.bodies] == [1, 2, 3]


def sync_seen(session):
    from checkpoints.services.drift import Limits, recents_for

    _, recent = recents_for([session.pk], limits=Limits(), timed=False)[session.pk]
    return recent.rows
