"""What ConsoleSaver sends for a put: only what changed since the checkpoint it last put in that thread+ns.

LangGraph hands `put` every channel value, but only the channels in `new_versions` changed. The console
resolves the rest against a base checkpoint, so a put carries: changed channels whole, unchanged ones by name
only (their version equals the base's), and a growing list channel (`messages`) as the items appended to the
base's list. The saver remembers, per (thread, ns), the last checkpoint it put: the versions of its channels
and, for list channels, the elements and their encodings, so a put encodes only the new items.

A list counts as grown when the base's elements are, by identity, a prefix of the new list: LangGraph's
reducers build a new list around the same message objects. An element changed in place is not noticed; the
server's copy is what was encoded when it was first sent.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

__all__ = ["Memory", "PutPlan", "Sent", "plan_put"]

Encode = Callable[[Any], Any]
T = TypeVar("T")


@dataclass
class Sent:
    """A checkpoint as this saver put it: what a later put in the same thread+ns may leave out."""

    checkpoint_id: str
    versions: dict[str, Any]
    lists: dict[str, tuple[list[Any], list[Any]]] = field(default_factory=dict)  # channel → (elements, encoded)


@dataclass
class PutPlan:
    """The channel part of a put body, and what the saver remembers once the server stored it."""

    values: dict[str, Any]
    appends: dict[str, dict[str, Any]]
    channels: list[str] | None
    base_checkpoint_id: str | None
    sent: Sent


class Memory(Generic[T]):
    """The last checkpoint put (or read: `lgread`) per (thread_id, checkpoint_ns), least recently used dropped
    past `size`."""

    def __init__(self, size: int = 512) -> None:
        self.size = size
        self._entries: OrderedDict[tuple[str, str], T] = OrderedDict()
        self._lock = threading.Lock()  # sync savers are shared across threads by LangGraph's executors

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, thread_id: str, checkpoint_ns: str) -> T | None:
        with self._lock:
            sent = self._entries.get((thread_id, checkpoint_ns))
            if sent is not None:
                self._entries.move_to_end((thread_id, checkpoint_ns))
            return sent

    def remember(self, thread_id: str, checkpoint_ns: str, entry: T) -> None:
        with self._lock:
            self._entries[(thread_id, checkpoint_ns)] = entry
            self._entries.move_to_end((thread_id, checkpoint_ns))
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def forget(self, thread_ids: Collection[str] | None = None) -> None:
        """Drop the threads' entries (every entry when None): their checkpoints may be gone from the server."""
        with self._lock:
            if thread_ids is None:
                self._entries.clear()
                return
            for key in [key for key in self._entries if key[0] in thread_ids]:
                del self._entries[key]


def plan_put(
    channel_values: Mapping[str, Any],
    channel_versions: Mapping[str, Any],
    new_versions: Mapping[str, Any],
    checkpoint_id: str,
    base: Sent | None,
    encode: Encode,
) -> PutPlan:
    """The channels of one put relative to `base` (None: every channel whole)."""
    values: dict[str, Any] = {}
    appends: dict[str, dict[str, Any]] = {}
    lists: dict[str, tuple[list[Any], list[Any]]] = {}
    relative = False
    for channel, value in channel_values.items():
        version = channel_versions.get(channel)
        if base is not None and _unchanged(base, channel, version, new_versions):
            relative = True
            if channel in base.lists:
                lists[channel] = base.lists[channel]
            continue
        cached = base.lists.get(channel) if base is not None else None
        if cached is not None and type(value) is list:
            grown = _append(cached, value, encode)
            if grown is not None:
                relative = True
                appends[channel] = {"base_len": len(cached[0]), "items": grown[1][len(cached[1]) :]}
                lists[channel] = grown
                continue
        encoded = encode(value)
        values[channel] = encoded
        if type(value) is list and isinstance(encoded, list) and len(encoded) == len(value):
            lists[channel] = (list(value), encoded)
    return PutPlan(
        values=values,
        appends=appends,
        channels=None if len(values) == len(channel_values) else list(channel_values),
        base_checkpoint_id=base.checkpoint_id if base is not None and relative else None,
        sent=Sent(checkpoint_id, {channel: channel_versions.get(channel) for channel in channel_values}, lists),
    )


def _unchanged(base: Sent, channel: str, version: Any, new_versions: Mapping[str, Any]) -> bool:
    return channel not in new_versions and version is not None and base.versions.get(channel, None) == version


def _append(
    cached: tuple[list[Any], list[Any]], value: list[Any], encode: Encode
) -> tuple[list[Any], list[Any]] | None:
    """(elements, encoded) of `value` when the cached list is an identity prefix of it, encoding only the rest."""
    elements, encoded = cached
    if len(value) < len(elements) or any(old is not new for old, new in zip(elements, value, strict=False)):
        return None
    added = value[len(elements) :]
    # Encoded as a list, so each item reads exactly as it would inside the whole value.
    added_encoded = encode(added) if added else []
    if not isinstance(added_encoded, list) or len(added_encoded) != len(added):
        return None
    return list(value), encoded + added_encoded
