"""What happened at a checkpoint, in one line, worked out when it is stored.

A timeline row cannot afford to read a state (a page shows a hundred), so ingest compares the new state with
its parent's (already in memory: the store patches against it) and keeps one line, one flag and one count on
the row: the tool calls and messages the checkpoint added, whether one of those calls failed, and how many
calls it added (a restore offer sums them over what it discards: an agent that keeps only its last messages
records no more calls in its state as it goes on, but each checkpoint still adds its own).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet

from .. import store
from ..humanize import short_value
from ..models import Checkpoint, CheckpointKind
from . import jsoncodec, tallies

PREVIEW_MAX = 120  # characters kept: a row shows one line of it (about 100 characters wide), its tooltip the rest
MESSAGE_KEYS = ("messages", "conversation_history", "history", "transcript")  # OpenAI / Ares / LangGraph, Kaizen
# LangChain messages (LangGraph's `messages` channel) name their role by `type`; the console says it as chat APIs do
LANGCHAIN_ROLES = {
    "human": "user", "ai": "assistant", "system": "system", "tool": "tool", "function": "function",
    "HumanMessageChunk": "user", "AIMessageChunk": "assistant", "SystemMessageChunk": "system",
    "ToolMessageChunk": "tool", "FunctionMessageChunk": "function",
}  # fmt: skip


@dataclass(frozen=True)
class Preview:
    text: str = ""
    tool_failed: bool = False
    tool_calls: int = 0  # the calls added: to the state's `tool_calls` log, else by the messages added


def tool_calls_of(state: Any) -> list[dict[str, Any]]:
    """The state's own log of tool calls (`tool_calls`); empty when it keeps none."""
    calls = state.get("tool_calls") if isinstance(state, dict) else None
    return [call for call in calls if isinstance(call, dict)] if isinstance(calls, list) else []


def role_of(message: dict[str, Any]) -> str:
    """Who wrote a message: its `role`, or a LangChain message's `type` said the same way; empty when neither."""
    role = message.get("role")
    if isinstance(role, str) and role:
        return role
    kind = message.get("type")
    return LANGCHAIN_ROLES.get(kind, "") if isinstance(kind, str) else ""


def is_langchain_message(value: Any) -> bool:
    return isinstance(value, dict) and "role" not in value and value.get("type") in LANGCHAIN_ROLES


def calls_of(state: Any) -> list[dict[str, Any]]:
    """The tool calls a state records: its own log (`tool_calls`), else those its messages carry (LangChain's
    `tool_calls` with `args`, OpenAI's with `function: {name, arguments}` as a JSON string), each as a log entry
    (`name`, `arguments`, `id`, and the `result` of the message answering it: `success` False and the
    `error` when that message has status "error")."""
    if isinstance(state, dict) and isinstance(state.get("tool_calls"), list):
        return tool_calls_of(state)
    messages = _messages(state)
    replies = {
        str(message["tool_call_id"]): message
        for message in messages
        if role_of(message) == "tool" and message.get("tool_call_id") is not None
    }
    calls = []
    for message in messages:
        listed = message.get("tool_calls") if role_of(message) == "assistant" else None
        for call in listed if isinstance(listed, list) else []:
            if not isinstance(call, dict):
                continue
            entry = {"id": call.get("id"), "name": call_name(call), "arguments": _call_arguments(call)}
            reply = replies.get(str(call.get("id")))
            if reply is not None and reply.get("status") == "error":
                entry.update(success=False, error=reply.get("content"))
            elif reply is not None:
                entry["result"] = reply.get("content")
            calls.append(entry)
    return calls


def tool_results_of(state: Any) -> dict[str, dict[str, Any]]:
    """Each tool result a state's messages keep (a LangChain ToolMessage, an OpenAI "tool" message) as a call
    record like `calls_of`'s (`name` and `arguments` from the message that made the call), keyed by the
    message's id (else its tool_call_id): what an agent that keeps messages remembers of its tool calls."""
    messages = _messages(state)
    made: dict[str, dict[str, Any]] = {}
    for message in messages:
        listed = message.get("tool_calls") if role_of(message) == "assistant" else None
        for call in listed if isinstance(listed, list) else []:
            if isinstance(call, dict) and call.get("id") is not None:
                made[str(call["id"])] = call
    results: dict[str, dict[str, Any]] = {}
    for position, message in enumerate(messages):
        if role_of(message) != "tool":
            continue
        call_id = message.get("tool_call_id")
        call = made.get(str(call_id), {}) if call_id is not None else {}
        entry = {
            "id": call_id,
            "name": call_name(call) or str(message.get("name") or ""),
            "arguments": _call_arguments(call) if call else None,
        }
        if message.get("status") == "error":
            entry.update(success=False, error=message.get("content"))
        else:
            entry.update(success=True, result=message.get("content"))
        key = message.get("id") or call_id
        results[str(key) if key is not None else f"#{position}"] = entry
    return results


def _call_arguments(call: dict[str, Any]) -> Any:
    """A message's call arguments: LangChain's `args`, OpenAI's JSON text under `function` read as JSON."""
    if "args" in call:
        return call["args"]
    function = call.get("function")
    arguments = function.get("arguments") if isinstance(function, dict) else call.get("arguments")
    if isinstance(arguments, str):
        try:
            return jsoncodec.loads(arguments)
        except ValueError:
            return arguments
    return arguments


@dataclass(frozen=True)
class Said:
    """One message as the loop detectors read it: who wrote it, its text, and whether it calls a tool."""

    role: str
    text: str
    calls: bool


def talk_of(state: Any, last: int) -> list[Said]:
    """The state's `last` messages in order, each reduced to what the loop detectors compare (no ids)."""
    said = []
    for message in _messages(state)[-last:]:
        listed = message.get("tool_calls")
        said.append(Said(role_of(message), _content(message.get("content")), isinstance(listed, list) and bool(listed)))
    return said


def call_name(call: dict[str, Any]) -> str:
    """The tool a call used, under whichever key its format names it; empty when it names none."""
    function = call.get("function")
    if isinstance(function, dict) and function.get("name"):  # OpenAI nests the call under "function"
        return str(function["name"])
    return str(call.get("tool_name") or call.get("name") or call.get("tool") or "")


def failed_call(call: dict[str, Any]) -> bool:
    if "success" in call:
        return call["success"] is False
    return bool(call.get("error"))


def preview_of(state: Any, previous: Any = None) -> Preview:
    """The newest tool call `state` added since `previous` (its parent's state) with its result, or else the
    newest message it added; nothing when it added neither (a routine checkpoint, a restore)."""
    calls = _dicts(_added(_listed(state, ("tool_calls",)), _listed(previous, ("tool_calls",))))
    messages = _dicts(_added(_listed(state, MESSAGE_KEYS), _listed(previous, MESSAGE_KEYS)))
    failed = any(failed_call(call) for call in calls)
    if calls:
        text = _call_line(calls[-1])
    else:
        text = next((line for line in map(_message_line, reversed(messages)) if line), "")
        failed = failed or any(_failed_tool_message(message) for message in messages)
    log = isinstance(state, dict) and isinstance(state.get("tool_calls"), list)
    count = len(calls) if log else sum(len(m["tool_calls"]) for m in messages if isinstance(m.get("tool_calls"), list))
    return Preview(short_value(text, PREVIEW_MAX), failed, count)


def _added(now: list[Any], before: list[Any]) -> list[Any]:
    """The items appended since `before`: those after its last item, looked for where an append puts it, then
    from the end (a sliding window drops items at the front as it appends: as many looks as items added, not
    a comparison of whole lists); only the newest when that item is gone (the list was rewritten)."""
    if not before:
        return now
    if len(now) >= len(before) and now[len(before) - 1] == before[-1]:
        return now[len(before) :]
    for index in range(len(now) - 1, -1, -1):
        if now[index] == before[-1]:
            return now[index + 1 :]
    return now[-1:]


def _listed(state: Any, keys: Sequence[str]) -> list[Any]:
    """The state's list under the first of `keys` it has, as stored (a put compares only the new end of it)."""
    if isinstance(state, dict):
        for key in keys:
            if isinstance(listed := state.get(key), list):
                return listed
    return []


def _dicts(items: list[Any]) -> list[dict[str, Any]]:
    return [item for item in items if isinstance(item, dict)]


def _messages(state: Any) -> list[dict[str, Any]]:
    return _dicts(_listed(state, MESSAGE_KEYS))


def _call_line(call: dict[str, Any]) -> str:
    name = call_name(call) or "tool"
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
    return role_of(message) == "tool" and message.get("status") == "error"


def _text(value: Any, limit: int = PREVIEW_MAX) -> str:
    return short_value(" ".join(_content(value).split()), limit)


def _content(value: Any) -> str:
    """A message's content as text: content parts (`[{"type": "text", "text": …}, …]`) joined."""
    if isinstance(value, list):
        value = " ".join(part.get("text", "") if isinstance(part, dict) else str(part) for part in value)
    return value if isinstance(value, str) else "" if value is None else str(value)


def fill_previews(checkpoints: QuerySet[Checkpoint] | None = None, *, batch_size: int = 500) -> int:
    """Work out the previews, tool failures and call counts of checkpoints stored before they were kept
    (`manage.py fill_previews`); returns how many rows were filled. Session by session in seq order, so each
    parent's state is still in the store's memory and its count known when its child is read; restores and
    forks add nothing and are not read. Written back `batch_size` rows at a time.
    The sessions where a failed tool call turns up are recounted: their tallies count such checkpoints."""
    rows = (
        (checkpoints if checkpoints is not None else Checkpoint.objects.all())
        .filter(calls_made__isnull=True)
        .order_by("session_id", "seq")
        .values_list("pk", "session_id", "kind", "root", "parent_id", "parent__root", "parent__calls_made")
    )
    fields = ["preview", "tool_failed", "calls_made"]
    made: dict[int, int] = {}  # pk → calls made, of this session's rows filled so far
    changed: list[Checkpoint] = []
    count, session = 0, None
    failing: set[int] = set()  # sessions with a newly marked failed tool call
    for pk, session_id, kind, root, parent_id, parent_root, parent_calls in rows.iterator(chunk_size=batch_size):
        if session_id != session:
            made, session = {}, session_id
        before = made.get(parent_id, parent_calls) if parent_id else 0
        if before is None:
            continue  # its parent could not be counted either
        preview = Preview()
        if kind not in (CheckpointKind.RESTORE, CheckpointKind.FORK):
            try:
                previous = store.load_shared(parent_root) if parent_root is not None else None
                preview = preview_of(store.load_shared(root), previous)
            except store.StateNotFound:
                continue  # nothing to read it from; the row keeps its name alone
        made[pk] = before + preview.tool_calls
        changed.append(Checkpoint(pk=pk, preview=preview.text, tool_failed=preview.tool_failed, calls_made=made[pk]))
        if preview.tool_failed:
            failing.add(session_id)
        if len(changed) >= batch_size:
            count += Checkpoint.objects.bulk_update(changed, fields)
            changed.clear()
    count += Checkpoint.objects.bulk_update(changed, fields) if changed else 0
    tallies.recount(sorted(failing))
    return count
