"""The content-addressed state store.

A checkpoint's state is stored as one of two things, both content-addressed `Chunk` rows:

* a **keyframe**: a tree of nodes. Objects and arrays whose canonical JSON is larger than
  `INLINE_LIMIT` are split into content-defined leaves (an entry closes its leaf when its hash says
  so, with a probability proportional to its size, so leaves average `LEAF_TARGET` bytes and an
  insertion near the front does not shift every later boundary); leaf digests are grouped into
  internal nodes the same way, level by level (fan-out ~`FANOUT`). Unchanged subtrees keep their
  digests, so a keyframe stores only the nodes that changed since the one before.
* a **patch**: the structural change against the parent's state (see `diff.walk`), pointing at
  its base node. At most `KEYFRAME_INTERVAL - 1` patches stand between a state and its keyframe.

A keyframe written on top of patches holds again what they added (the appended messages, in its new
leaves). So when it is written, the patches since the keyframe before (its **segment**) are compressed
again with those leaves as dictionary: same raw bytes, same digests and roots, about a third of the bytes.
The leaves are named by one `D` node whose references they are; a patch compressed so names it (see
`_decompress`). Reading the newest states needs nothing more; reading one of the segment's states
fetches the `D` node and its leaves once. Garbage collection and purges follow the patch → `D` edge.

Per step an agent that appends a message stores one small compressed patch, plus its share of the
next keyframe; a read fetches the patch chain in one recursive query and the keyframe tree one
level per query. Forks and restores reuse a root: zero copy. Node references are raw 16-byte
digests (hex would double them). Everything a state needs is reachable from its root through
node references (`Chunk.base` for patches), which is what garbage collection follows.

Chunk data: one byte n, then a zstd frame. n = 0: a plain frame; 1–16: a patch compressed with the n patches below
it as dictionary; REBASED: a segment's patch compressed again, then a reserved byte (0) and the digest of the D
node whose leaves form its dictionary.

Node layout (before zstd): kind (1 byte: O object, A array, V value, P patch, D a rebased segment's leaves) · codec (1 byte:
o = orjson, s = standard-library JSON for integers beyond 64 bits) · ref count (4 bytes) · refs
(16 bytes each) · JSON payload.
  O/A: [level, items]. Leaf items of A are entries; of O, key/entry pairs. An entry is [value]
       when inline or the index of a ref. Internal items are the children's entry counts.
  V:   the value itself.  P: [depth, ops].
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

import psycopg
import zstandard
from django.conf import settings
from django.db import connection
from django.utils import timezone

from ..models import Checkpoint, Chunk
from . import arrays, diff, jsoncodec, masking
from .digests import DIGEST_SIZE, Part, digest, encoded_from, rebased, released, state_digest, summarise
from .jsoncodec import InvalidJSON

INLINE_LIMIT = 4096
LEAF_TARGET = 16384
LEAF_MAX = 4 * LEAF_TARGET
FANOUT = 32
_QUERY_BATCH = 500
_HEADER = 6
_LEVEL = 6
# How many earlier patches a reader keeps as the next patch's compression dictionary, and a writer may use
# (settings.CHECKPOINT_PATCH_CONTEXT, 16 by default). A patch's first byte says how many it used, so patches written
# with fewer (4 before migration 0039) read back the same. 16 rather than 4: 7 % fewer bytes a patch on the
# benchmark's agent (810 B, was 872; 8 gives ~840) for ~0.2 ms more CPU a create; a read decodes the chain anyway.
PATCH_CONTEXT = 16
# A state's cached context keeps the raw bytes of every patch since its keyframe (up to SEGMENT_MAX), so the writer of
# a keyframe holds its segment.
SEGMENT_MAX = 254
REBASED = 255
_REBASED_HEAD = 2 + DIGEST_SIZE
_REBASE_MAX = 4 * 1024 * 1024  # a keyframe's new leaves beyond this (a state replaced wholesale) rebase nothing
_LEAVES_KEPT = 8
_TOUCH_AFTER = timedelta(minutes=5)  # reused chunks older than this get their created_at renewed


class StateNotFound(LookupError):
    """A root (or a node below it) is missing from the store."""


def _zstd() -> tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor]:
    return jsoncodec.zstd_pair(_LEVEL)


def _node(kind: bytes, refs: list[bytes], payload: bytes, big: bool) -> bytes:
    return b"".join((kind, b"s" if big else b"o", len(refs).to_bytes(4, "big"), *refs, payload))


@dataclass(frozen=True)
class Saved:
    root: bytes
    state_hash: bytes
    raw_bytes: int
    stored_bytes: int
    # What the state adds to its base, as patch operations (diff.to_ops; the whole state is one "s" at the root when
    # it has no base): what the secret scanner reads, so that a checkpoint costs the scan of its change only.
    added: list[list[Any]] = field(default_factory=list)


@dataclass(frozen=True)
class _Entry:
    state: Any  # shared and read-only: copy before changing
    state_hash: bytes | None  # None when read back: hashing 2 MB is not worth it on the read path
    depth: int
    context: tuple[bytes, ...] = ()  # raw bytes of the patches on this chain since its keyframe, newest first
    parts: dict[str, Part] | None = None  # what the next state's digest can reuse (see digests.summarise)


def _dictionary(context: tuple[bytes, ...]) -> zstandard.ZstdCompressionDict:
    return zstandard.ZstdCompressionDict(b"".join(reversed(context)), dict_type=zstandard.DICT_TYPE_RAWCONTENT)


class _StateCache:
    """Recently written or read states by root, so the next checkpoint diffs against memory."""

    def __init__(self, size: int) -> None:
        self.size = size
        # The newest purge this process has seen (`AgentSession.purge_generation`): a session purged later makes it
        # forget every state it holds (purging.forget_cached_states), so no patch is built on an unpurged parent.
        self.generation = 0
        self._items: OrderedDict[bytes, _Entry] = OrderedDict()
        # the dictionaries of recently read or written D nodes, their leaves' bytes (content-addressed: never stale)
        self._leaves: OrderedDict[bytes, zstandard.ZstdCompressionDict] = OrderedDict()
        self._lock = threading.Lock()

    def leaves(self, key: bytes) -> zstandard.ZstdCompressionDict | None:
        with self._lock:
            return self._leaves.get(key)

    def put_leaves(self, key: bytes, dictionary: zstandard.ZstdCompressionDict) -> None:
        with self._lock:
            self._leaves[key] = dictionary
            self._leaves.move_to_end(key)
            while len(self._leaves) > _LEAVES_KEPT:
                self._leaves.popitem(last=False)

    def get(self, root: bytes) -> _Entry | None:
        with self._lock:
            entry = self._items.get(root)
            if entry is not None:
                self._items.move_to_end(root)
            return entry

    def put(self, root: bytes, entry: _Entry) -> None:
        with self._lock:
            self._items[root] = entry
            self._items.move_to_end(root)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def release(self, root: bytes) -> None:
        """Drop the lists' canonical bytes from `root`'s parts (a newer state built on it holds its own), leaving
        its place in the order as it is."""
        with self._lock:
            entry = self._items.get(root)
            if entry is not None and (parts := released(entry.parts)) is not entry.parts:
                self._items[root] = replace(entry, parts=parts)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._leaves.clear()

    def snapshot(self) -> dict[bytes, _Entry]:
        with self._lock:
            return dict(self._items)


cache = _StateCache(size=settings.CHECKPOINT_CACHE_STATES)


# ---- writing ---------------------------------------------------------------------------------


class _TreeBuilder:
    def __init__(self) -> None:
        self.nodes: dict[bytes, bytes] = {}

    def add(self, raw: bytes) -> bytes:
        key = digest(raw)
        self.nodes[key] = raw
        return key

    def value(self, value: Any, encoded: bytes, big: bool) -> bytes:
        """Store `value` (whose canonical JSON is `encoded`) as a node; return its digest."""
        kind = type(value)
        if kind is dict and value:
            return self._container(b"O", sorted(value.items()))
        if (kind is list or kind is tuple) and value:
            return self._container(b"A", [(None, item) for item in value])
        return self.add(_node(b"V", [], encoded, big))

    def _container(self, kind: bytes, items: list[tuple[str | None, Any]]) -> bytes:
        leaves: list[tuple[bytes, int]] = []
        parts: list[bytes] = []
        refs: list[bytes] = []
        size = 0
        big_leaf = False
        for key, item in items:
            encoded, big = jsoncodec.encode(item)
            if len(encoded) > INLINE_LIMIT:
                refs.append(self.value(item, encoded, big))
                entry = str(len(refs) - 1).encode()
                cut_source = refs[-1]
            else:
                entry = b"[" + encoded + b"]"
                big_leaf |= big
                cut_source = encoded
            entry_size = len(entry)
            if key is not None:
                key_bytes = jsoncodec.canonical(key)
                parts.append(key_bytes)
                cut_source = key_bytes + cut_source
                entry_size += len(key_bytes)
            parts.append(entry)
            size += entry_size
            cut = int.from_bytes(digest(cut_source)[:4], "big") % LEAF_TARGET < entry_size
            if cut or size >= LEAF_MAX:
                leaves.append(self._leaf(kind, refs, parts, big_leaf, key is not None))
                parts, refs, size, big_leaf = [], [], 0, False
        if parts or not leaves:
            leaves.append(self._leaf(kind, refs, parts, big_leaf, items[0][0] is not None))
        level = 1
        while len(leaves) > 1:
            leaves = self._level(kind, leaves, level)
            level += 1
        return leaves[0][0]

    def _leaf(self, kind: bytes, refs: list[bytes], parts: list[bytes], big: bool, keyed: bool) -> tuple[bytes, int]:
        payload = b"[0,[" + b",".join(parts) + b"]]"
        count = len(parts) // 2 if keyed else len(parts)
        return self.add(_node(kind, refs, payload, big)), count

    def _level(self, kind: bytes, children: list[tuple[bytes, int]], level: int) -> list[tuple[bytes, int]]:
        parents: list[tuple[bytes, int]] = []
        group: list[tuple[bytes, int]] = []
        for child in children:
            group.append(child)
            if int.from_bytes(child[0][:4], "big") % FANOUT == 0 or len(group) >= 4 * FANOUT:
                parents.append(self._internal(kind, group, level))
                group = []
        if group:
            parents.append(self._internal(kind, group, level))
        return parents

    def _internal(self, kind: bytes, group: list[tuple[bytes, int]], level: int) -> tuple[bytes, int]:
        counts = ",".join(str(count) for _, count in group)
        payload = f"[{level},[{counts}]]".encode()
        return self.add(_node(kind, [key for key, _ in group], payload, False)), sum(c for _, c in group)


class ChunkBatch:
    """Chunks waiting to be inserted, so a batch of checkpoints costs one bulk insert."""

    def __init__(self, *, written: dict[bytes, bytes] | None = None) -> None:
        self.pending: dict[bytes, Any] = {}
        self.rewrites: dict[bytes, bytes] = {}  # a stored patch's digest → its data compressed again (`_rebase`)
        self.written = written  # when given, every chunk's data as flushed, by digest (a purge's rewrite)

    def add_patch(self, key: bytes, raw: bytes, *, base: bytes, context: tuple[bytes, ...]) -> int:
        """Queue a patch, compressed with the patches before it as dictionary; return its size.

        Consecutive patches of one agent share words, names and structure: with the previous few
        as a zstd dictionary a patch shrinks by about a third. Reading needs those patches anyway
        (they are on the chain to the keyframe), so this adds no dependency.
        """
        frame = zstandard.ZstdCompressor(level=_LEVEL, dict_data=_dictionary(context)) if context else _zstd()[0]
        data = bytes([len(context)]) + frame.compress(raw)
        chunk = Chunk(hash=key, data=data, raw_size=len(raw), base=base, created_at=timezone.now())
        self.pending[key] = chunk
        return len(data)

    def add(self, nodes: dict[bytes, bytes], *, check_existing: bool = True) -> int:
        """Queue the nodes not stored yet; return the compressed bytes they add."""
        candidates = [key for key in nodes if key not in self.pending]
        existing: set[bytes] = set()
        if check_existing:
            for start in range(0, len(candidates), _QUERY_BATCH):
                batch = candidates[start : start + _QUERY_BATCH]
                rows = Chunk.objects.filter(hash__in=batch).values_list("hash", flat=True)
                existing.update(bytes(h) for h in rows)
        now = timezone.now()
        if existing:
            # Reused chunks count as fresh: garbage collection spares young chunks, and the checkpoint
            # that will reference these is not committed yet.
            Chunk.objects.filter(hash__in=list(existing), created_at__lt=now - _TOUCH_AFTER).update(created_at=now)
        compressor = _zstd()[0]
        added = 0
        for key in candidates:
            if key in existing:
                continue
            raw = nodes[key]
            data = b"\x00" + compressor.compress(raw)
            self.pending[key] = Chunk(hash=key, data=data, raw_size=len(raw), created_at=now)
            added += len(data)
        return added

    def take(self) -> list[Chunk]:
        """The chunks waiting, for a caller that inserts them itself (`arrays.statement`); the batch is left empty."""
        chunks = list(self.pending.values())
        self.pending.clear()
        return chunks

    def flush(self) -> None:
        chunks = self.take()
        if self.written is not None:
            self.written.update((bytes(chunk.hash), bytes(chunk.data)) for chunk in chunks)
        if chunks:
            if connection.vendor == "postgresql":  # one statement however many chunks (a batch's: ~1,000)
                arrays.insert(Chunk, chunks, ignore_conflicts=True)
            else:
                Chunk.objects.bulk_create(chunks, ignore_conflicts=True, batch_size=_QUERY_BATCH)
        self.flush_rewrites()

    def flush_rewrites(self, *, wait: bool = False) -> None:
        """Store the rebased patches' new data (after the D nodes they name are inserted: `flush`, or a caller's own
        insert of `take()`). Stamped now: garbage collection's grace and a purge's look at chunks written since its
        scan both see them as new.

        Rows another transaction holds are skipped unless `wait`: a fork's keyframe may be rebasing the patches its
        session shares with this one, in another order, and a create must neither wait for it nor deadlock with it
        (a skipped patch keeps the data it had, which reads the same). A purge waits: it must replace what it read."""
        if not self.rewrites:
            return
        if self.written is not None:
            self.written.update(self.rewrites)
        rows, self.rewrites = list(self.rewrites.items()), {}
        table, now = _chunk_table(), timezone.now()
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                keys = [key for key, _ in rows]
                free = "" if wait else " SKIP LOCKED"
                cursor.execute(
                    f"UPDATE {table} SET data = v.data, created_at = %s"  # noqa: S608 - the table's quoted name; values are parameters
                    f" FROM unnest(%s::bytea[], %s::bytea[]) AS v(hash, data) WHERE {table}.hash = v.hash"
                    f" AND {table}.hash IN (SELECT hash FROM {table} WHERE hash = ANY(%s) ORDER BY hash FOR UPDATE{free})",
                    [now, keys, [data for _, data in rows], keys],
                )
            else:
                cursor.executemany(
                    f"UPDATE {table} SET data = %s, created_at = %s WHERE hash = %s",  # noqa: S608 - quoted name
                    [(data, now, key) for key, data in rows],
                )


def save_state(
    state: Any,
    *,
    base: bytes | None = None,
    batch: ChunkBatch | None = None,
    max_depth: int | None = None,
    max_bytes: int | None = None,
) -> Saved:
    """Store `state`, as a patch against `base` (the parent's root) when that is cheaper.

    Raises InvalidJSON for input canonical JSON would alter: NaN, non-string keys, excess depth.
    `max_bytes` caps its canonical JSON (InvalidJSON past it, before anything is stored or cached): a state made
    on the server (a patch applied) is held to the limit a body holds a whole state to.
    The caller keeps ownership of `state`; the store caches its own copy. With `batch`, chunks are
    queued there and written by its flush(); without, they are written before this returns.
    """
    own_batch = batch is None
    batch = batch if batch is not None else ChunkBatch()
    saved = _save(state, base, batch, max_depth if max_depth is not None else settings.CHECKPOINT_MAX_DEPTH, max_bytes)
    if own_batch:
        batch.flush()
    return saved


def _save(state: Any, base: bytes | None, batch: ChunkBatch, max_depth: int, max_bytes: int | None = None) -> Saved:
    parent = None
    if base is not None:
        try:
            parent = _entry(base)
        except StateNotFound:  # an unreadable parent must not block new checkpoints: store whole
            base = None
    summary = summarise(state, parent.parts if parent is not None else None)
    state_hash = summary.digest
    raw_bytes = len(jsoncodec.encode(state)[0]) if summary.big else summary.size
    if max_bytes is not None and raw_bytes > max_bytes:
        raise jsoncodec.InvalidJSON(f"the state is {raw_bytes:,} bytes, over the {max_bytes:,} a checkpoint may hold")
    if parent is not None and base is not None:
        if parent.state_hash == state_hash:
            return Saved(base, state_hash, raw_bytes, 0)
        ops = diff.to_ops(_changes(parent, state, summary.parts))
        added = [op for op in ops if op[0] != "d"]
        for op in added:
            if op[0] != "d":
                jsoncodec.check_value(op[-1], max_depth=max_depth, depth=len(op[1]))
        payload, patch_big = jsoncodec.encode([parent.depth + 1, ops])
        own_copy = diff.apply_ops(parent.state, jsoncodec.loads(payload, exact=patch_big)[1])
        # The walk compares with `==`, blind to 1 vs true vs 1.0; the canonical bytes are not. The replayed copy
        # shares the parent's unchanged values, whose digests are known: only the change is encoded to tell.
        replayed = summarise(own_copy, parent.parts)
        if replayed.digest == state_hash:
            parts = encoded_from(replayed.parts, summary.parts)
            cache.release(base)
            if not ops:
                cache.put(base, _Entry(parent.state, state_hash, parent.depth, parent.context, parts))
                return Saved(base, state_hash, raw_bytes, 0)
            if parent.depth + 1 < settings.CHECKPOINT_KEYFRAME_INTERVAL and len(payload) * 2 < raw_bytes:
                raw = _node(b"P", [base], payload, patch_big)
                root = digest(raw)
                # A patch's digest covers its base and its change: no need to ask whether it exists.
                used = parent.context[: settings.CHECKPOINT_PATCH_CONTEXT]
                stored = batch.add_patch(root, raw, base=base, context=used)
                context = (raw, *parent.context[: SEGMENT_MAX - 1])
                cache.put(root, _Entry(own_copy, state_hash, parent.depth + 1, context, parts))
                return Saved(root, state_hash, raw_bytes, stored, added)
            segment = parent.context if settings.CHECKPOINT_REBASE else ()
            return _keyframe(own_copy, batch, Saved(b"", state_hash, raw_bytes, 0, added), parts, segment)
        else:  # store the state whole, exactly as given
            jsoncodec.check_value(state, max_depth=max_depth)
            encoded, big = jsoncodec.encode(state)
            own_copy = jsoncodec.loads(encoded, exact=big)
    else:
        jsoncodec.check_value(state, max_depth=max_depth)
        encoded, big = jsoncodec.encode(state)
        own_copy = jsoncodec.loads(encoded, exact=big)
    whole = Saved(b"", state_hash, raw_bytes, 0, [["s", [], own_copy]])
    return _keyframe(own_copy, batch, whole, rebased(summary.parts, own_copy))


def _changes(parent: _Entry, state: Any, parts: dict[str, Part] | None) -> Iterator[diff.Change]:
    """diff.walk(parent.state, state), told by the digests which top-level values changed and where a grown list's
    new items begin: the walk would compare every other value and item with `==` (~1 ms on a 2 MB state of new
    objects). `parts` are `state`'s, summarised against the parent's."""
    old, old_parts = parent.state, parent.parts
    if parts is None or old_parts is None or type(old) is not dict or type(state) is not dict:
        yield from diff.walk(old, state)
        return
    for key, value in old.items():
        if key not in state:
            yield ("del", (key,), value)
    for key, new in state.items():
        if key not in old:
            yield ("set", (key,), diff.MISSING, new)
            continue
        part, old_part = parts[key], old_parts.get(key)
        if old_part is None or part.digest != old_part.digest:
            if part.kept and old_part is not None and part.kept == len(old_part.value) == len(old[key]):
                yield ("splice", (key,), part.kept, [], new[part.kept :])  # what the walk finds for appended items
            else:
                yield from diff.walk_at(old[key], new, (key,))


def _keyframe(
    state: Any,
    batch: ChunkBatch,
    saved: Saved,
    parts: dict[str, Part] | None,
    segment: tuple[bytes, ...] = (),
) -> Saved:
    """Store `state` (the store's own copy) as a tree; `saved` brings its digest and size, `segment` the raw bytes
    of the patches it follows, newest first (rebased on its new leaves)."""
    container = type(state) in (dict, list) and bool(state)  # encoded item by item: no need to encode it whole
    encoded, big = (b"", False) if container else jsoncodec.encode(state)
    builder = _TreeBuilder()
    root = builder.value(state, encoded, big)
    stored = batch.add(builder.nodes)
    if segment:
        leaves = sorted(
            key
            for key, raw in builder.nodes.items()
            if key != root and key in batch.pending and raw[2:_HEADER] == b"\0\0\0\0"
        )
        stored += _rebase(segment, [(key, builder.nodes[key]) for key in leaves], batch)
    cache.put(root, _Entry(state, saved.state_hash, 0, parts=parts))
    return Saved(root, saved.state_hash, saved.raw_bytes, stored, saved.added)


def _rebase(segment: tuple[bytes, ...], leaves: list[tuple[bytes, bytes]], batch: ChunkBatch) -> int:
    """Queue the segment's patches compressed again with a keyframe's new leaves (what they added, held again) as
    dictionary; return the bytes of the D node naming the leaves. On the benchmark's agent a patch falls from 810 to
    ~290 bytes (issue #23 item 4) for ~2 ms once a keyframe interval. The patches below each are left out of its
    dictionary: with them a patch was ~200 bytes, but each needed a compressor of its own (~30 ms a keyframe), and a
    reader would need them too."""
    leaf_bytes = b"".join(raw for _, raw in leaves)
    if not leaf_bytes or len(leaf_bytes) > _REBASE_MAX:
        return 0
    node = _node(b"D", [key for key, _ in leaves], b"0", False)
    key = digest(node)
    stored = batch.add({key: node}, check_existing=False)
    compressor = zstandard.ZstdCompressor(level=_LEVEL, dict_data=_hold_leaves(key, leaf_bytes))
    head = bytes([REBASED, 0]) + key
    for raw in segment:
        batch.rewrites[digest(raw)] = head + compressor.compress(raw)
    return stored


def _leaves_dictionary(key: bytes) -> zstandard.ZstdCompressionDict:
    """The leaves a D node names, their raw bytes concatenated in its order as a dictionary (two queries, then from
    memory: the object keeps its decompression tables for the segment's other patches)."""
    held = cache.leaves(key)
    if held is not None:
        return held
    node = _parse(_fetch({key})[key])
    found = _fetch(set(node.refs))
    return _hold_leaves(key, b"".join(_decompress(found[ref]) for ref in node.refs))


def _hold_leaves(key: bytes, leaf_bytes: bytes) -> zstandard.ZstdCompressionDict:
    """The dictionary of D node `key`'s leaves, kept in the state cache for the next patch of its segment."""
    dictionary = zstandard.ZstdCompressionDict(leaf_bytes, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    cache.put_leaves(key, dictionary)
    return dictionary


def rebased_on(data: bytes) -> bytes | None:
    """The D node a rebased patch's data names (None for any other chunk)."""
    return bytes(data[2:_REBASED_HEAD]) if data[0] == REBASED else None


# ---- reading ---------------------------------------------------------------------------------


def _chunk_table() -> str:
    return connection.ops.quote_name(Chunk._meta.db_table)


def _select(sql: str, params: list[Any]) -> list[tuple[bytes, bytes]]:
    """Run a chunk query (hash, data)."""
    if connection.vendor != "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(sql.replace("= ANY(%s)", f"IN ({', '.join(['%s'] * len(params[0]))})"), _flat(params))
            return [(bytes(h), bytes(d)) for h, d in cursor.fetchall()]
    return [(bytes(h), bytes(d)) for h, d in _binary_rows(sql, params)]


def _binary_rows(sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
    """A chunk query on PostgreSQL in binary result format: bytea as text is hex, twice the bytes to send and
    decode (a 2 MB state's leaves: 3.3 ms in text, 1.3 ms in binary)."""
    connection.ensure_connection()
    started = time.monotonic()
    with psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(sql, params, binary=True)
        rows = cursor.fetchall()
    if connection.queries_logged:  # keep Django's query counting (tests, debug toolbar) truthful
        connection.queries_log.append({"sql": sql, "time": f"{time.monotonic() - started:.3f}"})
    return rows


def _flat(params: list[Any]) -> list[Any]:
    return [item for param in params for item in (param if isinstance(param, list) else [param])]


def _fetch_chain(root: bytes, stop: Collection[bytes] = ()) -> list[tuple[bytes, bytes]]:
    """The root node and every patch base below it down to its keyframe, or to a node in `stop` (the states this
    process holds: a put's base stored by another process is a patch or two past one), newest first, in one
    query."""
    table = _chunk_table()
    if connection.vendor == "postgresql":
        short, params = "chain.hash <> ALL(%s)", [root, list(stop)]
    else:
        short, params = f"chain.hash NOT IN ({', '.join(['%s'] * len(stop))})", [root, *stop]
    sql = (
        f"WITH RECURSIVE chain(hash, data, base, n) AS ("  # noqa: S608 - the table's quoted name and placeholders; values are parameters
        f" SELECT hash, data, base, 0 FROM {table} WHERE hash = %s"
        f" UNION ALL SELECT c.hash, c.data, c.base, chain.n + 1 FROM {table} c JOIN chain ON c.hash = chain.base"
        f" WHERE {short}"
        f") SELECT hash, data FROM chain ORDER BY n"
    )
    return _select(sql, params)


def _fetch(keys: set[bytes]) -> dict[bytes, bytes]:
    found: dict[bytes, bytes] = {}
    ordered = list(keys)
    sql = f"SELECT hash, data FROM {_chunk_table()} WHERE hash = ANY(%s)"  # noqa: S608 - the table's quoted name; values are parameters
    for start in range(0, len(ordered), _QUERY_BATCH):
        found.update(_select(sql, [ordered[start : start + _QUERY_BATCH]]))
    missing = keys - found.keys()
    if missing:
        raise StateNotFound(f"{len(missing)} store node(s) missing, e.g. {next(iter(missing)).hex()}")
    return found


@dataclass(frozen=True)
class _Node:
    kind: bytes
    refs: list[bytes]
    payload: Any


def _decompress(data: bytes, context: tuple[bytes, ...] = ()) -> bytes:
    """A chunk is one byte n (0, or how many earlier patches form its dictionary) and a zstd frame (a rebased patch:
    see the module's docstring)."""
    used = data[0]
    if not used:
        return _zstd()[1].decompress(data[1:])
    if used == REBASED:
        if data[1]:  # reserved (0): a dictionary that also takes patches below it would say how many
            raise StateNotFound("a rebased patch in a format this release does not read")
        leaves = _leaves_dictionary(bytes(data[2:_REBASED_HEAD]))
        return zstandard.ZstdDecompressor(dict_data=leaves).decompress(data[_REBASED_HEAD:])
    if len(context) < used:
        raise StateNotFound("a patch's compression context is missing from its chain")
    return zstandard.ZstdDecompressor(dict_data=_dictionary(context[:used])).decompress(data[1:])


def _parse(data: bytes, context: tuple[bytes, ...] = ()) -> _Node:
    return _parse_raw(_decompress(data, context))


def _parse_raw(raw: bytes) -> _Node:
    kind, big = raw[:1], raw[1:2] == b"s"
    count = int.from_bytes(raw[2:_HEADER], "big")
    end = _HEADER + count * DIGEST_SIZE
    if end > len(raw):  # what a wrong dictionary decodes to: refuse it, not allocate billions of refs
        raise StateNotFound("a stored node does not decode (its header names more references than it holds)")
    refs = [raw[i : i + DIGEST_SIZE] for i in range(_HEADER, end, DIGEST_SIZE)]
    return _Node(kind, refs, jsoncodec.loads(raw[end:], exact=big))


def _load_tree(root: bytes, root_node: _Node) -> Any:
    """Materialise a keyframe, fetching one tree level per query."""
    nodes = {root: root_node}
    frontier = set(root_node.refs)
    while frontier:
        fetched = _fetch(frontier)
        frontier = set()
        for key, data in fetched.items():
            node = _parse(data)
            nodes[key] = node
            frontier.update(ref for ref in node.refs if ref not in nodes)
    return _assemble(root, nodes)


def _assemble(key: bytes, nodes: dict[bytes, _Node]) -> Any:
    node = nodes[key]
    if node.kind == b"V":
        return node.payload
    level, items = node.payload
    if node.kind == b"A":
        if level:
            return [value for ref in node.refs for value in _assemble(ref, nodes)]
        return [item[0] if type(item) is list else _assemble(node.refs[item], nodes) for item in items]
    if level:
        merged: dict[str, Any] = {}
        for ref in node.refs:
            merged.update(_assemble(ref, nodes))
        return merged
    return {
        items[i]: (items[i + 1][0] if type(items[i + 1]) is list else _assemble(node.refs[items[i + 1]], nodes))
        for i in range(0, len(items), 2)
    }


def _entry(root: bytes, *, keep: bool = True) -> _Entry:
    entry = cache.get(root)
    if entry is None:
        entry = _materialise(root, handover=keep)
        if keep:
            cache.put(root, entry)
    return entry


def prefetch(roots: Iterable[bytes]) -> None:
    """Load into the cache the states under `roots` it lacks, their patch chains fetched in one query (PostgreSQL;
    elsewhere one a state, as `load_shared` does). A page of LangGraph tuples reads ~40 states, most of them a patch
    or two past one another: one query a state was half the page's time (issue #23 item 9). Replayed shortest chain
    first, so each later state stops at one just cached. The states the chains stop at are held for the whole
    replay: caching the page's states may evict one of them (the least recently used) before a chain that stops
    there is replayed, which then found neither that state nor a keyframe below it (a list of 1,002 tuples failed
    so with the default 64 states)."""
    wanted = [root for root in dict.fromkeys(bytes(root) for root in roots) if cache.get(root) is None]
    if len(wanted) < 2 or connection.vendor != "postgresql":
        return
    held = cache.snapshot()
    table = _chunk_table()
    sql = (
        f"WITH RECURSIVE chain(hash, data, base) AS ("  # noqa: S608 - the table's quoted name and placeholders; values are parameters
        f" SELECT hash, data, base FROM {table} WHERE hash = ANY(%s)"
        f" UNION SELECT c.hash, c.data, c.base FROM {table} c JOIN chain ON c.hash = chain.base"
        f" WHERE chain.hash <> ALL(%s)"
        f") SELECT hash, data, base FROM chain"
    )
    fetched = _binary_rows(sql, [wanted, list(held)])
    rows = {bytes(h): (bytes(d), bytes(b) if b is not None else None) for h, d, b in fetched}
    chains = {root: _chain_in(root, rows, held) for root in wanted}
    for root in sorted(wanted, key=lambda root: len(chains[root] or ())):
        chain = chains[root]
        if chain and cache.get(root) is None:
            held[root] = entry = _materialise(root, chain, held)
            cache.put(root, entry)


def _chain_in(
    root: bytes, rows: dict[bytes, tuple[bytes, bytes | None]], held: dict[bytes, _Entry]
) -> list[tuple[bytes, bytes]] | None:
    """`root`'s chain as `_fetch_chain` gives it, from fetched rows (down to a keyframe, or the first state
    `held`), or None when the rows lack a link."""
    chain, key = [], root
    while True:
        row = rows.get(key)
        if row is None:
            return None
        chain.append((key, row[0]))
        if key in held or row[1] is None or len(chain) > len(rows):
            return chain
        key = row[1]


def _materialise(
    root: bytes,
    chain: list[tuple[bytes, bytes]] | None = None,
    cached: dict[bytes, _Entry] | None = None,
    *,
    handover: bool = False,
) -> _Entry:
    """Walk the chain down to a cached state (of `cached`, by default the cache now) or the keyframe, then replay
    the patches upwards. With `handover` (a state to be cached, one at a time) the lists' canonical bytes move up
    from the state the replay started at; a page's replays (`prefetch`) leave them where they are, or each of its
    states would copy them and hold the copy until the page is built."""
    cached = cache.snapshot() if cached is None else cached
    chain = chain if chain is not None else _fetch_chain(root, stop=cached)
    if not chain:
        raise StateNotFound(f"no state stored under {root.hex()}")
    pending: list[bytes] = []
    start: _Entry | None = None
    for key, data in chain:
        start = cached.get(key)
        if start is not None:
            break
        if data[0] == 0:
            node = _parse(data)
            if node.kind != b"P":
                start = _Entry(_load_tree(key, node), None, 0)
                break
        pending.append(data)
    if start is None:
        raise StateNotFound(f"the patch chain of {root.hex()} has no keyframe")
    state, context = start.state, start.context
    for data in reversed(pending):
        raw = _decompress(data, context)
        state = diff.apply_ops(state, _parse_raw(raw).payload[1])
        context = (raw, *context[: SEGMENT_MAX - 1])
    if not pending or start.parts is None:
        return _Entry(state, None if pending else start.state_hash, start.depth + len(pending), context)
    # Replayed from a cached state with its parts (another process stored the states since): the patches share
    # its unchanged values and list items, so the parts the next state's digest reuses cost only what changed. With
    # `handover`, the lists' canonical bytes a caller's state left there move up to the replayed state: the head the
    # caller's next whole state is compared with (behind several workers, often one another worker stored).
    summary = summarise(state, start.parts, extend=handover)
    if handover:
        cache.release(key)
    return _Entry(state, summary.digest, start.depth + len(pending), context, summary.parts)


def load_shared(root: bytes | memoryview) -> Any:
    """The state under `root` as a shared, read-only object (for diffs and serialisation)."""
    return _entry(bytes(root)).state


def load_state(root: bytes) -> Any:
    """The state under `root` as a fresh object the caller may change (masked inside `masking.masked_reads`)."""
    return masking.reading(_fresh_state(bytes(root)))


def _fresh_state(root: bytes) -> Any:
    cached = cache.get(root)
    if cached is None:  # freshly built from the store: nobody else holds it, so no copy is needed
        return _entry(root, keep=False).state
    encoded, big = jsoncodec.encode(cached.state)
    return jsoncodec.loads(encoded, exact=big)


def load_state_json(root: bytes) -> bytes:
    """The state under `root` as canonical JSON bytes (what the API sends)."""
    return jsoncodec.canonical(load_shared(root))


__all__ = [
    "DIGEST_SIZE",
    "InvalidJSON",
    "Saved",
    "StateNotFound",
    "cache",
    "load_shared",
    "prefetch",
    "load_state",
    "load_state_json",
    "save_state",
    "state_digest",
]


def diff_checkpoints(a: Checkpoint, b: Checkpoint) -> diff.Diff:
    return diff.diff_states(load_shared(bytes(a.root)), load_shared(bytes(b.root)))
