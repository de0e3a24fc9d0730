from __future__ import annotations

from datetime import UTC, datetime, timedelta

from checkpoints import store
from checkpoints.jobs.routine import take_routine_checkpoints
from checkpoints.models import AgentSession, AlertKind, AlertState, Checkpoint, DriftAlert, JobRun
from checkpoints.services import CheckpointInput, record_live_state
from checkpoints.services.checkpoints import take_routine_checkpoint
from checkpoints.tasks import take_routine_checkpoints as routine_task

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
STATE = {"step": 7, "task": {"progress": 40}, "messages": ["m"] * 50}


def started(make_session, make_checkpoint, external_id: str = "run-1") -> AgentSession:
    session = make_session(external_id)
    make_checkpoint(session, STATE, step=7, created_at=T0)
    AgentSession.objects.filter(pk=session.pk).update(last_seen_at=T0)
    Checkpoint.objects.filter(session=session).update(received_at=T0)
    session.refresh_from_db()
    return session


def routine(now: datetime) -> dict[str, int]:
    """The job's counts; every session in these tests is healthy, so none may fail."""
    result = take_routine_checkpoints(now=now)
    assert (result["error_count"], result["errors"]) == (0, [])
    return {key: result[key] for key in ("taken", "missed")}


def test_a_changed_live_state_is_checkpointed_once(make_session, make_checkpoint):
    session = started(make_session, make_checkpoint)
    live = {**STATE, "step": 8, "task": {"progress": 45}}
    record_live_state(session, state=live, now=T0 + timedelta(minutes=10))

    assert routine(T0 + timedelta(minutes=30)) == {"taken": 1, "missed": 0}
    session.refresh_from_db()
    head = session.head
    assert (head.kind, head.name, head.step, head.seq) == ("routine", "routine", 8, 2)
    assert store.load_state(bytes(head.root)) == live
    assert session.last_seen_at == T0 + timedelta(minutes=10)  # the job's checkpoint is no heartbeat

    assert routine(T0 + timedelta(minutes=31)) == {"taken": 0, "missed": 0}
    assert Checkpoint.objects.filter(session=session).count() == 2


def test_an_unchanged_live_state_is_not_checkpointed(make_session, make_checkpoint):
    session = started(make_session, make_checkpoint)
    record_live_state(session, state=dict(STATE), now=T0 + timedelta(minutes=10))
    assert take_routine_checkpoints(now=T0 + timedelta(minutes=30))["taken"] == 0
    assert Checkpoint.objects.filter(session=session).count() == 1


def test_a_live_state_older_than_the_head_is_not_checkpointed(make_session, make_checkpoint):
    session = make_session()
    record_live_state(session, state={"step": 1}, now=T0)
    make_checkpoint(session, {"step": 2}, step=2)
    assert take_routine_checkpoints(now=T0 + timedelta(minutes=5))["taken"] == 0


def test_sessions_that_are_not_active_get_no_routine_checkpoint(make_session, make_checkpoint):
    session = started(make_session, make_checkpoint)
    record_live_state(session, state={"step": 9}, now=T0 + timedelta(minutes=10))
    AgentSession.objects.filter(pk=session.pk).update(status="completed")
    assert routine(T0 + timedelta(minutes=20)) == {"taken": 0, "missed": 0}


def test_a_stale_heartbeat_opens_missed_routine_and_a_fresh_one_resolves_it(make_session, make_checkpoint):
    session = started(make_session, make_checkpoint)
    quiet = started(make_session, make_checkpoint, "run-2")
    record_live_state(quiet, state=STATE, now=T0 + timedelta(hours=2))

    assert routine(T0 + timedelta(hours=2)) == {"taken": 0, "missed": 1}
    alert = DriftAlert.objects.get(kind=AlertKind.MISSED_ROUTINE)
    assert (alert.session_id, alert.state) == (session.pk, AlertState.OPEN)
    assert alert.last_good_id == session.head_id

    assert take_routine_checkpoints(now=T0 + timedelta(hours=2, minutes=5))["missed"] == 1
    assert DriftAlert.objects.filter(kind=AlertKind.MISSED_ROUTINE).count() == 1  # deduplicated

    record_live_state(session, state=STATE, now=T0 + timedelta(hours=2, minutes=10))
    assert routine(T0 + timedelta(hours=2, minutes=11)) == {"taken": 0, "missed": 0}
    alert.refresh_from_db()
    assert alert.state == AlertState.RESOLVED
    assert alert.resolved_at == T0 + timedelta(hours=2, minutes=11)


def test_an_idle_session_gets_no_missed_routine_alert_and_loses_the_one_it_had(make_session, make_checkpoint):
    """Silent for longer than DRIFT_IDLE_HOURS (24): left idle, nobody expects a heartbeat from it any more."""
    session = started(make_session, make_checkpoint)
    assert routine(T0 + timedelta(hours=2)) == {"taken": 0, "missed": 1}
    assert routine(T0 + timedelta(days=2)) == {"taken": 0, "missed": 0}
    alert = DriftAlert.objects.get(session=session, kind=AlertKind.MISSED_ROUTINE)
    assert (alert.state, alert.resolved_at) == (AlertState.RESOLVED, T0 + timedelta(days=2))
    idle = started(make_session, make_checkpoint, "run-2")
    assert routine(T0 + timedelta(days=3)) == {"taken": 0, "missed": 0}
    assert not DriftAlert.objects.filter(session=idle).exists()


def test_the_task_records_a_job_run(make_session, make_checkpoint):
    session = started(make_session, make_checkpoint)
    record_live_state(session, state={"step": 99}, now=T0 + timedelta(minutes=1))
    result = routine_task.delay(triggered_by="test").get()
    assert result["taken"] == 1
    assert JobRun.objects.get(job="routine_checkpoints").result == result


def test_a_routine_checkpoint_stored_by_the_service_is_no_heartbeat_and_stored_once(make_session, make_checkpoint):
    session = started(make_session, make_checkpoint)
    later = T0 + timedelta(minutes=30)
    item = CheckpointInput(state={**STATE, "step": 8}, name="routine", kind="routine", idempotency_key="routine:1")

    assert take_routine_checkpoint(session, item, now=later) is True
    assert take_routine_checkpoint(session, item, now=later) is False
    session.refresh_from_db()
    assert (session.last_seq, session.last_seen_at) == (2, T0)
