"""A state as a tree the checkpoint page draws: a few levels with the page, deeper subtrees and long strings on demand.

The state comes from `store.load_shared`: one object shared with every other reader in the process,
so everything here only reads it (no sorting in place, no `setdefault`, no `pop`).

LangGraph's tagged values (typed JSON: a message, a datetime, an opaque blob) are drawn as
`typedjson.readable` renders them, one value at a time as the tree reaches it; paths name the readable
form's keys, so `resolve` walks the same form.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any

from jsonpointer import JsonPointer

from checkpoint_console.typedjson import TAG, readable
from checkpoints.humanize import short_value
from checkpoints.store.diff import format_path

CHILD_CAP = 50  # entries one expansion shows; "show more" loads the next ones
INLINE_NODES = 150  # nodes rendered with the page before subtrees load on demand (250 made a page of 118 kB)
INLINE_DEPTH = 3
OPEN_SMALL = 8  # first-level objects and lists this small start open
PREVIEW_CHARS = 160  # longer strings show a preview, and the whole text on demand
INLINE_TEXT = 2_000  # strings up to this long come with the page; longer ones load when opened
FULL_TEXT_MAX = 200_000  # beyond this, the download has the rest
MAX_PATH = 64
PREVIEW_FIELD = 48  # characters of one field in a closed object's preview


class BadPath(ValueError):
    pass


def parse_path(raw: str) -> list[str | int]:
    """A JSON list of object keys (strings) and array indexes (integers)."""
    try:
        path = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # RecursionError: "[[[[…" nested past the parser's limit
        raise BadPath('path must be a JSON list, e.g. ["messages", 3]') from exc
    if not isinstance(path, list):
        raise BadPath('path must be a JSON list, e.g. ["messages", 3]')
    if len(path) > MAX_PATH:
        raise BadPath(f"path is deeper than {MAX_PATH} levels")
    for part in path:
        if isinstance(part, bool) or not isinstance(part, str | int):
            raise BadPath(f"path parts are keys (strings) or indexes (integers), not {json.dumps(part)}")
    return path


def shown(value: Any) -> Any:
    """A value as the tree draws it: a tagged LangGraph value readable, anything else as it is."""
    return readable(value) if isinstance(value, dict) and TAG in value else value


def resolve(state: Any, path: list[str | int]) -> Any:
    value = shown(state)
    for depth, part in enumerate(path):
        where = format_path(path[:depth])
        if isinstance(value, dict):
            if not isinstance(part, str) or part not in value:
                raise BadPath(f"no key {json.dumps(part)} in {where}")
            value = shown(value[part])
        elif isinstance(value, list):
            if not isinstance(part, int) or not 0 <= part < len(value):
                raise BadPath(f"no index {json.dumps(part)} in {where} ({len(value)} items)")
            value = shown(value[part])
        else:
            raise BadPath(f"{where} is a value, not an object or a list")
    return value


@dataclass
class Node:
    """One entry of the state tree as the template draws it."""

    key: str | int | None
    path: list[str | int]
    kind: str  # object, array, string, number, bool, null
    text: str = ""  # a value's display text (strings: the preview)
    length: int = 0  # entries of a container, characters of a string
    full: str | None = None  # a long string's whole text, when it comes with the page
    children: list[Node] | None = None  # None: loads on demand
    preview: str = ""  # an object's telling fields, shown while it is closed
    more: int | None = None  # offset of the entries after the shown ones
    open: bool = False

    @property
    def container(self) -> bool:
        return self.kind in ("object", "array") and self.length > 0

    @property
    def is_index(self) -> bool:
        return isinstance(self.key, int)

    @property
    def long(self) -> bool:
        return self.kind == "string" and (self.length > PREVIEW_CHARS or "\n" in self.text)

    @property
    def remaining(self) -> int:
        return min(CHILD_CAP, self.length - self.more) if self.more is not None else 0

    @property
    def truncated(self) -> bool:
        return self.full is not None and len(self.full) < self.length

    @property
    def pointer(self) -> str:
        """The node's place as a JSON pointer (/messages/3), as the state editor takes it."""
        return str(JsonPointer.from_parts(self.path).path)

    @property
    def path_json(self) -> str:
        return json.dumps(self.path, ensure_ascii=False, separators=(",", ":"))


PREVIEW_KEYS = ("role", "name", "tool_name", "title", "type", "status", "id", "success", "content", "text")


def _preview(value: dict[str, Any]) -> str:
    """A few scalar fields of an object that are set, the telling ones first: `role: assistant · content: The…`."""
    keys = [key for key in PREVIEW_KEYS if key in value]
    keys += [key for key in islice(value, 12) if key not in keys]
    parts = []
    for key in keys:
        item = value[key]
        if item is None or isinstance(item, dict | list):  # a LangChain message's unset `name` tells nothing
            continue
        parts.append(f"{key}: {short_value(item, PREVIEW_FIELD)}")
        if len(parts) == 3:
            break
    return " · ".join(parts)


def make_node(key: str | int | None, path: list[str | int], value: Any) -> Node:
    if isinstance(value, dict):
        return Node(key, path, "object", length=len(value), preview=_preview(value))
    if isinstance(value, list):
        return Node(key, path, "array", length=len(value))
    if isinstance(value, str):
        node = Node(key, path, "string", text=value[:PREVIEW_CHARS], length=len(value))
        if node.long and len(value) <= INLINE_TEXT:
            node.full = value
        return node
    if isinstance(value, bool):
        return Node(key, path, "bool", text="true" if value else "false")
    if value is None:
        return Node(key, path, "null", text="null")
    return Node(key, path, "number", text=str(value))


def _entries(value: Any, path: list[str | int], offset: int) -> Iterator[tuple[Node, Any]]:
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, child in islice(items, offset, offset + CHILD_CAP):
        child = shown(child)
        yield make_node(key, [*path, key], child), child


def _expand(node: Node, value: Any, offset: int = 0) -> list[tuple[Node, Any]]:
    entries = list(_entries(value, node.path, offset))
    node.children = [child for child, _ in entries]
    node.more = offset + CHILD_CAP if offset + CHILD_CAP < node.length else None
    return entries


def state_tree(state: Any) -> Node:
    """The root and, breadth first, as many levels as INLINE_NODES allows; deeper subtrees load on demand."""
    state = shown(state)
    root = make_node(None, [], state)
    root.open = True
    _grow(root, state, 0)
    return root


def subtree(value: Any, path: list[str | int], offset: int) -> Node:
    """The entries of the value at `path` from `offset` (CHILD_CAP of them, a level or two deep), or a string."""
    node = make_node(path[-1] if path else None, path, value)
    if node.container:
        _grow(node, value, offset)
    elif node.kind == "string":
        node.full = value[:FULL_TEXT_MAX]
    return node


def _grow(top: Node, value: Any, offset: int) -> None:
    budget = INLINE_NODES
    queue: deque[tuple[Node, Any, int]] = deque([(top, value, 0)])
    while queue:
        node, value, depth = queue.popleft()
        if not node.container:
            continue
        if node is not top and (depth > INLINE_DEPTH or min(node.length, CHILD_CAP) > budget):
            continue
        entries = _expand(node, value, offset if node is top else 0)
        node.open = node.open or (depth == 1 and node.length <= OPEN_SMALL)
        budget -= len(entries)
        queue.extend((child, child_value, depth + 1) for child, child_value in entries)
