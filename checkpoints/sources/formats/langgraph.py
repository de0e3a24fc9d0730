"""LangGraph checkpointer databases: a SqliteSaver file or a PostgresSaver database, read-only.

SqliteSaver keeps `checkpoints(thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type,
checkpoint, metadata)`, the checkpoint a serializer blob holding its channel values, the metadata JSON, and
`writes(…, task_id, task_path, idx, channel, type, value)`. PostgresSaver keeps the checkpoint as JSONB with
its primitive channel values inline, every other value in `checkpoint_blobs` under (channel, version), and
`checkpoint_writes`. Both read into `Thread`s in typed JSON (checkpoint_console.typedjson): blobs are decoded
with `from_typed` only, never with LangGraph's serializer, which imports the modules a blob names and may
unpickle; a pickle blob stays opaque. A row that cannot be read is a `Problem` and reading goes on.

Mapping (services.langgraph stores it): one session per thread, one console checkpoint per LangGraph
checkpoint, with its namespace, parent, metadata and pending writes. Export writes a SqliteSaver file back.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from checkpoint_console import typedjson
from psycopg.rows import dict_row

from .base import Problem

NAME = "langgraph"
SQLITE_MAGIC = b"SQLite format 3\x00"
URL_SCHEMES = ("postgres://", "postgresql://")


@dataclass
class Saved:
    """One LangGraph checkpoint: its header (the Checkpoint without channel_values), values and metadata."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_checkpoint_id: str | None
    header: dict[str, Any]
    values: dict[str, Any]
    metadata: dict[str, Any]


@dataclass
class Write:
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    task_id: str
    task_path: str
    idx: int
    channel: str
    value: Any


@dataclass
class Thread:
    thread_id: str
    checkpoints: list[Saved] = field(default_factory=list)  # by checkpoint_id: parents before children
    writes: list[Write] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


def is_url(source: str | Path) -> bool:
    return str(source).startswith(URL_SCHEMES)


def detect(path: Path) -> bool:
    """A SQLite file with SqliteSaver's two tables."""
    try:
        with path.open("rb") as file:
            if file.read(len(SQLITE_MAGIC)) != SQLITE_MAGIC:
                return False
        with closing(_open_sqlite(path)) as conn:
            return {"thread_id", "checkpoint_ns", "checkpoint_id", "checkpoint"} <= _columns(conn, "checkpoints") and {
                "task_id",
                "channel",
                "value",
            } <= _columns(conn, "writes")
    except (OSError, sqlite3.Error):
        return False


def threads(source: str | Path) -> Iterator[Thread | Problem]:
    """Every thread of a SqliteSaver file or a PostgresSaver database URL, one at a time; a source that cannot
    be opened or read on is a Problem."""
    try:
        if is_url(source):
            yield from _postgres_threads(str(source))
        else:
            yield from _sqlite_threads(Path(source))
    except (sqlite3.Error, psycopg.Error) as exc:
        name = database_name(str(source)) if is_url(source) else str(source)
        yield Problem(name, f"not readable as LangGraph checkpoints: {exc}")


# ---- SqliteSaver -------------------------------------------------------------------------------


def _open_sqlite(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}


def _sqlite_threads(path: Path) -> Iterator[Thread]:
    with closing(_open_sqlite(path)) as conn:
        task_path = "task_path" if "task_path" in _columns(conn, "writes") else "''"
        ids = [row[0] for row in conn.execute("SELECT DISTINCT thread_id FROM checkpoints ORDER BY thread_id")]
        for thread_id in ids:
            thread = Thread(thread_id)
            rows = conn.execute(
                "SELECT checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata"
                " FROM checkpoints WHERE thread_id = ? ORDER BY checkpoint_id, checkpoint_ns",
                (thread_id,),
            )
            for ns, checkpoint_id, parent, type_, blob, metadata in rows:
                where = _where(path, thread_id, ns, checkpoint_id)
                try:
                    header = _decoded_checkpoint(type_, blob)
                    values = header.pop("channel_values")
                    found = Saved(thread_id, ns, checkpoint_id, parent, header, values, _sqlite_metadata(metadata))
                except ValueError as exc:
                    thread.problems.append(Problem(where, str(exc)))
                    continue
                thread.checkpoints.append(found)
            rows = conn.execute(
                f"SELECT checkpoint_ns, checkpoint_id, task_id, {task_path}, idx, channel, type, value"
                " FROM writes WHERE thread_id = ? ORDER BY checkpoint_ns, checkpoint_id, task_id, idx",
                (thread_id,),
            )
            for ns, checkpoint_id, task_id, path_, idx, channel, type_, value in rows:
                thread.writes.append(
                    Write(thread_id, ns, checkpoint_id, task_id, path_, idx, channel, _value(type_, value))
                )
            yield thread


def _where(source: Path | str, thread_id: str, ns: str, checkpoint_id: str) -> str:
    return f"{source} thread {thread_id!r} ns {ns!r} checkpoint {checkpoint_id}"


def _decoded_checkpoint(type_: str | None, blob: bytes | None) -> dict[str, Any]:
    """The checkpoint blob as typed JSON; a blob that is no msgpack map (a pickle, say) cannot be imported."""
    if type_ != "msgpack" or blob is None:
        raise ValueError(f"the checkpoint is a {type_!r} blob, which is not decoded (only msgpack is); skipped")
    checkpoint = typedjson.from_msgpack(bytes(blob))
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("channel_values", {}), dict):
        raise ValueError("the checkpoint blob is not a LangGraph checkpoint; skipped")
    checkpoint.setdefault("channel_values", {})
    return checkpoint


def _sqlite_metadata(blob: bytes | str | None) -> dict[str, Any]:
    """SqliteSaver writes metadata as JSON text (json.dumps); older files may hold serializer msgpack."""
    if blob is None:
        return {}
    data = blob.encode() if isinstance(blob, str) else bytes(blob)
    try:
        metadata = json.loads(data)
    except ValueError:
        metadata = typedjson.from_msgpack(data)
    if not isinstance(metadata, dict):
        raise ValueError("the metadata is not a JSON object; skipped")
    return metadata


def _value(type_: str | None, blob: bytes | None) -> Any:
    """A serialized value as typed JSON; what cannot be decoded without running code stays opaque."""
    try:
        return typedjson.from_typed(type_ or "null", bytes(blob or b""))
    except ValueError:  # says msgpack but is not: keep the bytes as they are
        return typedjson.from_typed(f"{type_} (unreadable)", bytes(blob or b""))


# ---- PostgresSaver -----------------------------------------------------------------------------


def _postgres_threads(url: str) -> Iterator[Thread]:
    """Read in one read-only, repeatable-read transaction: the threads are one consistent snapshot."""
    with psycopg.connect(url, row_factory=dict_row) as conn:
        conn.read_only = True
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        with conn.transaction():
            ids = [row["thread_id"] for row in conn.execute("SELECT DISTINCT thread_id FROM checkpoints ORDER BY 1")]
            for thread_id in ids:
                yield _postgres_thread(conn, url, thread_id)


def _postgres_thread(conn: psycopg.Connection[dict[str, Any]], url: str, thread_id: str) -> Thread:
    thread = Thread(thread_id)
    blobs: dict[tuple[str, str, str], Any] = {}
    for row in conn.execute(
        "SELECT checkpoint_ns, channel, version, type, blob FROM checkpoint_blobs WHERE thread_id = %s",
        (thread_id,),
    ):
        blobs[(row["checkpoint_ns"], row["channel"], row["version"])] = (
            _EMPTY if row["type"] == "empty" else _value(row["type"], row["blob"])
        )
    where = database_name(url)
    for row in conn.execute(
        "SELECT checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint, metadata FROM checkpoints"
        " WHERE thread_id = %s ORDER BY checkpoint_id, checkpoint_ns",
        (thread_id,),
    ):
        ns, checkpoint_id = row["checkpoint_ns"], row["checkpoint_id"]
        header = dict(row["checkpoint"])
        values = dict(header.pop("channel_values", None) or {})  # the primitives, stored inline
        for channel, version in (header.get("channel_versions") or {}).items():
            value = blobs.get((ns, channel, str(version)), _MISSING)
            if value is _EMPTY:
                values.pop(channel, None)
            elif value is not _MISSING:
                values[channel] = value
        metadata = row["metadata"]
        if not isinstance(metadata, dict):
            thread.problems.append(Problem(_where(where, thread_id, ns, checkpoint_id), "metadata is no object"))
            continue
        thread.checkpoints.append(
            Saved(thread_id, ns, checkpoint_id, row["parent_checkpoint_id"], header, values, metadata)
        )
    for row in conn.execute(
        "SELECT checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, blob FROM checkpoint_writes"
        " WHERE thread_id = %s ORDER BY checkpoint_ns, checkpoint_id, task_id, idx",
        (thread_id,),
    ):
        value = _value(row["type"], row["blob"])
        thread.writes.append(
            Write(
                thread_id,
                row["checkpoint_ns"],
                row["checkpoint_id"],
                row["task_id"],
                row["task_path"],
                row["idx"],
                row["channel"],
                value,
            )
        )
    return thread


_EMPTY = object()  # a channel version whose value was emptied
_MISSING = object()


def database_name(url: str) -> str:
    """The database named without its password, for report lines."""
    info = psycopg.conninfo.conninfo_to_dict(url)
    return f"postgres://{info.get('user') or ''}@{info.get('host') or ''}/{info.get('dbname') or ''}"
