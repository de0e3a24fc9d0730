"""The published loop rules as drift detectors: OpenHands' stuck detector and Gemini CLI's loop detection.

OpenHands (`openhands/controller/stuck.py`, on by default there) calls an agent stuck when its last 4 actions
and their 4 observations are the same; when its last 3 actions are the same and each ended in an error; when
it says the same thing 3 times with no observation in between (a monologue); when its last 6 actions and
observations alternate between two pairs (ping-pong); and when context-window errors repeat with nothing in
between. Gemini CLI (`loopDetectionService.ts`) calls it a loop when the same tool call (name and arguments)
comes 5 times in a row, and when a 50-character chunk of the model's text comes back 10 times close together
outside code blocks, tables and lists. Each rule here keeps that meaning on a checkpointed session: it looks at
the end of the head's state (the agent is in the pattern now; the alert resolves once it moves on), with the
thresholds as settings (`Limits`).

Actions compare by tool name and canonical arguments, observations by outcome and result text: tool-call
and message ids never take part. The head's state is read once for all of them (`Recent.head_calls`); the
checkpoints an alert names come from the rows (a call's `step`, the `calls_made` counter, the one-line
`preview`), not from reading older states. Context-window errors are read from the rows alone.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from ..humanize import short_value
from ..models import AlertKind, AlertSeverity
from ..store import jsoncodec
from ..store.previews import call_name, failed_call
from .findings import BAD, COPIES, Finding, Limits, Recent, SeenCheckpoint, action_of, good_ancestor

SHOWN = 160  # characters of a repeated call or text an alert shows
EVIDENCE_ROWS = 10  # checkpoints an alert names, the newest
CONTENT_HISTORY = 5000  # characters of one run of text the content rule reads, the newest (as Gemini CLI)
CONTEXT_ERROR = re.compile(
    r"context[ _-]?(window|length)|maximum context|prompt is too long|input is too long|too many tokens"
    r"|token limit|reduce the length of the messages",
    re.IGNORECASE,
)
FAILURE = re.compile(r"\b(failed|error|exception)\b", re.IGNORECASE)
INPUT_ROLES = {"user", "tool", "function"}  # what answers an agent: its user, or a tool's result
FENCE = re.compile(r"^\s*(```|~~~)")
# Lines Gemini CLI does not read for repeated text: tables, list items, headings, quotes and dividers
STRUCTURE = re.compile(r"^\s*(\|.*\||[|+-]{3,}|[*+-]\s|\d+\.\s|#+\s|>\s)|^[-+_=*\u2500-\u257f]+$")


# ---- what the rules compare ----------------------------------------------------------------------


def _observation(call: dict[str, Any]) -> bytes:
    """What a call got back, without ids: whether it failed, and its result or error."""
    failed = failed_call(call)
    result = call.get("error") if failed else call.get("result", call.get("output"))
    return jsoncodec.canonical([failed, result])


def _shown(call: dict[str, Any]) -> str:
    arguments = call.get("arguments")
    text = f"{call_name(call) or 'tool'}({_arguments(arguments)})"
    outcome = call.get("error") if failed_call(call) else call.get("result", call.get("output"))
    if outcome not in (None, ""):
        text += f" {'failed: ' if failed_call(call) else '→ '}{outcome}"
    return short_value(" ".join(text.split()), SHOWN)


def _arguments(arguments: Any) -> str:
    if isinstance(arguments, dict):
        return ", ".join(f"{key}={value}" for key, value in arguments.items())
    return "" if arguments in (None, "") else str(arguments)


def _run(items: list[Any], same: Any) -> int:
    """How many items at the end of `items` equal the last one under `same`."""
    count = 0
    for item in reversed(items):
        if count and not same(item, items[-1]):
            break
        count += 1
    return count


# ---- the checkpoints behind a finding -------------------------------------------------------------


def _rows_of_calls(recent: Recent, indexes: list[int]) -> list[SeenCheckpoint]:
    """The checkpoints that added the head's calls at `indexes`: by the step a call records, else by the count
    of calls made on the head's path (`calls_made`); the head when neither tells."""
    branch, calls = recent.branch(), recent.head_calls()
    head = branch[-1]
    found: list[SeenCheckpoint] = []
    for index in indexes:
        step, row = calls[index].get("step"), None
        if isinstance(step, int) and not isinstance(step, bool):
            row = next((r for r in branch if r.step is not None and r.step >= step), None)
        elif head.calls_made is not None:
            made = head.calls_made - (len(calls) - 1 - index)
            row = next((r for r in branch if r.calls_made is not None and r.calls_made >= made), None)
        found.append(row or head)
    return _unique(found)


def _rows_saying(recent: Recent, text: str, count: int) -> list[SeenCheckpoint]:
    """The newest checkpoints whose one-line preview shows `text` (its start), at most `count`; the head when none."""
    snippet = " ".join(text.split())[:60]
    found = [row for row in reversed(recent.branch()) if snippet and snippet in row.preview][:count]
    head = recent.head
    return found[::-1] if found else [head] if head else []


def _unique(rows: list[SeenCheckpoint]) -> list[SeenCheckpoint]:
    return list({row.pk: row for row in rows}.values())


def _finding(recent: Recent, kind: str, message: str, rows: list[SeenCheckpoint], **evidence: Any) -> list[Finding]:
    """A warning naming `rows` (the newest EVIDENCE_ROWS), its last good the newest healthy checkpoint before
    the first of them."""
    rows = sorted(rows, key=lambda row: row.seq)
    shown = [{"id": row.pk, "seq": row.seq} for row in rows[-EVIDENCE_ROWS:]]
    last_good = good_ancestor(recent, rows[0]) if rows else None
    return [Finding(kind, AlertSeverity.WARNING, message, {**evidence, "checkpoints": shown}, recent.head, last_good)]


# ---- OpenHands' stuck detector ---------------------------------------------------------------------


def detect_repeated_action(recent: Recent, now: datetime, limits: Limits) -> list[Finding]:
    calls = recent.head_calls()
    if len(calls) < limits.repeated_action:
        return []
    count = _run(calls, lambda a, b: action_of(a) == action_of(b) and _observation(a) == _observation(b))
    if count < limits.repeated_action:
        return []
    shown = _shown(calls[-1])
    message = (
        f"The same tool call got the same result {count} times in a row ({limits.repeated_action} or more "
        f"means stuck): {shown}"
    )
    rows = _rows_of_calls(recent, list(range(len(calls) - count, len(calls))))
    return _finding(recent, AlertKind.REPEATED_ACTION, message, rows, action=shown, count=count)


def detect_repeated_error(recent: Recent, now: datetime, limits: Limits) -> list[Finding]:
    calls = recent.head_calls()
    if len(calls) < limits.repeated_error or not failed_call(calls[-1]):
        return []
    count = _run(calls, lambda a, b: action_of(a) == action_of(b) and failed_call(a))
    if count < limits.repeated_error:
        return []
    shown = _shown(calls[-1])
    message = f"The same tool call failed {count} times in a row ({limits.repeated_error} or more means stuck): {shown}"
    rows = _rows_of_calls(recent, list(range(len(calls) - count, len(calls))))
    return _finding(recent, AlertKind.REPEATED_ERROR, message, rows, action=shown, count=count)


def detect_monologue(recent: Recent, now: datetime, limits: Limits) -> list[Finding]:
    """The agent's messages since its last input (from its user or a tool), when the newest are the same text."""
    said: list[str] = []
    for message in reversed(recent.head_talk(limits.window)):
        if message.role in INPUT_ROLES or (message.role == "assistant" and message.calls):
            break
        if message.role == "assistant" and message.text.strip():
            said.append(" ".join(message.text.split()))
    count = _run(said[::-1], lambda a, b: a == b) if said else 0
    if count < limits.monologue:
        return []
    text = short_value(said[0], SHOWN)
    explained = (
        f"The agent said the same thing {count} times with no user or tool input in between "
        f"({limits.monologue} or more means stuck): “{text}”"
    )
    return _finding(
        recent, AlertKind.MONOLOGUE, explained, _rows_saying(recent, said[0], count), text=text, count=count
    )


def detect_ping_pong(recent: Recent, now: datetime, limits: Limits) -> list[Finding]:
    calls = recent.head_calls()
    if len(calls) < limits.ping_pong or action_of(calls[-1]) == action_of(calls[-2]):
        return []
    keys: dict[int, tuple[Any, bytes]] = {}  # from the end: a long log is read only as far as the pattern goes

    def key(back: int) -> tuple[Any, bytes]:
        if back not in keys:
            keys[back] = (action_of(calls[-back]), _observation(calls[-back]))
        return keys[back]

    count = 2
    while count < len(calls) and key(count + 1) == key(count - 1):
        count += 1
    if count < limits.ping_pong:
        return []
    shown = f"{_shown(calls[-2])} ⇄ {_shown(calls[-1])}"
    message = (
        f"The agent alternated between the same two tool calls and results {count} times "
        f"({limits.ping_pong} or more means stuck): {shown}"
    )
    rows = _rows_of_calls(recent, list(range(len(calls) - count, len(calls))))
    return _finding(recent, AlertKind.PING_PONG, message, rows, action=shown, count=count)


def _context_error(row: SeenCheckpoint) -> str:
    """The text that shows `row` hit the context window (its status reason, or its preview when that reports a
    failure: a healthy call may well read about context windows), or ""."""
    reported = [row.status_reason, row.preview if FAILURE.search(row.preview) else ""]
    return next((text for text in reported if text and CONTEXT_ERROR.search(text)), "")


def detect_context_overflow(recent: Recent, now: datetime, limits: Limits) -> list[Finding]:
    """Context-window errors on the head's path since its last successful tool call: trimming is not helping."""
    errors: list[SeenCheckpoint] = []
    for row in reversed(recent.branch()):
        if row.kind in COPIES:
            continue
        if _context_error(row):
            errors.append(row)
        elif row.status not in BAD and "→" in row.preview:  # a tool call that returned a result
            break
    if len(errors) < limits.context_errors:
        return []
    text = short_value(_context_error(errors[0]), SHOWN)
    message = (
        f"{len(errors)} context-window errors with no successful tool call in between "
        f"({limits.context_errors} or more means stuck): {text}"
    )
    return _finding(recent, AlertKind.CONTEXT_OVERFLOW, message, errors, text=text, count=len(errors))


# ---- Gemini CLI's loop detection -------------------------------------------------------------------


def detect_tool_call_loop(recent: Recent, now: datetime, limits: Limits) -> list[Finding]:
    """The same tool and arguments in a row: calls over different files (other arguments) are work, not a loop."""
    calls = recent.head_calls()
    if len(calls) < limits.tool_call_loop:
        return []
    count = _run(calls, lambda a, b: action_of(a) == action_of(b))
    if count < limits.tool_call_loop:
        return []
    call = calls[-1]
    shown = short_value(f"{call_name(call) or 'tool'}({_arguments(call.get('arguments'))})", SHOWN)
    message = f"The same tool call came {count} times in a row ({limits.tool_call_loop} or more is a loop): {shown}"
    rows = _rows_of_calls(recent, list(range(len(calls) - count, len(calls))))
    return _finding(recent, AlertKind.TOOL_CALL_LOOP, message, rows, action=shown, count=count)


def _prose_runs(text: str) -> list[str]:
    """The runs of plain text lines in `text`: code blocks are skipped, and tables, lists, headings, quotes and
    dividers end a run (their lines repeat by design)."""
    runs: list[str] = []
    lines: list[str] = []
    in_code = False
    for line in text.split("\n"):
        fence = bool(FENCE.match(line))
        if fence or in_code or STRUCTURE.match(line):
            in_code ^= fence
            if lines:
                runs.append("\n".join(lines))
            lines = []
            continue
        lines.append(line)
    if lines:
        runs.append("\n".join(lines))
    return runs


def repeated_chunk(text: str, size: int, limit: int) -> tuple[str, int] | None:
    """Gemini CLI's content rule over one run of text: a `size`-character chunk seen `limit` times whose last
    `limit` occurrences lie close together (on average within 5 chunks) and repeat a few periods only (at most
    `limit` // 2 different texts between them: a list of items sharing a prefix is no loop). The chunk and how
    often it came, or None."""
    text = text[-CONTENT_HISTORY:]
    seen: dict[str, list[int]] = {}
    for start in range(len(text) - size + 1):
        chunk = text[start : start + size]
        where = seen.setdefault(chunk, [])
        where.append(start)
        if len(where) < limit:
            continue
        recent = where[-limit:]
        if (recent[-1] - recent[0]) / (limit - 1) > 5 * size:
            continue
        periods = {text[a:b] for a, b in zip(recent, recent[1:], strict=False)}
        if len(periods) <= limit // 2:
            return chunk, len(where)
    return None


def detect_content_loop(recent: Recent, now: datetime, limits: Limits) -> list[Finding]:
    """The agent's text since its last input or tool call, in runs (as Gemini CLI reads one response), over the
    messages of the last window; the newest run that loops."""
    streams: list[tuple[str, str]] = []  # (text of one stream, its first message)
    current: list[str] = []
    for message in recent.head_talk(limits.window):
        if message.role == "assistant" and message.text.strip():
            current.append(message.text)
        if (message.role in INPUT_ROLES or message.calls) and current:
            streams.append(("\n".join(current), current[0]))
            current = []
    if current:
        streams.append(("\n".join(current), current[0]))
    for stream, first in reversed(streams):
        for run in _prose_runs(stream):
            found = repeated_chunk(run, limits.content_chunk, limits.content_loop)
            if found is None:
                continue
            chunk, count = found
            text = " ".join(chunk.split())
            explained = (
                f"The same {limits.content_chunk}-character passage of the agent's text came back {count} times "
                f"({limits.content_loop} or more is a loop): “{text}”"
            )
            rows = _rows_saying(recent, first, 1)
            return _finding(recent, AlertKind.CONTENT_LOOP, explained, rows, text=text, count=count)
    return []
