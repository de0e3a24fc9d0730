"""LangGraph's typed values as JSON a person can read, losslessly, without importing anything.

LangGraph's serializer turns a value into a `(type, bytes)` pair; its "msgpack" bytes name the classes
to rebuild (pydantic models, datetimes, messages…) in msgpack extension records. `from_typed` turns such
a pair into plain JSON: a pydantic model (every message) becomes its fields plus a `"__lg__"` tag, so a
message reads as `{"type": "ai", "content": …, "tool_calls": […], "__lg__": [5, module, class, method]}`.
`to_typed` gives back bytes that LangGraph's own `loads_typed` reads as the same value.

Nothing here imports a module named in the data or unpickles: the console server and its importer decode
files users upload with it. Types it does not know (pickle, custom serializers) stay opaque base64.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterator
from typing import Any

import ormsgpack

__all__ = ["TAG", "from_msgpack", "from_typed", "quote", "readable", "to_msgpack", "to_typed", "type_names"]

TAG = "__lg__"
_PYDANTIC_V1 = 4
_PYDANTIC_V2 = 5
_METHOD = 3
_NAMING = range(6)  # ext codes whose payload names a callable: constructors (0-2), a method (3), pydantic (4, 5)
_OPAQUE = range(8)  # codes whose payload, when it does not read here, could hide such records (7 nests them)
_UNPACK = ormsgpack.OPT_NON_STR_KEYS
_PACK = ormsgpack.OPT_NON_STR_KEYS


class _Ext:
    __slots__ = ("code", "data")

    def __init__(self, code: int, data: bytes) -> None:
        self.code = code
        self.data = data


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: Any) -> bytes:
    if not isinstance(text, str):
        raise ValueError("a base64 value must be a string")
    return base64.b64decode(text.encode("ascii"), validate=True)


def _unpack(data: bytes) -> Any:
    return ormsgpack.unpackb(data, ext_hook=_Ext, option=_UNPACK)


def _ext_json(ext: _Ext) -> Any:
    try:
        inner = _unpack(ext.data)
    except (ormsgpack.MsgpackDecodeError, ValueError, TypeError):
        return {TAG: ["rawext", ext.code], "b64": _b64(ext.data)}
    if ext.code in (_PYDANTIC_V1, _PYDANTIC_V2) and isinstance(inner, list) and len(inner) in (3, 4):
        fields = inner[2]
        if (
            isinstance(inner[0], str)
            and isinstance(inner[1], str)
            and isinstance(fields, dict)
            and all(isinstance(key, str) and key != TAG for key in fields)
        ):
            tag: list[Any] = [ext.code, *inner[:2], *inner[3:]]
            return {**{key: _json(value) for key, value in fields.items()}, TAG: tag}
    return {TAG: ["ext", ext.code], "v": _json(inner)}


def _json(value: Any) -> Any:
    if isinstance(value, dict):
        if all(isinstance(key, str) and key != TAG for key in value):
            return {key: _json(item) for key, item in value.items()}
        return {TAG: ["map"], "items": [[_json(key), _json(item)] for key, item in value.items()]}
    if isinstance(value, list | tuple):
        return [_json(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return {TAG: ["float"], "v": repr(value)}
    if isinstance(value, bytes | bytearray | memoryview):
        return {TAG: ["bin"], "b64": _b64(bytes(value))}
    if isinstance(value, _Ext):
        return _ext_json(value)
    return value


def from_msgpack(data: bytes) -> Any:
    """LangGraph msgpack bytes as typed JSON. Raises ValueError when the bytes are not msgpack."""
    try:
        return _json(_unpack(data))
    except (ormsgpack.MsgpackDecodeError, TypeError) as exc:
        raise ValueError(f"not msgpack: {exc}") from None


def quote(value: Any) -> Any:
    """Plain JSON as typed JSON of the same data: a `__lg__` key in it stays a key (its object becomes a map),
    never a tag that to_typed would turn into an extension record."""
    return _json(value)


def from_typed(type_: str, data: bytes) -> Any:
    """A serializer's `(type, bytes)` pair as typed JSON; unknown types stay opaque (never unpickled)."""
    if type_ == "null":
        return None
    if type_ == "msgpack":
        return from_msgpack(data)
    if type_ in ("bytes", "bytearray"):
        return {TAG: [type_], "b64": _b64(data)}
    if type_ == "json":
        try:
            return {TAG: ["json"], "v": _json(json.loads(data))}
        except ValueError:
            pass
    return {TAG: ["typed", type_], "b64": _b64(data)}


def _tag(value: Any) -> list[Any] | None:
    if isinstance(value, dict):
        tag = value.get(TAG)
        if isinstance(tag, list) and tag:
            return tag
    return None


def _python(value: Any) -> Any:
    """Typed JSON back to the msgpack-level value that packs to what LangGraph wrote."""
    if isinstance(value, list):
        return [_python(item) for item in value]
    if not isinstance(value, dict):
        return value
    tag = _tag(value)
    if tag is None:
        return {key: _python(item) for key, item in value.items()}
    kind = tag[0]
    if kind in (_PYDANTIC_V1, _PYDANTIC_V2):
        fields = {key: _python(item) for key, item in value.items() if key != TAG}
        return ormsgpack.Ext(kind, _pack([*tag[1:3], fields, *tag[3:]]))
    if kind == "ext" and len(tag) == 2 and isinstance(tag[1], int):
        return ormsgpack.Ext(tag[1], _pack(_python(value.get("v"))))
    if kind == "rawext" and len(tag) == 2 and isinstance(tag[1], int):
        return ormsgpack.Ext(tag[1], _unb64(value.get("b64")))
    if kind == "map":
        items = value.get("items")
        if not isinstance(items, list) or not all(isinstance(pair, list) and len(pair) == 2 for pair in items):
            raise ValueError("a map's items must be [key, value] pairs")
        return {_key(_python(key)): _python(item) for key, item in items}
    if kind == "float":
        return float(value.get("v", "nan"))
    if kind in ("bin", "bytes", "bytearray"):
        return _unb64(value.get("b64"))
    raise ValueError(f"cannot pack a {kind!r} value inside msgpack")


def _key(key: Any) -> Any:
    return tuple(_key(item) for item in key) if isinstance(key, list) else key


def _pack(value: Any) -> bytes:
    return ormsgpack.packb(value, option=_PACK)


def to_msgpack(value: Any) -> bytes:
    """Typed JSON as LangGraph msgpack bytes. Raises ValueError on a malformed tag."""
    try:
        return _pack(_python(value))
    except (ormsgpack.MsgpackEncodeError, TypeError, OverflowError) as exc:
        raise ValueError(f"cannot encode as msgpack: {exc}") from None


def to_typed(value: Any) -> tuple[str, bytes]:
    """Typed JSON as the `(type, bytes)` pair LangGraph's `loads_typed` reads."""
    if value is None:
        return "null", b""
    tag = _tag(value)
    if tag is not None and tag[0] in ("bytes", "bytearray", "bin"):
        return ("bytes" if tag[0] == "bin" else tag[0]), _unb64(value.get("b64"))
    if tag is not None and tag[0] == "json":
        return "json", json.dumps(value.get("v"), ensure_ascii=False).encode()
    if tag is not None and tag[0] == "typed" and len(tag) == 2 and isinstance(tag[1], str):
        return tag[1], _unb64(value.get("b64"))
    return "msgpack", to_msgpack(value)


def readable(value: Any) -> Any:
    """Typed JSON for people: models keep their fields (tag dropped), other tagged values become short text."""
    if isinstance(value, list):
        return [readable(item) for item in value]
    if not isinstance(value, dict):
        return value
    tag = _tag(value)
    if tag is None:
        return {key: readable(item) for key, item in value.items()}
    kind = tag[0]
    if kind in (_PYDANTIC_V1, _PYDANTIC_V2):
        return {key: readable(item) for key, item in value.items() if key != TAG}
    if kind == "ext":
        inner = value.get("v")
        if isinstance(inner, list) and len(inner) >= 3 and all(isinstance(part, str) for part in inner[:2]):
            return f"{inner[1]}({_short(readable(inner[2]))})"
        return readable(inner)
    if kind == "map":
        items = value.get("items") or []
        return {
            _short(readable(pair[0])): readable(pair[1]) for pair in items if isinstance(pair, list) and len(pair) == 2
        }
    if kind == "float":
        return str(value.get("v"))
    if kind == "json":
        return readable(value.get("v"))
    encoded = str(value.get("b64", ""))
    size = len(encoded) * 3 // 4 - len(encoded) + len(encoded.rstrip("="))  # base64 padding holds no bytes
    label = tag[1] if kind in ("typed", "rawext") and len(tag) > 1 else kind
    return f"<{label} value, {size:,} bytes, not decoded>"


def _short(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def type_names(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(path, dotted name) of every callable a LangGraph reader would import to rebuild `value`, nested anywhere:
    ext records 0-5 (a method as `module.name.method`), LangChain `lc` constructors inside "json" values, and
    "pickle" for a pickled value. A record that names nothing readable (rawext 0-7, a malformed payload) yields
    a name in angle brackets, which no allow-list entry matches."""
    if isinstance(value, list):
        for index, item in enumerate(value):
            yield from type_names(item, f"{path}.{index}" if path else str(index))
        return
    if not isinstance(value, dict):
        return
    tag = _tag(value)
    kind = tag[0] if tag is not None else None
    if kind in (_PYDANTIC_V1, _PYDANTIC_V2) and tag is not None:
        yield path, _dotted(tag[1:3], kind)
        fields = {key: item for key, item in value.items() if key != TAG}
    elif kind == "ext" and tag is not None and len(tag) == 2:
        yield from _ext_names(tag[1], value.get("v"), path)
        return
    elif kind == "rawext" and tag is not None and len(tag) == 2 and tag[1] in _OPAQUE:
        yield path, f"<undecodable ext {tag[1]}>"
        return
    elif kind == "typed" and tag is not None and len(tag) == 2 and "pickle" in str(tag[1]):
        yield path, "pickle"
        return
    elif kind == "json":
        yield from _lc_names(value.get("v"), path)
        return
    elif kind == "map":
        fields = {str(index): pair for index, pair in enumerate(value.get("items") or [])}
    else:
        fields = value if tag is None else {}
    for key, item in fields.items():
        yield from type_names(item, f"{path}.{key}" if path else key)


def _dotted(parts: Any, code: Any) -> str:
    if isinstance(parts, list) and len(parts) == 2 and all(isinstance(part, str) for part in parts):
        return ".".join(parts)
    return f"<malformed ext {code}>"


def _ext_names(code: Any, inner: Any, path: str) -> Iterator[tuple[str, str]]:
    if code not in _NAMING:
        yield from type_names(inner, path)  # numpy arrays (6), delta snapshots (7): data, no callable named
        return
    if not isinstance(inner, list) or len(inner) < 3:
        yield path, f"<malformed ext {code}>"
        return
    name = _dotted(inner[:2], code)
    if code == _METHOD:
        method = inner[3] if len(inner) > 3 else None
        name = f"{name}.{method}" if isinstance(method, str) else f"<malformed ext {code}>"
    yield path, name
    yield from type_names(inner[2], path)


def _lc_names(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """LangChain's serialized constructors (`{"lc": 1|2, "type": "constructor", "id": [...]}`) in a json value."""
    if isinstance(value, list):
        for index, item in enumerate(value):
            yield from _lc_names(item, f"{path}.{index}")
    elif isinstance(value, dict):
        ids = value.get("id")
        if value.get("type") == "constructor" and "lc" in value:
            if isinstance(ids, list) and ids and all(isinstance(part, str) for part in ids):
                yield path, ".".join(ids)
            else:
                yield path, "<malformed lc constructor>"
        for key, item in value.items():
            yield from _lc_names(item, f"{path}.{key}")
