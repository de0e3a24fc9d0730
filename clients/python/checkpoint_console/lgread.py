"""What a ConsoleSaver read costs: a state is decoded once, and a later read decodes only what changed.

Decoding. The wire carries typed JSON (`checkpoint_console.typedjson`). LangGraph's own reader takes msgpack
bytes, so turning typed JSON back into those bytes and unpacking them again cost a pack and an unpack of every
message on every read. `Decoder` reads typed JSON directly: plain JSON is rebuilt as it is walked, and a pydantic
record (every LangChain message) whose type the serializer's allow-list admits — LangGraph's
`SAFE_MSGPACK_TYPES`, or the explicit list it was made with — is rebuilt exactly as LangGraph's ext hook does it
(`cls(**fields)`, then `model_construct`, then the fields themselves). Anything else, a type the list does not
name included, goes through the serializer's own `loads_typed`, which blocks and warns as it always did: the
direct path only ever imports what the allow-list names. A serializer other than a plain `JsonPlusSerializer`
(an encrypting one, one with its own ext hook) decodes everything itself.

Reuse. The server may send a tuple's channels relative to one the saver already decoded (`channel_patch`:
channels unchanged, lists kept up to a length then extended, values sent whole). The saver keeps its decoded
values private (`Held`, as `Copier`s) and hands each caller copies: LangGraph's `add_messages` mutates messages in
place, so two callers must never share a message, a list or a dict. A copy of a message is its class around its
fields without validating them again: the strings and numbers are shared (immutable), each list or dict field made
anew (unpacked from msgpack, or a literal when empty).
"""

from __future__ import annotations

import copy
import gc
import hashlib
import importlib
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import ormsgpack
from langgraph.checkpoint.serde import _msgpack as lg_msgpack
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from pydantic import BaseModel

from . import typedjson
from .lgwire import Memory

__all__ = ["Copier", "Decoder", "Held", "Reads", "channel_copier", "clone", "copier", "held_of", "uncollected"]

_PYDANTIC_V2 = 5
_TAG = typedjson.TAG
_IMMUTABLE = frozenset({str, int, float, bool, type(None), bytes})


@contextmanager
def uncollected() -> Iterator[None]:
    """Python's cyclic garbage collector paused while a state is parsed, decoded or copied.

    A state of 2,500 messages is some 15,000 new dicts and lists, all alive until the caller lets go of them: the
    collector, which runs every 700 net new containers, walks them again and again (and the whole heap when enough
    of them have lived long), for nothing, since they form no cycles. Listing 100 tuples of a 1,000-step thread took
    5.3–5.9 s of CPU with it running and 1.8–1.9 s with it paused. Paused only when it was running, and enabled again
    after, so a process that runs without it stays so; a thread that disables it meanwhile has it enabled again by
    this one when it is done (the collector is one switch per process)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class Decoder:
    """Typed JSON to the values the serializer would give back, read once."""

    def __init__(self, serde: SerializerProtocol) -> None:
        self.serde = serde
        allowed = getattr(serde, "_allowed_msgpack_modules", True)
        # The direct path only for LangGraph's own serializer with its own hook; True (permissive) admits any
        # type with a warning per type, which its hook emits: those values take the serializer's path.
        self.direct = (
            type(serde) is JsonPlusSerializer
            and not getattr(serde, "_custom_unpack_ext_hook", True)
            and (allowed is None or isinstance(allowed, set))
        )
        self._allowed: frozenset[tuple[str, ...]] = frozenset(lg_msgpack.SAFE_MSGPACK_TYPES) | frozenset(
            allowed if isinstance(allowed, set) else ()
        )
        self._classes: dict[tuple[str, str], Any] = {}

    def decode(self, value: Any) -> Any:
        """A top-level typed JSON value (a channel, a write, the header) as a fresh object graph. `value` is used
        up: its lists and dicts become the decoded value's (a cold read of 2,500 messages rebuilt none of them)."""
        if not self.direct:
            return self.serde.loads_typed(typedjson.to_typed(value))
        tag = value.get(_TAG) if type(value) is dict else None
        if tag is not None and not (type(tag) is list and tag and tag[0] == _PYDANTIC_V2):
            return self.serde.loads_typed(typedjson.to_typed(value))  # bytes, json, typed: top-level forms
        return self._walk(value)

    def decode_item(self, value: Any) -> Any:
        """An item of a list channel: read as it reads inside the list (never as a top-level `bytes`, `json` or
        `typed` value, which an item cannot be). `value` is used up, as by `decode`."""
        if not self.direct:
            return self.serde.loads_typed(("msgpack", typedjson.to_msgpack(value)))
        return self._walk(value)

    def _walk(self, value: Any) -> Any:
        # In place: the answer's JSON is this read's own (see `decode`), so its lists and dicts become the
        # caller's instead of being rebuilt.
        kind = type(value)
        if kind is list:
            for at, item in enumerate(value):
                if type(item) not in _IMMUTABLE:
                    value[at] = self._walk(item)
            return value
        if kind is not dict:
            return value
        tag = value.get(_TAG)
        if tag is None:
            for key, item in value.items():
                if type(item) not in _IMMUTABLE:
                    value[key] = self._walk(item)
            return value
        cls = self._class(tag)
        if cls is None:  # any other record, or a type the allow-list lacks: LangGraph's own reader decides
            return self.serde.loads_typed(("msgpack", typedjson.to_msgpack(value)))
        del value[_TAG]
        fields = self._walk(value)
        try:  # as LangGraph's ext hook rebuilds a pydantic v2 record
            try:
                return cls(**fields)
            except Exception:
                return cls.model_construct(**fields)
        except Exception:
            return fields

    def _class(self, tag: Any) -> Any:
        """The class of a well-formed pydantic v2 record the allow-list admits, else None."""
        if type(tag) is not list or len(tag) < 3 or tag[0] != _PYDANTIC_V2:
            return None
        module, name = tag[1], tag[2]
        if type(module) is not str or type(name) is not str:
            return None
        key = (module, name)
        found = self._classes.get(key)
        if found is None:
            if key not in self._allowed:
                return None
            try:
                found = getattr(importlib.import_module(module), name)
            except Exception:
                return None  # the serializer's path returns the fields, as LangGraph does
            self._classes[key] = found
        return found


def clone(value: Any) -> Any:
    """A copy sharing nothing mutable with `value`: containers rebuilt, pydantic models copied field by field."""
    kind = type(value)
    if kind in _IMMUTABLE:
        return value
    if kind is list:
        return [item if type(item) in _IMMUTABLE else clone(item) for item in value]
    if kind is dict:
        return {key: item if type(item) in _IMMUTABLE else clone(item) for key, item in value.items()}
    if isinstance(value, BaseModel):
        copied = value.__copy__()  # new __dict__, fields set, extra and private; values still shared
        fields = copied.__dict__
        for key, item in fields.items():
            if type(item) not in _IMMUTABLE:
                fields[key] = clone(item)
        extra = copied.__pydantic_extra__
        if extra:
            for key, item in extra.items():
                if type(item) not in _IMMUTABLE:
                    extra[key] = clone(item)
        return copied
    return copy.deepcopy(value)


class Copier:
    """Makes fresh copies of one private decoded value: `make()` shares nothing mutable with it or with earlier
    copies. Plain JSON is kept packed as msgpack, so a copy is one unpack in C; a pydantic model whose fields are
    plain JSON is rebuilt around its fields (the immutable ones shared, the containers made anew) as pydantic's own
    `__copy__` does, without validating again what was validated once; anything else is `clone`d."""

    __slots__ = ()

    def make(self) -> Any:
        raise NotImplementedError


class _Same(Copier):
    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value  # immutable

    def make(self) -> Any:
        return self.value


class _Packed(Copier):
    __slots__ = ("packed",)

    def __init__(self, packed: bytes) -> None:
        self.packed = packed

    def make(self) -> Any:
        return ormsgpack.unpackb(self.packed)


class _Model(Copier):
    """A pydantic model (a LangChain message) whose fields are plain JSON, made anew around its fields without
    validating them again, as pydantic's own `__copy__` makes one. The immutable fields (the content, the id, the
    type: strings, numbers, None) are shared by every copy; a container field is made anew each time — an empty
    list or dict as a literal, any other unpacked from msgpack — so a copy shares nothing mutable with another.
    Unpacking a message's whole fields made its content string anew each time (a copy 1.4–1.9 µs a message; this
    way 0.9–1.1 µs)."""

    __slots__ = ("cls", "dicts", "extra", "fields", "fields_set", "lists", "packed")

    def __init__(self, model: BaseModel, fields: dict[str, Any], packed: list[tuple[str, bytes]], extra: bytes | None):
        self.cls = type(model)
        self.fields = fields  # the immutable fields; a container field's entry is replaced in each copy
        self.packed = tuple(packed)
        self.lists = tuple(key for key, value in model.__dict__.items() if type(value) is list and not value)
        self.dicts = tuple(key for key, value in model.__dict__.items() if type(value) is dict and not value)
        self.fields_set = frozenset(model.__pydantic_fields_set__)
        self.extra = extra

    def make(self) -> Any:
        cls = self.cls
        made = cls.__new__(cls)
        fields = self.fields.copy()
        for key, packed in self.packed:
            fields[key] = _unpack(packed)
        for key in self.lists:
            fields[key] = []
        for key in self.dicts:
            fields[key] = {}
        _set(made, "__dict__", fields)
        _set(made, "__pydantic_fields_set__", set(self.fields_set))
        extra = self.extra
        _set(made, "__pydantic_extra__", None if extra is None else {} if extra == _EMPTY_MAP else _unpack(extra))
        _set(made, "__pydantic_private__", None)
        return made


class _Cloned(Copier):
    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def make(self) -> Any:
        return clone(self.value)


class _Items(Copier):
    """A list channel: a copier per item, so a patch keeps a prefix and adds the new items' copiers."""

    __slots__ = ("items",)

    def __init__(self, items: list[Copier]) -> None:
        self.items = items

    def make(self) -> Any:
        return [item.make() for item in self.items]


_set = object.__setattr__
_unpack = ormsgpack.unpackb
_EMPTY_MAP = b"\x80"  # msgpack's {}: every LangChain message's extra, made without unpacking


def copier(value: Any) -> Copier:
    """The copier of a decoded value (which the caller gives up: it is kept, never handed out)."""
    if type(value) in _IMMUTABLE:
        return _Same(value)
    if _plain(value):
        packed = _pack(value)
        if packed is not None:
            return _Packed(packed)
    elif isinstance(value, BaseModel) and getattr(value, "__pydantic_private__", None) is None:
        extra = value.__pydantic_extra__
        if _plain(value.__dict__) and (extra is None or _plain(extra)):
            made = _model(value, extra)
            if made is not None:
                return made
    return _Cloned(value)


def _model(value: BaseModel, extra: dict[str, Any] | None) -> _Model | None:
    """The copier of a model whose fields and extra are plain JSON, None if one of them is not msgpack."""
    fields: dict[str, Any] = {}
    packed: list[tuple[str, bytes]] = []
    for key, item in value.__dict__.items():
        fields[key] = item if type(item) in _IMMUTABLE else None
        if type(item) not in _IMMUTABLE and item:
            as_bytes = _pack(item)
            if as_bytes is None:
                return None
            packed.append((key, as_bytes))
    packed_extra = None if extra is None else _pack(extra)
    if extra is not None and packed_extra is None:
        return None
    return _Model(value, fields, packed, packed_extra)


def channel_copier(value: Any) -> Copier:
    return _Items([copier(item) for item in value]) if type(value) is list else copier(value)


def _plain(value: Any) -> bool:
    """JSON that msgpack gives back exactly: str-keyed dicts, lists (not tuples), str, int, float, bool, None."""
    kind = type(value)
    if kind is dict:
        return all(type(key) is str and _plain(item) for key, item in value.items())
    if kind is list:
        return all(_plain(item) for item in value)
    return kind in _IMMUTABLE and kind is not bytes


def _pack(value: Any) -> bytes | None:
    try:  # integers past 64 bits, lone surrogates: not msgpack, so cloned instead
        return ormsgpack.packb(value)
    except (ormsgpack.MsgpackEncodeError, TypeError, OverflowError):
        return None


class Held:
    """A tuple's channel values as this saver decoded them, private: handed out only as copies. A state read
    whole is kept as the answer's bytes (`again` parses its channel values anew: the parsed ones became the
    caller's) and decoded again only if a later read is sent relative to it, so a single read decodes once."""

    __slots__ = ("_copiers", "_lock", "_wire", "console_id")

    def __init__(
        self,
        console_id: int,
        copiers: dict[str, Copier] | None = None,
        wire: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        self.console_id = console_id
        self._copiers = copiers
        self._wire = wire
        self._lock = threading.Lock()

    def copiers(self, decoder: Decoder) -> dict[str, Copier]:
        with self._lock:
            if self._copiers is None:
                wire = self._wire() if self._wire is not None else {}
                self._copiers = {channel: channel_copier(decoder.decode(value)) for channel, value in wire.items()}
                self._wire = None
            return self._copiers


def held_of(
    item: dict[str, Any],
    base: Held | None,
    decoder: Decoder,
    again: Callable[[], dict[str, Any]] | None = None,
) -> tuple[Held | None, dict[str, Any]]:
    """(what to hold, the caller's channel values) of an answer's `item`, which is used up: a whole state decoded
    once (`again` gives its channel values' JSON anew, for a later patch against it), or a patch resolved against
    `base` (the tuple the server named), only its new values decoded, the rest copied."""
    console_id = item.get("console", {}).get("id")
    patch = item.get("channel_patch")
    if patch is None:
        stored = item["checkpoint"].get("channel_values", {})
        decoded = {channel: decoder.decode(value) for channel, value in stored.items()}
        return (Held(console_id, wire=again) if type(console_id) is int and again is not None else None), decoded
    if base is None or patch.get("base") != base.console_id:
        raise ValueError("the server sent a patch against a tuple this saver does not hold")
    held = base.copiers(decoder)
    copiers: dict[str, Copier] = {}
    for channel in patch.get("same", []):
        copiers[channel] = held[channel]
    for channel, grown in patch.get("lists", {}).items():
        kept = held[channel]
        if not isinstance(kept, _Items) or not 0 <= grown["keep"] <= len(kept.items):
            raise ValueError(f"the server's patch keeps more of {channel!r} than this saver holds")
        added = [copier(decoder.decode_item(value)) for value in grown["items"]]
        copiers[channel] = _Items([*kept.items[: grown["keep"]], *added])
    for channel, value in patch.get("values", {}).items():
        copiers[channel] = channel_copier(decoder.decode(value))
    return Held(console_id, copiers=copiers), {channel: made.make() for channel, made in copiers.items()}


class Reads:
    """The last tuple decoded per (thread_id, checkpoint_ns), least recently used dropped past `size`, for the
    decoding rules (serializer) and the token it was read with: a saver copied by `with_allowlist` shares the
    object but never what the other decoded."""

    def __init__(self, serde: SerializerProtocol, token: str, size: int) -> None:
        self.serde = serde
        self.token = _digest(token)
        self.decoder = Decoder(serde)
        self.held: Memory[Held] = Memory(size)

    def serves(self, serde: SerializerProtocol, token: str) -> bool:
        return serde is self.serde and _digest(token) == self.token


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()
