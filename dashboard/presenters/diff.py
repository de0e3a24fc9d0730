"""A structural diff shaped for reading, weighing about a screenful whatever the size of the two states.

Changes are grouped by top-level key with counts, each change counted once. Items added to or removed from
one list together collapse to one row ("+ 312 messages") that opens a page at a time; a path filter narrows
the rest. The first screen shows at most PAGE_ROWS rows (GROUP_ROWS per group), each value cut at VALUE_INLINE
characters (the state tree has it whole) and all values together at most CHAR_BUDGET characters.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import orjson
from django.urls import reverse

from checkpoint_console.typedjson import readable
from checkpoints.humanize import short_value
from checkpoints.store import jsoncodec, lgnodes
from checkpoints.store.diff import Diff, DiffEntry, Group, Run, format_path, group_changes
from checkpoints.store.previews import role_of

PAGE_ROWS = 40  # rows of the first screen, across groups
GROUP_ROWS = 8  # rows of one group before "show the other N"
MORE_ROWS = 50  # rows one "show more" adds
RUN_INLINE = 3  # runs this short show their items instead of one collapsed row
GROUPS_SHOWN = 100  # top-level keys with a section of their own; the path filter finds the others
CHAR_BUDGET = 200_000  # characters of values one response renders; past it, rows show their size only
VALUE_PREVIEW = 300  # characters shown before "Show all"
VALUE_PREVIEW_LINES = 6
VALUE_INLINE = 3_000  # characters of one value that come with the page
SHORT_VALUE = 60  # one-line values this short sit on their row's line: `"draft" → "sent"`
LINE_LIMIT = 600  # lines per side that a line diff compares
SIDE_ROWS = 80  # rows of a line diff shown
CONTEXT = 3  # unchanged lines kept around each change
INLINE_MAX = 4_000  # longest line that gets a word-level diff
MESSAGE_LISTS = {"messages", "conversation_history", "conversation", "history", "transcript"}


class Budget:
    """Characters of values a response may still render."""

    def __init__(self, chars: int = CHAR_BUDGET) -> None:
        self.left = chars

    def take(self, chars: int) -> bool:
        if chars > self.left:
            self.left = 0
            return False
        self.left -= chars
        return True


@dataclass
class Value:
    text: str
    preview: str
    truncated: bool  # the preview is shorter than the text
    clipped: bool  # the text itself was cut at VALUE_INLINE
    size: int  # characters of the whole value as shown
    shape: str = ""  # "list of 5,000 items", "object of 12 keys"
    message: dict[str, Any] | None = None  # role, content, tools: for chat messages
    omitted: bool = False  # past the response's budget: only its size is shown

    @property
    def short(self) -> bool:
        return not self.omitted and self.message is None and len(self.text) <= SHORT_VALUE and "\n" not in self.text


@dataclass
class Cell:
    number: int | None = None
    segments: list[tuple[str, bool]] = field(default_factory=list)  # (text, changed)
    kind: str = ""  # del | add | same | empty


@dataclass
class SideRow:
    left: Cell
    right: Cell
    skipped: int = 0  # a collapsed run of unchanged lines


@dataclass
class EntryRow:
    """One changed entry of the diff: its path, old and new value, side by side when both are long text."""

    op: str
    list_op: str
    path: str
    path_json: str  # the path as the state tree's ?path= takes it
    old: Value | None
    new: Value | None
    sides: list[SideRow] | None = None
    sides_clipped: bool = False
    is_run = False

    @property
    def short(self) -> bool:
        """Every value it shows fits on its line."""
        return self.sides is None and all(value.short for value in (self.old, self.new) if value is not None)


@dataclass
class RunRow:
    """`+ 312 messages`: one splice of a list, collapsed; `page` holds its items once opened."""

    op: str
    list_op: str
    path: str  # the list
    start: int
    count: int
    noun: str
    anchor: str
    url: str  # opens the first page of its items
    page: Page | None = None
    is_run = True

    @property
    def end(self) -> int:
        return self.start + self.count - 1


@dataclass
class Page:
    """A slice of a group's rows or a run's items, with the link to the next slice."""

    title: str
    rows: list[EntryRow | RunRow]
    first: int  # position of the first row in its group or run
    total: int
    more_url: str = ""

    @property
    def remaining(self) -> int:
        return self.total - self.first - len(self.rows)

    @property
    def last(self) -> int:
        return self.first + len(self.rows)

    @property
    def next_count(self) -> int:
        return min(MORE_ROWS, self.remaining)


@dataclass
class GroupView:
    label: str
    anchor: str
    counts: dict[str, int]
    total: int
    url: str  # opens the group's rows (when the first screen had no room for them)
    page: Page | None  # None: collapsed


@dataclass
class DiffView:
    groups: list[GroupView]
    hidden_groups: int  # top-level keys past GROUPS_SHOWN
    counts: dict[str, int]  # changed, added, removed: each change once
    total: int
    messages_appended: int
    path_filter: str
    unfiltered_total: int
    filter_url: str  # the compare page, for the filter form
    filter_fields: dict[str, str]  # hidden fields the filter form keeps (a, b, base)
    old_pk: int | None  # the checkpoints whose state trees hold the whole values
    new_pk: int | None
    expanded: Page | None = None  # what ?expand= asked for: the htmx fragment
    expanded_run: RunRow | None = None  # the run it belongs to, when it is a run's items
    internal_hidden: int = 0  # changes to LangGraph's own channels left out (see `present_diff`)


@dataclass
class _Links:
    """Links back to the compare page for the same two checkpoints: `query` holds a, b (and base, path)."""

    query: dict[str, Any]

    def expand(self, key: str, offset: int = 0) -> str:
        query = {**self.query, "expand": key, "offset": offset} if offset else {**self.query, "expand": key}
        return f"{reverse('dashboard:compare')}?{urlencode(query)}"


def present_diff(
    diff: Diff,
    *,
    query: dict[str, Any],
    path_filter: str = "",
    expand: str = "",
    offset: int = 0,
    rows: int = PAGE_ROWS,
    old_pk: int | None = None,
    new_pk: int | None = None,
    hide_internal: bool = False,
) -> DiffView:
    """`query` names the two checkpoints on the compare page (a, b, base), for the links that open more;
    `expand` and `offset` open one group or run a page at a time; `rows` bounds the first screen.
    `hide_internal` leaves out LangGraph's own channels (`branch:to:*`, `__start__`, …): a thread's graph
    bookkeeping, not its state."""
    everything = diff.entries
    if hide_internal:
        everything = [entry for entry in diff.entries if not (entry.path and lgnodes.is_internal(entry.path[0]))]
    wanted = path_filter.strip().lower()
    entries = [entry for entry in everything if wanted in entry.path_text.lower()] if wanted else everything
    groups = group_changes(entries)
    links = _Links({**query, **({"path": path_filter.strip()} if wanted else {})})
    budget = Budget()
    counts = {"changed": 0, "added": 0, "removed": 0}
    for group in groups:
        for op, count in group.counts.items():
            counts[op] += count
    view = DiffView(
        groups=[],
        hidden_groups=max(0, len(groups) - GROUPS_SHOWN),
        counts=counts,
        total=len(entries),
        messages_appended=sum(1 for entry in entries if entry.list_op == "appended" and _in_message_list(entry)),
        path_filter=path_filter.strip(),
        unfiltered_total=len(everything),
        filter_url=reverse("dashboard:compare"),
        filter_fields={key: str(value) for key, value in query.items()},
        old_pk=old_pk,
        new_pk=new_pk,
        internal_hidden=len(diff.entries) - len(everything),
    )
    left = rows
    for group in groups[:GROUPS_SHOWN]:
        items = _items(group)
        key = f"g:{group.label}"
        run_at, run = next(
            ((i, item) for i, item in enumerate(items) if isinstance(item, Run) and expand == f"r:{item.key}"),
            (0, None),
        )
        if expand == key:
            first = min(max(offset, 0), len(items) - 1)
            page = view.expanded = _page(group.label, items, first, MORE_ROWS, key, links, budget)
        elif run is not None:
            view.expanded = _run_page(run, offset, links, budget)
            view.expanded_run = _run_row(run, links, view.expanded)
            page = _page(group.label, items, run_at, GROUP_ROWS, key, links, budget, opened=view.expanded_run)
        elif left > 0:
            page = _page(group.label, items, 0, min(GROUP_ROWS, left), key, links, budget)
            left -= len(page.rows)
        else:
            page = None
        view.groups.append(
            GroupView(group.label, _anchor("g", key), group.counts, group.total, links.expand(key), page)
        )
    return view


def _items(group: Group) -> list[DiffEntry | Run]:
    """A group's rows: short runs read better as their items."""
    items: list[DiffEntry | Run] = []
    for item in group.items:
        if isinstance(item, Run) and item.count <= RUN_INLINE:
            items.extend(item.entries)
        else:
            items.append(item)
    return items


def _page(
    title: str,
    items: list[DiffEntry | Run],
    first: int,
    size: int,
    key: str,
    links: _Links,
    budget: Budget,
    *,
    opened: RunRow | None = None,
) -> Page:
    """Rows `first`… of a group or run; `opened` is the run it starts with, with its items open."""
    shown = items[first : first + size]
    rows: list[EntryRow | RunRow] = [
        _run_row(item, links) if isinstance(item, Run) else _row(item, budget) for item in shown
    ]
    if opened is not None:
        rows[0] = opened
    end = first + len(shown)
    return Page(title, rows, first, len(items), links.expand(key, end) if end < len(items) else "")


def _run_page(run: Run, offset: int, links: _Links, budget: Budget) -> Page:
    key = f"r:{run.key}"
    first = min(max(offset, 0), run.count - 1)
    title = f"{format_path(run.list_path)}[{run.start}–{run.start + run.count - 1}]"
    return _page(title, list(run.entries), first, MORE_ROWS, key, links, budget)


def _run_row(run: Run, links: _Links, page: Page | None = None) -> RunRow:
    key = f"r:{run.key}"
    name = run.list_path[-1] if run.list_path else ""
    noun = "messages" if name in MESSAGE_LISTS else f"items of {format_path(run.list_path)}"
    return RunRow(
        op=run.op,
        list_op=run.list_op,
        path=format_path(run.list_path),
        start=run.start,
        count=run.count,
        noun=noun,
        anchor=_anchor("r", key),
        url=links.expand(key),
        page=page,
    )


def _anchor(prefix: str, key: str) -> str:
    return f"diff-{prefix}-{hashlib.blake2b(key.encode(), digest_size=5).hexdigest()}"


def _in_message_list(entry: DiffEntry) -> bool:
    return len(entry.path) >= 2 and isinstance(entry.path[-1], int) and entry.path[-2] in MESSAGE_LISTS


def _row(entry: DiffEntry, budget: Budget) -> EntryRow:
    path_json = json.dumps(list(entry.path), ensure_ascii=False, separators=(",", ":"))
    row = EntryRow(entry.op, entry.list_op, entry.path_text, path_json, None, None)
    if entry.is_text_change:
        sides, clipped = side_by_side(entry.old, entry.new)
        if budget.take(
            escaped_size(*(text for line in sides for cell in (line.left, line.right) for text, _ in cell.segments))
        ):
            row.sides, row.sides_clipped = sides, clipped
            return row
    row.old = present_value(entry.old, budget) if entry.op != "added" else None
    row.new = present_value(entry.new, budget) if entry.op != "removed" else None
    return row


def present_value(value: Any, budget: Budget | None = None) -> Value:
    value = readable(value)  # LangGraph's tagged values (messages, datetimes, blobs) as people read them
    if isinstance(value, str) and "\n" in value:
        text = value  # multi-line text reads better unquoted
    else:
        text = jsoncodec.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode()
    size = len(text)
    shape = _shape(value)
    clipped = size > VALUE_INLINE
    text = text[:VALUE_INLINE] if clipped else text
    lines = text.split("\n", VALUE_PREVIEW_LINES)
    preview = "\n".join(lines[:VALUE_PREVIEW_LINES])[:VALUE_PREVIEW]
    message = _message(value)
    if budget is not None and not budget.take(escaped_size(text, preview, message["content"] if message else "")):
        return Value("", "", False, clipped, size, shape, omitted=True)
    return Value(text, preview, len(preview) < len(text), clipped, size, shape, message)


_ESCAPE_GROWTH = {"&": 4, "<": 3, ">": 3, '"': 5, "'": 5}  # &amp; &lt; &gt; &quot; &#x27;


def escaped_size(*texts: str) -> int:
    """Characters the texts take in HTML, once escaped."""
    return sum(len(text) + sum(text.count(char) * extra for char, extra in _ESCAPE_GROWTH.items()) for text in texts)


def _shape(value: Any) -> str:
    if isinstance(value, list):
        return f"list of {len(value):,} item{'s' if len(value) != 1 else ''}"
    if isinstance(value, dict):
        return f"object of {len(value):,} key{'s' if len(value) != 1 else ''}"
    return ""


def _message(value: Any) -> dict[str, Any] | None:
    if not isinstance(value, dict) or not (role := role_of(value)) or not ("role" in value or "content" in value):
        return None
    content = value.get("content")
    calls = listed if isinstance(listed := value.get("tool_calls"), list) else []
    tools = [call.get("name") or call.get("function", {}).get("name", "?") for call in calls if isinstance(call, dict)]
    return {"role": role, "content": short_value(content, VALUE_PREVIEW * 2 + 1), "tools": tools}


def side_by_side(old: str, new: str) -> tuple[list[SideRow], bool]:
    """Two columns of lines (removed left, added right), unchanged runs collapsed to CONTEXT lines; at most
    SIDE_ROWS rows (clipped says the texts go on)."""
    a, b = old.splitlines(), new.splitlines()
    clipped = len(a) > LINE_LIMIT or len(b) > LINE_LIMIT
    a, b = a[:LINE_LIMIT], b[:LINE_LIMIT]
    rows: list[SideRow] = []
    opcodes = difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    for index, (tag, i1, i2, j1, j2) in enumerate(opcodes):
        if tag == "equal":
            rows.extend(_equal_run(a, i1, i2, j1, first=index == 0, last=index == len(opcodes) - 1))
            continue
        for offset in range(max(i2 - i1, j2 - j1)):
            i, j = i1 + offset, j1 + offset
            left_text = a[i] if i < i2 else None
            right_text = b[j] if j < j2 else None
            left_segments, right_segments = _inline(left_text, right_text)
            rows.append(
                SideRow(
                    Cell(i + 1, left_segments, "del") if left_text is not None else Cell(kind="empty"),
                    Cell(j + 1, right_segments, "add") if right_text is not None else Cell(kind="empty"),
                )
            )
        if len(rows) >= SIDE_ROWS:
            return rows[:SIDE_ROWS], True
    return rows, clipped


def _equal_run(lines: list[str], i1: int, i2: int, j1: int, *, first: bool, last: bool) -> list[SideRow]:
    def same(i: int) -> SideRow:
        text = short_value(lines[i], INLINE_MAX + 1)
        return SideRow(Cell(i + 1, [(text, False)], "same"), Cell(j1 + i - i1 + 1, [(text, False)], "same"))

    keep_head = 0 if first else CONTEXT
    keep_tail = 0 if last else CONTEXT
    if i2 - i1 <= keep_head + keep_tail + 1:
        return [same(i) for i in range(i1, i2)]
    hidden = i2 - i1 - keep_head - keep_tail
    gap = SideRow(Cell(kind="empty"), Cell(kind="empty"), skipped=hidden)
    return [*(same(i) for i in range(i1, i1 + keep_head)), gap, *(same(i) for i in range(i2 - keep_tail, i2))]


_TOKEN = re.compile(r"\s+|\w+|[^\w\s]")


def _inline(old: str | None, new: str | None) -> tuple[list[tuple[str, bool]], list[tuple[str, bool]]]:
    """Word-level marks within a changed pair of lines; whole lines when one side is missing or huge."""
    if old is None or new is None or len(old) > INLINE_MAX or len(new) > INLINE_MAX:
        return [(short_value(old or "", INLINE_MAX + 1), True)], [(short_value(new or "", INLINE_MAX + 1), True)]
    a, b = _TOKEN.findall(old), _TOKEN.findall(new)
    left: list[tuple[str, bool]] = []
    right: list[tuple[str, bool]] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if i2 > i1:
            left.append(("".join(a[i1:i2]), tag != "equal"))
        if j2 > j1:
            right.append(("".join(b[j1:j2]), tag != "equal"))
    return left or [("", False)], right or [("", False)]
