"""Routine checkpoints: every interval, the live state an agent sent (PUT …/live-state) becomes a checkpoint.

Only a state that changed since the session's last checkpoint is taken, so running the job twice takes nothing
new; the store shares every unchanged chunk, so a routine checkpoint costs a small patch. Sessions whose
heartbeat is older than the interval get a `missed_routine` alert, resolved when the heartbeat returns or the
session goes idle (silent for longer than DRIFT_IDLE_HOURS: nobody expects it to run).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import Q
from django.utils import timezone

from .. import services, store
from ..models import AgentSession, AlertKind, CheckpointKind, DriftAlert, SessionStatus
from ..services import drift
from ..services.batches import Failures, each_batch
from ..services.checkpoints import take_routine_checkpoint
from ..services.findings import Limits

ROUTINE_BATCH = 20  # sessions per savepoint: few, since each holds its session's row lock until the batch ends


def take_routine_checkpoints(now: datetime | None = None) -> dict[str, Any]:
    """Checkpoint the changed live states, then alert on (or clear) missed heartbeats.

    Both passes take sessions in batches (`services.batches.each_batch`): one whose data breaks them is named in the
    result's `errors` and gets no routine checkpoint; the others are processed all the same.
    """
    now = now or timezone.now()
    limits = Limits.from_settings()
    failures = Failures()
    active = AgentSession.objects.active()
    live = (
        active.filter(live_root__isnull=False, live_state_at__isnull=False).order_by("pk").values_list("pk", flat=True)
    )

    def take_batch(batch: list[int]) -> int:
        sessions = active.filter(pk__in=batch).select_related("head").defer("metadata", "head__metadata")
        return sum(_take_routine_checkpoint(session, now=now) for session in sessions)

    taken = sum(each_batch(live.iterator(chunk_size=1000), take_batch, failures, size=ROUTINE_BATCH))

    # Silent active sessions that are not idle get the alert; sessions holding one are looked at again, to
    # resolve it.
    stale_before = now - limits.routine_interval - limits.routine_grace
    idle_before = now - limits.idle_after
    silent = Q(last_seen_at__lt=stale_before, last_seen_at__gte=idle_before) | Q(
        last_seen_at__isnull=True, created_at__lt=stale_before, created_at__gte=idle_before
    )
    alerted = DriftAlert.objects.unresolved().filter(kind=AlertKind.MISSED_ROUTINE).values("session")
    candidates = AgentSession.objects.filter((Q(status=SessionStatus.ACTIVE) & silent) | Q(pk__in=alerted))

    def check_batch(batch: list[int]) -> int:
        drift.detect_batch(batch, now=now, limits=limits, kinds=[AlertKind.MISSED_ROUTINE])
        heard = AgentSession.objects.filter(pk__in=batch, status=SessionStatus.ACTIVE)
        return sum(
            idle_before <= (seen or created) < stale_before
            for seen, created in heard.values_list("last_seen_at", "created_at")
        )

    ids = candidates.order_by("pk").values_list("pk", flat=True).iterator(chunk_size=1000)
    missed = sum(each_batch(ids, check_batch, failures, size=drift.DETECT_BATCH))
    return {"taken": taken, "missed": missed, **failures.as_dict()}


def _take_routine_checkpoint(session: AgentSession, *, now: datetime) -> bool:
    head, live_at = session.head, session.live_state_at
    if session.live_root is None or live_at is None:  # cleared since the batch was listed
        return False
    live_root = bytes(session.live_root)
    if head is not None and (bytes(head.root) == live_root or head.received_at >= live_at):
        return False
    state = store.load_shared(live_root)
    # Roots of one state differ by the base it was patched against: compare the states' digests.
    if head is not None and store.state_digest(state) == bytes(head.state_hash):
        return False
    step = state.get("step") if isinstance(state, dict) else None
    item = services.CheckpointInput(
        state=state,
        name="routine",
        kind=CheckpointKind.ROUTINE,
        step=step if isinstance(step, int) else head.step if head else None,
        created_at=live_at,
        # a second worker taking the same live state finds this key and creates nothing
        idempotency_key=f"routine:{live_root.hex()}:{live_at.isoformat()}",
    )
    return take_routine_checkpoint(session, item, now=now)
