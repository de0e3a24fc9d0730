"""A real Celery worker with embedded beat, against Redis and the test database.

These tests start `celery -A config worker -B` as a subprocess (a new process group, always killed
by the fixture's finalizer), point it at the test database and Redis db of REDIS_URL, and watch
what a scheduled job records.

What an operator sees after a worker is killed mid-run (second test): the killed run's JobRun stays
`running` with no result and no finish time (on the Jobs page: "running…" with no duration); the
job's JobLock row still names the dead worker until its ttl passes (run_job's default: one hour),
so runs in between are recorded as `skipped`; after that the next scheduled run claims the lock and
succeeds. Nothing of the killed run is half-applied: GC deletes in batches, each its own
transaction, so a kill rolls back at most the batch in flight.
"""

from __future__ import annotations

import contextlib
import os
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


def test_a_worker_killed_mid_run_leaves_nothing_half_done(worker):
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
        time.sleep(1)  # it is now waiting on the table inside collect_garbage
        first.kill()
    lock = JobLock.objects.get(name="gc")
    assert lock.holder and lock.expires_at > timezone.now()
    killed.refresh_from_db()
    assert killed.status == JobRunStatus.RUNNING and killed.result == {} and killed.finished_at is None
    assert Chunk.objects.count() == chunks  # the killed run deleted nothing

    second = worker()
    _wait(
        lambda: JobRun.objects.filter(job="gc", status=JobRunStatus.SKIPPED).exists(),
        timeout=60,
        what="a run skipped while the dead worker's lock is unexpired",
        log=second.log,
    )
    assert not JobRun.objects.filter(job="gc", status=JobRunStatus.SUCCEEDED).exists()
    JobLock.objects.filter(name="gc").update(expires_at=timezone.now() - timedelta(seconds=1))  # its ttl passes
    done = _wait(
        lambda: JobRun.objects.filter(job="gc", status=JobRunStatus.SUCCEEDED).first(),
        timeout=60,
        what="a succeeded GC run after the lock expired",
        log=second.log,
    )
    assert done.result["deleted"] == chunks
    killed.refresh_from_db()
    assert killed.status == JobRunStatus.RUNNING and killed.finished_at is None  # what the operator sees
