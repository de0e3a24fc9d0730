"""Breakpilot-style exports: one JSON array per file, as Breakpilot's `export()` writes it.

    [{"id": "bp-session-42:1", "name": "session_start", "timestamp": "2026-04-01T12:00:37+00:00",
      "data": {…the state…}, "metadata": {"tokens": 1337}}, …]

Mapping: the session is the id's prefix (before the last ":"), step = n (the suffix); the name, timestamp
and metadata are kept as they are; state = data; kind "imported" (as the console client's Breakpilot import
does). Any other key of an entry is kept in metadata["source_extra"]. An entry that cannot be read (not an
object, no data, an id not "<session>:<n>") is reported and the others go in; so is an empty export.

Identity, order and head, as Breakpilot's own CheckpointManager has them: its ids are
"<session>:<counter>" and the counter starts again at 1 when an agent restarts and re-imports its
export (`import_checkpoints()`), so an id alone is not unique: a checkpoint is its id *and* its
timestamp (the key "<id>@<timestamp in UTC>"; a checkpoint stored under a differing key is never taken
for it). Entries keep the export's array order, the manager's list order, so the last entry, what its
`get_latest()` returns, becomes the session's head. Checkpoints imported before ids were known to repeat
were keyed on the id alone; that key is still recognised, so re-importing such a file adds nothing.

Write-back of a restore: a new export file `<session>_restored_<timestamp>.json` holding the restored
checkpoint as its newest (only) entry, with the next free n; Breakpilot's `import()` of it is idempotent.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.db.models import Max
from django.utils import timezone

from ... import store
from ...models import Checkpoint, CheckpointKind
from . import _jsonfiles as files
from .base import CheckpointRecord, Problem, Record, SessionRecord, parse_time, write_atomically

NAME = "breakpilot"
FIELDS = ("id", "name", "timestamp", "data", "metadata")
OWN_METADATA = ("source_extra",)
PEEKS = 50  # .json files a folder's detection looks into at most


def _looks_like(path: Path) -> bool:
    """A .json file whose text starts as an array of objects (or an empty array)."""
    if path.suffix.lower() != ".json":
        return False
    head = files.peek(path, 256)
    return head[:1] == b"[" and head[1:].lstrip()[:1] in (b"{", b"]")


def detect(path: Path) -> bool:
    if not path.is_dir():
        return path.is_file() and _looks_like(path)
    peeks = 0
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.name.startswith(".") or not entry.name.lower().endswith(".json") or not entry.is_file():
                    continue
                if _looks_like(Path(entry.path)):
                    return True
                peeks += 1
                if peeks >= PEEKS:
                    return False
    except OSError:
        return False
    return False


def read(path: Path) -> Iterator[Record]:
    seen: set[str] = set()
    if path.is_dir():
        yield from _read_folder(path, seen)
    else:
        yield from _read_file(path, seen)


def _read_folder(folder: Path, seen: set[str]) -> Iterator[Record]:
    found, folders = files.listing(folder)
    for path in found:
        if _looks_like(path):
            yield from _read_file(path, seen)
        else:
            yield Problem(str(path), "not a Breakpilot export (a .json file holding an array of checkpoints)")
    for sub in folders:
        yield from _read_folder(sub, seen)


def _read_file(path: Path, seen: set[str]) -> Iterator[Record]:
    try:
        doc = files.read_json(path)
    except files.BadFile as exc:
        yield Problem(str(path), str(exc))
        return
    if not isinstance(doc, list):
        yield Problem(str(path), f"wrong shape: a Breakpilot export is a JSON array; found a JSON {type(doc).__name__}")
        return
    if not doc:
        yield Problem(str(path), "an empty export: it holds no checkpoints")
        return
    sessions: dict[str, list[CheckpointRecord]] = {}  # in array order: the manager's own order
    for index, entry in enumerate(doc):
        if not isinstance(entry, dict):
            yield Problem(str(path), f"entry {index}: not an object")
            continue
        key = entry.get("id")
        prefix, colon, suffix = key.rpartition(":") if isinstance(key, str) else ("", "", "")
        if not colon or not prefix:
            yield Problem(str(path), f'entry {index}: id {key!r} is not "<session>:<n>"')
            continue
        if "data" not in entry:
            yield Problem(str(path), f'entry {index} ({key}): no "data"')
            continue
        sessions.setdefault(prefix, []).append(_record(prefix, files.as_int(suffix), entry, f"{path} (entry {index})"))
    for session, records in sessions.items():
        if session not in seen:
            seen.add(session)
            yield SessionRecord(external_id=session, agent=session)
        yield from records


def identity(entry_id: str, created_at: datetime | None, timestamp: Any) -> str:
    """A checkpoint's key: its id and its time (in UTC, so that a re-export in another offset is the same)."""
    if created_at is not None:
        return f"{entry_id}@{files.iso(created_at)}"
    if timestamp not in (None, ""):
        return f"{entry_id}@{timestamp}"
    return entry_id


def _record(session: str, n: int | None, entry: dict[str, Any], source_path: str) -> CheckpointRecord:
    raw = entry.get("metadata")
    metadata: dict[str, Any] = dict(raw) if isinstance(raw, dict) else {} if raw is None else {"metadata": raw}
    extra = {key: value for key, value in entry.items() if key not in FIELDS and key != files.CONSOLE}
    if extra:
        metadata["source_extra"] = extra
    name = entry.get("name")
    created_at = parse_time(entry.get("timestamp"))
    if created_at is None and entry.get("timestamp") not in (None, ""):
        metadata["timestamp"] = entry["timestamp"]
    key = identity(entry["id"], created_at, entry.get("timestamp"))
    values: dict[str, Any] = {
        "session": session,
        "key": key,
        "state": entry["data"],
        "name": name if isinstance(name, str) else "" if name is None else str(name),
        "kind": CheckpointKind.IMPORTED.value,
        "step": n,
        "created_at": created_at,
        "metadata": {"source_id": entry["id"], **metadata},
        "source_path": source_path,
        "legacy_key": entry["id"] if key != entry["id"] else "",
    }
    files.apply_console(values, entry.get(files.CONSOLE))
    return CheckpointRecord(**values)


# ---- export and write-back ---------------------------------------------------------------------


def export(session: Any, out_dir: Path) -> list[Path]:
    """One array, written entry by entry (a long session is never held whole in memory)."""
    return [files.write_new(out_dir / f"{files.safe_name(session.external_id)}.json", _export_chunks(session))]


def _export_chunks(session: Any) -> Iterator[bytes]:
    external_id = session.external_id
    # ids this session's Breakpilot checkpoints already carry: made-up ids must not take them
    taken = set(
        Checkpoint.objects.filter(session=session, metadata__source_format=NAME).values_list(
            "metadata__source_id", flat=True
        )
    )
    yield b"["
    first = True
    for checkpoint, state in files.checkpoints_with_states(session):
        metadata = checkpoint.metadata or {}
        key = metadata.get("source_id")
        if not (files.from_format(checkpoint, NAME) and isinstance(key, str)):
            key = _free_id(external_id, checkpoint.seq, taken)
        entry: dict[str, Any] = {
            "id": key,
            "name": checkpoint.name,
            "timestamp": files.iso(checkpoint.created_at),
            "data": state,
            "metadata": files.other_metadata(checkpoint, OWN_METADATA),
        }
        extra = metadata.get("source_extra")
        if isinstance(extra, dict):
            entry.update({k: v for k, v in extra.items() if k not in entry and k != files.CONSOLE})
        derived = {"name": checkpoint.name, "step": files.as_int(key.rpartition(":")[2])}
        if console := files.console_fields(checkpoint, derived):
            entry[files.CONSOLE] = console
        text = textwrap.indent(files.dumps(entry).decode("utf-8").rstrip("\n"), "  ")
        yield (b"\n" if first else b",\n") + text.encode("utf-8")
        first = False
    yield b"\n]\n" if not first else b"]\n"


def _free_id(external_id: str, n: int, taken: set[str]) -> str:
    """An id for a checkpoint made in the console: its seq, or the next number no entry of the session has.

    A Breakpilot checkpoint keeps its own id even when the id repeats (ids restart with the manager;
    id and timestamp together tell checkpoints apart, for Breakpilot and for a re-import alike).
    """
    while f"{external_id}:{n}" in taken:
        n += 1
    taken.add(f"{external_id}:{n}")
    return f"{external_id}:{n}"


def write_back(session: Any, checkpoint: Any, folder: Path, *, now: datetime | None = None) -> list[Path]:
    """A new export file whose one entry is the restored checkpoint, numbered after everything known."""
    folder = files.home_folder(files.writable_folder(folder), _looks_like)
    now = (now or timezone.now()).astimezone(UTC)
    source = files.restored_target(checkpoint)
    highest = Checkpoint.objects.filter(session=session).aggregate(step=Max("step"), seq=Max("seq"))
    n = max(highest["step"] or 0, highest["seq"] or 0, session.last_seq) + 1
    source_id = (source.metadata or {}).get("source_id") if files.from_format(source, NAME) else None
    metadata: dict[str, Any] = {"restored_from": source_id or f"{session.external_id}:{source.seq}"}
    reason = (checkpoint.metadata or {}).get("reason") if checkpoint.kind == CheckpointKind.RESTORE else None
    if reason:
        metadata["reason"] = reason
    entry = {
        "id": f"{session.external_id}:{n}",
        "name": source.name,
        "timestamp": files.iso(now),
        "data": store.load_state(bytes(checkpoint.root)),
        "metadata": metadata,
    }
    name = f"{files.safe_name(session.external_id)}_restored_{now.strftime('%Y%m%dT%H%M%SZ')}.json"
    return [write_atomically(folder / name, files.dumps([entry]))]
