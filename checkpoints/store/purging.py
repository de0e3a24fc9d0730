"""What a purge needs from the store (docs/purges.md): every chunk read back, the ones whose bytes hold a value, the
chunks that reach them, and a value replaced in a state.

A chunk is read back the way `_materialise` reads it: a patch compressed with earlier patches as dictionary needs
the raw bytes of those patches (its base chain), and a patch rebased on a keyframe's leaves those leaves instead
(`store._leaves_dictionary`), so chains are fetched once and their contexts remembered while the pass goes on, chunk by
chunk in the order of their hashes. The D node a rebased patch names is a reference like any other here: a purge
that rewrites one of its leaves rewrites the patches compressed with them. A value is found in a chunk by the bytes canonical
JSON gives it (orjson's, and the standard library's for nodes holding integers beyond 64 bits, which escape
non-ASCII): a string is always whole in one node, never cut across two.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from django.db import connection

from ..models import Chunk
from . import PATCH_CONTEXT, ChunkBatch, _decompress, _fetch_chain, cache, rebased_on
from .digests import DIGEST_SIZE

_PAGE = 500
_CONTEXTS_KEPT = 20_000  # patch contexts remembered during a pass (a chain is up to 64 patches; most are reused)
_HEADER = 6


def needles(value: str) -> list[bytes]:
    """The ways `value` is spelled inside a stored node."""
    ascii_escaped = json.dumps(value)[1:-1].encode()
    return sorted({orjson.dumps(value)[1:-1], ascii_escaped, json.dumps(value, ensure_ascii=False)[1:-1].encode()})


def refs_of(raw: bytes) -> list[bytes]:
    count = int.from_bytes(raw[2:_HEADER], "big")
    return [raw[i : i + DIGEST_SIZE] for i in range(_HEADER, _HEADER + count * DIGEST_SIZE, DIGEST_SIZE)]


def payload_of(raw: bytes) -> bytes:
    return raw[_HEADER + int.from_bytes(raw[2:_HEADER], "big") * DIGEST_SIZE :]


class _Contexts:
    """The raw bytes of each patch's dictionary (the patches below it, newest first), found chain by chain."""

    def __init__(self) -> None:
        self._known: OrderedDict[bytes, tuple[bytes, ...]] = OrderedDict()

    def _remember(self, key: bytes, context: tuple[bytes, ...]) -> None:
        self._known[key] = context
        while len(self._known) > _CONTEXTS_KEPT:
            self._known.popitem(last=False)

    def after(self, base: bytes) -> tuple[bytes, ...]:
        """The context a patch on `base` was compressed with: `base`'s own raw bytes when it is a patch, then the
        patches below it, up to PATCH_CONTEXT."""
        if base in self._known:
            return self._known[base]
        chain = _fetch_chain(base)  # at most a keyframe interval of rows; the known ones are not decompressed again
        context: tuple[bytes, ...] = ()
        for key, data in reversed(chain):
            if key in self._known:
                context = self._known[key]
                continue
            raw = _decompress(data, context)
            context = (raw, *context[: PATCH_CONTEXT - 1]) if raw[:1] == b"P" else ()
            self._remember(key, context)
        return context


def raw_chunks(keys: Iterable[bytes] | None = None) -> Iterator[tuple[bytes, bytes]]:
    """(hash, raw node) of every stored chunk (or of `keys`), decompressed."""
    for key, raw, _ in _decoded(keys):
        yield key, raw


def _decoded(keys: Iterable[bytes] | None) -> Iterator[tuple[bytes, bytes, bytes | None]]:
    """(hash, raw node, the D node it was rebased on or None) of every stored chunk (or of `keys`)."""
    contexts = _Contexts()
    table = connection.ops.quote_name(Chunk._meta.db_table)
    if keys is not None:
        wanted = list(keys)
        pages: Iterator[list[tuple[Any, ...]]] = (
            _rows(f"SELECT hash, data, base FROM {table} WHERE hash = ANY(%s)", [wanted[i : i + _PAGE]])  # noqa: S608 - quoted name
            for i in range(0, len(wanted), _PAGE)
        )
    else:
        pages = _all_pages(table)
    for rows in pages:
        for key, data, base in rows:
            data = bytes(data)
            yield bytes(key), _decompress(data, contexts.after(bytes(base)) if data[0] else ()), rebased_on(data)


def _rows(sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
    if connection.vendor != "postgresql":
        sql = sql.replace("= ANY(%s)", f"IN ({', '.join(['%s'] * len(params[0]))})")
        params = [item for param in params for item in (param if isinstance(param, list) else [param])]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows: list[tuple[Any, ...]] = cursor.fetchall()
        return rows


def _all_pages(table: str) -> Iterator[list[tuple[Any, ...]]]:
    after = b""
    while True:
        rows = _rows(f"SELECT hash, data, base FROM {table} WHERE hash > %s ORDER BY hash LIMIT {_PAGE}", [after])  # noqa: S608 - quoted name, a constant
        if not rows:
            return
        yield rows
        after = bytes(rows[-1][0])


@dataclass
class StoreScan:
    """The chunks holding a value (`holding`) and the reference graph of the store, reversed (`referrers`)."""

    holding: set[bytes] = field(default_factory=set)
    refs: dict[bytes, list[bytes]] = field(default_factory=dict)
    referrers: dict[bytes, list[bytes]] = field(default_factory=dict)
    chunks: int = 0

    def add(self, key: bytes, raw: bytes, spelled: list[bytes], rebased: bytes | None = None) -> None:
        self.chunks += 1
        refs = refs_of(raw) if rebased is None else [*refs_of(raw), rebased]
        self.refs[key] = refs
        for ref in refs:
            self.referrers.setdefault(ref, []).append(key)
        payload = payload_of(raw)
        if any(needle in payload for needle in spelled):
            self.holding.add(key)

    def reaching(self, targets: Iterable[bytes]) -> set[bytes]:
        """`targets` and every chunk from which one of them is reachable (the nodes that must be re-encoded)."""
        found = set(targets)
        stack = list(found)
        while stack:
            for referrer in self.referrers.get(stack.pop(), ()):
                if referrer not in found:
                    found.add(referrer)
                    stack.append(referrer)
        return found

    def reachable(self, roots: Iterable[bytes]) -> set[bytes]:
        """Every chunk reachable from `roots`."""
        found: set[bytes] = set()
        stack = [root for root in roots if root in self.refs]
        found.update(stack)
        while stack:
            for ref in self.refs.get(stack.pop(), ()):
                if ref not in found:
                    found.add(ref)
                    stack.append(ref)
        return found


def scan_store(value: str, keys: Iterable[bytes] | None = None, into: StoreScan | None = None) -> StoreScan:
    """Read every chunk (or `keys`) once: which hold `value`, and what refers to what."""
    scan = into or StoreScan()
    spelled = needles(value)
    for key, raw, rebased in _decoded(keys):
        if key not in scan.refs:
            scan.add(key, raw, spelled, rebased)
        elif rebased is not None and rebased not in scan.refs[key]:  # rebased since the scan read it: same bytes
            scan.refs[key].append(rebased)
            scan.referrers.setdefault(rebased, []).append(key)
    return scan


def replaced(value: Any, old: str, new: str) -> Any:
    """`value` with every occurrence of `old` in its strings and keys replaced by `new` (a new object where it
    changes; iteratively: a deep state must not exhaust the stack)."""

    def text(item: str) -> str:
        return item.replace(old, new) if old in item else item

    kind = type(value)
    if kind is str:
        return text(value)
    if kind is not dict and kind is not list:
        return value
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(value, root, 0)]
    while stack:
        item, parent, slot = stack.pop()
        kind = type(item)
        if kind is str:
            parent[slot] = text(item)
        elif kind is dict:
            copy: dict[str, Any] = {}
            for key, child in item.items():
                copy[text(key)] = None
                stack.append((child, copy, text(key)))
            parent[slot] = copy
        elif kind is list:
            items: list[Any] = [None] * len(item)
            stack.extend((child, items, index) for index, child in enumerate(item))
            parent[slot] = items
        else:
            parent[slot] = item
    return root[0]


def replace_chunks(data: dict[bytes, bytes]) -> None:
    """Give these stored chunks new data (a purge's rewrite stored them again under the same digest)."""
    batch = ChunkBatch()
    batch.rewrites = dict(data)
    batch.flush_rewrites(wait=True)


def delete_chunks(keys: Iterable[bytes]) -> int:
    """Delete these chunks now (no grace period: a purge's old nodes must not wait for garbage collection)."""
    ordered, deleted = list(keys), 0
    for start in range(0, len(ordered), _PAGE):
        deleted += Chunk.objects.filter(hash__in=ordered[start : start + _PAGE]).delete()[0]
    return deleted


def forget_cached_states(generation: int) -> None:
    """Called with a session's purge generation before this process stores a state for it: a purge newer than
    what this process saw makes it forget every cached state (one of them may be an unpurged parent)."""
    if generation > cache.generation:
        cache.clear()
        cache.generation = generation


__all__ = [
    "StoreScan",
    "delete_chunks",
    "replace_chunks",
    "forget_cached_states",
    "needles",
    "raw_chunks",
    "replaced",
    "scan_store",
]
