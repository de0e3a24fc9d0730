"""A checkpoint: metadata, the conversation as a transcript, the state as a lazily loaded tree, JSON download.

The state comes from `store.load_shared`: one object shared with every other reader in the process,
so everything here only reads it (no sorting in place, no `setdefault`, no `pop`).
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from django.http import HttpResponse, HttpResponseBadRequest
from django.shortcuts import render
from django.utils.http import content_disposition_header
from django.utils.text import get_valid_filename
from django.views.decorators.http import require_GET

from checkpoints import store
from checkpoints.models import AgentSession, Checkpoint, CheckpointKind, Phase
from checkpoints.store import diff_checkpoints
from checkpoints.store.diff import format_path

from ..presenters.diff import present_diff
from .common import HtmxHttpRequest, console, get_checkpoint_for_user, parse_int, render_page

CHILD_CAP = 50  # entries one expansion shows; "show more" loads the next ones
INLINE_NODES = 250  # nodes rendered with the page before subtrees load on demand
INLINE_DEPTH = 3
OPEN_SMALL = 8  # first-level objects and lists this small start open
PREVIEW_CHARS = 160  # longer strings show a preview, and the whole text on demand
INLINE_TEXT = 2_000  # strings up to this long come with the page; longer ones load when opened
FULL_TEXT_MAX = 200_000  # beyond this, the download has the rest
MAX_PATH = 64
TRANSCRIPT_PAGE = 60  # messages per transcript page, newest last
MESSAGE_MAX = 20_000  # characters of one message shown
CHANGES_ROWS = 12  # rows of "what changed here"; Compare has the rest


@console()
@require_GET
def checkpoint_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    checkpoint = get_checkpoint_for_user(request, pk)
    state = store.load_shared(bytes(checkpoint.root))
    before = parse_int(request.GET.get("before"))
    if request.htmx and before is not None:
        context: dict[str, Any] = {"checkpoint": checkpoint, "transcript": Transcript.of(state, before=before)}
        return render(request, "dashboard/checkpoint_detail.html#earlier", context)
    context = {
        "checkpoint": checkpoint,
        "session": checkpoint.session,
        "tree": state_tree(state),
        "transcript": Transcript.of(state, before=before),
        **related(checkpoint, request.user),
        **changed_here(checkpoint),
    }
    return render_page(request, "dashboard/checkpoint_detail.html", context, "checkpoint")


@console()
@require_GET
def checkpoint_subtree(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    checkpoint = get_checkpoint_for_user(request, pk)
    state = store.load_shared(bytes(checkpoint.root))
    try:
        path = parse_path(request.GET.get("path", "[]"))
        value = resolve(state, path)
        offset = parse_int(request.GET.get("offset", "0"))
        if offset is None:
            raise BadPath("offset must be a whole number")
    except BadPath as exc:
        return HttpResponseBadRequest(f"Bad path: {exc}", content_type="text/plain; charset=utf-8")
    node = subtree(value, path, offset)
    context = {"checkpoint": checkpoint, "session": checkpoint.session, "node": node, "path_label": format_path(path)}
    return render_page(request, "dashboard/state_subtree.html", context, "items")


@console()
@require_GET
def checkpoint_download(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    checkpoint = get_checkpoint_for_user(request, pk)
    response = HttpResponse(store.load_state_json(bytes(checkpoint.root)), content_type="application/json")
    name = get_valid_filename(f"{checkpoint.session.external_id}-{checkpoint.seq}.json")
    response["Content-Disposition"] = content_disposition_header(True, name)
    return response


def related(checkpoint: Checkpoint, user: Any) -> dict[str, Any]:
    """Neighbours by seq, children (next on the branch, restores back to here), forks and the phase."""
    session = checkpoint.session
    siblings = Checkpoint.objects.for_session(session).for_timeline()
    previous = siblings.filter(seq__lt=checkpoint.seq).order_by("-seq").first()
    following = siblings.filter(seq__gt=checkpoint.seq).order_by("seq").first()
    children = list(siblings.filter(parent=checkpoint).order_by("seq")[:20])
    forks = list(AgentSession.objects.visible_to(user).filter(forked_from=checkpoint).order_by("pk")[:20])
    phase = (
        Phase.objects.filter(session=session, number=checkpoint.phase).first() if checkpoint.phase is not None else None
    )
    # "Compare with previous": the parent, except for a restore, where the interesting change is from the head it replaced
    compare_from = previous.pk if checkpoint.kind == CheckpointKind.RESTORE and previous else checkpoint.parent_id
    return {
        "previous": previous,
        "following": following,
        "children": children,
        "forks": forks,
        "phase": phase,
        "compare_from": compare_from,
        "metadata_json": json.dumps(checkpoint.metadata, indent=2, ensure_ascii=False, default=str)
        if checkpoint.metadata
        else "",
    }


def changed_here(checkpoint: Checkpoint) -> dict[str, Any]:
    """ "What changed here": the diff from the checkpoint this one continues (for a restore, from the head it
    replaced: its parent has the same state), or why there is none (`changed_why`: root or fork)."""
    session = checkpoint.session
    before = checkpoint.parent
    if checkpoint.kind == CheckpointKind.RESTORE and isinstance(checkpoint.metadata.get("previous_head"), int):
        before = Checkpoint.objects.filter(session=session, pk=checkpoint.metadata["previous_head"]).first() or before
    if before is None:
        return {
            "changed_from": None,
            "changed_why": "fork" if checkpoint.seq == 1 and session.forked_from_id else "root",
        }
    query = {"a": before.pk, "b": checkpoint.pk, "base": "a"}
    changes = present_diff(
        diff_checkpoints(before, checkpoint), query=query, rows=CHANGES_ROWS, old_pk=before.pk, new_pk=checkpoint.pk
    )
    return {
        "changed_from": before,
        "changes": changes,
        "old_label": f"#{before.seq}",
        "new_label": f"#{checkpoint.seq}",
    }


# ---- the state tree ------------------------------------------------------------------------------


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


def resolve(state: Any, path: list[str | int]) -> Any:
    value = state
    for depth, part in enumerate(path):
        where = format_path(path[:depth])
        if isinstance(value, dict):
            if not isinstance(part, str) or part not in value:
                raise BadPath(f"no key {json.dumps(part)} in {where}")
            value = value[part]
        elif isinstance(value, list):
            if not isinstance(part, int) or not 0 <= part < len(value):
                raise BadPath(f"no index {json.dumps(part)} in {where} ({len(value)} items)")
            value = value[part]
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
    def path_json(self) -> str:
        return json.dumps(self.path, ensure_ascii=False, separators=(",", ":"))


PREVIEW_KEYS = ("role", "name", "tool_name", "title", "type", "status", "id", "success", "content", "text")


def _preview(value: dict[str, Any]) -> str:
    """A few scalar fields of an object, the telling ones first: `role: assistant · content: The profile…`."""
    keys = [key for key in PREVIEW_KEYS if key in value]
    keys += [key for key in islice(value, 12) if key not in keys]
    parts = []
    for key in keys:
        item = value[key]
        if isinstance(item, dict | list):
            continue
        text = json.dumps(item) if isinstance(item, bool) or item is None else str(item)
        parts.append(f"{key}: {text if len(text) <= 48 else text[:47] + '…'}")
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
        yield make_node(key, [*path, key], child), child


def _expand(node: Node, value: Any, offset: int = 0) -> list[tuple[Node, Any]]:
    entries = list(_entries(value, node.path, offset))
    node.children = [child for child, _ in entries]
    node.more = offset + CHILD_CAP if offset + CHILD_CAP < node.length else None
    return entries


def state_tree(state: Any) -> Node:
    """The root and, breadth first, as many levels as INLINE_NODES allows; deeper subtrees load on demand."""
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


# ---- the transcript ------------------------------------------------------------------------------


@dataclass
class ToolCall:
    name: str
    arguments: str
    result: str | None = None
    success: bool | None = None
    error: str | None = None


@dataclass
class Message:
    index: int
    role: str
    text: str
    truncated: int = 0  # characters left out
    name: str = ""
    calls: list[ToolCall] = field(default_factory=list)


@dataclass
class Transcript:
    key: str  # where the messages are in the state
    total: int
    start: int  # index of the first message shown
    messages: list[Message]
    records: list[ToolCall]  # tool calls kept beside the messages, when no message carries them
    end: int  # index after the last message shown

    @property
    def earlier(self) -> int:
        """How many messages the "show earlier" link loads."""
        return min(TRANSCRIPT_PAGE, self.start)

    @classmethod
    def of(cls, state: Any, *, before: int | None = None) -> Transcript | None:
        found = _find_messages(state)
        if found is None:
            return None
        key, messages = found
        end = min(before, len(messages)) if before is not None else len(messages)
        start = max(0, end - TRANSCRIPT_PAGE)
        records = _records(state)
        results: dict[str, Any] = {}
        for message in messages:
            if isinstance(message, dict) and message.get("role") == "tool" and message.get("tool_call_id"):
                results[str(message["tool_call_id"])] = message
        shown = []
        for index in range(start, end):
            message = messages[index]
            if not isinstance(message, dict):
                shown.append(Message(index, "?", _text(message)))
                continue
            calls = []
            for call in message.get("tool_calls") or []:
                if isinstance(call, dict):
                    calls.append(_tool_call(call, records, results))
            shown.append(_message(index, message, calls))
        all_called = {
            str(call.get("id"))
            for message in messages
            if isinstance(message, dict) and isinstance(message.get("tool_calls"), list)
            for call in message["tool_calls"]
            if isinstance(call, dict) and call.get("id")
        }
        shown = [m for m in shown if not (m.role == "tool" and _result_id(messages[m.index]) in all_called)]
        loose = []
        if not all_called and isinstance(state, dict) and isinstance(state.get("tool_calls"), list):
            loose = [_tool_call(r, {}, {}) for r in state["tool_calls"][-TRANSCRIPT_PAGE:] if isinstance(r, dict)]
        return cls(key, len(messages), start, shown, loose, end)


def _find_messages(state: Any) -> tuple[str, list[Any]] | None:
    if not isinstance(state, dict):
        return None
    for key in ("messages", "conversation_history", "conversation", "history"):
        value = state.get(key)
        if isinstance(value, list) and any(isinstance(m, dict) and "role" in m for m in value[:20]):
            return key, value
    return None


def _records(state: Any) -> dict[str, dict[str, Any]]:
    """The state's own log of tool calls (with success and result), by call id."""
    log = state.get("tool_calls") if isinstance(state, dict) else None
    if not isinstance(log, list):
        return {}
    return {str(r["id"]): r for r in log if isinstance(r, dict) and r.get("id") is not None}


def _result_id(message: Any) -> str | None:
    return str(message.get("tool_call_id")) if isinstance(message, dict) and message.get("tool_call_id") else None


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # content blocks: text blocks as text, anything else as JSON
        return "\n\n".join(
            block["text"] if isinstance(block, dict) and isinstance(block.get("text"), str) else _text(block)
            for block in value
        )
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def _pretty(value: Any) -> str:
    """Arguments as JSON: on one line when short, indented when not."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return value
    if isinstance(value, str):
        return value
    short = json.dumps(value, ensure_ascii=False, default=str)
    return short if len(short) <= 100 else json.dumps(value, indent=2, ensure_ascii=False, default=str)


def _message(index: int, message: dict[str, Any], calls: list[ToolCall]) -> Message:
    text = _text(message.get("content"))
    truncated = max(0, len(text) - MESSAGE_MAX)
    return Message(
        index,
        str(message.get("role") or "?"),
        text[:MESSAGE_MAX],
        truncated,
        name=str(message.get("name") or ""),
        calls=calls,
    )


def _tool_call(call: dict[str, Any], records: dict[str, dict[str, Any]], results: dict[str, Any]) -> ToolCall:
    function = named if isinstance(named := call.get("function"), dict) else {}
    record = records.get(str(call.get("id")), {})
    reply = results.get(str(call.get("id")))
    name = call.get("tool_name") or call.get("name") or function.get("name") or record.get("tool_name") or "tool"
    arguments = call.get("arguments", function.get("arguments", record.get("arguments")))
    result = next((source["result"] for source in (call, record) if source.get("result") is not None), None)
    if result is None and reply is not None:
        result = reply.get("content")
    error = call.get("error") or record.get("error")
    success = next((source["success"] for source in (call, record) if isinstance(source.get("success"), bool)), None)
    if success is None and error:
        success = False
    if error and result is not None and _text(result) == _text(error):
        result = None  # the tool's reply was the error itself: shown once, as the error
    return ToolCall(
        name=str(name),
        arguments=_pretty(arguments) if arguments is not None else "",
        result=_text(result)[:MESSAGE_MAX] if result is not None else None,
        success=success,
        error=_text(error)[:MESSAGE_MAX] if error else None,
    )
