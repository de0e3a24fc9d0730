"""Compare two checkpoints: the structural diff as a table, long strings side by side.

The diff itself is `services.diff_checkpoints`; this module only shapes it for reading, with bounded
work: at most ENTRY_LIMIT rows, values cut at VALUE_MAX characters, line diffs of at most LINE_LIMIT lines.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field
from typing import Any

import orjson
from django.http import Http404, HttpResponse
from django.views.decorators.http import require_GET

from checkpoints import jsoncodec
from checkpoints.diff import Diff, DiffEntry
from checkpoints.models import AgentSession, Checkpoint
from checkpoints.services import diff_checkpoints

from ..forms import CheckpointRef, CompareForm
from .common import VIEW, HtmxHttpRequest, console, get_checkpoint_for_user, render_page

ENTRY_LIMIT = 500
VALUE_PREVIEW = 300  # characters shown before "Show all"
VALUE_PREVIEW_LINES = 6
VALUE_MAX = 20_000  # characters rendered at all; the download has the rest
LINE_LIMIT = 600  # lines per side in a line diff
CONTEXT = 3  # unchanged lines kept around each change
INLINE_MAX = 4_000  # longest line that gets a word-level diff
MESSAGE_LISTS = {"messages", "conversation_history", "history", "transcript"}


@dataclass
class Value:
    text: str
    preview: str
    truncated: bool  # the preview is shorter than the text
    clipped: bool  # the text itself was cut at VALUE_MAX
    size: int
    message: dict[str, Any] | None = None  # role, content, tools: for chat messages


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
class Row:
    op: str
    list_op: str
    path: str
    old: Value | None
    new: Value | None
    sides: list[SideRow] | None = None
    sides_clipped: bool = False


@dataclass
class DiffView:
    rows: list[Row]
    total: int
    counts: dict[str, int]
    summary: str
    messages_appended: int

    @property
    def capped(self) -> bool:
        return self.total > len(self.rows)


def present_diff(diff: Diff, *, limit: int = ENTRY_LIMIT) -> DiffView:
    counts = diff.counts
    appended = sum(1 for entry in diff.entries if entry.list_op == "appended" and _in_message_list(entry))
    return DiffView(
        rows=[_row(entry) for entry in diff.entries[:limit]],
        total=len(diff.entries),
        counts=counts,
        summary=diff.summary,
        messages_appended=appended,
    )


def _in_message_list(entry: DiffEntry) -> bool:
    return len(entry.path) >= 2 and isinstance(entry.path[-1], int) and entry.path[-2] in MESSAGE_LISTS


def _row(entry: DiffEntry) -> Row:
    old = present_value(entry.old) if entry.op != "added" else None
    new = present_value(entry.new) if entry.op != "removed" else None
    row = Row(entry.op, entry.list_op, entry.path_text, old, new)
    if entry.op == "changed" and isinstance(entry.old, str) and isinstance(entry.new, str) and entry.line_diff:
        row.sides, row.sides_clipped = side_by_side(entry.old, entry.new)
    return row


def present_value(value: Any) -> Value:
    if isinstance(value, str) and "\n" in value:
        text = value  # multi-line text reads better unquoted
    else:
        text = jsoncodec.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode()
    size = len(text)
    clipped = size > VALUE_MAX
    text = text[:VALUE_MAX] if clipped else text
    lines = text.split("\n", VALUE_PREVIEW_LINES)
    preview = "\n".join(lines[:VALUE_PREVIEW_LINES])[:VALUE_PREVIEW]
    return Value(text, preview, len(preview) < len(text), clipped, size, _message(value))


def _message(value: Any) -> dict[str, Any] | None:
    if not (isinstance(value, dict) and isinstance(value.get("role"), str)):
        return None
    content = value.get("content")
    calls = value.get("tool_calls") if isinstance(value.get("tool_calls"), list) else []
    tools = [call.get("name") or call.get("function", {}).get("name", "?") for call in calls if isinstance(call, dict)]
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False, default=str)
    cut = len(text) > VALUE_PREVIEW * 2
    return {"role": value["role"], "content": text[: VALUE_PREVIEW * 2] + ("…" if cut else ""), "tools": tools}


def side_by_side(old: str, new: str) -> tuple[list[SideRow], bool]:
    """Two columns of lines (removed left, added right), unchanged runs collapsed to CONTEXT lines."""
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
    return rows, clipped


def _equal_run(lines: list[str], i1: int, i2: int, j1: int, *, first: bool, last: bool) -> list[SideRow]:
    def same(i: int) -> SideRow:
        return SideRow(Cell(i + 1, [(lines[i], False)], "same"), Cell(j1 + i - i1 + 1, [(lines[i], False)], "same"))

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
        return [(old or "", True)], [(new or "", True)]
    a, b = _TOKEN.findall(old), _TOKEN.findall(new)
    left: list[tuple[str, bool]] = []
    right: list[tuple[str, bool]] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if i2 > i1:
            left.append(("".join(a[i1:i2]), tag != "equal"))
        if j2 > j1:
            right.append(("".join(b[j1:j2]), tag != "equal"))
    return left or [("", False)], right or [("", False)]


class NotComparable(Exception):
    """What to tell the operator instead of a comparison, and the status a page (not an htmx swap) gets."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


@console(VIEW)
@require_GET
def compare(request: HtmxHttpRequest) -> HttpResponse:
    form = CompareForm(request.GET)
    try:
        a, b = _pick(request, form)
    except NotComparable as exc:
        # htmx swaps the message in place of the previous comparison (it swaps 2xx answers only)
        context = {"form": form, "fields": _typed_fields(form), "error": str(exc)}
        response = render_page(request, "dashboard/compare.html", context, partial="compare-result")
        if not request.htmx:
            response.status_code = exc.status
        return response
    view = present_diff(diff_checkpoints(a, b))
    context = {
        "form": form,
        "fields": {
            "session": a.session_id,
            "a": f"#{a.seq}",
            "b": f"#{b.seq}" if b.session_id == a.session_id else f"id:{b.pk}",
        },
        "a": a,
        "b": b,
        "diff": view,
        "old_label": f"A · #{a.seq}",
        "new_label": f"B · #{b.seq}",
    }
    return render_page(request, "dashboard/compare.html", context, partial="compare-result")


def _typed_fields(form: CompareForm) -> dict[str, Any]:
    return {name: form.data.get(name, "") for name in ("session", "a", "b")}


def _pick(request: HtmxHttpRequest, form: CompareForm) -> tuple[Checkpoint, Checkpoint]:
    """The two checkpoints the request names (see CompareForm), or NotComparable saying what is wrong."""
    if not form.is_valid():
        errors = [error for name in ("a", "b") for error in form.errors.get(name, []) if name in form.data]
        raise NotComparable(" ".join(["Choose two checkpoints to compare: #12 or id:345.", *errors]), 400)
    refs = {name: form.cleaned_data[name] for name in ("a", "b")}
    found = {name: _by_id(request, ref) for name, ref in refs.items() if ref.by == "id"}
    session_id = form.cleaned_data.get("session") or next((c.session_id for c in found.values()), None)
    for name, ref in refs.items():
        if name not in found:
            if session_id is None:
                raise NotComparable(
                    f"{ref} is a checkpoint of which session? Compare from a session's timeline, or write id:345.", 400
                )
            found[name] = _by_seq(request, session_id, ref.number)
    return found["a"], found["b"]


def _by_id(request: HtmxHttpRequest, ref: CheckpointRef) -> Checkpoint:
    try:
        return get_checkpoint_for_user(request, ref.number)
    except Http404:
        raise NotComparable(f"No checkpoint {ref} that you can see.", 404) from None


def _by_seq(request: HtmxHttpRequest, session_id: int, seq: int) -> Checkpoint:
    session = AgentSession.objects.visible_to(request.user).filter(pk=session_id).values_list("external_id", flat=True)
    name = session.first()
    pk = Checkpoint.objects.filter(session_id=session_id, seq=seq).values_list("pk", flat=True).first()
    if name is None or pk is None:
        raise NotComparable(f"No checkpoint #{seq} in {name or 'that session'}.", 404)
    return _by_id(request, CheckpointRef("id", pk))
