"""A real Celery worker with embedded beat, against Redis and the test database.

These tests start `celery -A config worker -B` as a subprocess (a new process group, always killed
by the fixture's finalizer), point it at the test database and Redis db of REDIS_URL, and watch
what a scheduled job records. The workers beat every second and count as dead after 5 silent
seconds (JOB_HEARTBEAT_SECONDS, JOB_STALE_AFTER_SECONDS).

What an operator sees after a worker is killed mid-run (second test): the killed run's JobRun stays
`running` until its heartbeat is older than the staleness threshold; its lock, renewed by each
heartbeat for that threshold only, is free by then at the latest. The next run of a job marks the
killed run failed ("The worker … stopped responding …"), frees its lock and runs. Nothing of the
killed run is half-applied: GC deletes in batches, each its own transaction, so a kill rolls back
at most the batch in flight.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection, transaction
from django.utils import timezone
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from checkpoints import store
from checkpoints.models import Chunk, JobLock, JobRun, JobRunStatus

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
GC_TASK = "checkpoints.tasks.collect_garbage"
HEARTBEAT_SECONDS, STALE_AFTER_SECONDS = 1, 5


def _database_url() -> str:
    s = connection.settings_dict
    auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def _wait(condition: Callable[[], object], *, timeout: float, what: str, log: Path | None = None) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.3)
    tail = log.read_text()[-4000:] if log and log.exists() else ""
    pytest.fail(f"timed out after {timeout} s waiting for {what}\n--- worker log ---\n{tail}")


class Worker:
    def __init__(self, log: Path) -> None:
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CELERY_")}
        env.update(
            DATABASE_URL=_database_url(),
            CELERY_BROKER_URL=os.environ["REDIS_URL"],
            DJANGO_SETTINGS_MODULE="config.settings",
            JOB_HEARTBEAT_SECONDS=str(HEARTBEAT_SECONDS),
            JOB_STALE_AFTER_SECONDS=str(STALE_AFTER_SECONDS),
        )
        command = [sys.executable, "-m", "celery", "-A", "config", "worker", "-B"]
        command += ["--scheduler", "django_celery_beat.schedulers:DatabaseScheduler", "-l", "info"]
        command += ["--concurrency", "1", "--without-gossip", "--without-mingle", "--without-heartbeat"]
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def kill(self) -> None:
        """SIGKILL the worker, its pool child and its beat: the whole process group it leads."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)
        self.process = None


@pytest.fixture
def worker(tmp_path) -> Iterator[Callable[[], Worker]]:
    import redis

    redis.Redis.from_url(os.environ["REDIS_URL"]).flushdb()  # no messages left from an earlier run
    started: list[Worker] = []

    def start() -> Worker:
        w = Worker(tmp_path / f"worker-{len(started)}.log")
        started.append(w)
        w.start()
        return w

    yield start
    for w in started:
        w.kill()
    redis.Redis.from_url(os.environ["REDIS_URL"]).flushdb()


def _schedule_gc_every_second() -> PeriodicTask:
    PeriodicTask.objects.update(enabled=False)  # only the job under test runs
    interval, _ = IntervalSchedule.objects.get_or_create(every=1, period=IntervalSchedule.SECONDS)
    return PeriodicTask.objects.create(name="GC under test", task=GC_TASK, interval=interval, enabled=True)


def _garbage() -> int:
    store.save_state({"orphan": "x" * 9000, "items": [f"item {i} " * 40 for i in range(200)]})
    store.cache.clear()
    Chunk.objects.update(created_at=timezone.now() - timedelta(days=1))
    return Chunk.objects.count()


def test_beat_schedules_gc_and_a_real_worker_runs_it(worker):
    chunks = _garbage()
    _schedule_gc_every_second()
    w = worker()
    run = _wait(
        lambda: JobRun.objects.filter(job="gc", status=JobRunStatus.SUCCEEDED).order_by("started_at").first(),
        timeout=60,
        what="a succeeded GC run",
        log=w.log,
    )
    assert run.triggered_by == "beat"
    assert run.result["deleted"] == chunks
    assert Chunk.objects.count() == 0
    assert not JobLock.objects.filter(name="gc").exclude(holder="").exists()


def test_a_killed_workers_run_is_marked_failed_its_lock_freed_and_the_next_run_succeeds(worker):
    chunks = _garbage()
    _schedule_gc_every_second()
    table = connection.ops.quote_name(Chunk._meta.db_table)
    with transaction.atomic():
        # Hold the chunk table so the worker's GC blocks inside its run, after claiming the lock.
        with connection.cursor() as cursor:
            cursor.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
        first = worker()
        killed = _wait(
            lambda: JobRun.objects.filter(job="gc", status=JobRunStatus.RUNNING).first(),
            timeout=60,
            what="a GC run in progress",
            log=first.log,
        )
        _wait(  # blocked on the table, the run still beats: a waiting worker is alive
            lambda: JobRun.objects.filter(pk=killed.pk, heartbeat_at__gt=killed.heartbeat_at).exists(),
            timeout=10,
            what="a heartbeat of the blocked run",
            log=first.log,
        )
        first.kill()
        killed_at = time.monotonic()
    killed.refresh_from_db()
    lock = JobLock.objects.get(name="gc")
    assert lock.holder == killed.worker
    # the lock outlives the last heartbeat by the staleness threshold, not by an hour
    assert lock.expires_at - killed.heartbeat_at <= timedelta(seconds=STALE_AFTER_SECONDS + 1)
    assert killed.status == JobRunStatus.RUNNING and killed.result == {} and killed.finished_at is None
    assert Chunk.objects.count() == chunks  # the killed run deleted nothing

    second = worker()
    _wait(
        lambda: JobRun.objects.filter(pk=killed.pk, status=JobRunStatus.FAILED).exists(),
        timeout=60,
        what="the killed run marked failed",
        log=second.log,
    )
    done = _wait(
        lambda: JobRun.objects.filter(job="gc", status=JobRunStatus.SUCCEEDED).order_by("started_at").first(),
        timeout=60,
        what="a succeeded GC run after the killed one",
        log=second.log,
    )
    recovered_in = time.monotonic() - killed_at
    killed.refresh_from_db()
    assert re.match(rf"The worker {re.escape(killed.worker)} stopped responding: no heartbeat since ", killed.error)
    assert killed.finished_at is not None
    assert done.result["deleted"] == chunks and Chunk.objects.count() == 0
    assert done.started_at >= killed.heartbeat_at + timedelta(seconds=STALE_AFTER_SECONDS)
    assert recovered_in < 60, f"the next run succeeded {recovered_in:.1f} s after the kill"
