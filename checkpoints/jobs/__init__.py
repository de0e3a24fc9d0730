"""Running background jobs: one run of a job at a time, every run recorded, dead workers noticed, bad sessions contained.

Lock and heartbeat: `run_job` claims the job's lock row with a conditional UPDATE that expires after
`JOB_STALE_AFTER_SECONDS`, records a JobRun and runs the work while a thread refreshes the run's
`heartbeat_at` and the lock's expiry every `JOB_HEARTBEAT_SECONDS` (also while the work waits on a long
statement). A worker that dies (SIGKILL, out of memory, a lost host) stops beating: its lock expires by
itself, and the next run of any job marks the silent run failed ("worker … stopped responding") and frees
its lock at once. A run that finds the lock held by a live run records `skipped` and does nothing.

Stopping: a job that can stop part-way (retention, between two batches) takes a `StopRequest` and checks it at
each safe point. The heartbeat sets it when the run's lock is no longer its own (taken by another run after this
one went silent past the threshold), so two runs of one job never go on side by side for longer than a batch; a
command sets it on SIGTERM or Ctrl-C.

Isolation (a failing session recorded while the job goes on with the rest) is `services.batches`.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any

from django.conf import settings
from django.db import connections, transaction
from django.db.models import Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from ..models import JobLock, JobRun, JobRunStatus
from ..outbox import events
from ..services.heartbeats import stale_after

logger = logging.getLogger(__name__)


def new_holder() -> str:
    """host:pid:token: unique per run, so two runs in one process never take each other's lock for their own."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


def acquire(name: str, *, holder: str, ttl: timedelta | None = None) -> bool:
    now = timezone.now()
    JobLock.objects.get_or_create(name=name)
    claimed = (
        JobLock.objects.filter(name=name)
        .filter(Q(holder="") | Q(expires_at__lt=now))
        .update(holder=holder, expires_at=now + (ttl or stale_after()))
    )
    return claimed == 1


def release(name: str, *, holder: str) -> None:
    JobLock.objects.filter(name=name, holder=holder).update(holder="", expires_at=None)


def beat(run_pk: int, name: str, *, holder: str, now: datetime | None = None) -> bool:
    """Proof of life: the run's heartbeat and its lock's expiry move forward. False when the lock is no longer
    `holder`'s (another run took it after this one went silent): the run must stop at its next safe point."""
    now = now or timezone.now()
    JobRun.objects.filter(pk=run_pk, status=JobRunStatus.RUNNING).update(heartbeat_at=now)
    return JobLock.objects.filter(name=name, holder=holder).update(expires_at=now + stale_after()) == 1


class StopRequest:
    """Asks a running job to stop at its next safe point; the first reason given is kept. Thread-safe: the
    heartbeat thread and signal handlers set it, the job reads it."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason = ""

    def set(self, reason: str) -> None:
        if not self._event.is_set():
            self.reason = reason
            self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()


class Pulse:
    """A daemon thread that calls `beat` every JOB_HEARTBEAT_SECONDS until the `with` block ends.

    A thread, not calls between batches: a run waiting on a lock or one long statement is alive too. It dies
    with its process, which is the point. It uses (and closes) its own database connection.
    """

    def __init__(self, beat: Callable[[], None], label: str) -> None:
        self.beat, self.label = beat, label
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._loop, name=f"heartbeat:{label}", daemon=True)

    def __enter__(self) -> Pulse:
        self.thread.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stopped.set()
        self.thread.join(timeout=settings.JOB_HEARTBEAT_SECONDS)

    def _loop(self) -> None:
        try:
            while not self.stopped.wait(settings.JOB_HEARTBEAT_SECONDS):
                try:
                    self.beat()
                except Exception:  # a missed beat is retried next time; staleness allows several
                    logger.exception("heartbeat of %s failed", self.label)
        finally:
            connections.close_all()  # this thread's connections only


class Heartbeat(Pulse):
    """The pulse of a job's run: `beat` moves its JobRun's heartbeat and its lock's expiry; when the lock turns
    out to be another run's, `stop` is set (the run ends at its next safe point)."""

    def __init__(self, run_pk: int, name: str, *, holder: str, stop: StopRequest | None = None) -> None:
        self.run_pk, self.name, self.holder, self.stop = run_pk, name, holder, stop
        super().__init__(self._beat, f"job {name} (run {run_pk})")

    def _beat(self) -> None:
        if beat(self.run_pk, self.name, holder=self.holder) or self.stop is None or self.stop.is_set():
            return
        holder = JobLock.objects.filter(name=self.name).values_list("holder", flat=True).first() or "nobody"
        logger.warning(
            "job %s run %s lost its lock to %s; it stops at its next safe point", self.name, self.run_pk, holder
        )
        self.stop.set(f"lost its lock to {holder}")


def reap_dead_runs(*, now: datetime | None = None) -> int:
    """Mark failed the runs whose worker stopped beating, and free the locks they held; returns how many."""
    now = now or timezone.now()
    cutoff = now - stale_after()
    silent = JobRun.objects.filter(status=JobRunStatus.RUNNING).filter(
        Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True, started_at__lt=cutoff)
    )
    reaped = 0
    for pk, job, worker, last in silent.values_list("pk", "job", "worker", Coalesce("heartbeat_at", "started_at")):
        error = (
            f"The worker {worker or '(unknown)'} stopped responding: no heartbeat since "
            f"{last.isoformat(timespec='seconds')}, over {settings.JOB_STALE_AFTER_SECONDS} s before "
            f"{now.isoformat(timespec='seconds')}. Marked failed and its lock freed; the next run starts afresh."
        )
        with transaction.atomic():
            if JobRun.objects.filter(pk=pk, status=JobRunStatus.RUNNING).update(
                status=JobRunStatus.FAILED, error=error, finished_at=now
            ):
                reaped += 1
                if worker:
                    release(job, holder=worker)
        logger.warning("job %s run %s: %s", job, pk, error)
    return reaped


def run_job(
    name: str,
    work: Callable[[], dict[str, Any]],
    *,
    triggered_by: str = "beat",
    dry_run: bool = False,
    stop: StopRequest | None = None,
) -> JobRun:
    """Run `work` under the job's lock and record the run; exceptions are recorded, then re-raised.

    A result with a non-zero `error_count` (sessions that failed, see `Failures`) ends `succeeded_with_errors`.
    `stop`, when the work checks it, is set if the heartbeat finds the lock taken by another run.
    """
    reap_dead_runs()
    holder = new_holder()
    if not acquire(name, holder=holder):
        return JobRun.objects.create(
            job=name,
            status=JobRunStatus.SKIPPED,
            dry_run=dry_run,
            triggered_by=triggered_by,
            finished_at=timezone.now(),
            result={"reason": "another run of this job holds its lock"},
        )
    now = timezone.now()
    run = JobRun.objects.create(
        job=name, dry_run=dry_run, triggered_by=triggered_by, worker=holder, started_at=now, heartbeat_at=now
    )
    try:
        with Heartbeat(run.pk, name, holder=holder, stop=stop):
            result = work()
    except Exception as exc:
        with transaction.atomic():
            JobRun.objects.filter(pk=run.pk).update(
                status=JobRunStatus.FAILED, error=repr(exc), finished_at=timezone.now()
            )
            run.status, run.error = JobRunStatus.FAILED, repr(exc)
            events.publish_job_failed(run)
        raise
    finally:
        release(name, holder=holder)
    status = JobRunStatus.SUCCEEDED_WITH_ERRORS if result.get("error_count") else JobRunStatus.SUCCEEDED
    JobRun.objects.filter(pk=run.pk).update(status=status, result=result, finished_at=timezone.now())
    run.refresh_from_db()
    return run


def forget_runs(name: str, *, older_than: timedelta, now: datetime | None = None) -> int:
    """Delete the finished runs of job `name` that started more than `older_than` ago (its newest run stays,
    whatever its age, for the Jobs page); how many."""
    cutoff = (now or timezone.now()) - older_than
    runs = JobRun.objects.filter(job=name)
    newest = runs.order_by("-started_at", "-pk").values_list("pk", flat=True)[:1]
    old = runs.filter(started_at__lt=cutoff).exclude(status=JobRunStatus.RUNNING).exclude(pk__in=newest)
    deleted, _ = old.delete()
    return deleted
