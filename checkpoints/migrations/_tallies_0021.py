"""What migration 0021's backfill needs of the tallies, frozen: `recount` as it was when 0021 introduced them.

Never edit this module: 0021 has run on databases, and what it writes must not move with the live tallies
(checkpoints.store.tallies; their move there once broke a fresh `migrate`). A later change of what is tallied
takes a migration of its own (docs/decisions/0010-frozen-migrations.md). tests/models/test_migrations.py
checks that it gives the live `recount`'s answers.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC
from typing import Any

from django.db import transaction
from django.db.models import Count, F, Max, Min, Q, Sum
from django.db.models.functions import TruncHour

ROLLUP_BLOCK = 20  # seqs per rollup block
_STOPPED = ("failed", "halted")
_TROUBLE = Q(status__in=_STOPPED) | Q(tool_failed=True)
_TALLIED = ("name", "kind", "status")
_SESSION_FIELDS = ["checkpoint_count", "raw_bytes", "stored_bytes", "failed_count", "tool_failed_count"]
_ROWS = 500  # rows per INSERT
_SESSIONS = 100  # sessions per transaction


def recount(apps: Any, using: str, session_ids: list[int]) -> None:
    """Rebuild the tallies of these sessions from their rows, a hundred sessions per transaction, each batch under
    its sessions' row locks."""
    for start in range(0, len(session_ids), _SESSIONS):
        with transaction.atomic(using=using):
            _recount_batch(apps, using, session_ids[start : start + _SESSIONS])


def _recount_batch(apps: Any, using: str, batch: list[int]) -> None:
    session_model, rollup_model, count_model, checkpoint_model = (
        apps.get_model("checkpoints", name) for name in ("AgentSession", "SessionRollup", "SessionCount", "Checkpoint")
    )
    sessions = list(session_model.objects.using(using).select_for_update().filter(pk__in=batch).order_by("pk"))
    rows = checkpoint_model.objects.using(using).filter(session_id__in=batch).order_by()
    rollup_model.objects.using(using).filter(session_id__in=batch).delete()
    rollup_model.objects.using(using).bulk_create(_rollups(rows, rollup_model), batch_size=_ROWS)
    counts: Counter[tuple[int, str, str]] = Counter()
    totals = {session.pk: [0] * len(_SESSION_FIELDS) for session in sessions}
    grouped = rows.values("session_id", *_TALLIED, "tool_failed").annotate(
        n=Count("pk"), raw=Sum("raw_bytes"), stored=Sum("stored_bytes")
    )
    for row in grouped:
        n, total = row["n"], totals[row["session_id"]]
        for field in _TALLIED:
            counts[row["session_id"], field, row[field]] += n
        for i, value in enumerate(
            (n, row["raw"], row["stored"], n * (row["status"] in _STOPPED), n * row["tool_failed"])
        ):
            total[i] += value
    count_model.objects.using(using).filter(session_id__in=batch).delete()
    count_model.objects.using(using).bulk_create(
        [count_model(session_id=s, field=field, value=value, count=n) for (s, field, value), n in counts.items()],
        batch_size=_ROWS,
    )
    for session in sessions:
        for name, value in zip(_SESSION_FIELDS, totals[session.pk], strict=True):
            setattr(session, name, value)
    session_model.objects.using(using).bulk_update(sessions, _SESSION_FIELDS)


def _rollups(checkpoints: Any, model: Any) -> list[Any]:
    """The rollup rows, by session, block and hour (UTC) of creation, from one grouped query."""
    grouped = (
        checkpoints.annotate(
            rollup_block=(F("seq") - 1) / ROLLUP_BLOCK, rollup_hour=TruncHour("created_at", tzinfo=UTC)
        )
        .values("session_id", "rollup_block", "rollup_hour")
        .annotate(
            n=Count("pk"),
            steps=Count("pk", filter=Q(kind="step")),
            trouble=Count("pk", filter=_TROUBLE),
            raw_max=Max("raw_bytes"),
            stored=Sum("stored_bytes"),
            first_seq=Min("seq"),
            last_seq=Max("seq"),
        )
    )
    return [
        model(
            session_id=row["session_id"],
            block=row["rollup_block"],
            hour=row["rollup_hour"],
            count=row["n"],
            steps=row["steps"],
            trouble=row["trouble"],
            raw_max=row["raw_max"],
            stored_bytes=row["stored"],
            first_seq=row["first_seq"],
            last_seq=row["last_seq"],
        )
        for row in grouped
    ]
