"""What happened at a checkpoint, in one line, worked out when it is stored.

A timeline row cannot afford to read a state (a page shows a hundred), so ingest compares the new state with
its parent's (already in memory: the store patches against it) and keeps one line and one flag on the row:
the tool calls and messages the checkpoint added, and whether one of those calls failed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet

from . import store, tallies
from .models import Checkpoint, CheckpointKind

PREVIEW_MAX = 200  # characters kept: a row shows one line of it
MESSAGE_KEYS = ("messages", "conversation_history")  # OpenAI / Ares / LangGraph, Kaizen


@dataclass(frozen=True)
class Preview:
    text: str = ""
    tool_failed: bool = False


def tool_calls_of(state: Any) -> list[dict[str, Any]]:
    calls = state.get("tool_calls") if isinstance(state, dict) else None
    return [call for call in calls if isinstance(call, dict)] if isinstance(calls, list) else []


def failed_call(call: dict[str, Any]) -> bool:
    if "success" in call:
        return call["success"] is False
    return bool(call.get("error"))


def preview_of(state: Any, previous: Any = None) -> Preview:
    """The newest tool call `state` added since `previous` (its parent's state) with its result, or else the
    newest message it added; nothing when it added neither (a routine checkpoint, a restore)."""
    calls = _added(tool_calls_of(state), tool_calls_of(previous))
    messages = _added(_messages(state), _messages(previous))
    failed = any(failed_call(call) for call in calls)
    if calls:
        text = _call_line(calls[-1])
    else:
        text = next((line for line in map(_message_line, reversed(messages)) if line), "")
        failed = failed or any(_failed_tool_message(message) for message in messages)
    return Preview(_clip(text), failed)


def _added(now: list[Any], before: list[Any]) -> list[Any]:
    """The items appended since `before`; only the newest when the list was rewritten rather than appended to
    (told by the item before the new ones: comparing whole lists on every ingest would cost O(state))."""
    if len(now) >= len(before) and (not before or now[len(before) - 1] == before[-1]):
        return now[len(before) :]
    return now[-1:]


def _messages(state: Any) -> list[dict[str, Any]]:
    if not isinstance(state, dict):
        return []
    for key in MESSAGE_KEYS:
        if isinstance(state.get(key), list):
            return [message for message in state[key] if isinstance(message, dict)]
    return []


def _call_line(call: dict[str, Any]) -> str:
    name = call.get("tool_name") or call.get("name") or call.get("tool") or "tool"
    head = f"{name}({_arguments(call.get('arguments') or call.get('args'))})"
    if failed_call(call):
        why = _text(call.get("error") or call.get("result"))
        return f"{head} failed: {why}" if why else f"{head} failed"
    result = call.get("result", call.get("output"))
    return f"{head} → {_text(result)}" if result not in (None, "") else head


def _arguments(arguments: Any) -> str:
    if isinstance(arguments, dict):
        return ", ".join(f"{key}={_text(value, 40)}" for key, value in arguments.items())
    return _text(arguments, 60) if arguments not in (None, "") else ""


def _message_line(message: dict[str, Any]) -> str:
    role = message.get("role") or message.get("type") or "message"
    calls = message.get("tool_calls")
    if isinstance(calls, list) and calls and isinstance(calls[-1], dict):
        call = calls[-1].get("function", calls[-1])  # OpenAI nests the call under "function"
        return f"{role}: calls {_call_line(call) if isinstance(call, dict) else _text(call)}"
    content = _text(message.get("content"))
    if role == "tool" and message.get("name"):
        return f"{message['name']} → {content}"
    return f"{role}: {content}" if content else ""


def _failed_tool_message(message: dict[str, Any]) -> bool:
    return (message.get("role") == "tool" or message.get("type") == "tool") and message.get("status") == "error"


def _text(value: Any, limit: int = PREVIEW_MAX) -> str:
    if isinstance(value, list):  # content parts: [{"type": "text", "text": …}, …]
        value = " ".join(part.get("text", "") if isinstance(part, dict) else str(part) for part in value)
    text = value if isinstance(value, str) else "" if value is None else str(value)
    return _clip(" ".join(text.split()), limit)


def _clip(text: str, limit: int = PREVIEW_MAX) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def fill_previews(checkpoints: QuerySet[Checkpoint] | None = None, *, batch_size: int = 500) -> int:
    """Work out the previews of checkpoints stored before previews existed (`manage.py fill_previews`);
    returns how many changed. Session by session in seq order, so each parent's state is still in the
    store's memory when its child is read; restores and forks are skipped (they add nothing). The sessions
    where a failed tool call turns up are recounted: their tallies count such checkpoints."""
    rows = (
        (checkpoints if checkpoints is not None else Checkpoint.objects.all())
        .filter(preview="", tool_failed=False)
        .exclude(kind__in=[CheckpointKind.RESTORE, CheckpointKind.FORK])
        .order_by("session_id", "seq")
        .values_list("pk", "session_id", "root", "parent__root")
    )
    changed: list[Checkpoint] = []
    count = 0
    failing: set[int] = set()  # sessions with a newly marked failed tool call
    for pk, session_id, root, parent_root in rows.iterator(chunk_size=batch_size):
        try:
            previous = store.load_shared(parent_root) if parent_root is not None else None
            preview = preview_of(store.load_shared(root), previous)
        except store.StateNotFound:
            continue  # nothing to read it from; the row keeps its name alone
        if preview != Preview():
            changed.append(Checkpoint(pk=pk, preview=preview.text, tool_failed=preview.tool_failed))
        if preview.tool_failed:
            failing.add(session_id)
        if len(changed) >= batch_size:
            count += Checkpoint.objects.bulk_update(changed, ["preview", "tool_failed"])
            changed.clear()
    count += Checkpoint.objects.bulk_update(changed, ["preview", "tool_failed"]) if changed else 0
    tallies.recount(sorted(failing))
    return count
