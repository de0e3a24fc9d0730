"""Structural diff of two JSON states.

One walker serves both the store (which turns changes into patch operations) and operators (who
read added/removed/changed paths). It descends only where the two sides differ: a subtree that is
the same object (states loaded from the store share unchanged subtrees) or compares equal is
skipped without being visited, so two huge states that differ in one message cost the changed path.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeGuard

from .jsoncodec import canonical

MISSING: Any = type("Missing", (), {"__repr__": lambda self: "MISSING"})()

Path = tuple[str | int, ...]
# ("set", path, old or MISSING, new) · ("del", path, old) · ("splice", path, start, removed, inserted)
Change = tuple[Any, ...]

# Equal-length runs of list items up to this size are compared item by item (a message edited
# in place shows as one changed path); longer runs are reported as removed + inserted items.
_PAIRWISE_LIMIT = 16
LONG_STRING = 200


@dataclass
class WalkStats:
    descents: int = 0


def _equal(a: Any, b: Any, strict: bool) -> bool:
    if a is b:
        return True
    kind = type(a)
    if kind is not type(b) or a != b:
        return False
    if not strict:
        return True
    # `==` treats 1, 1.0 and True (and 0.0, -0.0) as equal; JSON does not.
    if kind is dict or kind is list:
        return canonical(a) == canonical(b)
    if kind is float:
        return math.copysign(1.0, a) == math.copysign(1.0, b)
    return True


def walk(a: Any, b: Any, *, strict: bool = False, stats: WalkStats | None = None) -> Iterator[Change]:
    """Yield the changes that turn `a` into `b`, in an order a patch can replay."""
    stats = stats if stats is not None else WalkStats()
    if not _equal(a, b, strict):
        yield from _descend(a, b, (), strict, stats)


def walk_at(a: Any, b: Any, path: Path) -> Iterator[Change]:
    """walk() of the values at `path` of two states: the changes carry the whole path."""
    if not _equal(a, b, False):
        yield from _descend(a, b, path, False, WalkStats())


def _descend(a: Any, b: Any, path: Path, strict: bool, stats: WalkStats) -> Iterator[Change]:
    kind = type(a)
    if kind is type(b) and kind is dict:
        yield from _walk_dict(a, b, path, strict, stats)
    elif kind is type(b) and kind is list:
        yield from _walk_list(a, b, path, strict, stats)
    else:
        yield ("set", path, a, b)


def _walk_dict(a: dict[Any, Any], b: dict[Any, Any], path: Path, strict: bool, stats: WalkStats) -> Iterator[Change]:
    stats.descents += 1
    for key, old in a.items():
        if key not in b:
            yield ("del", (*path, key), old)
    for key, new in b.items():
        old = a.get(key, MISSING)
        if old is MISSING:
            yield ("set", (*path, key), MISSING, new)
        elif not _equal(old, new, strict):
            yield from _descend(old, new, (*path, key), strict, stats)


def _walk_list(a: list[Any], b: list[Any], path: Path, strict: bool, stats: WalkStats) -> Iterator[Change]:
    stats.descents += 1
    len_a, len_b = len(a), len(b)
    shortest = min(len_a, len_b)
    if not strict and a[:shortest] == b[:shortest]:
        prefix = shortest  # the common case: items appended at the end
    else:
        prefix = 0
        while prefix < shortest and _equal(a[prefix], b[prefix], strict):
            prefix += 1
    if prefix == 0 and len_a and len_b:
        shift = _front_shift(a, b, strict)
        if shift:  # a window that drops its oldest items and appends new ones
            kept = len_a - shift
            yield ("splice", path, 0, a[:shift], [])
            if len_b > kept:
                yield ("splice", path, kept, [], b[kept:])
            return
    suffix = 0
    while suffix < shortest - prefix and _equal(a[len_a - 1 - suffix], b[len_b - 1 - suffix], strict):
        suffix += 1
    removed = a[prefix : len_a - suffix]
    inserted = b[prefix : len_b - suffix]
    if removed and len(removed) == len(inserted) and len(removed) <= _PAIRWISE_LIMIT:
        for offset, (old, new) in enumerate(zip(removed, inserted, strict=True)):
            if not _equal(old, new, strict):
                yield from _descend(old, new, (*path, prefix + offset), strict, stats)
    elif removed or inserted:
        yield ("splice", path, prefix, removed, inserted)


_SHIFT_CANDIDATES = 8


def _front_shift(a: list[Any], b: list[Any], strict: bool) -> int:
    """k > 0 when `b` starts with `a[k:]` (items dropped at the front), else 0."""
    first, tried = b[0], 0
    for k in range(1, len(a)):
        if _equal(a[k], first, strict):
            rest = a[k:]
            head = b[: len(rest)]
            same = (
                rest == head
                if not strict
                else len(head) == len(rest) and all(map(_equal, rest, head, [True] * len(rest)))
            )
            if same:
                return k
            tried += 1
            if tried == _SHIFT_CANDIDATES:
                break
    return 0


def to_ops(changes: Iterator[Change]) -> list[list[Any]]:
    """Patch operations, as stored: ["s", path, value], ["d", path], ["l", path, start, count, items]."""
    ops: list[list[Any]] = []
    for change in changes:
        if change[0] == "set":
            ops.append(["s", list(change[1]), change[3]])
        elif change[0] == "del":
            ops.append(["d", list(change[1])])
        else:
            ops.append(["l", list(change[1]), change[2], len(change[3]), change[4]])
    return ops


def json_patch(a: Any, b: Any) -> list[dict[str, Any]]:
    """RFC 6902 operations turning `a` into `b` (JSON told apart strictly: `1`, `1.0` and `true` differ), for a
    reader that holds `a`: the walk's changes, a splice as removals at its start then additions. Only `add`,
    `remove` and `replace`, and no operation refers to a value by identity, so a reader applies them to its own
    copy."""
    ops: list[dict[str, Any]] = []
    for change in walk(a, b, strict=True):
        pointer = pointer_of(change[1])
        if change[0] == "set":
            ops.append({"op": "add" if change[2] is MISSING else "replace", "path": pointer, "value": change[3]})
        elif change[0] == "del":
            ops.append({"op": "remove", "path": pointer})
        else:
            start = change[2]
            ops.extend({"op": "remove", "path": f"{pointer}/{start}"} for _ in change[3])
            ops.extend(
                {"op": "add", "path": f"{pointer}/{start + offset}", "value": item}
                for offset, item in enumerate(change[4])
            )
    return ops


def pointer_of(path: Path) -> str:
    """A JSON Pointer (RFC 6901)."""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in path)


def apply_ops(state: Any, ops: list[list[Any]]) -> Any:
    """Return a new state with `ops` applied; `state` is not modified and unchanged subtrees are shared."""
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


# ---- the operator's view ----------------------------------------------------------------------

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def format_path(path: Sequence[str | int]) -> str:
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        elif _IDENTIFIER.match(part):
            text += f".{part}" if text else part
        else:
            text += f"[{canonical(part).decode()}]"
    return text or "(root)"


@dataclass
class DiffEntry:
    op: str  # added | removed | changed
    path: Path
    old: Any = None
    new: Any = None
    list_op: str = ""  # appended | inserted | removed | "" for keyed changes

    @property
    def path_text(self) -> str:
        return format_path(self.path)

    @property
    def is_text_change(self) -> bool:
        """A long or multi-line text replaced by another: it reads best line by line."""
        return self.op == "changed" and _is_long_text(self.old) and _is_long_text(self.new)

    @cached_property
    def line_diff(self) -> list[str]:
        """Unified diff of a text change, computed when asked for: on texts of thousands of lines it takes
        long, and a screen that shows a few changes must not pay it for all of them."""
        return line_diff(self.old, self.new) if self.is_text_change else []

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"op": self.op, "path": self.path_text, "path_parts": list(self.path)}
        if self.op != "added":
            data["old"] = self.old
        if self.op != "removed":
            data["new"] = self.new
        if self.list_op:
            data["list_op"] = self.list_op
        if self.line_diff:
            data["line_diff"] = self.line_diff
        return data


@dataclass
class Diff:
    entries: list[DiffEntry]
    stats: WalkStats

    @property
    def counts(self) -> dict[str, int]:
        counts = {"added": 0, "removed": 0, "changed": 0, "appended": 0}
        for entry in self.entries:
            counts[entry.op] += 1
            if entry.list_op == "appended":
                counts["appended"] += 1
        return counts

    @property
    def summary(self) -> str:
        counts = self.counts
        if not self.entries:
            return "identical"
        parts = [f"{counts[op]} {op}" for op in ("changed", "added", "removed") if counts[op]]
        if counts["appended"]:
            parts.append(f"{counts['appended']} list item{'s' if counts['appended'] != 1 else ''} appended")
        return ", ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return {
            "summary": {**self.counts, "text": self.summary},
            "changes": [entry.as_dict() for entry in self.entries],
        }


def line_diff(old: str, new: str) -> list[str]:
    return list(difflib.unified_diff(old.splitlines(), new.splitlines(), "before", "after", lineterm="", n=2))


def _is_long_text(value: Any) -> bool:
    return isinstance(value, str) and (len(value) > LONG_STRING or "\n" in value)


def diff_states(a: Any, b: Any) -> Diff:
    stats = WalkStats()
    entries: list[DiffEntry] = []
    for change in walk(a, b, strict=True, stats=stats):
        if change[0] == "set":
            _, path, old, new = change
            if old is MISSING:
                entries.append(DiffEntry("added", path, new=new))
            else:
                entries.append(DiffEntry("changed", path, old=old, new=new))
        elif change[0] == "del":
            entries.append(DiffEntry("removed", change[1], old=change[2]))
        else:
            _, path, start, removed, inserted = change
            appended = not removed and start + len(inserted) == _length_at(b, path)
            for offset, old in enumerate(removed):
                entries.append(DiffEntry("removed", (*path, start + offset), old=old, list_op="removed"))
            for offset, new in enumerate(inserted):
                list_op = "appended" if appended else "inserted"
                entries.append(DiffEntry("added", (*path, start + offset), new=new, list_op=list_op))
    return Diff(entries=entries, stats=stats)


def _length_at(state: Any, path: Path) -> int:
    node = state
    for part in path:
        node = node[part]
    return len(node)


# ---- a long diff, grouped -----------------------------------------------------------------------


@dataclass
class Run:
    """Items added to or removed from one list together (one splice): `+ 312 messages` on screen."""

    list_path: Path
    list_op: str  # appended | inserted | removed
    entries: list[DiffEntry]

    @property
    def op(self) -> str:
        return self.entries[0].op

    @property
    def start(self) -> int:
        start = self.entries[0].path[-1]
        if not isinstance(start, int):
            raise TypeError("a run's entries are list items")
        return start

    @property
    def count(self) -> int:
        return len(self.entries)

    @property
    def key(self) -> str:
        """Names the run among the changes of two states, e.g. `messages@1`."""
        return f"{format_path(self.list_path)}@{self.start}"


@dataclass
class Group:
    """The changes under one top-level key of the state, each counted once (a run counts its items)."""

    key: str | None  # None: the state itself, when it is a list or was replaced whole
    items: list[DiffEntry | Run] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=lambda: {"changed": 0, "added": 0, "removed": 0})

    @property
    def label(self) -> str:
        return format_path(() if self.key is None else (self.key,))

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def group_changes(entries: Iterable[DiffEntry]) -> list[Group]:
    """Changes grouped by top-level key (in the order they come), consecutive list items of one splice as a Run."""
    groups: dict[str | None, Group] = {}
    for entry in entries:
        key = entry.path[0] if entry.path and isinstance(entry.path[0], str) else None
        group = groups.get(key)
        if group is None:
            group = groups[key] = Group(key)
        group.counts[entry.op] += 1
        last = group.items[-1] if group.items else None
        if entry.list_op and _continues(last, entry):
            if isinstance(last, Run):
                last.entries.append(entry)
            else:
                group.items[-1] = Run(entry.path[:-1], entry.list_op, [last, entry])
        else:
            group.items.append(entry)
    return list(groups.values())


def _continues(last: DiffEntry | Run | None, entry: DiffEntry) -> TypeGuard[DiffEntry | Run]:
    """`entry` is the next item of the same list, added or removed the same way as `last`."""
    if last is None:
        return False
    previous = last.entries[-1] if isinstance(last, Run) else last
    index = entry.path[-1]
    return (
        previous.list_op == entry.list_op
        and previous.path[:-1] == entry.path[:-1]
        and isinstance(index, int)
        and previous.path[-1] == index - 1
    )
