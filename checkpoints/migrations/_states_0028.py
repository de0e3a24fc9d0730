"""What migration 0028 needs of the store, frozen: the state digest it writes and a reader of stored states.

Never edit this module: 0028 has run on databases, and what it computes must not move with the live store
(checkpoints.store). A later change of the digest's definition takes a migration of its own, with its own copy.

* The digest is `checkpoints.store.digests.state_digest` as 0028 introduced it: of a non-empty object, the digest
  of its sorted keys, each followed by its value's digest; a list value's, that of its items' digests in order;
  any other value's (and any other state's), that of its canonical JSON. SHA-256, the first 16 bytes.
* The reader reads every node format the store has written (docs/decisions/0010-frozen-migrations.md): a
  keyframe is a tree of O/A/V nodes, a patch (P) a list of ops against its base, zstd-compressed, a patch with
  the raw bytes of the patches below it as its dictionary. It is the live read path without its cache.
* tests/models/test_migrations.py checks that both give the live store's answers.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import orjson
import zstandard

DIGEST_SIZE = 16
_HEADER = 6  # kind (1 byte) · codec (1 byte: o orjson, s standard library) · ref count (4 bytes)
PATCH_CONTEXT = 4  # how many earlier patches a patch may use as its dictionary


class Unreadable(LookupError):
    """A root, or a node below it, is missing or incomplete."""


# ---- the digest --------------------------------------------------------------------------------------------


def _canonical(value: Any) -> bytes:
    """Sorted keys, no spaces; the standard library for integers beyond 64 bits (orjson refuses them)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError as exc:
        if "64-bit" not in str(exc):
            raise
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def _digest(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()[:DIGEST_SIZE]


def _value_digest(value: Any) -> bytes:
    if type(value) is not list:
        return _digest(_canonical(value))
    items = hashlib.sha256(b"A")
    for item in value:
        items.update(_digest(_canonical(item)))
    return items.digest()[:DIGEST_SIZE]


def state_digest(state: Any) -> bytes:
    if type(state) is not dict or not state:
        return _digest(_canonical(state))
    outer = hashlib.sha256(b"O")
    for key in sorted(state):
        outer.update(_canonical(key))
        outer.update(_value_digest(state[key]))
    return outer.digest()[:DIGEST_SIZE]


# ---- the reader --------------------------------------------------------------------------------------------


def _decompress(data: bytes, context: tuple[bytes, ...]) -> bytes:
    """A chunk is one byte n (0, or how many earlier patches, newest first, form its dictionary) and a zstd frame."""
    used = data[0]
    if not used:
        return zstandard.ZstdDecompressor().decompress(data[1:])
    if len(context) < used:
        raise Unreadable("a patch's compression context is missing from its chain")
    dictionary = zstandard.ZstdCompressionDict(
        b"".join(reversed(context[:used])), dict_type=zstandard.DICT_TYPE_RAWCONTENT
    )
    return zstandard.ZstdDecompressor(dict_data=dictionary).decompress(data[1:])


def _parse(raw: bytes) -> tuple[bytes, list[bytes], Any]:
    """(kind, refs, payload) of a decompressed node."""
    count = int.from_bytes(raw[2:_HEADER], "big")
    end = _HEADER + count * DIGEST_SIZE
    refs = [raw[i : i + DIGEST_SIZE] for i in range(_HEADER, end, DIGEST_SIZE)]
    payload = json.loads(raw[end:]) if raw[1:2] == b"s" else orjson.loads(raw[end:])
    return raw[:1], refs, payload


def _rows(cursor: Any, sql: str, params: list[Any]) -> list[tuple[bytes, bytes]]:
    cursor.execute(sql, params)
    return [(bytes(key), bytes(data)) for key, data in cursor.fetchall()]


def _fetch(cursor: Any, keys: set[bytes]) -> dict[bytes, bytes]:
    found: dict[bytes, bytes] = {}
    ordered = list(keys)
    for start in range(0, len(ordered), 500):
        batch = ordered[start : start + 500]
        marks = ", ".join(["%s"] * len(batch))
        found.update(_rows(cursor, f"SELECT hash, data FROM checkpoints_chunk WHERE hash IN ({marks})", batch))
    if keys - found.keys():
        raise Unreadable(f"{len(keys - found.keys())} store node(s) missing")
    return found


def _assemble(key: bytes, nodes: dict[bytes, tuple[bytes, list[bytes], Any]]) -> Any:
    kind, refs, payload = nodes[key]
    if kind == b"V":
        return payload
    level, items = payload
    if kind == b"A":
        if level:
            return [value for ref in refs for value in _assemble(ref, nodes)]
        return [item[0] if type(item) is list else _assemble(refs[item], nodes) for item in items]
    if level:
        merged: dict[str, Any] = {}
        for ref in refs:
            merged.update(_assemble(ref, nodes))
        return merged
    return {
        items[i]: (items[i + 1][0] if type(items[i + 1]) is list else _assemble(refs[items[i + 1]], nodes))
        for i in range(0, len(items), 2)
    }


def _load_tree(cursor: Any, root: bytes, node: tuple[bytes, list[bytes], Any]) -> Any:
    nodes = {root: node}
    frontier = set(node[1])
    while frontier:
        fetched = _fetch(cursor, frontier)
        frontier = set()
        for key, data in fetched.items():
            nodes[key] = _parse(_decompress(data, ()))
            frontier.update(ref for ref in nodes[key][1] if ref not in nodes)
    return _assemble(root, nodes)


def _apply_ops(state: Any, ops: list[list[Any]]) -> Any:
    """`state` with the patch's ops applied: set (s), delete (d), or replace a slice of a list."""
    box = [state]
    fresh = {id(box)}

    def own(parent: Any, key: Any) -> Any:
        child = parent[key]
        if id(child) not in fresh:
            child = child.copy()
            parent[key] = child
            fresh.add(id(child))
        return child

    for op in ops:
        node, key = box, 0
        for step in op[1]:
            node, key = own(node, key), step
        if op[0] == "s":
            node[key] = op[2]
        elif op[0] == "d":
            del node[key]
        else:
            target = own(node, key)
            start, count = op[2], op[3]
            target[start : start + count] = op[4]
    return box[0]


def load_state(cursor: Any, root: bytes) -> Any:
    """The state stored under `root`: its patch chain down to the keyframe in one query, then the keyframe's
    tree one level per query, then the patches replayed upwards."""
    chain = _rows(
        cursor,
        "WITH RECURSIVE chain(hash, data, base, n) AS ("
        " SELECT hash, data, base, 0 FROM checkpoints_chunk WHERE hash = %s"
        " UNION ALL SELECT c.hash, c.data, c.base, chain.n + 1 FROM checkpoints_chunk c JOIN chain ON c.hash = chain.base"
        ") SELECT hash, data FROM chain ORDER BY n",
        [root],
    )
    pending: list[bytes] = []
    for key, data in chain:
        if data[0] == 0:
            node = _parse(_decompress(data, ()))
            if node[0] != b"P":
                state = _load_tree(cursor, key, node)
                break
        pending.append(data)
    else:
        raise Unreadable(f"no keyframe under {root.hex()}")
    context: tuple[bytes, ...] = ()
    for data in reversed(pending):
        raw = _decompress(data, context)
        state = _apply_ops(state, _parse(raw)[2][1])
        context = (raw, *context[: PATCH_CONTEXT - 1])
    return state
