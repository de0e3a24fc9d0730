"""Kaizen-style checkpoints: one AgentState per `<checkpoint_id>.jsonl` (or `.jsonl.gz`) file.

Each file holds one JSON line (several lines are read as several states): checkpoint_id, agent_id,
step_number, timestamp, status, parent_checkpoint_id, conversation_history, memory_contents, … .

Mapping, as Kaizen's own StateManager sees its files:

* one session per `agent_id` (external id and agent both the agent id); a checkpoint is identified by
  its `checkpoint_id`;
* each agent's checkpoints arrive in `timestamp` order, the order Kaizen lists them in (parents before
  their children where a copy made by `fork_from_checkpoint` shares its original's time); the
  session's head is the newest, which is what `resume_from_latest()` returns, and the session's
  status is that checkpoint's;
* `parent_checkpoint_id` is the parent, so forks inside an agent and runs resumed from an older
  checkpoint are branches of the session's tree. Kaizen's own agent loop leaves it empty: such a
  checkpoint continues the one before it, unless its step counter went back (the agent id was used
  again for a new run), which starts a new root in the same session. A parent deleted by Kaizen's
  retention counts as none; a parent of another agent makes its agent's session a fork of that
  checkpoint (`SessionRecord.forked_from`), and the source session is read first;
* status running → in_progress, completed → completed, failed → failed, interrupted → halted;
* the state is the AgentState without the fields that have columns (checkpoint_id, agent_id,
  step_number, timestamp, status, parent_checkpoint_id); those are kept verbatim in the
  checkpoint's metadata (status as `kaizen_status`), with the line's field order (`field_order`),
  so that export rebuilds the line, and `source_path` names the file (`.jsonl.gz` or `.jsonl`), so
  that export keeps each checkpoint's compression.

Reading is two passes over the files, one file at a time: the first keeps only ids, parents, steps
and times (to order things), the second reads each state again and yields it.
"""

from __future__ import annotations

import gzip
import hashlib
import heapq
import json
import os
import re
import secrets
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ... import store
from ...models import Checkpoint
from ...store import jsoncodec
from .base import CheckpointRecord, Problem, Record, SessionRecord, parse_time, write_atomically

NAME = "kaizen"

SUFFIXES = (".jsonl.gz", ".jsonl")
COLUMN_FIELDS = ("checkpoint_id", "agent_id", "step_number", "timestamp", "status", "parent_checkpoint_id")
STATUS = {"running": "in_progress", "completed": "completed", "failed": "failed", "interrupted": "halted"}
KAIZEN_STATUS = {value: key for key, value in STATUS.items()}
SESSION_STATUS = {"in_progress": "active", "completed": "completed", "failed": "failed", "halted": "halted"}
NO_TIME = datetime.min.replace(tzinfo=UTC)


def _metadata_name(field_name: str) -> str:
    return "kaizen_status" if field_name == "status" else field_name


def _is_checkpoint_file(name: str) -> bool:
    return not name.startswith(".") and name.endswith(SUFFIXES)


def _stem(name: str) -> str:
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def detect(path: Path) -> bool:
    """A `.jsonl`/`.jsonl.gz` file, or a folder with one directly inside."""
    if path.is_file():
        return _is_checkpoint_file(path.name)
    if path.is_dir():
        try:
            with os.scandir(path) as entries:
                return any(_is_checkpoint_file(entry.name) and entry.is_file() for entry in entries)
        except OSError:
            return False
    return False


# ---- reading -----------------------------------------------------------------------------------


class _Unreadable(Exception):
    pass


@dataclass(slots=True)
class _Entry:
    """What ordering needs of one checkpoint; its state is read again when it is yielded."""

    key: str
    agent: str
    parent: str | None
    step: int | None
    time: datetime  # `timestamp`, parsed (Kaizen compares datetimes); the earliest possible when absent
    status: str
    path: Path
    line: int


def _read_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise _Unreadable(f"cannot read: {exc}") from exc
    if path.name.endswith(".gz"):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise _Unreadable(f"corrupt gzip: {exc or type(exc).__name__}") from exc
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Unreadable(f"not UTF-8 text: {exc}") from exc


def _lines(path: Path) -> list[tuple[int, dict[str, Any] | str]]:
    """(line number, AgentState) for each line, or (line number, why it cannot be read)."""
    text = _read_text(path)
    found: list[tuple[int, dict[str, Any] | str]] = []
    for number, line in enumerate(text.split("\n"), 1):  # not splitlines(): JSON strings may hold U+2028
        line = line.strip()
        if not line:
            continue
        try:
            value = jsoncodec.loads(line)
        except jsoncodec.InvalidJSON as exc:
            found.append((number, f"line {number}: {exc} (truncated?)"))
            continue
        if not isinstance(value, dict):
            found.append((number, f"line {number}: not a JSON object, so not a Kaizen AgentState"))
        elif not isinstance(value.get("agent_id"), str) or not value["agent_id"]:
            found.append((number, f"line {number}: no agent_id, so not a Kaizen AgentState"))
        else:
            found.append((number, value))
    if not found:
        raise _Unreadable("empty file: no AgentState line")
    return found


def _key(state: dict[str, Any], path: Path, number: int, single: bool) -> str:
    checkpoint_id = state.get("checkpoint_id")
    if isinstance(checkpoint_id, str) and checkpoint_id:
        return checkpoint_id
    stem = _stem(path.name)
    return stem if single else f"{stem}#{number}"


def _files(path: Path) -> Iterator[Path | Problem]:
    if path.is_file():
        yield path
        return
    for folder, dirs, names in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            if name.startswith("."):
                continue
            file = Path(folder) / name
            if _is_checkpoint_file(name):
                yield file
            else:
                yield Problem(str(file), "not a Kaizen checkpoint file (<checkpoint_id>.jsonl or .jsonl.gz); skipped")


def _index(path: Path) -> Iterator[_Entry | Problem]:
    for item in _files(path):
        if isinstance(item, Problem):
            yield item
            continue
        try:
            lines = _lines(item)
        except _Unreadable as exc:
            yield Problem(str(item), str(exc))
            continue
        for number, value in lines:
            if isinstance(value, str):
                yield Problem(str(item), value)
                continue
            parent = value.get("parent_checkpoint_id")
            step = value.get("step_number")
            yield _Entry(
                key=_key(value, item, number, len(lines) == 1),
                agent=value["agent_id"],
                parent=str(parent) if parent not in (None, "") else None,
                step=step if isinstance(step, int) and not isinstance(step, bool) else None,
                time=parse_time(value.get("timestamp")) or NO_TIME,
                status=str(value.get("status") or ""),
                path=item,
                line=number,
            )


def _order_key(entry: _Entry) -> tuple[Any, ...]:
    return (entry.time, entry.step if entry.step is not None else -1, entry.key)


def _sibling_agent(entry: _Entry, parent: str, seen: set[Path]) -> str | None:
    """The agent of a parent not among the files read, if its file lies next to the child's."""
    for suffix in SUFFIXES:
        candidate = entry.path.parent / f"{parent}{suffix}"
        if candidate in seen or not candidate.is_file():
            continue
        try:
            for _, value in _lines(candidate):
                if isinstance(value, dict) and _key(value, candidate, 1, True) == parent:
                    agent_id: str = value["agent_id"]  # _lines keeps only the lines whose agent_id is a str
                    return agent_id
        except _Unreadable:
            continue
    return None


def read(path: Path) -> Iterator[Record]:
    entries: dict[str, _Entry] = {}
    seen: set[Path] = set()
    yield from _collect(path, entries, seen)

    outside: dict[str, str | None] = {}  # parents not read here → their agent, if found next to the child
    by_agent: dict[str, list[_Entry]] = defaultdict(list)
    for entry in entries.values():
        by_agent[entry.agent].append(entry)
        if entry.parent is not None and entry.parent not in entries and entry.parent not in outside:
            outside[entry.parent] = _sibling_agent(entry, entry.parent, seen)

    def agent_of(key: str | None) -> str | None:
        if key is None:
            return None
        return entries[key].agent if key in entries else outside.get(key)

    orders: dict[str, list[_Entry]] = {}
    sources: dict[str, set[str]] = {}
    forks: dict[str, tuple[str, str]] = {}
    for agent, group in by_agent.items():
        orders[agent], cycle = _order(group, agent, entries)
        for entry in cycle:
            yield Problem(str(entry.path), f"parent chain of {entry.key} forms a cycle; ordered by time")
        fork, sources[agent] = _fork_of(agent, orders[agent], entries, agent_of)
        if fork is not None:
            forks[agent] = fork

    reread = _Reread()
    for agent in _agent_order(orders, sources):
        yield from _session(agent, orders[agent], forks.get(agent), agent_of, reread)


def _collect(path: Path, entries: dict[str, _Entry], seen: set[Path]) -> Iterator[Problem]:
    """Index the checkpoints under `path` into `entries` by key, and the files looked at into `seen`."""
    for item in _index(path):
        if isinstance(item, Problem):
            if item.path:
                seen.add(Path(item.path))
            yield item
            continue
        seen.add(item.path)
        if item.key in entries:
            yield Problem(str(item.path), f"checkpoint {item.key} also in {entries[item.key].path}; skipped")
            continue
        entries[item.key] = item


def _fork_of(
    agent: str, order: list[_Entry], entries: dict[str, _Entry], agent_of: Callable[[str | None], str | None]
) -> tuple[tuple[str, str] | None, set[str]]:
    """Where the agent's session forks from (the first parent of another agent's: that agent and the parent's
    key), and the agents read here whose checkpoints it hangs under (their sessions are imported first)."""
    fork: tuple[str, str] | None = None
    sources: set[str] = set()
    for entry in order:
        source = agent_of(entry.parent)
        if entry.parent is None or source is None or source == agent:
            continue
        fork = fork or (source, entry.parent)
        if entry.parent in entries:
            sources.add(source)
    return fork, sources


class _Reread:
    """The lines of the file read last: an agent's checkpoints come file by file, so each file is read once more."""

    def __init__(self) -> None:
        self.path: Path | None = None
        self.lines: dict[int, dict[str, Any] | str] = {}

    def load(self, path: Path) -> str | None:
        """Read `path` unless it was the file read last; why it cannot be read, if it cannot."""
        if path == self.path:
            return None
        self.path = path
        try:
            self.lines = dict(_lines(path))
        except _Unreadable as exc:
            self.lines = {}
            return str(exc)
        return None


def _session(
    agent: str,
    order: list[_Entry],
    fork: tuple[str, str] | None,
    agent_of: Callable[[str | None], str | None],
    reread: _Reread,
) -> Iterator[Record]:
    """The agent's session, then its checkpoints in order, each read again from its file."""
    head = _latest(order)
    metadata: dict[str, Any] = {"source_format": NAME}
    if fork is not None:
        metadata["forked_from_agent"], metadata["forked_from_checkpoint_id"] = fork
    yield SessionRecord(
        external_id=agent,
        agent=agent,
        status=SESSION_STATUS[STATUS.get(head.status, "in_progress")],
        metadata=metadata,
        forked_from=fork,
    )
    links = _links(order, agent, agent_of)
    yielded: set[str] = set()
    for entry in order:
        if (unreadable := reread.load(entry.path)) is not None:
            yield Problem(str(entry.path), unreadable)
            continue
        value = reread.lines.get(entry.line)
        if not isinstance(value, dict):
            yield Problem(str(entry.path), f"line {entry.line} changed while importing; skipped")
            continue
        parent, new_root = links[entry.key]
        if parent is not None and parent not in yielded:  # its parent could not be read again
            parent, new_root = None, True
        yield _record(entry, value, parent, new_root=new_root, head=entry is head)
        yielded.add(entry.key)


_Link = tuple[str | None, bool]  # (the parent's key, starts a new root); (None, False): after the session's head
_NEW_ROOT: _Link = (None, True)


def _links(order: list[_Entry], agent: str, agent_of: Callable[[str | None], str | None]) -> dict[str, _Link]:
    """Where each checkpoint hangs: under its parent, as a new root, or (the first read) after the session's head.

    A parent of the same agent read before it is the parent. Without one (Kaizen's own agent loop
    never sets `parent_checkpoint_id`; retention deletes the oldest parents) a checkpoint continues the
    one before it, unless its step counter went back: the agent id was used again for a new run.
    """
    links: dict[str, _Link] = {}
    previous: _Entry | None = None
    for entry in order:
        if entry.parent in links:
            links[entry.key] = (entry.parent, False)
        elif previous is None:
            links[entry.key] = (None, False)
        elif agent_of(entry.parent) not in (None, agent) or _restarts(entry, previous):
            links[entry.key] = _NEW_ROOT
        else:
            links[entry.key] = (previous.key, False)
        previous = entry
    return links


def _restarts(entry: _Entry, previous: _Entry) -> bool:
    return entry.step is not None and previous.step is not None and entry.step < previous.step


def _latest(order: list[_Entry]) -> _Entry:
    """What Kaizen's `resume_from_latest()` returns: the newest timestamp (of equal ones, the last read)."""
    return max(reversed(order), key=lambda entry: entry.time)


def _order(group: list[_Entry], agent: str, entries: dict[str, _Entry]) -> tuple[list[_Entry], list[_Entry]]:
    """Parents before children, otherwise by time, step and id; and the entries caught in a cycle."""
    children: dict[str, list[_Entry]] = defaultdict(list)
    ready: list[tuple[tuple[Any, ...], _Entry]] = []
    for entry in group:
        parent = entries.get(entry.parent) if entry.parent is not None else None
        if parent is not None and parent.agent == agent and parent is not entry:
            children[parent.key].append(entry)
        else:
            ready.append((_order_key(entry), entry))
    heapq.heapify(ready)
    order: list[_Entry] = []
    while ready:
        _, entry = heapq.heappop(ready)
        order.append(entry)
        for child in children.pop(entry.key, []):
            heapq.heappush(ready, (_order_key(child), child))
    placed = {entry.key for entry in order}
    cycle = sorted((entry for entry in group if entry.key not in placed), key=_order_key)
    return order + cycle, cycle


def _agent_order(orders: dict[str, list[_Entry]], sources: dict[str, set[str]]) -> list[str]:
    """Source sessions before the sessions forked from them; otherwise by first checkpoint time."""

    def priority(agent: str) -> tuple[datetime, str]:
        return (min(entry.time for entry in orders[agent]), agent)

    waiting = {agent: set(needed) - {agent} for agent, needed in sources.items()}
    result: list[str] = []
    while waiting:
        free = [agent for agent, needed in waiting.items() if not needed]
        agent = min(free or waiting, key=priority)  # a cycle of forks: break it by time
        result.append(agent)
        del waiting[agent]
        for needed in waiting.values():
            needed.discard(agent)
    return result


def _record(
    entry: _Entry, value: dict[str, Any], parent: str | None, *, new_root: bool, head: bool
) -> CheckpointRecord:
    status = str(value.get("status") or "")
    metadata: dict[str, Any] = {"source_path": str(entry.path)}
    for field_name in COLUMN_FIELDS:
        if field_name in value:
            metadata[_metadata_name(field_name)] = value[field_name]
    metadata["field_order"] = list(value)
    return CheckpointRecord(
        session=entry.agent,
        key=entry.key,
        state={name: item for name, item in value.items() if name not in COLUMN_FIELDS},
        kind="step",
        status=STATUS.get(status, "in_progress"),
        step=entry.step,
        created_at=parse_time(value.get("timestamp")),
        metadata=metadata,
        head=head,
        parent_key=parent,
        new_root=new_root,
        source_path=str(entry.path),
    )


# ---- writing -----------------------------------------------------------------------------------


def _own(metadata: dict[str, Any]) -> bool:
    return metadata.get("source_format") == NAME and "field_order" in metadata


def _generated_id(project: str, session: str, seq: int) -> str:
    digest = hashlib.sha256(f"{project}/{session}/{seq}".encode()).hexdigest()
    return f"ckpt_{digest[:12]}"


def _checkpoint_id(checkpoint: Any) -> str:
    """The Kaizen id of a checkpoint: its own when it came from Kaizen, else a stable made-up one."""
    metadata = checkpoint.metadata or {}
    if _own(metadata) and isinstance(own := metadata.get("checkpoint_id"), str):
        return own
    if metadata.get("source_format") == NAME and metadata.get("source_id"):
        return str(metadata["source_id"])
    session = checkpoint.session
    return _generated_id(session.project.slug, session.external_id, checkpoint.seq)


def _timestamp(moment: datetime | None) -> str:
    return (moment or datetime.now(UTC)).isoformat()


def _line(checkpoint: Any, state: Any, agent_id: str, checkpoint_id: str, parent_id: str | None) -> dict[str, Any]:
    """The AgentState line of a stored checkpoint: its state plus the fields kept in columns/metadata."""
    metadata = checkpoint.metadata or {}
    if not isinstance(state, dict):
        state = {"state": state}
    columns: dict[str, Any] = {
        "checkpoint_id": checkpoint_id,
        "agent_id": agent_id,
        "timestamp": _timestamp(checkpoint.created_at),
        "step_number": checkpoint.step,
        "parent_checkpoint_id": parent_id,
        "status": KAIZEN_STATUS.get(checkpoint.status, "running"),
    }
    if _own(metadata):
        order = [name for name in metadata["field_order"] if isinstance(name, str)]
        for name in COLUMN_FIELDS:
            if name in order and _metadata_name(name) in metadata:
                columns[name] = metadata[_metadata_name(name)]
    else:
        order = ["checkpoint_id", "agent_id", "timestamp", "step_number"]
        order += [name for name in state if name not in COLUMN_FIELDS]
        order += ["parent_checkpoint_id", "status"]
    line: dict[str, Any] = {}
    for name in order:
        if name in COLUMN_FIELDS:
            line[name] = columns[name]
        elif name in state:
            line[name] = state[name]
    for name, item in state.items():  # anything the recorded order did not name
        if name not in line and name not in COLUMN_FIELDS:
            line[name] = item
    return line


def _encode(line: dict[str, Any], compress: bool) -> bytes:
    data = (json.dumps(line, ensure_ascii=False) + "\n").encode("utf-8")
    return gzip.compress(data, mtime=0) if compress else data


def _file_name(checkpoint_id: str, compress: bool) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", checkpoint_id).lstrip(".") or "checkpoint"
    return f"{safe}{'.jsonl.gz' if compress else '.jsonl'}"


def _gzipped(metadata: dict[str, Any]) -> bool | None:
    """Whether the checkpoint's own Kaizen file was gzipped; None when it came from no Kaizen file."""
    if metadata.get("source_format") != NAME or not metadata.get("source_path"):
        return None
    return str(metadata["source_path"]).endswith(".gz")


def export(session: Any, out_dir: Path, *, compress: bool | None = None) -> list[Path]:
    """One `<checkpoint_id>.jsonl` or `.jsonl.gz` per checkpoint; existing files are not replaced.

    Each checkpoint keeps the compression of the file it came from; one made in the console (a
    restore, a fork) takes its parent's, and plain `.jsonl` where neither came from a file (Kaizen's
    default). `compress` forces one or the other.
    """

    project = session.project.slug
    ids: dict[int, str] = {}
    for pk, seq, metadata in Checkpoint.objects.filter(session=session).values_list("pk", "seq", "metadata"):
        metadata = metadata or {}
        if _own(metadata) and isinstance(metadata.get("checkpoint_id"), str):
            ids[pk] = metadata["checkpoint_id"]
        elif metadata.get("source_format") == NAME and metadata.get("source_id"):
            ids[pk] = str(metadata["source_id"])
        else:
            ids[pk] = _generated_id(project, session.external_id, seq)
    fork_source = None
    fork_gzipped = False
    if session.forked_from_id:
        source = Checkpoint.objects.select_related("session__project").filter(pk=session.forked_from_id).first()
        fork_source = _checkpoint_id(source) if source else None
        fork_gzipped = bool(source and _gzipped(source.metadata or {}))
    gzipped: dict[int, bool] = {}
    written: list[Path] = []
    checkpoints = Checkpoint.objects.filter(session=session).order_by("seq")
    for checkpoint in checkpoints.iterator(chunk_size=200):
        parent_id = ids.get(checkpoint.parent_id) if checkpoint.parent_id is not None else fork_source
        own = _gzipped(checkpoint.metadata or {})
        inherited = gzipped.get(checkpoint.parent_id, False) if checkpoint.parent_id is not None else fork_gzipped
        gzipped[checkpoint.pk] = own if own is not None else inherited
        gzip_it = gzipped[checkpoint.pk] if compress is None else compress
        checkpoint_id = ids[checkpoint.pk]
        state = store.load_state(bytes(checkpoint.root))
        line = _line(checkpoint, state, session.external_id, checkpoint_id, parent_id)
        path = Path(out_dir) / _file_name(checkpoint_id, gzip_it)
        written.append(write_atomically(path, _encode(line, gzip_it)))
    return written


def _restored(checkpoint: Any) -> Any:
    """The checkpoint a restore (or fork) checkpoint stands for: the one that has the source's id."""

    seen: set[int] = set()
    while checkpoint.kind in ("restore", "fork") and checkpoint.pk not in seen:
        seen.add(checkpoint.pk)
        target = (checkpoint.metadata or {}).get("restored_from") or (checkpoint.metadata or {}).get("forked_from")
        found = Checkpoint.objects.select_related("session__project").filter(pk=target).first() if target else None
        if found is None:
            break
        checkpoint = found
    return checkpoint


def write_back(session: Any, checkpoint: Any, folder: Path) -> list[Path]:
    """Write the restored state as a new checkpoint file (fresh id) whose parent is the restored checkpoint.

    Kaizen resumes from an agent's newest checkpoint, so the new file carries the current time. It is
    gzipped when the restored checkpoint's file was. Nothing existing is replaced.
    """

    source = _restored(checkpoint)
    metadata = source.metadata or {}
    state = store.load_state(bytes(checkpoint.root))
    agent_id = metadata.get("agent_id") if _own(metadata) else None
    compress = bool(_gzipped(metadata))
    while True:
        new_id = f"ckpt_{secrets.token_hex(6)}"
        line = _line(source, state, agent_id or session.external_id, new_id, _checkpoint_id(source))
        line["checkpoint_id"] = new_id
        line["parent_checkpoint_id"] = _checkpoint_id(source)
        line["timestamp"] = _timestamp(None)
        try:
            return [write_atomically(Path(folder) / _file_name(new_id, compress), _encode(line, compress))]
        except FileExistsError:  # a fresh id that is taken: draw another
            continue
