from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from checkpoints import store
from checkpoints.jobs.routine import take_routine_checkpoints
from checkpoints.models import AgentSession, AlertKind, AlertState, Checkpoint, DriftAlert, JobRun
from checkpoints.services import CheckpointInput, record_live_state
from checkpoints.services.checkpoints import take_routine_checkpoint
from checkpoints.tasks import take_routine_checkpoints as routine_task

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
STATE = {"step": 7, "task": {"progress": 40}, "messages": ["m"] * 50}


@pytest.fixture(autouse=True)
def at(time_machine) -> Callable[..., None]:
    """The clock stands at T0; `at(minutes=10)` moves it to T0 + 10 minutes and stops it there."""

    def move(**since_t0: float) -> None:
        time_machine.move_to(T0 + timedelta(**since_t0), tick=False)

    move()
    return move


def started(make_session, make_checkpoint, external_id: str = "run-1") -> AgentSession:
    """An active session whose last checkpoint and heartbeat came now."""
    session = make_session(external_id)
    make_checkpoint(session, STATE, step=7)
    session.refresh_from_db()
    return session


def routine() -> dict[str, int]:
    """The job's counts; every session in these tests is healthy, so none may fail."""
    result = take_routine_checkpoints()
    assert (result["error_count"], result["errors"]) == (0, [])
    return {key: result[key] for key in ("taken", "missed")}


def test_a_changed_live_state_is_checkpointed_once(make_session, make_checkpoint, at):
    session = started(make_session, make_checkpoint)
    live = {**STATE, "step": 8, "task": {"progress": 45}}
    at(minutes=10)
    record_live_state(session, state=live)

    at(minutes=30)
    assert routine() == {"taken": 1, "missed": 0}
    session.refresh_from_db()
    head = session.head
    assert (head.kind, head.name, head.step, head.seq) == ("routine", "routine", 8, 2)
    assert store.load_state(bytes(head.root)) == live
    assert session.last_seen_at == T0 + timedelta(minutes=10)  # the job's checkpoint is no heartbeat

    at(minutes=31)
    assert routine() == {"taken": 0, "missed": 0}
    assert Checkpoint.objects.filter(session=session).count() == 2


def test_an_unchanged_live_state_is_not_checkpointed(make_session, make_checkpoint, at):
    session = started(make_session, make_checkpoint)
    at(minutes=10)
    record_live_state(session, state=dict(STATE))
    at(minutes=30)
    assert routine()["taken"] == 0
    assert Checkpoint.objects.filter(session=session).count() == 1


def test_a_live_state_older_than_the_head_is_not_checkpointed(make_session, make_checkpoint, at):
    session = make_session()
    record_live_state(session, state={"step": 1})
    at(minutes=1)
    make_checkpoint(session, {"step": 2}, step=2)
    at(minutes=5)
    assert routine()["taken"] == 0


def test_sessions_that_are_not_active_get_no_routine_checkpoint(make_session, make_checkpoint, at):
    session = started(make_session, make_checkpoint)
    at(minutes=10)
    record_live_state(session, state={"step": 9})
    AgentSession.objects.filter(pk=session.pk).update(status="completed")
    at(minutes=20)
    assert routine() == {"taken": 0, "missed": 0}


def test_a_stale_heartbeat_opens_missed_routine_and_a_fresh_one_resolves_it(make_session, make_checkpoint, at):
    session = started(make_session, make_checkpoint)
    quiet = started(make_session, make_checkpoint, "run-2")
    at(hours=2)
    record_live_state(quiet, state=STATE)

    assert routine() == {"taken": 0, "missed": 1}
    alert = DriftAlert.objects.get(kind=AlertKind.MISSED_ROUTINE)
    assert (alert.session_id, alert.state) == (session.pk, AlertState.OPEN)
    assert alert.last_good_id == session.head_id

    at(hours=2, minutes=5)
    assert routine()["missed"] == 1
    assert DriftAlert.objects.filter(kind=AlertKind.MISSED_ROUTINE).count() == 1  # deduplicated

    at(hours=2, minutes=10)
    record_live_state(session, state=STATE)
    at(hours=2, minutes=11)
    assert routine() == {"taken": 0, "missed": 0}
    alert.refresh_from_db()
    assert alert.state == AlertState.RESOLVED
    assert alert.resolved_at == T0 + timedelta(hours=2, minutes=11)


def test_an_idle_session_gets_no_missed_routine_alert_and_loses_the_one_it_had(make_session, make_checkpoint, at):
    """Silent for longer than DRIFT_IDLE_HOURS (24): left idle, nobody expects a heartbeat from it any more."""
    session = started(make_session, make_checkpoint)
    at(hours=2)
    assert routine() == {"taken": 0, "missed": 1}
    at(days=2)
    assert routine() == {"taken": 0, "missed": 0}
    alert = DriftAlert.objects.get(session=session, kind=AlertKind.MISSED_ROUTINE)
    assert (alert.state, alert.resolved_at) == (AlertState.RESOLVED, T0 + timedelta(days=2))

    at()  # another session, silent since T0 too, that the job first sees three days on
    idle = started(make_session, make_checkpoint, "run-2")
    at(days=3)
    assert routine() == {"taken": 0, "missed": 0}
    assert not DriftAlert.objects.filter(session=idle).exists()


def test_the_task_records_a_job_run(make_session, make_checkpoint, at):
    session = started(make_session, make_checkpoint)
    at(minutes=1)
    record_live_state(session, state={"step": 99})
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
