"""Deleting stored chunks: the write half of garbage collection (`jobs.gc` decides which are unreachable).

Not audited: chunks are storage, not anything an operator sees; the gc job's run records what it freed.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db import transaction

from ..models import Chunk


@transaction.atomic
def delete_chunks(hashes: Iterable[bytes], *, created_before: datetime) -> list[bytes]:
    """Delete the given chunks that are still older than `created_before`; returns the hashes deleted.

    The age is tested again here, not just when the caller listed them: a chunk refreshed since then stays.
    A chunk another transaction holds locked is skipped (the next run gets it).
    """
    gone = [
        bytes(key)
        for key in Chunk.objects.filter(hash__in=list(hashes), created_at__lt=created_before)
        .select_for_update(skip_locked=True)
        .values_list("hash", flat=True)
    ]
    if gone:
        Chunk.objects.filter(hash__in=gone, created_at__lt=created_before).delete()
    return gone
