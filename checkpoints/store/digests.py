"""A state's digest (`Checkpoint.state_hash`) and size (`raw_bytes`), told from what changed.

Encoding and hashing a whole 2.6 MB state on every checkpoint costs milliseconds; a LangGraph put changes a
few channels and appends to one list. So the digest is defined by parts: of a non-empty object, the digest of
its sorted keys, each followed by its value's digest; a list value's digest is that of its items' digests in
order; any other value's (and any other state's) that of its canonical JSON. Equal states have equal digests
whatever path built them, as drift detection and idempotent retries need.

A summary keeps each top-level value's part beside the cached state, so the next state built on it (its
unchanged values the same objects, its grown list the same items plus new ones) hashes and measures only the
new values and items.
"""

from __future__ import annotations

import hashlib
import operator
from dataclasses import dataclass, replace
from functools import partial
from itertools import islice
from typing import Any

import orjson

from . import jsoncodec

DIGEST_SIZE = 16


def digest(data: bytes) -> bytes:
    # SHA-256 is hardware-accelerated here and twice as fast as BLAKE2b on large states.
    return hashlib.sha256(data).digest()[:DIGEST_SIZE]


@dataclass(frozen=True)
class Part:
    """One top-level value of an object state: its digest and canonical size, and for a list the running hash
    of its items' digests (to extend when items are appended) and their sizes summed."""

    value: Any  # the object these figures are of: reused only for that very object (or a list it prefixes)
    size: int
    digest: bytes
    big: bool  # encoded with the standard library (integers beyond 64 bits): sizes may differ from the whole's
    items: Any = None  # hashlib object fed with every item's digest; never updated in place
    items_size: int = 0
    kept: int = 0  # a list's items at the front that are the old part's (the one it was told from), in order
    # A list's canonical JSON when it was encoded whole (a caller's list, told against the one before): the next
    # state's list is compared with it, so only that caller's side is encoded. Held by the newest state of a chain
    # only (`released` drops it from the one a newer state was built on): a 2 MB state's lists are ~2 MB of bytes.
    encoded: bytes | None = None


@dataclass(frozen=True)
class Summary:
    digest: bytes
    size: int  # of the canonical JSON, exact unless `big`
    big: bool
    parts: dict[str, Part] | None  # None: not an object state (or an empty one)


def state_digest(state: Any) -> bytes:
    """The digest of a state (see the module docstring), computed from scratch."""
    return summarise(state).digest


def summarise(state: Any, previous: dict[str, Part] | None = None, *, extend: bool = False) -> Summary:
    """Digest and size of `state`, reusing the `previous` parts (of the state it was built on) for the values
    that are the same objects. With `extend`, a list that is a previous one's items plus new ones takes over that
    part's canonical JSON, grown by the new items' (see `_part`)."""
    if type(state) is not dict or not state:
        encoded, big = jsoncodec.encode(state)
        return Summary(digest(encoded), len(encoded), big, None)
    if any(type(key) is not str for key in state):
        raise jsoncodec.InvalidJSON("an object key is not a string")
    outer = hashlib.sha256(b"O")
    parts: dict[str, Part] = {}
    size = 1 + 2 * len(state)  # braces, colons and commas: 2 + n + (n - 1)
    for key in sorted(state):
        value = state[key]
        old = previous.get(key) if previous is not None else None
        part = old if old is not None and old.value is value else _part(value, old, extend)
        encoded_key = jsoncodec.canonical(key)
        outer.update(encoded_key)
        outer.update(part.digest)
        size += len(encoded_key) + part.size
        parts[key] = part
    big = any(part.big for part in parts.values())
    return Summary(outer.digest()[:DIGEST_SIZE], size, big, parts)


def _part(value: Any, old: Part | None, extend: bool = False) -> Part:
    if type(value) is not list:
        encoded, big = jsoncodec.encode(value)
        return Part(value, len(encoded), digest(encoded), big)
    start, items, items_size, big = 0, hashlib.sha256(b"A"), 0, False
    # the old list's items begin this one (the very objects, or items with the same canonical JSON): only the new
    # ones are hashed
    begins, whole = _begins(old, value) if old is not None and old.items is not None else (False, None)
    known, grown = None, []
    if begins and old is not None:
        start, items, items_size, big = len(old.value), old.items.copy(), old.items_size, old.big
        # A state replayed on top of one a caller gave (its lists the same objects plus the patches' new items):
        # the caller's next list is compared with these bytes, not encoded on both sides (see `_grown`).
        if extend and whole is None and not big:
            known = old.encoded
    for item in islice(value, start, None):
        encoded, item_big = jsoncodec.encode(item)
        items.update(digest(encoded))
        items_size += len(encoded)
        big |= item_big
        if known is not None:
            grown.append(encoded)
    if known is not None and not big:
        whole = _grown(known, grown)
    size = 2 + items_size + max(len(value) - 1, 0)
    return Part(value, size, items.digest()[:DIGEST_SIZE], big, items, items_size, start, None if big else whole)


def _begins(old: Part, value: list[Any]) -> tuple[bool, bytes | None]:
    """Whether `old`'s list is where `value` begins, and `value`'s canonical JSON when it had to be encoded: the same
    objects (the store's own states share them), or, for a caller's state (new objects every time, or the agent's
    own objects changed in place since), the same canonical JSON. Equal array bytes are equal items, each with its
    canonical bytes (JSON values delimit themselves, and a number ends at the comma or bracket after it): one orjson
    call and a comparison cost ~10 times less than hashing every item, and the old side's bytes are kept from when
    it was encoded (`Part.encoded`), so only the caller's list is encoded."""
    prefix = old.value
    if type(prefix) is not list or len(prefix) > len(value):
        return False, None
    if all(map(operator.is_, prefix, value)):
        return True, None
    if old.big:  # integers beyond 64 bits: orjson cannot encode them (and such lists are rare)
        return False, None
    try:
        whole = _canonical(value)
        known = old.encoded if old.encoded is not None else _canonical(prefix)
    except orjson.JSONEncodeError:
        return False, None
    if not prefix:
        return True, whole
    end = len(known) - 1  # where `known` closes its list: `whole` goes on there (",") or closes it too ("]")
    # a view of the kept bytes, not a slice: a slice copies them (~2 MB a create)
    return whole[end : end + 1] in (b",", b"]") and whole.startswith(memoryview(known)[:end]), whole


_canonical = partial(orjson.dumps, option=orjson.OPT_SORT_KEYS)


def _grown(known: bytes, new: list[bytes]) -> bytes:
    """The canonical JSON of a list whose canonical JSON was `known`, with items of canonical JSON `new` appended:
    a list's canonical JSON is its items' joined by commas in brackets, so a copy of the old bytes instead of
    encoding every old item again."""
    if not new:
        return known
    if known == b"[]":
        return b"[" + b",".join(new) + b"]"
    return b"".join((memoryview(known)[:-1], b",", b",".join(new), b"]"))


def rebased(parts: dict[str, Part] | None, state: Any) -> dict[str, Part] | None:
    """`parts` (of an equal state) pointing at `state`'s own values: the objects the next state will share."""
    if parts is None or type(state) is not dict:
        return None
    return {key: part if part.value is state[key] else replace(part, value=state[key]) for key, part in parts.items()}


def released(parts: dict[str, Part] | None) -> dict[str, Part] | None:
    """`parts` without the lists' canonical bytes: a newer state of the chain holds its own."""
    if parts is None or all(part.encoded is None for part in parts.values()):
        return parts
    return {key: part if part.encoded is None else replace(part, encoded=None) for key, part in parts.items()}


def encoded_from(parts: dict[str, Part] | None, told: dict[str, Part] | None) -> dict[str, Part] | None:
    """`parts` (of the store's copy of a state) with the canonical bytes of the lists `told` (the same state as the
    caller gave it, an equal digest) had encoded."""
    if parts is None or told is None:
        return parts
    return {
        key: replace(part, encoded=known.encoded)
        if part.encoded is None and (known := told.get(key)) is not None and known.encoded is not None
        else part
        for key, part in parts.items()
    }
