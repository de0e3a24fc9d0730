"""Ares-style step checkpoints: `<session>_<step>.json`, plus `<session>_latest.json` naming the latest file.

    {"id": "sess-a-3", "agent_name": "ares-coder", "session_id": "sess-a", "step": 3,
     "messages": […], "tool_calls": [{"tool_name", "arguments", "result", "success"}, …],
     "partial_results": […], "timestamp": 1767225780, "status": "InProgress"}

Mapping: session = session_id (else the file name's prefix), agent = agent_name; kind "step", step = step,
name "step <n>"; status "InProgress" → in_progress, "Completed" → completed, {"Failed": m} → failed and
{"Halted": m} → halted with status_reason m (an unknown status: completed, the raw value kept in
metadata["ares_status"]); state = {messages, tool_calls, partial_results}; created_at = the epoch timestamp;
the key is the checkpoint's id (else the file name). metadata keeps id, agent_name, the file name (`file`)
and any other key (`source_extra`). The file `_latest.json` names becomes the session's head (a pointer
to a missing file is reported); the session takes the status of its last step: active, completed,
failed or halted.

Write-back of a restore: a new `<session>_<next step>.json` (status InProgress) holding the restored
state, then `<session>_latest.json` pointed at it (the one file replaced: temporary file + os.replace).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.utils import timezone

from ... import store
from ...models import Checkpoint, CheckpointKind, CheckpointStatus, SessionStatus
from ...store import jsoncodec
from . import _jsonfiles as files
from .base import CheckpointRecord, Problem, Record, SessionRecord, parse_time, write_atomically

NAME = "ares"
STEP_FILE = re.compile(r"^(?P<session>.+)_(?P<step>\d+)\.json$")
LATEST_FILE = re.compile(r"^(?P<session>.+)_latest\.json$")
NATIVE = ("id", "agent_name", "session_id", "step", "messages", "tool_calls", "partial_results", "timestamp", "status")
STATE_KEYS = ("messages", "tool_calls", "partial_results")
OWN_METADATA = ("id", "agent_name", "file", "ares_status", "source_extra")
POINTER_KEYS = ("latest", "file", "path", "name", "checkpoint")

_STATUS = {"InProgress": CheckpointStatus.IN_PROGRESS, "Completed": CheckpointStatus.COMPLETED}
_WITH_REASON = {"Failed": CheckpointStatus.FAILED, "Halted": CheckpointStatus.HALTED}
_SESSION_STATUS: dict[str, SessionStatus] = {
    CheckpointStatus.IN_PROGRESS: SessionStatus.ACTIVE,
    CheckpointStatus.COMPLETED: SessionStatus.COMPLETED,
    CheckpointStatus.FAILED: SessionStatus.FAILED,
    CheckpointStatus.HALTED: SessionStatus.HALTED,
}


def _is_step_file(path: Path) -> bool:
    return STEP_FILE.match(path.name) is not None and files.peek(path, 64)[:1] == b"{"


def _is_ares_file(path: Path) -> bool:
    return LATEST_FILE.match(path.name) is not None or _is_step_file(path)


def detect(path: Path) -> bool:
    if path.is_dir():
        return files.any_file(path, _is_ares_file)
    return path.is_file() and _is_ares_file(path)


def read(path: Path) -> Iterator[Record]:
    seen: dict[str, str] = {}  # session → agent, for the sessions announced so far
    if path.is_dir():
        yield from _read_folder(path, seen)
    elif match := LATEST_FILE.match(path.name):
        # a pointer on its own (a watched folder's changed file): the checkpoint it names, as the head
        target = _pointer_target(path, match["session"])
        if isinstance(target, Problem):
            yield target
        elif not (path.parent / target).is_file():
            yield Problem(str(path), f"points to {target}, which is not in {path.parent}")
        else:
            yield from _read_steps(match["session"], [path.parent / target], target, seen)
    else:
        match = STEP_FILE.match(path.name)
        prefix = match["session"] if match else path.stem
        pointer = path.with_name(f"{prefix}_latest.json")
        head = _pointer_target(pointer, prefix) if match and pointer.is_file() else None
        yield from _read_steps(prefix, [path], head if isinstance(head, str) else None, seen)


def _name_step(path: Path) -> int:
    match = STEP_FILE.match(path.name)
    return int(match["step"]) if match else -1


def _session_file(path: Path) -> str | None:
    """The session prefix of a step file or pointer."""
    match = STEP_FILE.match(path.name) or LATEST_FILE.match(path.name)
    return match["session"] if match else None


def _step_files(folder: Path, prefix: str) -> list[Path]:
    found = []
    for path in folder.glob(f"{glob_escape(prefix)}_*.json"):
        match = STEP_FILE.match(path.name)
        if match and match["session"] == prefix:
            found.append(path)
    return found


def glob_escape(text: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", text)


def _read_folder(folder: Path, seen: dict[str, str]) -> Iterator[Record]:
    found, folders = files.listing(folder)
    steps: dict[str, list[Path]] = {}
    pointers: dict[str, Path] = {}
    for path in found:
        if match := LATEST_FILE.match(path.name):
            pointers[match["session"]] = path
        elif match := STEP_FILE.match(path.name):
            steps.setdefault(match["session"], []).append(path)
        else:
            yield Problem(str(path), "not an Ares checkpoint file (<session>_<step>.json or <session>_latest.json)")
    for prefix in sorted(steps.keys() | pointers.keys()):
        yield from _read_session(prefix, steps.pop(prefix, []), pointers.get(prefix), seen)
    for sub in folders:
        yield from _read_folder(sub, seen)


def _read_session(prefix: str, paths: list[Path], pointer: Path | None, seen: dict[str, str]) -> Iterator[Record]:
    head = None
    if pointer is not None:
        target = _pointer_target(pointer, prefix)
        if isinstance(target, Problem):
            yield target
        elif target not in {path.name for path in paths}:
            yield Problem(str(pointer), f"points to {target}, which is not in {pointer.parent}")
        else:
            head = target
    yield from _read_steps(prefix, paths, head, seen)


def _read_steps(prefix: str, paths: list[Path], head: str | None, seen: dict[str, str]) -> Iterator[Record]:
    """A session's step files in step order (by their names), then the session's status from the last one."""
    ordered = sorted(paths, key=lambda p: (_name_step(p), p.name))
    last: CheckpointRecord | None = None
    for path in ordered:
        record = _read_step(path, prefix, head)
        if isinstance(record, Problem):
            yield record
            continue
        if record.session not in seen:
            seen[record.session] = record.metadata.get("agent_name") or record.session
            yield SessionRecord(external_id=record.session, agent=seen[record.session])
        yield record
        last = record
    if last is not None and last.status in _SESSION_STATUS:
        # the engine applies a session's status once all is stored: a second record carries it
        yield SessionRecord(
            external_id=last.session, agent=seen[last.session], status=_SESSION_STATUS[last.status].value
        )


def _pointer_target(pointer: Path, prefix: str) -> str | Problem:
    """The file name a `_latest.json` names: a bare name (as Ares writes it), a JSON string or object."""
    try:
        data = pointer.read_bytes().removeprefix(files.BOM)
        text = data.decode("utf-8").strip()
    except OSError as exc:
        return Problem(str(pointer), f"cannot read: {exc.strerror or exc}")
    except UnicodeDecodeError as exc:
        return Problem(str(pointer), files.utf8_problem(data, exc))
    if not text:
        return Problem(str(pointer), "empty pointer: it names no checkpoint file")
    name: Any = text
    if text[0] in '"{':
        try:
            value = files.parse_json(data)
        except files.BadFile as exc:
            return Problem(str(pointer), f"unreadable pointer: {exc}")
        name = value
        if isinstance(value, dict):
            name = next((value[key] for key in POINTER_KEYS if isinstance(value.get(key), str)), None)
            step = files.as_int(value.get("step"))
            if name is None and step is not None:
                name = f"{prefix}_{step}.json"
    if not isinstance(name, str) or not name.strip() or "\n" in name.strip():
        return Problem(str(pointer), "unreadable pointer: it should hold the latest step file's name")
    return Path(name.strip()).name


def _read_step(path: Path, prefix: str, head: str | None) -> CheckpointRecord | Problem:
    try:
        doc = files.read_json(path)
    except files.BadFile as exc:
        return Problem(str(path), str(exc))
    if not isinstance(doc, dict):
        return Problem(str(path), f"wrong shape: an Ares step is a JSON object; found a JSON {type(doc).__name__}")
    console = doc.get(files.CONSOLE)
    has_state = isinstance(console, dict) and "state" in console
    if not has_state and not any(key in doc for key in STATE_KEYS):
        return Problem(str(path), "wrong shape: no messages, tool_calls or partial_results")
    match = STEP_FILE.match(path.name)
    step = files.as_int(doc["step"]) if "step" in doc else int(match["step"]) if match else None
    if "step" in doc and step is None:
        return Problem(str(path), f"wrong shape: step {doc['step']!r} is not a number")
    session = doc.get("session_id")
    metadata: dict[str, Any] = {"file": path.name}
    if not isinstance(session, str) or not session:
        if session is not None:
            metadata["session_id"] = session
        session = prefix
    metadata |= {key: doc[key] for key in ("id", "agent_name") if key in doc}
    if extra := {key: value for key, value in doc.items() if key not in NATIVE and key != files.CONSOLE}:
        metadata["source_extra"] = extra
    status, reason = _step_status(doc, metadata)
    created_at = parse_time(doc.get("timestamp"))
    if created_at is None and doc.get("timestamp") is not None:
        metadata["timestamp"] = doc["timestamp"]
    entry_id = doc.get("id")
    values: dict[str, Any] = {
        "session": session,
        "key": entry_id if isinstance(entry_id, str) and entry_id else path.name,
        "state": {key: doc[key] for key in STATE_KEYS if key in doc},
        "name": f"step {step}" if step is not None else "",
        "kind": CheckpointKind.STEP.value,
        "status": status.value,
        "status_reason": reason,
        "step": step,
        "created_at": created_at,
        "metadata": metadata,
        "head": path.name == head,
        "source_path": str(path),
    }
    files.apply_console(values, console)
    return CheckpointRecord(**values)


def _step_status(doc: dict[str, Any], metadata: dict[str, Any]) -> tuple[CheckpointStatus, str]:
    """A step's status and its reason. An unknown status reads as completed, and a reason that is no string as its
    JSON; either keeps the raw value in `metadata`."""
    status, reason = _status(doc.get("status"))
    if status is None:
        if "status" in doc:
            metadata["ares_status"] = doc["status"]
        return CheckpointStatus.COMPLETED, ""
    if not isinstance(reason, str):
        metadata["ares_status"] = doc["status"]
        return status, jsoncodec.canonical(reason).decode("utf-8")
    return status, reason


def _status(value: Any) -> tuple[CheckpointStatus | None, Any]:
    """(status, reason) of an Ares status: "InProgress", "Completed", {"Failed": m}, {"Halted": m}."""
    if isinstance(value, str):
        if value in _STATUS:
            return _STATUS[value], ""
        if value in _WITH_REASON:  # a unit variant, without a message
            return _WITH_REASON[value], ""
    if isinstance(value, dict) and len(value) == 1:
        ((variant, reason),) = value.items()
        if variant in _WITH_REASON:
            return _WITH_REASON[variant], reason
    return None, None


def _ares_status(status: str, reason: str) -> Any:
    if status == CheckpointStatus.FAILED:
        return {"Failed": reason}
    if status == CheckpointStatus.HALTED:
        return {"Halted": reason}
    return "InProgress" if status == CheckpointStatus.IN_PROGRESS else "Completed"


def _epoch(moment: datetime) -> int | float:
    seconds = moment.timestamp()
    return int(seconds) if seconds == int(seconds) else seconds


# ---- export and write-back ---------------------------------------------------------------------


def export(session: Any, out_dir: Path) -> list[Path]:
    external_id = session.external_id
    prefix = files.safe_name(external_id)
    steps = _file_steps(session)
    written: list[Path] = []
    # ids the session's Ares checkpoints carry: a made-up id (for a checkpoint without one) must not take them
    taken = {key for key in Checkpoint.objects.filter(session=session).values_list("metadata__id", flat=True) if key}
    used_ids: set[str] = set()
    head_file = None
    for checkpoint, state in files.checkpoints_with_states(session):
        metadata = checkpoint.metadata or {}
        step = steps[checkpoint.pk]
        key = metadata.get("id")
        if not isinstance(key, str) or not key or key in used_ids:
            key = f"{external_id}-{step}"
            if key in used_ids or key in taken:
                key = f"{external_id}-{step}-{checkpoint.seq}"
        used_ids.add(key)
        doc: dict[str, Any] = {
            "id": key,
            "agent_name": metadata.get("agent_name", session.agent),
            "session_id": external_id,
            "step": step,
        }
        console: dict[str, Any] = {}
        if isinstance(state, dict) and state and set(state) <= set(STATE_KEYS):
            doc.update(state)
        else:  # not an Ares state: the file keeps Ares' shape, the state rides along
            doc.update({key: [] for key in STATE_KEYS})
            console["state"] = state
        doc["timestamp"] = _epoch(checkpoint.created_at)
        derived: dict[str, Any] = {"name": f"step {step}", "kind": CheckpointKind.STEP.value, "step": step}
        _export_status(checkpoint, metadata, doc, derived)
        extra = metadata.get("source_extra")
        if isinstance(extra, dict):
            doc.update({k: v for k, v in extra.items() if k not in doc and k != files.CONSOLE})
        console |= files.console_fields(checkpoint, derived)
        if other := files.other_metadata(checkpoint, OWN_METADATA):
            console["metadata"] = other
        if console:
            doc[files.CONSOLE] = console
        source = metadata.get("file")
        match = STEP_FILE.match(source) if files.plain_name(source) else None
        name = (
            match.string
            if match and match["session"] == prefix and int(match["step"]) == step
            else f"{prefix}_{step}.json"
        )
        written.append(write_atomically(out_dir / name, files.dumps(doc)))
        if checkpoint.pk == session.head_id:
            head_file = name
    if head_file is not None:
        written.append(write_atomically(out_dir / f"{prefix}_latest.json", head_file.encode("utf-8")))
    return written


def _export_status(checkpoint: Any, metadata: dict[str, Any], doc: dict[str, Any], derived: dict[str, Any]) -> None:
    """Write the checkpoint's status into `doc` (the raw Ares value it came with, if any), and into `derived` what
    the importer would read back from it."""
    if "ares_status" in metadata:
        doc["status"] = metadata["ares_status"]
        status, reason = _status(metadata["ares_status"])
        derived["status"] = (status or CheckpointStatus.COMPLETED).value
        if status is not None and not isinstance(reason, str):
            derived["status_reason"] = jsoncodec.canonical(reason).decode("utf-8")
    else:
        doc["status"] = _ares_status(checkpoint.status, checkpoint.status_reason)
        derived["status"] = checkpoint.status
        if checkpoint.status in (CheckpointStatus.FAILED, CheckpointStatus.HALTED):
            derived["status_reason"] = checkpoint.status_reason


def _file_steps(session: Any) -> dict[int, int]:
    """Each checkpoint's step in its file name: increasing in seq order, since files are read back in step
    order. A checkpoint's own step when it is higher than the one before, else the next one (a restore
    repeats the step it restored; a checkpoint may have none): its real step then rides in "console"."""
    steps: dict[int, int] = {}
    previous = -1
    for pk, step in Checkpoint.objects.filter(session=session).order_by("seq").values_list("pk", "step"):
        previous = step if step is not None and step > previous else previous + 1
        steps[pk] = previous
    return steps


def write_back(session: Any, checkpoint: Any, folder: Path, *, now: datetime | None = None) -> list[Path]:
    """The restored state as the session's next step file, then the `_latest.json` pointer moved to it."""
    prefix = files.safe_name(session.external_id)
    folder = files.home_folder(files.writable_folder(folder), lambda path: _session_file(path) == prefix)
    now = (now or timezone.now()).astimezone(UTC)
    state = store.load_state(bytes(checkpoint.root))
    if not isinstance(state, dict) or not any(key in state for key in STATE_KEYS):
        raise ValueError(f"the state of {checkpoint} is not an Ares step (messages, tool_calls, partial_results)")
    source = files.restored_target(checkpoint)
    steps = [_name_step(path) for path in _step_files(folder, prefix)]
    if source.step is not None:
        steps.append(source.step)
    step = max(steps, default=-1) + 1
    doc = {
        "id": f"{session.external_id}-{step}",
        "agent_name": (source.metadata or {}).get("agent_name", session.agent),
        "session_id": session.external_id,
        "step": step,
        "messages": state.get("messages", []),
        "tool_calls": state.get("tool_calls", []),
        "partial_results": state.get("partial_results", []),
        "timestamp": int(now.timestamp()),
        "status": "InProgress",
    }
    step_file = write_atomically(folder / f"{prefix}_{step}.json", files.dumps(doc))
    pointer = files.replace_atomically(folder / f"{prefix}_latest.json", step_file.name.encode("utf-8"))
    return [step_file, pointer]
