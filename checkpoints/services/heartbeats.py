"""Jobs a worker claims and keeps alive by a heartbeat (fleet recoveries, purges): one claim, one beat and one
sweep for every model with `state` (queued, running, …), `worker`, `heartbeat_at`, `started_at`, `attempts` and
`created_at`. A worker killed midway stops beating; after `stale_after()` the sweep queues its job again and the
next worker claims it (each job is written so that a rerun finishes what the first run left)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import F, Model, Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerUnreachable

logger = logging.getLogger(__name__)

QUEUED, RUNNING = "queued", "running"  # the states both RecoveryState and PurgeState name so
ALIVE = [QUEUED, RUNNING]


def stale_after() -> timedelta:
    return timedelta(seconds=settings.JOB_STALE_AFTER_SECONDS)


def claim(model: type[Model], pk: int, *, holder: str, now: datetime | None = None, **also: Any) -> bool:
    """Take the job for this worker: a queued one, or a running one whose worker stopped beating (a conditional
    UPDATE, so of two workers one wins). A finished or failed job is never taken again. `also`: more fields the
    claim sets (a purge's phase)."""
    now = now or timezone.now()
    free = Q(state=QUEUED) | Q(state=RUNNING, heartbeat_at__lt=now - stale_after())
    return bool(
        model._default_manager.filter(free, pk=pk).update(
            state=RUNNING,
            worker=holder,
            heartbeat_at=now,
            started_at=Coalesce(F("started_at"), Value(now)),
            attempts=F("attempts") + 1,
            **also,
        )
    )


def beat(model: type[Model], pk: int, *, holder: str, now: datetime | None = None, **also: Any) -> None:
    """Proof of life, while this worker still holds the job; `also`: its progress, where it records one."""
    model._default_manager.filter(pk=pk, worker=holder, state=RUNNING).update(
        heartbeat_at=now or timezone.now(), **also
    )


def send(label: str, pk: int, start: Callable[[int], object]) -> None:
    """Queue the job; a broker that refuses leaves it queued for the sweep (`requeue_stalled`)."""
    try:
        start(pk)
    except BrokerUnreachable as exc:
        logger.warning("%s %s not queued, the broker is unreachable (the sweep resends it): %s", label, pk, exc)


def requeue_stalled(
    model: type[Model], label: str, start: Callable[[int], object], *, now: datetime | None = None, limit: int = 100
) -> int:
    """Queue again the jobs whose worker stopped beating (killed, out of memory) or whose message never reached a
    worker (the broker was down when it was queued); how many. Each is taken first by moving its heartbeat (a
    conditional UPDATE on the beat it was seen with, while still queued or running), so two sweeps never queue one
    twice and a job that finished meanwhile stays finished; the job then claims it afresh. A job without a
    heartbeat (made before it had one) counts its age."""
    now = now or timezone.now()
    cutoff = now - stale_after()
    rows = model._default_manager.filter(state__in=ALIVE)
    silent = rows.filter(Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True, created_at__lt=cutoff))
    sent = 0
    for pk, seen in silent.values_list("pk", "heartbeat_at")[:limit]:
        same = Q(heartbeat_at=seen) if seen is not None else Q(heartbeat_at__isnull=True)
        if rows.filter(same, pk=pk).update(state=QUEUED, worker="", heartbeat_at=now):
            logger.warning("%s %s: no sign of its worker since %s, queued again", label, pk, seen)
            send(label, pk, start)
            sent += 1
    return sent
