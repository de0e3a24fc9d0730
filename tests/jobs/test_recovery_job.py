"""The fleet recovery job: a worker killed midway leaves every session restored once or untouched, and the sweep
queues again a recovery whose worker stopped beating; the rerun restores the rest, nothing twice."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from checkpoints import tasks
from checkpoints.audit import Actor
from checkpoints.jobs import recoveries
from checkpoints.models import AgentSession, AuditEvent, DriftAlert, Recovery, RecoveryItem, RecoveryState
from checkpoints.services import fleet
from checkpoints.services import recovery as recovery_services
from checkpoints.services.fleet import Reach, Selection, start_recovery
from checkpoints.services.targets import TargetRule


class WorkerKilled(BaseException):
    """What SIGKILL does to the Python code of a worker: it stops where it is, no handler runs."""


@pytest.fixture
def fleet_of(make_session, make_checkpoint):
    def make(count: int):
        sessions = []
        for number in range(count):
            session = make_session(f"run-{number}")
            make_checkpoint(session, {"ok": 1})
            make_checkpoint(session, {"ok": 2})
            make_checkpoint(session, {"down": 1}, status="failed")
            sessions.append(session)
        return sessions

    return make


def queued(project) -> Recovery:
    reach = Reach(AgentSession.objects.filter(project=project), None, project)
    sent: list[int] = []
    recovery = start_recovery(
        Selection("restore", TargetRule()), reach, actor=Actor.system("on-call"), reason="outage", start=sent.append
    )
    return recovery


def test_a_killed_worker_leaves_each_session_restored_once_or_untouched_and_the_sweep_finishes_the_rest(
    fleet_of, project, monkeypatch
):
    sessions = fleet_of(5)
    for session in sessions:
        DriftAlert.objects.create(session=session, kind="failed", message="down", checkpoint=session.head)
    recovery = queued(project)
    real_restore = recovery_services.restore_checkpoint
    calls = {"n": 0}

    def dies_on_the_third(*args, **kwargs):
        calls["n"] += 1
        restored = real_restore(*args, **kwargs)
        if calls["n"] == 3:
            raise WorkerKilled  # after the restore's rows were written, before its transaction committed
        return restored

    monkeypatch.setattr(fleet, "restore_checkpoint", dies_on_the_third)
    with pytest.raises(WorkerKilled):
        recoveries.run(recovery.pk)
    monkeypatch.setattr(fleet, "restore_checkpoint", real_restore)

    recovery.refresh_from_db()
    assert recovery.state == RecoveryState.RUNNING and recovery.done == 2
    generations = sorted(
        AgentSession.objects.filter(pk__in=[s.pk for s in sessions]).values_list("restore_generation", flat=True)
    )
    assert generations == [0, 0, 0, 1, 1]  # the third's restore rolled back with its item: untouched
    assert RecoveryItem.objects.filter(recovery=recovery, result="pending").count() == 3
    assert DriftAlert.objects.unresolved().count() == 5  # the page's detectors never ran: the worker died first

    # a second worker finds it running and alive: it does not take it over
    assert recoveries.run(recovery.pk) == {"claimed": False}
    # the sweep sees no heartbeat for longer than JOB_STALE_AFTER_SECONDS and queues it again
    sent: list[int] = []
    assert fleet.requeue_stalled(sent.append, now=timezone.now()) == 0  # not stale yet
    later = timezone.now() + timedelta(seconds=600)
    assert fleet.requeue_stalled(sent.append, now=later) == 1 and sent == [recovery.pk]
    assert fleet.requeue_stalled(sent.append, now=later) == 0  # claimed once: not queued twice
    recoveries.run(recovery.pk)

    recovery.refresh_from_db()
    assert recovery.state == RecoveryState.FINISHED and (recovery.done, recovery.attempts) == (5, 2)
    for session in AgentSession.objects.filter(pk__in=[s.pk for s in sessions]):
        assert session.restore_generation == 1, session.external_id
        restores = AuditEvent.objects.filter(action="restore", session=session)
        assert restores.count() == 1
    assert AuditEvent.objects.filter(action="recovery").count() == 1
    # the rerun asked the detectors for the two sessions the killed worker restored too: every failed alert cleared
    assert not DriftAlert.objects.unresolved().exists()


def test_a_recovery_whose_message_was_lost_is_sent_again_by_the_sweep(fleet_of, project):
    fleet_of(1)
    recovery = queued(project)  # its `start` recorded the message and sent nothing
    sent: list[int] = []
    assert fleet.requeue_stalled(sent.append, now=timezone.now() + timedelta(seconds=600)) == 1
    assert sent == [recovery.pk]


def test_the_task_runs_on_the_default_queue_and_the_sweep_requeues_through_it(fleet_of, project, settings):
    from checkpoints import task_names

    assert task_names.RUN_RECOVERY.queue == ""
    assert task_names.RUN_RECOVERY.name not in settings.CELERY_TASK_ROUTES
    fleet_of(2)
    recovery = queued(project)
    tasks.run_recovery.delay(recovery.pk)  # eager in unit tests
    recovery.refresh_from_db()
    assert recovery.state == RecoveryState.FINISHED and recovery.done == 2


def test_a_bug_fails_the_recovery_instead_of_leaving_it_running(fleet_of, project, monkeypatch):
    fleet_of(1)
    recovery = queued(project)

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(fleet, "finish_recovery", broken)
    with pytest.raises(RuntimeError):
        recoveries.run(recovery.pk)
    recovery.refresh_from_db()
    assert recovery.state == RecoveryState.FAILED and "RuntimeError" in recovery.error
