"""A state's conversation as a transcript: its messages, newest last, a page at a time, with their tool calls.

The state is shared with every other reader in the process (`store.load_shared`): only read here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from checkpoints.store.previews import is_langchain_message, role_of

TRANSCRIPT_PAGE = 60  # messages per transcript page, newest last
MESSAGE_MAX = 20_000  # characters of one message shown


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
            if isinstance(message, dict) and role_of(message) == "tool" and message.get("tool_call_id"):
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
        if isinstance(value, list) and any(
            isinstance(m, dict) and ("role" in m or is_langchain_message(m)) for m in value[:20]
        ):
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
        role_of(message) or "?",
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
    arguments = call.get("arguments", call.get("args", function.get("arguments", record.get("arguments"))))
    result = next((source["result"] for source in (call, record) if source.get("result") is not None), None)
    if result is None and reply is not None:
        result = reply.get("content")
    error = call.get("error") or record.get("error")
    if not error and reply is not None and reply.get("status") == "error":  # a LangChain ToolMessage that failed
        error = reply.get("content")
    success = next((source["success"] for source in (call, record) if isinstance(source.get("success"), bool)), None)
    if success is None and error:
        success = False
    if success is None and reply is not None and reply.get("status") == "success":  # a LangChain ToolMessage's own
        success = True
    if error and result is not None and _text(result) == _text(error):
        result = None  # the tool's reply was the error itself: shown once, as the error
    return ToolCall(
        name=str(name),
        arguments=_pretty(arguments) if arguments is not None else "",
        result=_text(result)[:MESSAGE_MAX] if result is not None else None,
        success=success,
        error=_text(error)[:MESSAGE_MAX] if error else None,
    )
