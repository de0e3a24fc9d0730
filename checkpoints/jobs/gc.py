"""Storage garbage collection: mark every chunk a live state needs, sweep the old rest.

Mark: start from every checkpoint's `root`, every session's `live_root` and every LangGraph pending write's
`values_root` (a write whose value a later state holds), and follow references
one tree level per query (as the store reads): a patch's only reference is its `base` column (its
data is compressed with a dictionary and is never decompressed here); any other node is a plain
zstd frame whose header lists its refs. Keyframes and the patches between them are therefore kept
for every live checkpoint, whatever retention deleted around them. A patch rebased on a keyframe's
leaves (store.REBASED) also refers to the D node naming them, whose header lists them.

Sweep: chunks that were not marked AND were created before `now - grace`, in batches, each batch
its own short transaction. The age test is repeated inside the DELETE itself, so a chunk rewritten
or refreshed meanwhile is left alone. The grace period protects ingest in flight: chunks are
written before the checkpoint row that references them.

Limit (see the report of issue 5): ingest skips chunks that already exist. If a new state reuses an
*old unreachable* chunk (a subtree of a checkpoint retention deleted) between this run's mark and
its sweep, the sweep can delete it. Closing that window needs ingest to refresh `created_at` of the
chunks it reuses (an UPDATE … RETURNING instead of the existence SELECT in store.ChunkBatch.add).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models.functions import Length
from django.utils import timezone

from .. import store
from ..models import AgentSession, Checkpoint, Chunk, LangGraphWrites
from ..services.chunks import delete_chunks

_QUERY_BATCH = 500


def _refs(data: bytes) -> list[bytes]:
    """The references in a plain (dictionary-less) node's header, without parsing its payload."""
    head = store._zstd()[1].decompress(data[1:])
    count = int.from_bytes(head[2 : store._HEADER], "big")
    end = store._HEADER + count * store.DIGEST_SIZE
    return [head[i : i + store.DIGEST_SIZE] for i in range(store._HEADER, end, store.DIGEST_SIZE)]


def live_roots() -> set[bytes]:
    # .order_by(): the model's ordering would make DISTINCT sort every row by (session, seq, root) on disk
    roots = {bytes(r) for r in Checkpoint.objects.order_by().values_list("root", flat=True).distinct()}
    roots.update(
        bytes(r) for r in AgentSession.objects.filter(live_root__isnull=False).values_list("live_root", flat=True)
    )
    writes = LangGraphWrites.objects.filter(values_root__isnull=False).order_by().values_list("values_root", flat=True)
    roots.update(bytes(r) for r in writes.distinct() if r is not None)
    return roots


def mark(roots: set[bytes]) -> set[bytes]:
    """Every stored chunk reachable from `roots` (missing ones are skipped: nothing to keep)."""
    marked: set[bytes] = set()
    frontier = set(roots)
    while frontier:
        ordered = list(frontier)
        frontier = set()
        for start in range(0, len(ordered), _QUERY_BATCH):
            rows = Chunk.objects.filter(hash__in=ordered[start : start + _QUERY_BATCH]).values_list(
                "hash", "data", "base"
            )
            for key, data, base in rows:
                key, data = bytes(key), bytes(data)
                marked.add(key)
                if base is not None:  # a patch: its base, and the D node of the leaves it was rebased on
                    rebased = store.rebased_on(data)
                    children = [bytes(base)] if rebased is None else [bytes(base), rebased]
                elif data[0] == 0:
                    children = _refs(data)
                else:  # pragma: no cover - a dictionary-compressed node always has a base
                    children = []
                frontier.update(child for child in children if child not in marked)
    return marked


def collect_garbage(
    *, now: datetime | None = None, grace: timedelta | None = None, batch_size: int = 1000
) -> dict[str, Any]:
    """Mark from every live root, then delete unmarked chunks older than the grace period."""
    now = now or timezone.now()
    grace = grace if grace is not None else timedelta(minutes=settings.GC_GRACE_MINUTES)
    cutoff = now - grace
    marked = mark(live_roots())
    deleted = freed = 0
    last: bytes | None = None
    while True:
        candidates = Chunk.objects.filter(created_at__lt=cutoff).order_by("hash")
        if last is not None:
            candidates = candidates.filter(hash__gt=last)
        page = [(bytes(h), size or 0) for h, size in candidates.values_list("hash", Length("data"))[:batch_size]]
        if not page:
            break
        last = page[-1][0]
        doomed = [(key, size) for key, size in page if key not in marked]
        if doomed:
            sizes = dict(doomed)
            gone = delete_chunks(sizes, created_before=cutoff)
            deleted += len(gone)
            freed += sum(sizes[key] for key in gone)
        if len(page) < batch_size:
            break
    return {"marked": len(marked), "deleted": deleted, "bytes_freed": freed}
