"""Finding secrets in what a checkpoint adds (docs/secrets.md).

The store hands over a state's change against its base as patch operations (`Saved.added`); this module walks
the strings they add, runs the declared detectors (`registry.secrets`) and a project's own patterns over them, and
answers with hits: where (the JSON path), which detector, and a keyed fingerprint of the value — never the value,
which leaves this module only as the fingerprint.

Every pattern runs on RE2, whose time is linear in the text: no pattern, ours or one a project adds, can make a
scan backtrack. The declared ones are compiled once into an RE2 set that tells in one pass over all the text which
of them match at all (usually none), and only those are run again, string by string, to tell where. A scan stops
at `SECRETS_SCAN_MAX_BYTES` of text and `SECRETS_SCAN_MAX_MS` of time, and says so (`Scan.truncated`).
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import re2
from django.conf import settings
from django.utils.crypto import salted_hmac

from ..registry.secrets import SECRET_DETECTORS, SECRET_KEY_NAMES

logger = logging.getLogger(__name__)

Path = tuple[str | int, ...]
_KEY_SALT = "checkpoints.secrets.fingerprint"
_SHORTEST = 8  # no detector finds a value in a shorter string
_ENTROPY_MIN_LENGTH = 16
_ENTROPY_MAX_LENGTH = 1024
_ENTROPY_BITS = 3.3  # per character; a random 16-character token of letters and digits has about 4
_SCHEME = re.compile(r"^(?:Bearer|Basic|Token|Bot)\s+(\S+)$", re.IGNORECASE)
_RE2_MEMORY = 64 << 20


class InvalidPattern(ValueError):
    """A pattern a project gave that RE2 cannot compile."""


@dataclass(frozen=True)
class Hit:
    path: Path
    detector: str
    fingerprint: str
    length: int  # of the value: how a masked form is shaped, and whether a finding is a short one


@dataclass
class Scan:
    hits: list[Hit] = field(default_factory=list)
    scanned_bytes: int = 0
    truncated: bool = False


def fingerprint(value: str) -> str:
    """The value's keyed digest: equal values give equal fingerprints, and without the key (SECRETS_FINGERPRINT_KEY,
    else one derived from SECRET_KEY) nobody can test a guess against it."""
    key = settings.SECRETS_FINGERPRINT_KEY or None
    return salted_hmac(_KEY_SALT, value, secret=key, algorithm="sha256").hexdigest()


@dataclass(frozen=True)
class _Pattern:
    detector: str
    regex: Any  # re2._Regexp
    group: int


def _options() -> re2.Options:
    options = re2.Options()
    options.max_mem = _RE2_MEMORY
    options.log_errors = False
    return options


def compile_pattern(pattern: str) -> Any:
    """`pattern` compiled by RE2, or InvalidPattern saying why not (a look-around, a backreference…)."""
    try:
        return re2.compile(pattern, _options())
    except re2.error as exc:
        raise InvalidPattern(str(exc)) from None


class _Detectors:
    """The declared detectors compiled, with the set that finds which of them match anywhere in one pass."""

    def __init__(self) -> None:
        self.patterns: list[_Pattern] = []
        self.set = re2.Set.SearchSet(_options())
        for spec in SECRET_DETECTORS:
            for pattern, group in spec.patterns:
                self.patterns.append(_Pattern(spec.name, compile_pattern(pattern), group))
                self.set.Add(pattern)
        self.set.Compile()

    def matching(self, text: str) -> list[_Pattern]:
        return [self.patterns[index] for index in sorted(self.set.Match(text) or ())]


@lru_cache(maxsize=1)
def _detectors() -> _Detectors:
    return _Detectors()


@lru_cache(maxsize=256)
def project_patterns(entries: tuple[tuple[str, str], ...]) -> tuple[_Pattern, ...]:
    """A project's (name, pattern) entries compiled; one that no longer compiles is skipped (and logged)."""
    compiled = []
    for name, pattern in entries:
        try:
            compiled.append(_Pattern(f"custom:{name}", compile_pattern(pattern), 0))
        except InvalidPattern as exc:
            logger.warning("secret pattern %r does not compile: %s", name, exc)
    return tuple(compiled)


def added_values(ops: Iterable[list[Any]]) -> Iterator[tuple[Path, Any]]:
    """The values patch operations add, each with its path: "s" sets one, "l" splices items into a list."""
    for op in ops:
        if op[0] == "s":
            yield tuple(op[1]), op[2]
        elif op[0] == "l":
            start = op[2]
            for offset, item in enumerate(op[4]):
                yield (*op[1], start + offset), item


def _strings(values: Iterable[tuple[Path, Any]]) -> Iterator[tuple[Path, str]]:
    """Every string in the values, with its path (iteratively: a deep state must not exhaust the stack)."""
    stack = list(values)
    stack.reverse()
    while stack:
        path, value = stack.pop()
        kind = type(value)
        if kind is str:
            if len(value) >= _SHORTEST:
                yield path, value
        elif kind is dict:
            stack.extend(((*path, key), item) for key, item in reversed(list(value.items())))
        elif kind is list:
            stack.extend(((*path, index), item) for index, item in reversed(list(enumerate(value))))


def _entropy(text: str) -> float:
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def _keyword_value(path: Path, text: str) -> str | None:
    """The value a secret-named key holds, when it looks random enough to be a credential."""
    if not path or not isinstance(path[-1], str) or not SECRET_KEY_NAMES.search(path[-1]):
        return None
    scheme = _SCHEME.match(text)
    value = scheme.group(1) if scheme else text
    if not _ENTROPY_MIN_LENGTH <= len(value) <= _ENTROPY_MAX_LENGTH or any(c.isspace() for c in value):
        return None
    return value if _entropy(value) >= _ENTROPY_BITS else None


def scan(
    ops: Iterable[list[Any]],
    *,
    extra: Sequence[_Pattern] = (),
    max_bytes: int | None = None,
    max_ms: int | None = None,
) -> Scan:
    """Find secrets in the values `ops` add: each (path, detector, value) once, fingerprinted."""
    max_bytes = settings.SECRETS_SCAN_MAX_BYTES if max_bytes is None else max_bytes
    detectors = _detectors()  # compiled on first use (~0.2 s): not on the scan's clock
    deadline = time.monotonic() + (settings.SECRETS_SCAN_MAX_MS if max_ms is None else max_ms) / 1000
    result = Scan()
    strings: list[tuple[Path, str]] = []
    for path, text in _strings(added_values(ops)):
        if result.scanned_bytes + len(text) > max_bytes or time.monotonic() > deadline:
            result.truncated = True
            break
        strings.append((path, text))
        result.scanned_bytes += len(text)
    if not strings:
        return result
    seen: set[tuple[Path, str]] = set()

    def hit(path: Path, detector: str, value: str) -> None:
        if value and (path, value) not in seen:
            seen.add((path, value))
            result.hits.append(Hit(path, detector, fingerprint(value), len(value)))

    joined = "\n".join(text for _, text in strings)
    matching = detectors.matching(joined) + [pattern for pattern in extra if pattern.regex.search(joined)]
    for pattern in matching:  # usually none: where each matches, string by string
        for path, text in strings:
            if time.monotonic() > deadline:
                result.truncated = True
                return result
            for match in pattern.regex.finditer(text):
                hit(path, pattern.detector, match.group(pattern.group) or "")
    for path, text in strings:
        value = _keyword_value(path, text)
        if value is not None:
            hit(path, "keyword_entropy", value)
    return result


# what `masking.find_value` reads a value back with
detectors = _detectors
keyword_value = _keyword_value
SHORTEST = _SHORTEST


# ---- masking for people ------------------------------------------------------------------------------------


def masked_form(value: str, detector: str) -> str:
    """What a person without `reveal_secrets` sees instead of a found value: the detector, and the value's last four
    characters when it is long enough that they give nothing away (as key listings show them)."""
    tail = f" …{value[-4:]}" if len(value) >= 20 else ""
    return f"[masked {detector}{tail}]"


# A value a secret-named key holds, quoted in a free text: `password=…`, `"api_key": "…"`, `Authorization: Bearer …`
# (the key names of SECRET_KEY_NAMES, as a word's end). RE2: linear in the text, whatever it holds.
_QUOTED_KEYWORD = (
    r"(?i)(?:token|secret|passw(?:or)?d|passwd|api[_-]?key|access[_-]?key|private[_-]?key|auth|authorization"
    r"|credentials?)[\"']?\s{0,3}[:=]\s{0,3}[\"']?(?:(?:bearer|basic|token|bot)\s+)?([^\s\"'`]{16}[^\s\"'`]*)"
)
_TRAILING = ".,;:)]}>"


@lru_cache(maxsize=1)
def _quoted_keyword() -> Any:
    return compile_pattern(_QUOTED_KEYWORD)


def _quoted_keyword_spans(text: str, fingerprints: Mapping[str, str]) -> Iterator[tuple[int, int, str]]:
    """Where `text` quotes a value found under a secret-named key (`keyword_entropy`), with the key before it:
    a message, a reason or a tool's output saying `password=…`. The value as the scan fingerprinted it, or without
    the punctuation that ends a sentence around it."""
    for match in _quoted_keyword().finditer(text):
        start, end = match.span(1)
        if end - start > _ENTROPY_MAX_LENGTH:
            continue
        for stop in (end, start + len(text[start:end].rstrip(_TRAILING))):
            if stop > start and fingerprint(text[start:stop]) in fingerprints:
                yield start, stop, "keyword_entropy"
                break


def _mask_text(
    text: str,
    key: str | int | None,
    fingerprints: Mapping[str, str],
    detectors: _Detectors,
    extra: Sequence[_Pattern],
    quoted: bool = False,
) -> str:
    spans: list[tuple[int, int, str]] = list(_quoted_keyword_spans(text, fingerprints)) if quoted else []
    for pattern in [*detectors.matching(text), *(p for p in extra if p.regex.search(text))]:
        for match in pattern.regex.finditer(text):
            start, end = match.span(pattern.group)
            if end > start and fingerprint(text[start:end]) in fingerprints:
                spans.append((start, end, pattern.detector))
    keyed = _keyword_value((key,) if key is not None else (), text)
    if keyed is not None and fingerprint(keyed) in fingerprints:
        start = text.rindex(keyed)
        spans.append((start, start + len(keyed), "keyword_entropy"))
    if not spans:
        return text
    out, at = [], 0
    for start, end, detector in sorted(spans):
        if start < at:  # inside a span already masked (two detectors, one value)
            continue
        out += [text[at:start], masked_form(text[start:end], detector)]
        at = end
    return "".join([*out, text[at:]])


def mask_state(state: Any, fingerprints: Mapping[str, str], *, extra: Sequence[_Pattern] = ()) -> Any:
    """`state` with every value the detectors find whose fingerprint is in `fingerprints` masked (`masked_form`);
    unchanged subtrees are shared, not copied, and `state` itself is not changed. The whole state is searched:
    what is shown is masked wherever it came in, a fork's or a copy's included."""
    if not fingerprints:
        return state
    detectors = _detectors()
    quoted = "keyword_entropy" in fingerprints.values()  # found under a key: look for the key quoted in texts

    def walk(value: Any, key: str | int | None) -> Any:
        kind = type(value)
        if kind is str:
            if len(value) < _SHORTEST:
                return value
            return _mask_text(value, key, fingerprints, detectors, extra, quoted)
        if kind is dict:
            fields = {k: walk(v, k) for k, v in value.items()}
            return fields if any(fields[k] is not value[k] for k in value) else value
        if kind is list:
            items = [walk(v, i) for i, v in enumerate(value)]
            return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
        return value

    return walk(state, None)
