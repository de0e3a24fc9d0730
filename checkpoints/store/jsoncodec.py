"""Canonical JSON and strict parsing, shared by the store, the API and the importers.

orjson does the work. Two gaps are closed here: it cannot encode integers beyond 64 bits and
silently turns them into floats when parsing, so such documents take the standard library's path.
"""

from __future__ import annotations

import json
import math
import re
import threading
from typing import Any

import orjson
import zstandard

# Any run of 19 digits might be an integer beyond 64 bits. Mapping digits to "0" and searching for
# nineteen of them is ~15x faster than a regular expression on a 2 MB body.
_DIGITS_TO_ZERO = bytes.maketrans(b"0123456789", b"0" * 10)
_NINETEEN_ZEROS = b"0" * 19


def _may_hold_big_integers(data: bytes) -> bool:
    return _NINETEEN_ZEROS in data.translate(_DIGITS_TO_ZERO)


class InvalidJSON(ValueError):
    """The document is not JSON this product accepts (syntax, NaN/Infinity, non-string keys, depth).

    `path` locates the offending value when the syntax was fine (keys and list indexes from the root).
    """

    def __init__(self, message: str, *, path: list[str | int] | None = None) -> None:
        super().__init__(message)
        self.path = path


def encode(value: Any) -> tuple[bytes, bool]:
    """Canonical bytes (sorted keys, no spaces) and whether the big-integer fallback was needed."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS), False
    except orjson.JSONEncodeError as exc:
        if "64-bit" not in str(exc):
            raise InvalidJSON(f"not JSON-serialisable: {exc}") from exc
    try:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidJSON(f"not JSON-serialisable: {exc}") from exc
    return text.encode("utf-8", "strict"), True


def dumps(value: Any, *, default: Any = None, option: int | None = None) -> bytes:
    """JSON for people and clients: orjson, with integers beyond 64 bits written exactly (as the store keeps them)."""
    try:
        return orjson.dumps(value, default=default, option=option)
    except orjson.JSONEncodeError as exc:
        if "64-bit" not in str(exc):
            raise
    return orjson.dumps(_big_ints_as_fragments(value), default=default, option=option)


def _big_ints_as_fragments(value: Any) -> Any:
    kind = type(value)
    if kind is int and not -(2**63) <= value < 2**64:
        return orjson.Fragment(str(value).encode())
    if kind is dict:
        return {key: _big_ints_as_fragments(item) for key, item in value.items()}
    if kind is list or kind is tuple:
        return [_big_ints_as_fragments(item) for item in value]
    return value


def canonical(value: Any) -> bytes:
    return encode(value)[0]


def _reject_constant(name: str) -> Any:
    raise InvalidJSON(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise InvalidJSON(f"number {text} is out of range")
    return number


def loads(data: bytes | str, *, exact: bool | None = None) -> Any:
    """Parse strict JSON. `exact` forces the slow path that keeps integers beyond 64 bits exact."""
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    if exact is None:
        exact = _may_hold_big_integers(data)
    try:
        if not exact:
            return orjson.loads(data)
        value = json.loads(data, parse_constant=_reject_constant, parse_float=_finite_float)
    except InvalidJSON:
        raise
    except (ValueError, RecursionError, UnicodeDecodeError) as exc:
        if not exact and "surrogate" in str(exc):
            value = loads(data, exact=True)  # the standard library reads lone surrogates: find where
        else:
            raise InvalidJSON(f"malformed JSON: {exc}") from exc
    if exact and _SURROGATE_ESCAPE.search(data):  # orjson refuses lone surrogates itself
        _refuse_lone_surrogates(value)
    return value


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _refuse_lone_surrogates(value: Any) -> None:
    """Pairs became characters when parsed; a lone half cannot be stored as UTF-8 (I-JSON refuses it too)."""
    stack: list[tuple[Any, list[str | int]]] = [(value, [])]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            if _has_surrogate(item):
                raise InvalidJSON("a lone surrogate (\\ud800–\\udfff) is not a character", path=path)
        elif isinstance(item, dict):
            for key, child in item.items():
                if _has_surrogate(key):
                    raise InvalidJSON("a lone surrogate (\\ud800–\\udfff) is not a character", path=[*path, key])
                stack.append((child, [*path, key]))
        elif isinstance(item, list):
            stack.extend((child, [*path, index]) for index, child in enumerate(item))


def check_value(value: Any, *, max_depth: int, depth: int = 0) -> None:  # noqa: C901 (see below)
    """Reject what canonical JSON would silently change: NaN/Infinity, non-string keys, foreign types, depth.

    One loop over every value of the state, on every ingest: a branch per container kind, inline, is measurably
    faster than helpers (a call per container) or a merged branch (a test more per container)."""
    stack: list[tuple[Any, int]] = [(value, depth)]
    while stack:
        item, level = stack.pop()
        kind = type(item)
        if kind is dict:
            if level >= max_depth:
                raise InvalidJSON(f"state is nested deeper than {max_depth} levels")
            for key, child in item.items():
                if type(key) is not str:
                    raise InvalidJSON(f"object key {key!r} is not a string")
                if type(child) not in _PLAIN:
                    stack.append((child, level + 1))
        elif kind is list or kind is tuple:
            if level >= max_depth:
                raise InvalidJSON(f"state is nested deeper than {max_depth} levels")
            for child in item:
                if type(child) not in _PLAIN:
                    stack.append((child, level + 1))
        elif kind is float:
            if not math.isfinite(item):
                raise InvalidJSON(f"{item} is not a valid JSON number")
        elif item is not None and kind not in _SCALARS:
            raise InvalidJSON(f"{kind.__name__} is not a JSON type")


_SCALARS = frozenset({str, int, float, bool})
_PLAIN = frozenset({str, int, bool, type(None)})  # always valid: no need to visit


PACK_LEVEL = 3
_zstd_pairs = threading.local()


def zstd_pair(level: int) -> tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor]:
    """A compressor and decompressor of this thread's own: zstandard's are not thread-safe (two threads of one
    server compressing with a shared one crashed the process)."""
    pairs: dict[int, tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor]] | None
    pairs = getattr(_zstd_pairs, "by_level", None)
    if pairs is None:
        pairs = _zstd_pairs.by_level = {}
    if level not in pairs:
        pairs[level] = (zstandard.ZstdCompressor(level=level), zstandard.ZstdDecompressor())
    return pairs[level]


def pack(value: Any) -> bytes:
    """Canonical JSON, zstd'd: small records kept beside the store (LangGraph's headers and pending writes)."""
    return zstd_pair(PACK_LEVEL)[0].compress(canonical(value))


def unpack(data: bytes | memoryview) -> Any:
    return loads(zstd_pair(PACK_LEVEL)[1].decompress(bytes(data)), exact=True)
