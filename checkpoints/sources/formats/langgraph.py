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
import re
import sqlite3
import time
from collections.abc import Iterable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from django.conf import settings
from psycopg.rows import dict_row

from checkpoint_console import typedjson

from ... import store
from ...models import Checkpoint, LangGraphWrites
from ...store import lgtuples
from .base import Problem

NAME = "langgraph"
SQLITE_MAGIC = b"SQLite format 3\x00"
URL_SCHEMES = ("postgres://", "postgresql://")
READ_BATCH = 200  # checkpoints (or writes) read from a PostgresSaver database at a time
CHECKPOINT_COLUMNS = {
    "thread_id", "checkpoint_ns", "checkpoint_id", "parent_checkpoint_id", "type", "checkpoint", "metadata"
}  # fmt: skip
WRITE_COLUMNS = {"thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx", "channel", "type", "value"}
PROGRESS_EVERY = 10_000  # SQLite instructions between two looks at a file's time budget


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
    """One thread, read while it is stored: its checkpoints oldest id first (parents before children), a checkpoint
    that cannot be read as a Problem in its place, then its pending writes in put order. Both are read from the
    source as they are consumed, checkpoints first, so a thread of any size (users keep 17 GB in one) is never held
    in memory whole; consume a thread before asking `threads` for the next."""

    thread_id: str
    checkpoints: Iterator[Saved | Problem]
    writes: Iterator[Write]


def is_url(source: str | Path) -> bool:
    return str(source).startswith(URL_SCHEMES)


def detect(path: Path) -> bool:
    """A SQLite file naming SqliteSaver's two tables; whether they are plain tables with SqliteSaver's columns is
    `threads`' to report, so that a file that only looks like one gets a report line saying why it is not read."""
    try:
        with path.open("rb") as file:
            if file.read(len(SQLITE_MAGIC)) != SQLITE_MAGIC:
                return False
        with closing(_open_sqlite(path)) as conn:
            return {"checkpoints", "writes"} <= set(_schema(conn))
    except (OSError, sqlite3.Error):
        return False


def threads(source: str | Path) -> Iterator[Thread | Problem]:
    """Every thread of a SqliteSaver file or a PostgresSaver database URL, one at a time; a source that cannot
    be opened or read on is a Problem."""
    name = database_name(str(source)) if is_url(source) else str(source)
    try:
        if is_url(source):
            yield from _postgres_threads(str(source))
        else:
            yield from _sqlite_threads(Path(source))
    except psycopg.errors.QueryCanceled:
        seconds = settings.IMPORT_POSTGRES_STATEMENT_SECONDS
        yield Problem(name, f"a statement ran past IMPORT_POSTGRES_STATEMENT_SECONDS ({seconds} s); not read further")
    except (sqlite3.Error, psycopg.Error) as exc:
        yield Problem(name, f"not readable as LangGraph checkpoints: {exc}")


# ---- SqliteSaver -------------------------------------------------------------------------------


class TooSlow(sqlite3.OperationalError):
    """A file kept SQLite busy past IMPORT_SQLITE_SECONDS."""


class _Budget:
    """The time SQLite spends on one file's statements, added up: a progress handler interrupts the statement
    running when the sum passes the limit. Only time inside SQLite counts, not the import's own work between
    reads, so a large file is not cut short by the speed of the database it goes into."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.spent = 0.0
        self.since: float | None = None

    def exceeded(self) -> int:
        return int(self.since is not None and self.spent + time.monotonic() - self.since > self.seconds)

    def check(self) -> None:
        if self.spent > self.seconds:
            raise self.too_slow()

    def too_slow(self) -> TooSlow:
        return TooSlow(f"reading took longer than IMPORT_SQLITE_SECONDS ({self.seconds:g} s); not read further")

    @contextmanager
    def running(self) -> Iterator[None]:
        self.check()
        self.since = time.monotonic()
        try:
            yield
        except sqlite3.OperationalError as exc:
            if self.exceeded():
                raise self.too_slow() from exc
            raise
        finally:
            self.spent += time.monotonic() - self.since
            self.since = None


class SqliteReader:
    """A SqliteSaver file opened read-only, every statement within the file's time budget."""

    def __init__(self, path: Path, seconds: float) -> None:
        self.conn = _open_sqlite(path)
        self.budget = _Budget(seconds)
        self.conn.set_progress_handler(self.budget.exceeded, PROGRESS_EVERY)

    def all(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        with self.budget.running():
            return self.conn.execute(sql, params).fetchall()

    def batches(self, sql: str, params: tuple[Any, ...] = ()) -> Iterator[Any]:
        """The rows READ_BATCH at a time; between batches SQLite waits, and that time is not counted."""
        with self.budget.running():
            cursor = self.conn.execute(sql, params)
        while True:
            with self.budget.running():
                rows = cursor.fetchmany(READ_BATCH)
            if not rows:
                return
            yield from rows

    def close(self) -> None:
        self.conn.close()


def _open_sqlite(path: Path) -> sqlite3.Connection:
    """Read-only twice over: the file opened with mode=ro, and the connection refusing writes (query_only)."""
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    conn.execute("PRAGMA query_only = ON")
    conn.execute("PRAGMA trusted_schema = OFF")  # the schema may call no function with side effects
    return conn


def _schema(conn: sqlite3.Connection) -> dict[str, tuple[str, str]]:
    """Each schema object by its name as SQLite compares names (case-insensitively): its kind and its SQL."""
    rows = conn.execute("SELECT type, name, coalesce(sql, '') FROM sqlite_master").fetchall()
    return {name.lower(): (kind, sql) for kind, name, sql in rows}


def _columns(conn: sqlite3.Connection, table: str) -> dict[str, int]:
    """The table's columns and whether each is hidden or generated (table_xinfo's `hidden`: 0 for a plain one)."""
    return {row[1]: row[6] for row in conn.execute(f"PRAGMA table_xinfo({table})")}


def _structure_problem(conn: sqlite3.Connection) -> str | None:
    """What keeps the file from being read as SqliteSaver's: only plain tables are read, because a view (an
    endless recursive one, say), a virtual table (its module's code) or a trigger runs what the file's author
    wrote, and a generated column computes on every read."""
    schema = _schema(conn)
    triggers = sorted(name for name, (kind, _) in schema.items() if kind == "trigger")
    if triggers:
        return f"the file has triggers ({', '.join(triggers)}), which a SqliteSaver file has not; not read"
    for table, expected in (("checkpoints", CHECKPOINT_COLUMNS), ("writes", WRITE_COLUMNS)):
        kind, sql = schema.get(table, ("", ""))
        if kind != "table":
            return f"{table} is {f'a {kind}' if kind else 'missing'}, not a plain table; not read"
        if sql.lstrip().upper().startswith("CREATE VIRTUAL"):
            return f"{table} is a virtual table, not a plain table; not read"
        columns = _columns(conn, table)
        if missing := sorted(expected - columns.keys()):
            return f"{table} lacks the column{'s' * (len(missing) > 1)} {', '.join(missing)}; not read"
        if generated := sorted(name for name, hidden in columns.items() if hidden):
            return f"{table} has generated or hidden columns ({', '.join(generated)}); not read"
    return None


def _sqlite_threads(path: Path) -> Iterator[Thread | Problem]:
    with closing(SqliteReader(path, settings.IMPORT_SQLITE_SECONDS)) as reader:
        with reader.budget.running():
            problem = _structure_problem(reader.conn)
        if problem:
            yield Problem(str(path), problem)
            return
        ids = [row[0] for row in reader.all("SELECT DISTINCT thread_id FROM checkpoints ORDER BY thread_id")]
        with reader.budget.running():
            task_path = "task_path" if "task_path" in _columns(reader.conn, "writes") else "''"
        for thread_id in ids:
            reader.budget.check()  # a thread that ran out of time stops the file, not only itself
            yield Thread(
                thread_id, _sqlite_checkpoints(reader, path, thread_id), _sqlite_writes(reader, thread_id, task_path)
            )


def _sqlite_checkpoints(reader: SqliteReader, path: Path, thread_id: str) -> Iterator[Saved | Problem]:
    """The keys in id order first (small), then each row by its primary key: sorting the rows themselves would copy
    every blob of the thread into SQLite's sorter."""
    keys = reader.all(
        "SELECT checkpoint_ns, checkpoint_id FROM checkpoints WHERE thread_id = ? ORDER BY checkpoint_id, checkpoint_ns",
        (thread_id,),
    )
    for ns, checkpoint_id in keys:
        ((parent, type_, blob, metadata),) = reader.all(
            "SELECT parent_checkpoint_id, type, checkpoint, metadata FROM checkpoints"
            " WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ? LIMIT 1",
            (thread_id, ns, checkpoint_id),
        )
        try:
            header = _decoded_checkpoint(type_, blob)
            values = header.pop("channel_values")
            yield Saved(thread_id, ns, checkpoint_id, parent, header, values, _sqlite_metadata(metadata))
        except ValueError as exc:
            yield Problem(where(path, thread_id, ns, checkpoint_id), str(exc))


def _sqlite_writes(reader: SqliteReader, thread_id: str, task_path: str) -> Iterator[Write]:
    rows = reader.batches(
        f"SELECT checkpoint_ns, checkpoint_id, task_id, {task_path}, idx, channel, type, value"  # noqa: S608 - task_path is a column name or '', picked by this code
        " FROM writes WHERE thread_id = ? ORDER BY checkpoint_ns, checkpoint_id, task_id, idx",
        (thread_id,),
    )
    for ns, checkpoint_id, task_id, path_, idx, channel, type_, value in rows:
        yield Write(thread_id, ns, checkpoint_id, task_id, path_, idx, channel, _value(type_, value))


def where(source: Path | str, thread_id: str, ns: str, checkpoint_id: str) -> str:
    """A checkpoint's place in a report line."""
    return f"{source} thread {thread_id!r}" + (f" ns {ns!r}" if ns else "") + f" checkpoint {checkpoint_id}"


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
            # A view named checkpoints may run anything; no statement of the import runs longer than this
            milliseconds = str(settings.IMPORT_POSTGRES_STATEMENT_SECONDS * 1000)
            conn.execute("SELECT set_config('statement_timeout', %s, true)", (milliseconds,))
            has_path = conn.execute(
                "SELECT 1 FROM information_schema.columns WHERE table_name = 'checkpoint_writes'"
                " AND column_name = 'task_path' AND table_schema = ANY(current_schemas(false))"
            ).fetchone()
            ids = [row["thread_id"] for row in conn.execute("SELECT DISTINCT thread_id FROM checkpoints ORDER BY 1")]
            for thread_id in ids:
                yield Thread(
                    thread_id,
                    _postgres_checkpoints(conn, url, thread_id),
                    _postgres_writes(conn, thread_id, task_path="task_path" if has_path else "''"),
                )


def _postgres_checkpoints(
    conn: psycopg.Connection[dict[str, Any]], url: str, thread_id: str
) -> Iterator[Saved | Problem]:
    """The thread's checkpoints with their channel values put back together, a batch at a time: each channel's
    version names its blob (a primitive stays inline in the checkpoint; an "empty" blob means the channel has no
    value). Blobs are read for the batch that needs them and kept only while the next batch needs them too
    (PostgresSaver keeps a whole copy of a growing channel per version)."""
    name = database_name(url)
    keys = conn.execute(
        "SELECT checkpoint_ns, checkpoint_id FROM checkpoints WHERE thread_id = %s ORDER BY checkpoint_id, checkpoint_ns",
        (thread_id,),
    ).fetchall()
    blobs: dict[tuple[str, str, str], Any] = {}
    for start in range(0, len(keys), READ_BATCH):
        batch = keys[start : start + READ_BATCH]
        rows = conn.execute(
            "SELECT checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint, metadata FROM checkpoints"
            " WHERE thread_id = %s AND (checkpoint_ns, checkpoint_id) IN"
            " (SELECT * FROM unnest(%s::text[], %s::text[])) ORDER BY checkpoint_id, checkpoint_ns",
            (thread_id, [key["checkpoint_ns"] for key in batch], [key["checkpoint_id"] for key in batch]),
        ).fetchall()
        needed = {
            (row["checkpoint_ns"], channel, str(version))
            for row in rows
            for channel, version in ((row["checkpoint"] or {}).get("channel_versions") or {}).items()
        }
        blobs = {key: value for key, value in blobs.items() if key in needed}
        missing = sorted(needed - blobs.keys())
        if missing:
            for blob in conn.execute(
                "SELECT checkpoint_ns, channel, version, type, blob FROM checkpoint_blobs WHERE thread_id = %s"
                " AND (checkpoint_ns, channel, version) IN (SELECT * FROM unnest(%s::text[], %s::text[], %s::text[]))",
                (thread_id, *(list(column) for column in zip(*missing, strict=True))),
            ):
                blobs[(blob["checkpoint_ns"], blob["channel"], blob["version"])] = (
                    _EMPTY if blob["type"] == "empty" else _value(blob["type"], blob["blob"])
                )
        for row in rows:
            yield _postgres_saved(row, thread_id, blobs, name)


def _postgres_saved(
    row: dict[str, Any], thread_id: str, blobs: dict[tuple[str, str, str], Any], name: str
) -> Saved | Problem:
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
        return Problem(where(name, thread_id, ns, checkpoint_id), "metadata is no object")
    return Saved(thread_id, ns, checkpoint_id, row["parent_checkpoint_id"], header, values, metadata)


def _postgres_writes(conn: psycopg.Connection[dict[str, Any]], thread_id: str, *, task_path: str) -> Iterator[Write]:
    """Through a server-side cursor, in the primary key's order: no sort, a batch in memory at a time."""
    with conn.cursor(name=f"lg_writes_{abs(hash(thread_id))}") as cursor:
        cursor.itersize = READ_BATCH
        cursor.execute(
            f"SELECT checkpoint_ns, checkpoint_id, task_id, {task_path} AS task_path, idx, channel, type, blob"  # noqa: S608 - task_path is a column name or '', picked by this code
            " FROM checkpoint_writes WHERE thread_id = %s ORDER BY checkpoint_ns, checkpoint_id, task_id, idx",
            (thread_id,),
        )
        for row in cursor:
            yield Write(
                thread_id,
                row["checkpoint_ns"],
                row["checkpoint_id"],
                row["task_id"],
                row["task_path"],
                row["idx"],
                row["channel"],
                _value(row["type"], row["blob"]),
            )


_EMPTY = object()  # a channel version whose value was emptied
_MISSING = object()


def database_name(url: str) -> str:
    """The database named without its password, for report lines and the audit log."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "a postgres:// URL that does not parse"
    return f"postgres://{info.get('user') or ''}@{info.get('host') or ''}/{info.get('dbname') or ''}"


# ---- export ------------------------------------------------------------------------------------

SQLITE_SCHEMA = """
CREATE TABLE checkpoints (
    thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL DEFAULT '',
    checkpoint_id TEXT NOT NULL,
    parent_checkpoint_id TEXT,
    type TEXT,
    checkpoint BLOB,
    metadata BLOB,
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
);
CREATE TABLE writes (
    thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL DEFAULT '',
    checkpoint_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    task_path TEXT NOT NULL DEFAULT '',
    idx INTEGER NOT NULL,
    channel TEXT NOT NULL,
    type TEXT,
    value BLOB,
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
);
"""
# LangGraph's WRITES_IDX_MAP: the special channels' fixed slots
SPECIAL_WRITES = {"__error__": -1, "__scheduled__": -2, "__interrupt__": -3, "__resume__": -4}


class ExportRefused(ValueError):
    """The thread holds a value naming a type its project does not allow (stored before the allow-list said so)."""


def export(session: Any, out: Path) -> list[Path]:
    """The thread as a SqliteSaver file (SqliteSaver's schema; every namespace, checkpoint and pending write, values
    back as serializer blobs with typedjson.to_typed) that LangGraph's SqliteSaver reads as the thread it was.
    A session of another format becomes a thread of its own (`_as_thread`) whose states stay data.

    A SqliteSaver opening the file rebuilds whatever its records name, so a thread naming a type outside its
    project's allow-list is not exported (ExportRefused; no file is left behind).

    `out` is the file to write, or a folder (one without a suffix too) to write `<session>.sqlite` into; an
    existing file is not replaced.
    """
    out = Path(out)
    path = out / f"{_file_stem(session.external_id)}.sqlite" if out.is_dir() or not out.suffix else out
    if path.exists():
        raise FileExistsError(f"{path} exists; not overwriting it")
    path.parent.mkdir(parents=True, exist_ok=True)
    thread_id = str((session.metadata or {}).get("thread_id", session.external_id))
    tuples = lgtuples.session_tuples(session) if session.source_format == NAME else _as_thread(session)
    tuples = _allowed(tuples, session.project.type_allowlist, thread_id)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.unlink(missing_ok=True)
    try:
        with closing(sqlite3.connect(temporary)) as conn, conn:
            conn.executescript(SQLITE_SCHEMA)
            _write_rows(conn, thread_id, tuples, _task_paths(session))
        path.hardlink_to(temporary)  # unlike a rename, fails if `path` appeared meanwhile
    finally:
        temporary.unlink(missing_ok=True)
    return [path]


def _write_rows(
    conn: sqlite3.Connection, thread_id: str, tuples: Iterable[dict[str, Any]], task_paths: dict[tuple[str, ...], str]
) -> None:
    for item in tuples:
        ns, checkpoint_id = item["checkpoint_ns"], item["checkpoint_id"]
        conn.execute(
            "INSERT INTO checkpoints VALUES (?, ?, ?, ?, ?, ?, ?)",
            (thread_id, ns, checkpoint_id, item["parent_checkpoint_id"], *typedjson.to_typed(item["checkpoint"]))
            + (json.dumps(item["metadata"], ensure_ascii=False).encode("utf-8", "ignore"),),
        )
        conn.executemany(
            "INSERT INTO writes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (thread_id, ns, checkpoint_id, task_id, task_paths.get((ns, checkpoint_id, task_id), ""), idx)
                + (channel, *typedjson.to_typed(value))
                for task_id, idx, channel, value in _numbered(item["pending_writes"])
            ],
        )


def _allowed(tuples: Iterable[dict[str, Any]], allowlist: list[str], thread_id: str) -> Iterator[dict[str, Any]]:
    for item in tuples:
        for where, name in lgtuples.refused_in(item, allowlist):
            raise ExportRefused(
                f"checkpoint {item['checkpoint_id']} of thread {thread_id[:200]!r} holds a {name[:300]} at {where}, "
                "a type its project does not allow: not exported (manage.py check_typed_values lists such values)"
            )
        yield item


def _task_paths(session: Any) -> dict[tuple[str, ...], str]:
    """(ns, checkpoint id, task id) → task_path: the tuples' pending writes are sorted by it but do not carry it."""
    rows = LangGraphWrites.objects.filter(session=session)
    return {
        tuple(key): path for *key, path in rows.values_list("checkpoint_ns", "checkpoint_id", "task_id", "task_path")
    }


def _as_thread(session: Any) -> Iterator[dict[str, Any]]:
    """A session of another format as a LangGraph thread: each checkpoint, oldest first, a root-namespace checkpoint
    whose channels are the state's keys (a state that is no object: one channel "state"), parent for parent, the
    newest id the head; metadata says `source` "update" and the step."""
    ids: dict[int, str] = {}
    for checkpoint in Checkpoint.objects.filter(session=session).order_by("seq").iterator(chunk_size=200):
        state = typedjson.quote(store.load_state(bytes(checkpoint.root)))  # the agent's data, even an "__lg__" key
        values = state if isinstance(state, dict) and typedjson.TAG not in state else {"state": state}
        ids[checkpoint.pk] = checkpoint_id = f"{checkpoint.seq:08x}-0000-6000-8000-{checkpoint.pk:012x}"
        header = {
            "v": 4,
            "ts": checkpoint.created_at.isoformat(),
            "id": checkpoint_id,
            "channel_versions": dict.fromkeys(values, 1),
            "versions_seen": {},
            "updated_channels": None,
        }
        yield {
            "checkpoint_ns": "",
            "checkpoint_id": checkpoint_id,
            "parent_checkpoint_id": ids.get(checkpoint.parent_id) if checkpoint.parent_id else None,
            "checkpoint": {**header, "channel_values": values},
            "metadata": {"source": "update", "step": checkpoint.step if checkpoint.step is not None else -1},
            "pending_writes": [],
        }


def _numbered(pending: list[list[Any]]) -> Iterator[tuple[str, int, str, Any]]:
    """Each pending write with its idx: a special channel's slot, else its place among its task's other writes."""
    positions: dict[str, int] = {}
    for task_id, channel, value in pending:
        if channel in SPECIAL_WRITES:
            yield task_id, SPECIAL_WRITES[channel], channel, value
        else:
            positions[task_id] = positions.get(task_id, -1) + 1
            yield task_id, positions[task_id], channel, value


def _file_stem(external_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", external_id).lstrip(".") or "thread"
