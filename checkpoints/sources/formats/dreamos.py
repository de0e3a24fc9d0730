"""Dream.OS-style checkpoints: `<agent_id>_<YYYYmmddHHMMSS>_<type>.checkpoint`, one JSON object per file.

    {"agent_id": "agent-7", "timestamp": "2026-03-02T10:01:00+00:00", "checkpoint_type": "recovery",
     "version": "1.0", "state": {"current_task": …, "mailbox": …, "operational_context": …, "memory": …}}

Mapping: one session per agent (external id and agent = agent_id); kind = checkpoint_type (a type that is
not a checkpoint kind becomes kind "imported", the type kept in metadata["checkpoint_type"]); name = the
type; state = the `state` object; created_at = timestamp (else the one in the file name); the key is the
file name. metadata keeps `version`, the file name (`file`) and any other top-level key (`source_extra`).
Files are read agent by agent, oldest first by the timestamp in their names.

Write-back of a restore: a new `<agent>_<now>_recovery.checkpoint` holding the restored state, which is
how a Dream.OS agent recovers (it loads its newest recovery checkpoint).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from django.utils import timezone

from ... import store
from ...models import CheckpointKind
from . import _jsonfiles as files
from .base import CheckpointRecord, Problem, Record, SessionRecord, parse_time, write_atomically

NAME = "dreamos"
FILE = re.compile(r"^(?P<agent>.+)_(?P<stamp>\d{14})_(?P<type>[A-Za-z0-9_]+)\.checkpoint$")
STAMP = "%Y%m%d%H%M%S"
NATIVE = ("agent_id", "timestamp", "checkpoint_type", "version", "state")
OWN_METADATA = ("version", "file", "checkpoint_type", "source_extra")
KINDS = frozenset(CheckpointKind.values)


def _named(path: Path) -> bool:
    return FILE.match(path.name) is not None


def detect(path: Path) -> bool:
    if path.is_dir():
        return files.any_file(path, _named)
    return path.is_file() and _named(path)


def read(path: Path) -> Iterator[Record]:
    seen: set[str] = set()
    if path.is_dir():
        yield from _read_folder(path, seen)
    else:
        yield from _read_file(path, seen)


def _read_folder(folder: Path, seen: set[str]) -> Iterator[Record]:
    found, folders = files.listing(folder)
    by_agent: dict[str, list[tuple[str, str, Path]]] = {}
    for path in found:
        match = FILE.match(path.name)
        if match is None:
            yield Problem(str(path), "not a Dream.OS checkpoint file (<agent_id>_<YYYYmmddHHMMSS>_<type>.checkpoint)")
            continue
        by_agent.setdefault(match["agent"], []).append((match["stamp"], path.name, path))
    for agent in sorted(by_agent):
        for _, _, path in sorted(by_agent.pop(agent)):
            yield from _read_file(path, seen)
    for sub in folders:
        yield from _read_folder(sub, seen)


def _read_file(path: Path, seen: set[str]) -> Iterator[Record]:
    match = FILE.match(path.name)
    try:
        doc = files.read_json(path)
    except files.BadFile as exc:
        yield Problem(str(path), str(exc))
        return
    if not isinstance(doc, dict) or "state" not in doc:
        found = 'an object without "state"' if isinstance(doc, dict) else f"a JSON {type(doc).__name__}"
        yield Problem(str(path), f'wrong shape: a Dream.OS checkpoint is an object with a "state"; found {found}')
        return
    agent = doc.get("agent_id")
    if not isinstance(agent, str) or not agent:
        agent = match["agent"] if match else None
    if agent is None:
        yield Problem(str(path), "wrong shape: no agent_id, and the file name does not name the agent")
        return
    checkpoint_type = doc.get("checkpoint_type", match["type"] if match else None)
    kind, metadata = _kind_and_metadata(path, doc, checkpoint_type)
    created_at = parse_time(doc.get("timestamp"))
    if created_at is None:
        if doc.get("timestamp") is not None:
            metadata["timestamp"] = doc["timestamp"]
        if match:
            created_at = _stamp_time(match["stamp"])
    values: dict[str, Any] = {
        "session": agent,
        "key": path.name,
        "state": doc["state"],
        "name": checkpoint_type if isinstance(checkpoint_type, str) else "",
        "kind": kind,
        "created_at": created_at,
        "metadata": metadata,
        "source_path": str(path),
    }
    files.apply_console(values, doc.get(files.CONSOLE))
    if agent not in seen:
        seen.add(agent)
        yield SessionRecord(external_id=agent, agent=agent)
    yield CheckpointRecord(**values)


def _kind_and_metadata(path: Path, doc: dict[str, Any], checkpoint_type: Any) -> tuple[str, dict[str, Any]]:
    """The checkpoint's kind (a type the console does not know imports as "imported", the type kept), and the
    metadata that keeps what the file says beyond the fields the console reads."""
    metadata: dict[str, Any] = {"file": path.name}
    if "version" in doc:
        metadata["version"] = doc["version"]
    if extra := {key: value for key, value in doc.items() if key not in NATIVE and key != files.CONSOLE}:
        metadata["source_extra"] = extra
    if checkpoint_type in KINDS:
        return checkpoint_type, metadata
    if checkpoint_type is not None:
        metadata["checkpoint_type"] = checkpoint_type
    return CheckpointKind.IMPORTED.value, metadata


# ---- export and write-back ---------------------------------------------------------------------


def export(session: Any, out_dir: Path) -> list[Path]:
    agent = session.external_id
    written: list[Path] = []
    names = _Names(agent)
    for checkpoint, state in files.checkpoints_with_states(session):
        metadata = checkpoint.metadata or {}
        checkpoint_type = metadata.get("checkpoint_type", checkpoint.kind)
        doc: dict[str, Any] = {
            "agent_id": agent,
            "timestamp": files.iso(checkpoint.created_at),
            "checkpoint_type": checkpoint_type,
        }
        if "version" in metadata:
            doc["version"] = metadata["version"]
        elif not files.from_format(checkpoint, NAME):
            doc["version"] = "1.0"
        doc["state"] = state
        extra = metadata.get("source_extra")
        if isinstance(extra, dict):
            doc.update({key: value for key, value in extra.items() if key not in doc and key != files.CONSOLE})
        derived = {"name": checkpoint_type if isinstance(checkpoint_type, str) else "", "kind": checkpoint.kind}
        console = files.console_fields(checkpoint, derived)
        if other := files.other_metadata(checkpoint, OWN_METADATA):
            console["metadata"] = other
        if console:
            doc[files.CONSOLE] = console
        name = names.next(checkpoint_type, checkpoint.created_at, metadata.get("file"))
        written.append(write_atomically(out_dir / name, files.dumps(doc)))
    return written


def _stamp_time(stamp: str) -> datetime | None:
    """The time a file name's YYYYmmddHHMMSS says, read as UTC; None when it is no date."""
    try:
        return datetime.strptime(stamp, STAMP).replace(tzinfo=UTC)
    except ValueError:
        return None


class _Names:
    """File names for an export: each checkpoint's source name when it came from Dream.OS, else one made
    from agent, time and type that sorts after the names before it (files are read back in name order;
    the JSON keeps the exact time, so a name may move on a second)."""

    def __init__(self, agent: str) -> None:
        self.prefix = files.safe_name(agent)
        self.taken: set[str] = set()
        self.last = ("", "")  # (stamp, name) of the latest name so far

    def next(self, checkpoint_type: Any, moment: datetime, source: Any) -> str:
        if files.plain_name(source) and FILE.match(source) and source not in self.taken:
            return self._take(source)
        kind = re.sub(r"[^A-Za-z0-9_]", "_", str(checkpoint_type)) or "imported"
        moment = moment.astimezone(UTC)
        latest = _stamp_time(self.last[0])
        if latest is not None:
            moment = max(moment, latest)
        while True:
            stamp = moment.strftime(STAMP)
            name = f"{self.prefix}_{stamp}_{kind}.checkpoint"
            if name not in self.taken and (stamp, name) > self.last:
                return self._take(name)
            moment += timedelta(seconds=1)

    def _take(self, name: str) -> str:
        self.taken.add(name)
        match = FILE.match(name)  # always: a source name is taken only when it matches, a made one matches
        # a name whose "time" is no date sets no order
        if match is not None and _stamp_time(match["stamp"]) is not None:
            self.last = max(self.last, (match["stamp"], name))
        return name


def write_back(session: Any, checkpoint: Any, folder: Path, *, now: datetime | None = None) -> list[Path]:
    """A new recovery checkpoint file holding the restored state; never replaces an existing file."""
    agents = {session.external_id, files.safe_name(session.external_id)}
    folder = files.home_folder(
        files.writable_folder(folder), lambda path: (match := FILE.match(path.name)) and match["agent"] in agents
    )
    now = (now or timezone.now()).astimezone(UTC)
    source = files.restored_target(checkpoint)
    doc = {
        "agent_id": session.external_id,
        "timestamp": files.iso(now),
        "checkpoint_type": "recovery",
        "version": (source.metadata or {}).get("version", "1.0"),
        "state": store.load_state(bytes(checkpoint.root)),
    }
    name = f"{files.safe_name(session.external_id)}_{now.strftime(STAMP)}_recovery.checkpoint"
    return [write_atomically(folder / name, files.dumps(doc))]
