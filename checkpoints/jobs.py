"""Running background jobs: one run of a job at a time, every run recorded, dead workers noticed, bad sessions contained.

Lock and heartbeat: `run_job` claims the job's lock row with a conditional UPDATE that expires after
`JOB_STALE_AFTER_SECONDS`, records a JobRun and runs the work while a thread refreshes the run's
`heartbeat_at` and the lock's expiry every `JOB_HEARTBEAT_SECONDS` (also while the work waits on a long
statement). A worker that dies (SIGKILL, out of memory, a lost host) stops beating: its lock expires by
itself, and the next run of any job marks the silent run failed ("worker … stopped responding") and frees
its lock at once. A run that finds the lock held by a live run records `skipped` and does nothing.

Isolation: a job that works across sessions hands them to `each_batch`, which runs each batch in a savepoint;
when a batch fails it runs it again in halves, down to one session, whose failure is recorded in `Failures`
while the job goes on with the rest. Such a run ends `succeeded_with_errors`; its result lists the first
failures (`errors`: [{session, id, error}]), their count (`error_count`) and the sessions done.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, TypeVar

from billiard.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import InterfaceError, OperationalError, connection, connections, transaction
from django.db.models import Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from .models import AgentSession, JobLock, JobRun, JobRunStatus

logger = logging.getLogger(__name__)

ERRORS_KEPT = 20  # failures listed in a run's result; `error_count` counts every one
ERROR_CHARS = 500

T = TypeVar("T")
R = TypeVar("R")


def stale_after() -> timedelta:
    return timedelta(seconds=settings.JOB_STALE_AFTER_SECONDS)


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


def beat(run_pk: int, name: str, *, holder: str, now: datetime | None = None) -> None:
    """Proof of life: the run's heartbeat and its lock's expiry move forward."""
    now = now or timezone.now()
    JobRun.objects.filter(pk=run_pk, status=JobRunStatus.RUNNING).update(heartbeat_at=now)
    JobLock.objects.filter(name=name, holder=holder).update(expires_at=now + stale_after())


class Heartbeat:
    """A daemon thread that calls `beat` every JOB_HEARTBEAT_SECONDS until the `with` block ends.

    A thread, not calls between batches: a run waiting on a lock or one long statement is alive too. It dies
    with its process, which is the point. It uses (and closes) its own database connection.
    """

    def __init__(self, run_pk: int, name: str, *, holder: str) -> None:
        self.run_pk, self.name, self.holder = run_pk, name, holder
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._loop, name=f"heartbeat:{name}", daemon=True)

    def __enter__(self) -> Heartbeat:
        self.thread.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stopped.set()
        self.thread.join(timeout=settings.JOB_HEARTBEAT_SECONDS)

    def _loop(self) -> None:
        try:
            while not self.stopped.wait(settings.JOB_HEARTBEAT_SECONDS):
                try:
                    beat(self.run_pk, self.name, holder=self.holder)
                except Exception:  # a missed beat is retried next time; staleness allows several
                    logger.exception("heartbeat of job %s (run %s) failed", self.name, self.run_pk)
        finally:
            connections.close_all()  # this thread's connections only


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
) -> JobRun:
    """Run `work` under the job's lock and record the run; exceptions are recorded, then re-raised.

    A result with a non-zero `error_count` (sessions that failed, see `Failures`) ends `succeeded_with_errors`.
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
        with Heartbeat(run.pk, name, holder=holder):
            result = work()
    except Exception as exc:
        JobRun.objects.filter(pk=run.pk).update(status=JobRunStatus.FAILED, error=repr(exc), finished_at=timezone.now())
        raise
    finally:
        release(name, holder=holder)
    status = JobRunStatus.SUCCEEDED_WITH_ERRORS if result.get("error_count") else JobRunStatus.SUCCEEDED
    JobRun.objects.filter(pk=run.pk).update(status=status, result=result, finished_at=timezone.now())
    run.refresh_from_db()
    return run


# ---- isolation ------------------------------------------------------------------------------------


def session_label(pk: int) -> str:
    """`project/external_id`, read from text columns only: the session's other columns may be what broke."""
    row = AgentSession.objects.filter(pk=pk).values_list("project__slug", "external_id").first()
    return f"{row[0]}/{row[1]}" if row else f"session #{pk}"


def describe_error(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text if len(text) <= ERROR_CHARS else text[: ERROR_CHARS - 1] + "…"


def concerns_the_whole_run(exc: BaseException) -> bool:
    """A time limit or a lost database is no fault of one session: the run stops (and is retried)."""
    if isinstance(exc, SoftTimeLimitExceeded | InterfaceError):
        return True
    return isinstance(exc, OperationalError) and not connection.is_usable()


@dataclass
class Failures:
    """Which units (sessions, or watched folders) a job finished, and which failed with what (the first few)."""

    unit: str = "session"
    label: Callable[[int], str] = session_label
    errors: list[dict[str, Any]] = field(default_factory=list)
    _done: set[int] = field(default_factory=set)
    _failed: set[int] = field(default_factory=set)

    @property
    def count(self) -> int:
        return len(self._failed)

    @property
    def done(self) -> int:
        return len(self._done - self._failed)

    def succeeded(self, pks: Iterable[int]) -> None:
        self._done.update(pks)

    def record(self, pk: int, exc: Exception) -> None:
        """Note that unit `pk` failed (logged with its traceback); an error that concerns the whole run re-raises."""
        if concerns_the_whole_run(exc):
            raise exc
        logger.error("%s #%s failed; the job goes on with the others", self.unit, pk, exc_info=exc)
        if pk in self._failed:
            return
        self._failed.add(pk)
        if len(self.errors) < ERRORS_KEPT:
            self.errors.append({self.unit: self.label(pk), "id": pk, "error": describe_error(exc)})

    def as_dict(self) -> dict[str, Any]:
        return {f"{self.unit}s_done": self.done, "errors": list(self.errors), "error_count": self.count}


@contextmanager
def contained(pk: int, failures: Failures) -> Iterator[None]:
    """Run the block for unit `pk`, recording its failure in `failures` instead of raising it.

    Inside a transaction the block gets a savepoint, so a failed statement cannot poison it; outside one every
    statement commits on its own and there is nothing to poison (a long import must not become one transaction).
    """
    try:
        with savepoint():
            yield
    except Exception as exc:
        failures.record(pk, exc)
    else:
        failures.succeeded([pk])


def savepoint() -> AbstractContextManager[Any]:
    """A savepoint inside a transaction (a failed statement there would poison it); nothing outside one."""
    return transaction.atomic() if connection.in_atomic_block else nullcontext()


def each_batch(
    items: Iterable[T],
    work: Callable[[list[T]], R],
    failures: Failures,
    *,
    size: int,
    key: Callable[[T], Any] = lambda item: item,  # each item's unit id, as `failures` names it
) -> Iterator[R]:
    """`work` over `items` in batches of `size`, each batch in a savepoint; yields each batch's result.

    A batch that raises is rolled back (so a failed statement cannot poison the connection) and run again in
    halves, down to single items; an item that still fails is recorded in `failures` and skipped. The work must
    be idempotent: a retried half repeats what the failed batch had done before it was rolled back.
    """
    batch: list[T] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield from _isolated(batch, work, failures, key)
            batch = []
    if batch:
        yield from _isolated(batch, work, failures, key)


def _isolated(batch: list[T], work: Callable[[list[T]], R], failures: Failures, key: Callable[[T], Any]) -> Iterator[R]:
    try:
        with transaction.atomic():
            result = work(batch)
    except Exception as exc:
        if len(batch) == 1:
            failures.record(key(batch[0]), exc)
            return
        if concerns_the_whole_run(exc):
            raise
        half = len(batch) // 2
        yield from _isolated(batch[:half], work, failures, key)
        yield from _isolated(batch[half:], work, failures, key)
        return
    failures.succeeded(key(item) for item in batch)
    yield result
