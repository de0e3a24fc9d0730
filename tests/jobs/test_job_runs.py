"""run_job: one run at a time, a heartbeat while it runs, and a dead worker's run noticed and its lock freed.

The real thing (a worker SIGKILLed mid-run, then a new worker) is in test_worker.py; these tests set
up the rows such a worker leaves behind, and run a heartbeat thread for real.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from checkpoints import jobs
from checkpoints.models import JobLock, JobRun, JobRunStatus

DEAD = "gone-host:4242:abcdef"


def dead_run(settings, job: str = "gc") -> JobRun:
    """What a killed worker leaves: its claim on the lock and a `running` run whose heartbeat stopped."""
    silent_for = timedelta(seconds=settings.JOB_STALE_AFTER_SECONDS + 5)
    assert jobs.acquire(job, holder=DEAD)
    return JobRun.objects.create(
        job=job, worker=DEAD, started_at=timezone.now() - 2 * silent_for, heartbeat_at=timezone.now() - silent_for
    )


@pytest.mark.django_db
def test_the_next_run_marks_a_silent_run_failed_frees_its_lock_and_completes(settings):
    stale = dead_run(settings)

    run = jobs.run_job("gc", lambda: {"deleted": 0})

    assert run.status == JobRunStatus.SUCCEEDED
    stale.refresh_from_db()
    assert stale.status == JobRunStatus.FAILED and stale.finished_at is not None
    assert f"The worker {DEAD} stopped responding" in stale.error
    assert JobLock.objects.get(name="gc").holder == ""  # released by the run that finished


@pytest.mark.django_db
def test_a_silent_run_of_another_job_is_noticed_too(settings):
    stale = dead_run(settings, job="retention")
    jobs.run_job("gc", lambda: {})
    stale.refresh_from_db()
    assert stale.status == JobRunStatus.FAILED
    assert JobLock.objects.get(name="retention").holder == ""


@pytest.mark.django_db
def test_a_run_that_beats_keeps_its_lock_and_the_next_one_is_skipped(settings):
    assert jobs.acquire("gc", holder="alive:1:aaaaaa")
    live = JobRun.objects.create(job="gc", worker="alive:1:aaaaaa", heartbeat_at=timezone.now())

    run = jobs.run_job("gc", lambda: pytest.fail("must not run while the lock is held"))

    assert run.status == JobRunStatus.SKIPPED
    live.refresh_from_db()
    assert live.status == JobRunStatus.RUNNING
    assert JobLock.objects.get(name="gc").holder == "alive:1:aaaaaa"


@pytest.mark.django_db
def test_a_dead_workers_lock_expires_after_the_staleness_threshold_even_if_no_run_notices(settings):
    settings.JOB_STALE_AFTER_SECONDS = 90
    assert jobs.acquire("gc", holder=DEAD)
    assert not jobs.acquire("gc", holder="next:1:bbbbbb")
    with time_machine.travel(timezone.now() + timedelta(seconds=91)):
        assert jobs.acquire("gc", holder="next:1:bbbbbb")


@pytest.mark.django_db(transaction=True)
def test_a_running_job_refreshes_its_heartbeat_and_its_lock(settings):
    """A real heartbeat thread, with its own connection: the run's row and lock move while the work runs."""
    settings.JOB_HEARTBEAT_SECONDS = 1
    seen = {}

    def work() -> dict[str, int]:
        run = JobRun.objects.get(job="gc", status=JobRunStatus.RUNNING)
        lock = JobLock.objects.get(name="gc")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            time.sleep(0.2)
            beat = JobRun.objects.get(pk=run.pk).heartbeat_at
            expires = JobLock.objects.get(name="gc").expires_at
            if beat > run.heartbeat_at and expires > lock.expires_at:  # the beat writes the run, then the lock
                seen["heartbeat"] = beat - run.heartbeat_at
                seen["lock"] = expires - lock.expires_at
                return {"beats": 1}
        pytest.fail("no heartbeat within 10 s")

    run = jobs.run_job("gc", work)

    assert run.status == JobRunStatus.SUCCEEDED
    assert seen["heartbeat"] >= timedelta(seconds=0.5) and seen["lock"] >= timedelta(seconds=0.5)
    assert run.worker.count(":") == 2 and JobLock.objects.get(name="gc").holder == ""


@pytest.mark.django_db
def test_the_every_minute_sweeps_old_runs_go_with_old_deliveries_and_its_newest_stays(settings):
    from checkpoints import tasks

    now = timezone.now()
    old = now - timedelta(days=settings.DELIVERY_KEEP_DAYS + 1)
    for minutes in range(3):
        JobRun.objects.create(
            job="delivery_sweep", status=JobRunStatus.SUCCEEDED, started_at=old + timedelta(minutes=minutes)
        )
    kept_gc = JobRun.objects.create(job="gc", status=JobRunStatus.SUCCEEDED, started_at=old)

    result = tasks.delete_old_deliveries()

    assert result["sweep_runs"] == 2  # the newest of the sweep's runs stays, however old: the Jobs page shows it
    assert JobRun.objects.filter(job="delivery_sweep").count() == 1
    assert JobRun.objects.filter(pk=kept_gc.pk).exists()  # other jobs' runs are not its business
    tasks.send_due_deliveries()
    assert tasks.delete_old_deliveries()["sweep_runs"] == 1
    assert JobRun.objects.filter(job="delivery_sweep").get().started_at >= now
