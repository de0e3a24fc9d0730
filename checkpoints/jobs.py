"""Running background jobs: one run of a job at a time across workers, every run recorded.

`run_job` claims the job's lock row with a conditional UPDATE (a crashed holder's claim expires after
`ttl`), records a JobRun, runs the work, and records its result or error. A job that finds its lock
taken records a `skipped` run and does nothing: beat and "Run now" can never overlap.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.db.models import Q
from django.utils import timezone

from .models import JobLock, JobRun, JobRunStatus

HOLDER = f"{socket.gethostname()}:{os.getpid()}"


def acquire(name: str, *, ttl: timedelta, holder: str = HOLDER) -> bool:
    now = timezone.now()
    JobLock.objects.get_or_create(name=name)
    claimed = (
        JobLock.objects.filter(name=name)
        .filter(Q(holder="") | Q(expires_at__lt=now))
        .update(holder=holder, expires_at=now + ttl)
    )
    return claimed == 1


def release(name: str, *, holder: str = HOLDER) -> None:
    JobLock.objects.filter(name=name, holder=holder).update(holder="", expires_at=None)


def run_job(
    name: str,
    work: Callable[[], dict[str, Any]],
    *,
    triggered_by: str = "beat",
    dry_run: bool = False,
    ttl: timedelta = timedelta(hours=1),
) -> JobRun:
    """Run `work` under the job's lock and record the run; exceptions are recorded, then re-raised."""
    if not acquire(name, ttl=ttl):
        return JobRun.objects.create(
            job=name,
            status=JobRunStatus.SKIPPED,
            dry_run=dry_run,
            triggered_by=triggered_by,
            finished_at=timezone.now(),
            result={"reason": "another run of this job holds its lock"},
        )
    run = JobRun.objects.create(job=name, dry_run=dry_run, triggered_by=triggered_by)
    try:
        result = work()
    except Exception as exc:
        JobRun.objects.filter(pk=run.pk).update(status=JobRunStatus.FAILED, error=repr(exc), finished_at=timezone.now())
        raise
    finally:
        release(name)
    JobRun.objects.filter(pk=run.pk).update(status=JobRunStatus.SUCCEEDED, result=result, finished_at=timezone.now())
    run.refresh_from_db()
    return run
