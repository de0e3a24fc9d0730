"""LangGraph threads as sessions: the server side of `checkpoint_console.langgraph.ConsoleSaver`.

A thread is a session (source format "langgraph") of the token's project; each LangGraph checkpoint is a
Checkpoint whose state is its channel values as typed JSON (see `checkpoint_console.typedjson`), stored through
the usual ingest path, with a `LangGraphCheckpoint` beside it holding what only LangGraph reads (id, namespace,
header, exact metadata). Pending writes are one `LangGraphWrites` row per task. The session's head is the
root-namespace checkpoint with the largest id, whatever order puts arrive in.

Puts send what changed: channels left out of `values` come from the base checkpoint's stored state, and
`appends` extend a base list; when the base cannot serve them, `ResendNeeded` asks for the whole state.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from .. import limits, store
from ..audit import Actor, CheckpointError, InvalidInput, max_length, record_audit
from ..fields import escape_text, unescape_text
from ..models import (
    AgentSession,
    Checkpoint,
    CheckpointKind,
    LangGraphCheckpoint,
    LangGraphTombstone,
    LangGraphWrites,
    Project,
    SourceFormat,
)
from ..store import diff, jsoncodec, lgnodes, lgtuples, previews, tallies
from ..store.jsoncodec import InvalidJSON
from . import cleanup, lginterrupts
from .checkpoints import CheckpointInput, ParentRow, check_json_field, ingest_checkpoints, locked_for_ingest
from .secrets import scan_writes
from .typeguard import check_typed, check_types

AGENT = "langgraph"
ID_MAX = max_length(LangGraphCheckpoint, "checkpoint_id")
NAME_MAX = max_length(Checkpoint, "name")
EXTERNAL_ID_MAX = max_length(AgentSession, "external_id")
NS_MAX = 1000  # like thread ids, sent in request bodies: in a URL, 1,000 characters can pass a server's request line
THREAD_MAX = 1000
PAGE = lgtuples.PAGE  # the API pages as the reads do
# LangGraph's WRITES_IDX_MAP: these channels have fixed slots and replace; the others keep their first write
SPECIAL_WRITES = {"__error__": -1, "__scheduled__": -2, "__interrupt__": -3, "__resume__": -4}


class ResendNeeded(CheckpointError):
    """The put left channels to a base the server cannot use: the client sends every channel whole (409)."""


class HistoryDeleted(CheckpointError):
    """The put or write names a checkpoint of a thread its agent deleted (410)."""


def thread_external_id(thread_id: str) -> str:
    """The session id of a thread: the thread id itself when the API's id rules take it, else with "/", "%" and
    NUL percent-encoded, and past 200 characters a digest (the original stays in the session's metadata)."""
    if 1 <= len(thread_id) <= EXTERNAL_ID_MAX and not any(char in thread_id for char in "/%\x00"):
        return thread_id
    encoded = thread_id.replace("%", "%25").replace("/", "%2F").replace("\x00", "%00")
    if len(encoded) <= EXTERNAL_ID_MAX:
        return encoded
    return "%sha256:" + hashlib.sha256(thread_id.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass
class PutInput:
    thread_id: str
    checkpoint_ns: str
    checkpoint: dict[str, Any]  # LangGraph's checkpoint header, "id" included, channel values not
    metadata: dict[str, Any]
    values: dict[str, Any]
    channels: list[str] | None = None  # every channel of the state; None: exactly those of values and appends
    appends: dict[str, Any] = field(default_factory=dict)  # channel → {"base_len": n, "items": [...]}
    parent_checkpoint_id: str | None = None
    base_checkpoint_id: str | None = None


# ---- checking input --------------------------------------------------------------------------------------


def _check_id(name: str, value: Any) -> None:
    if not isinstance(value, str) or not 1 <= len(value) <= ID_MAX:
        raise InvalidInput(name, f"must be a string of 1–{ID_MAX} characters")


def _check_thread(thread_id: Any, checkpoint_ns: Any) -> None:
    if not isinstance(thread_id, str) or not 1 <= len(thread_id) <= THREAD_MAX:
        raise InvalidInput("thread_id", f"must be a string of 1–{THREAD_MAX} characters")
    if not isinstance(checkpoint_ns, str) or len(checkpoint_ns) > NS_MAX:
        raise InvalidInput("checkpoint_ns", f"must be a string of at most {NS_MAX} characters")


def _check_put(item: PutInput) -> None:
    _check_thread(item.thread_id, item.checkpoint_ns)
    if not isinstance(item.checkpoint, dict):
        raise InvalidInput("checkpoint", "must be an object")
    _check_id("checkpoint.id", item.checkpoint.get("id"))
    if "channel_values" in item.checkpoint:
        raise InvalidInput("checkpoint", "channel values go in values and appends")
    check_json_field("checkpoint", item.checkpoint)
    if not isinstance(item.metadata, dict):
        raise InvalidInput("metadata", "must be an object")
    check_typed("metadata", item.metadata)
    for name in ("parent_checkpoint_id", "base_checkpoint_id"):
        if getattr(item, name) is not None:
            _check_id(name, getattr(item, name))
    if not isinstance(item.values, dict) or not isinstance(item.appends, dict):
        raise InvalidInput("values", "values and appends must be objects")
    for channel, value in item.values.items():
        check_typed(f"values.{channel}", value)
    _check_appends(item)
    if item.channels is not None:
        if not isinstance(item.channels, list) or not all(isinstance(name, str) for name in item.channels):
            raise InvalidInput("channels", "must be a list of channel names")
        if missing := sorted((item.values.keys() | item.appends.keys()) - set(item.channels)):
            raise InvalidInput("channels", f"values or appends name channels it lacks: {missing[:5]}")


def _check_appends(item: PutInput) -> None:
    for channel, append in item.appends.items():
        if channel in item.values:
            raise InvalidInput(f"appends.{channel}", "a channel is sent whole or appended, not both")
        base_len = append.get("base_len") if isinstance(append, dict) else None
        items = append.get("items") if isinstance(append, dict) else None
        if not isinstance(base_len, int) or isinstance(base_len, bool) or base_len < 0 or not isinstance(items, list):
            raise InvalidInput(f"appends.{channel}", 'must be {"base_len": n ≥ 0, "items": [...]}')
        check_typed(f"appends.{channel}", items)


def _created_at(ts: Any, now: datetime) -> datetime:
    """The checkpoint's `ts` as the console's created_at; now when it is no time the console can store."""
    if isinstance(ts, str):
        try:
            return limits.as_utc(datetime.fromisoformat(ts))
        except (ValueError, limits.OutOfRange):
            pass
    return now


def _step(metadata: dict[str, Any]) -> int | None:
    step = metadata.get("step")
    if isinstance(step, int) and not isinstance(step, bool) and limits.INT32_MIN <= step <= limits.INT32_MAX:
        return step
    return None


# ---- sessions and tombstones ----------------------------------------------------------------------------


def _thread_session(project: Project, thread_id: str) -> AgentSession:
    """The thread's session, created on first use, locked for the rest of the transaction as ingest locks it."""
    external_id = thread_external_id(thread_id)
    session = _locked_thread(project, external_id)
    if session is None:
        locked = AgentSession.objects.locked_for_ingest()
        created, _ = AgentSession.objects.get_or_create(
            project=project,
            external_id=external_id,
            defaults={"agent": AGENT, "source_format": SourceFormat.LANGGRAPH, "metadata": {"thread_id": thread_id}},
        )
        session = locked.get(pk=created.pk)
    session.project = project  # known: ingest's metrics label it without reading the project again
    return _langgraph(session)


def _locked_thread(project: Project, external_id: str) -> AgentSession | None:
    """`AgentSession.objects.locked_for_ingest()`'s row of the thread, in a statement written out (every step's put
    reads it)."""
    return locked_for_ingest(
        "{table}.project_id = %s AND {table}.external_id = %s", [project.pk, escape_text(external_id)]
    )


def _thread_for_writes(project: Project, thread_id: str) -> AgentSession:
    """The thread's session under a KEY SHARE lock: nobody deletes it meanwhile, while the thread's next put
    (NO KEY UPDATE) goes on instead of waiting for these writes. Created (and locked) on first use."""
    table = connection.ops.quote_name(AgentSession._meta.db_table)
    lock = " FOR KEY SHARE" if connection.vendor == "postgresql" else ""  # SQLite has one writer at a time anyway
    sql = f"SELECT * FROM {table} WHERE project_id = %s AND external_id = %s{lock}"  # noqa: S608 - the table's quoted name; values are parameters
    session = next(iter(AgentSession.objects.raw(sql, [project.pk, escape_text(thread_external_id(thread_id))])), None)
    return _thread_session(project, thread_id) if session is None else _langgraph(session)


def _langgraph(session: AgentSession) -> AgentSession:
    if session.source_format != SourceFormat.LANGGRAPH:
        raise InvalidInput("thread_id", f"session {session.external_id!r} exists and is not a LangGraph thread")
    return session


def find_thread(project: Project, thread_id: str) -> AgentSession | None:
    return AgentSession.objects.filter(
        project=project, external_id=thread_external_id(thread_id), source_format=SourceFormat.LANGGRAPH
    ).first()


def pending_resume(project: Project, *, thread_id: str) -> dict[str, Any]:
    """interrupt id → answer of the thread's answered interrupts the graph has not taken yet (see lginterrupts)."""
    _check_thread(thread_id, "")
    session = find_thread(project, thread_id)
    return lginterrupts.pending_resume(session) if session is not None else {}


def _current(session: AgentSession, checkpoint_ns: str) -> Any:
    return LangGraphCheckpoint.objects.filter(session=session, checkpoint_ns=checkpoint_ns, current=True)


def _refuse_deleted_history(session: AgentSession, named: list[str | None], held: set[str]) -> None:
    """After the thread's deletion, a checkpoint id the thread does not hold now (`held`: those of `named` it
    holds) at or below the newest id deleted is from the deleted history. A newer one is the thread run again
    under its id: under LangGraph's default durability ("async") a step's writes can arrive before its put."""
    missing = sorted({name for name in named if name} - held)
    if not missing:
        return
    tombstone = LangGraphTombstone.objects.filter(project_id=session.project_id, external_id=session.external_id)
    found = tombstone.first()
    refused = [name for name in missing if found is not None and found.refuses(name)]
    if refused:
        raise HistoryDeleted(
            f"checkpoint {refused[0]!r} belongs to a deleted history of thread {session.metadata.get('thread_id')!r}; "
            "put without a parent to start the thread afresh"
        )


# ---- put -------------------------------------------------------------------------------------------------


def _resolve_state(item: PutInput, base_row: LangGraphCheckpoint | None) -> dict[str, Any]:
    """The full channel values: those sent, the rest from the base checkpoint's stored state."""
    channels = item.channels if item.channels is not None else [*item.values, *item.appends]
    state: dict[str, Any] = {}
    base: Any = None
    if any(channel not in item.values for channel in channels):
        if base_row is None:
            raise ResendNeeded(f"base checkpoint {item.base_checkpoint_id!r} is not stored: send every channel")
        base = store.load_shared(bytes(base_row.console.root))
    for channel in channels:
        if channel in item.values:
            state[channel] = item.values[channel]
            continue
        if not isinstance(base, dict) or channel not in base:
            raise ResendNeeded(f"the base checkpoint has no channel {channel!r}: send every channel")
        if channel in item.appends:
            append = item.appends[channel]
            stored = base[channel]
            if not isinstance(stored, list) or len(stored) != append["base_len"]:
                raise ResendNeeded(f"channel {channel!r} of the base is not a list of {append['base_len']} items")
            state[channel] = [*stored, *append["items"]]
        else:
            state[channel] = base[channel]
    return state


@transaction.atomic
def put_checkpoint(project: Project, item: PutInput, *, actor: Actor | None = None) -> tuple[Checkpoint, bool]:
    """Store a LangGraph checkpoint; returns (checkpoint, created). An id already current in the thread+ns is
    replaced for LangGraph (the console keeps the old Checkpoint in its history), unless the put repeats it
    exactly (an importer run twice): then nothing is stored. Puts are the agent's own steps, not audited."""
    _check_put(item)
    check_types(
        project,
        [
            ("checkpoint", item.checkpoint),
            ("metadata", item.metadata),
            *((f"values.{channel}", value) for channel, value in item.values.items()),
            *((f"appends.{channel}", append["items"]) for channel, append in item.appends.items()),
        ],
    )
    session = _thread_session(project, item.thread_id)
    checkpoint_id = item.checkpoint["id"]
    named = {checkpoint_id, item.parent_checkpoint_id, item.base_checkpoint_id} - {None}
    wanted = Q(checkpoint_ns=item.checkpoint_ns, checkpoint_id__in=named) | Q(console_id=session.head_id)
    rows = LangGraphCheckpoint.objects.filter(wanted, session=session, current=True).select_related("console")
    found: dict[str, LangGraphCheckpoint] = {}
    head: LangGraphCheckpoint | None = None
    for row in rows.only(*_NAMED_FIELDS, "checkpoint_ns"):
        if row.console_id == session.head_id:
            head = row
        if row.checkpoint_ns == item.checkpoint_ns and row.checkpoint_id in named:
            found[row.checkpoint_id] = row
    _refuse_deleted_history(session, [item.parent_checkpoint_id, item.base_checkpoint_id], set(found))
    state = _resolve_state(item, found.get(item.base_checkpoint_id or ""))
    header = {key: value for key, value in item.checkpoint.items() if key != "id"}
    existing = found.get(checkpoint_id)
    if existing is not None and _same_put(existing, item, state, header):
        return existing.console, False
    parent_row = found.get(item.parent_checkpoint_id or "")
    parent = parent_row.console_id if parent_row is not None else None
    now = timezone.now()
    metadata = item.metadata
    source = metadata.get("source")
    console_input = CheckpointInput(
        state=state,
        name=source[:NAME_MAX] if isinstance(source, str) else "",
        kind=CheckpointKind.STEP,
        step=_step(metadata),
        created_at=_created_at(header.get("ts"), now),
        metadata={
            **metadata,
            "checkpoint_id": checkpoint_id,
            "checkpoint_ns": item.checkpoint_ns,
            lgnodes.KEY: _nodes(header, state, metadata, parent_row),
        },
        parent=parent,
        new_root=parent is None,
        previous=_subgraph_input(item, parent_row),
    )
    if existing is not None:
        LangGraphCheckpoint.objects.filter(pk=existing.pk).update(current=False)
    previous, status = session.head_id, session.status
    known = {} if parent_row is None else {parent_row.console_id: _parent_row(parent_row.console)}
    [(checkpoint, _)] = ingest_checkpoints(
        [(session, [console_input])], now=now, savepoint=False, locked=True, parents=known
    )
    run_id = metadata.get("run_id")
    row = LangGraphCheckpoint.objects.create(
        console=checkpoint,
        session=session,
        checkpoint_ns=item.checkpoint_ns,
        checkpoint_id=checkpoint_id,
        parent_checkpoint_id=item.parent_checkpoint_id or "",
        header=jsoncodec.pack(header),
        metadata=metadata,
        run_id=run_id[:ID_MAX] if isinstance(run_id, str) else "",
    )
    _keep_head(session, item, previous, head)
    if item.checkpoint_ns == "" and (head is None or checkpoint_id > head.checkpoint_id):
        lginterrupts.after_head_moved(session, row, previous_status=status)
    return checkpoint, True


def _nodes(
    header: dict[str, Any], state: dict[str, Any], metadata: dict[str, Any], parent: LangGraphCheckpoint | None
) -> dict[str, Any]:
    """The nodes that wrote the checkpoint and those that run next, kept beside its id so that a timeline page
    reads them with its rows (`store.lgnodes`)."""
    if parent is None:
        return lgnodes.nodes_of(header, state, metadata)
    return lgnodes.nodes_of(
        header,
        state,
        metadata,
        parent_header=jsoncodec.unpack(parent.header),
        parent_nodes=parent.console.metadata.get(lgnodes.KEY),
    )


def _parent_row(console: Checkpoint) -> ParentRow:
    return ParentRow(console.seq, bytes(console.root), console.calls_made)


def _subgraph_input(item: PutInput, parent: LangGraphCheckpoint | None) -> Any:
    """What a subgraph's first step is told against: the input its parent graph passed it (the input checkpoint's
    "__start__"), so the inherited conversation's tool calls are not counted, nor its failures flagged, again."""
    if item.checkpoint_ns == "" or parent is None or parent.metadata.get("source") != "input":
        return None
    state = store.load_shared(bytes(parent.console.root))
    start = state.get("__start__") if isinstance(state, dict) else None
    return start if isinstance(start, dict) else None


def _keep_head(session: AgentSession, item: PutInput, previous: int | None, head: LangGraphCheckpoint | None) -> None:
    """Ingest made the new checkpoint the head: right when it is the root namespace's largest id (the usual
    put); else the head stays the `previous` one (a subgraph's put, an id arriving late), or is looked up again
    when LangGraph does not know that one."""
    if previous is not None and (head is None or head.checkpoint_ns != ""):
        set_head(session)
    elif item.checkpoint_ns != "" or (head is not None and item.checkpoint["id"] < head.checkpoint_id):
        AgentSession.objects.filter(pk=session.pk).update(head_id=previous)


_NAMED_FIELDS = (
    "console_id", "checkpoint_id", "parent_checkpoint_id", "header", "metadata", "console__root",
    "console__state_hash", "console__seq", "console__session_id", "console__calls_made", "console__metadata",
)  # fmt: skip


def _same_put(existing: LangGraphCheckpoint, item: PutInput, state: dict[str, Any], header: dict[str, Any]) -> bool:
    try:
        state_hash = store.state_digest(state)
    except InvalidJSON:
        return False
    return (
        bytes(existing.console.state_hash) == state_hash
        and existing.metadata == item.metadata
        and jsoncodec.unpack(existing.header) == header
        and existing.parent_checkpoint_id == (item.parent_checkpoint_id or "")
    )


def set_head(session: AgentSession) -> None:
    """The head is the root-namespace checkpoint with the largest id (ingest made the newest arrival head)."""
    head = _current(session, "").order_by("-checkpoint_id").values_list("console_id", flat=True).first()
    AgentSession.objects.filter(pk=session.pk).exclude(head_id=head).update(head_id=head)


# ---- writes ----------------------------------------------------------------------------------------------


@transaction.atomic
def put_writes(
    project: Project,
    *,
    actor: Actor | None = None,
    thread_id: str,
    checkpoint_ns: str,
    checkpoint_id: str,
    task_id: str,
    task_path: str,
    writes: list[tuple[str, Any]],
) -> int:
    """Store a task's pending writes against a checkpoint as LangGraph's savers do: the special channels
    (error, scheduled, interrupt, resume) replace their slot, the others keep a write already stored at their
    position. Returns how many writes were stored."""
    _check_thread(thread_id, checkpoint_ns)
    _check_id("checkpoint_id", checkpoint_id)
    _check_id("task_id", task_id)
    if not isinstance(task_path, str) or len(task_path) > NS_MAX:
        raise InvalidInput("task_path", f"must be a string of at most {NS_MAX} characters")
    if not isinstance(writes, list | tuple):
        raise InvalidInput("writes", "must be a list of [channel, value] pairs")
    for position, write in enumerate(writes):
        if not isinstance(write, list | tuple) or len(write) != 2 or not isinstance(write[0], str):
            raise InvalidInput(f"writes.{position}", "must be a [channel, value] pair")
        check_typed(f"writes.{position}", write[1])
    check_types(project, ((f"writes.{position}", value) for position, (_, value) in enumerate(writes)))
    session = _thread_for_writes(project, thread_id)
    held, child, parent_id, parent_root, task_wrote = _locked_root(session, checkpoint_ns, checkpoint_id, task_id)
    _refuse_deleted_history(session, [checkpoint_id], {checkpoint_id} if held else set())
    key = {"session": session, "checkpoint_ns": checkpoint_ns, "checkpoint_id": checkpoint_id, "task_id": task_id}
    # A task's first writes (the usual case) skip the read of its row: a concurrent first writes of the same task
    # would have found no row to lock either, and the unique constraint refuses the second insert as before.
    row = LangGraphWrites.objects.select_for_update().filter(**key).first() if task_wrote is not False else None
    slots: dict[int, list[Any]] = {}  # idx → [channel, value] or a stored form (see store.lgtuples.value_of)
    if row is not None:
        slots = {entry[0]: entry[1:] for entry in jsoncodec.unpack(row.writes)}
    stored_now: list[int] = []  # the slots this call wrote
    for position, (channel, value) in enumerate(writes):
        idx = SPECIAL_WRITES.get(channel, position)
        if idx >= 0 and idx in slots:
            continue
        slots[idx] = [channel, value]
        stored_now.append(idx)
    stored = len(stored_now)
    if not stored:
        return 0
    entries = [[idx, *slots[idx]] for idx in sorted(slots)]
    fields: dict[str, Any] = {}
    if row is None and held is not None:
        entries, fields["values_root"] = _stored_once(entries, held, child)
    fields |= {
        "task_path": task_path,
        "writes": jsoncodec.pack(entries),
        "interrupted": SPECIAL_WRITES["__interrupt__"] in slots,
        "resumed": SPECIAL_WRITES["__resume__"] in slots,
        "failed": SPECIAL_WRITES["__error__"] in slots,
    }
    if row is None:
        LangGraphWrites.objects.create(**key, **fields)
    else:
        LangGraphWrites.objects.filter(pk=row.pk).update(**fields)
    if held is not None and parent_root is not None:
        _name_parent_writes(session, checkpoint_ns, parent_id, parent_root, held)
    scan_writes(
        session,
        checkpoint_ns=checkpoint_ns,
        checkpoint_id=checkpoint_id,
        writes=[(slots[idx][0], slots[idx][1]) for idx in stored_now],
    )
    lginterrupts.after_writes(
        session,
        checkpoint_ns=checkpoint_ns,
        checkpoint_id=checkpoint_id,
        task_id=task_id,
        channels={channel for channel, _ in writes},
    )
    return stored


def _locked_root(
    session: AgentSession, checkpoint_ns: str, checkpoint_id: str, task_id: str
) -> tuple[bytes | None, bytes | None, str, bytes | None, bool | None]:
    """The state root of the current checkpoint that writes go against (None: not stored), its row locked (NO KEY
    UPDATE) to the end of the transaction so that a deletion waits; the root of its child when stored; its parent's
    id and root; whether the task has written against it before (None: not known, the checkpoint is not stored).
    One statement, written out (`_locked_root_sql`): the ORM spent more CPU building it than the database running it."""
    # the columns are Safe*Fields: text is compared as they store it (escaped), which the ORM did for us
    checkpoint_ns, checkpoint_id, task_id = escape_text(checkpoint_ns), escape_text(checkpoint_id), escape_text(task_id)
    params: list[Any] = [checkpoint_ns, session.pk, checkpoint_id, checkpoint_id]  # the child
    params += [checkpoint_ns, session.pk]  # the parent
    params += [session.pk, checkpoint_ns, checkpoint_id, task_id]  # the task's earlier writes
    params += [session.pk, checkpoint_ns, checkpoint_id]  # the checkpoint itself
    with connection.cursor() as cursor:
        cursor.execute(_locked_root_sql(), params)
        found = cursor.fetchone()
    if found is None:
        return None, None, "", None, None
    root, child_root, parent_id, parent_root, task_wrote = found
    return _bytes(root), _bytes(child_root), unescape_text(parent_id), _bytes(parent_root), bool(task_wrote)


def _locked_root_sql() -> str:
    """`_locked_root`'s statement for this connection's database (PostgreSQL locks the row; SQLite has one writer)."""
    quote = connection.ops.quote_name
    lgc, cp, lgw = (quote(model._meta.db_table) for model in (LangGraphCheckpoint, Checkpoint, LangGraphWrites))
    current = quote("current")
    lock = f" FOR NO KEY UPDATE OF {lgc}" if connection.vendor == "postgresql" else ""
    return (
        f"SELECT c.root,"  # noqa: S608 - tables' and columns' quoted names; values are parameters
        f" (SELECT c2.root FROM {lgc} l2 INNER JOIN {cp} c2 ON l2.console_id = c2.id"
        f"  WHERE l2.checkpoint_ns = %s AND l2.{current} AND l2.session_id = %s AND l2.checkpoint_id > %s"
        f"  AND l2.parent_checkpoint_id = %s ORDER BY l2.checkpoint_id ASC LIMIT 1),"
        f" {lgc}.parent_checkpoint_id,"
        f" (SELECT c3.root FROM {lgc} l3 INNER JOIN {cp} c3 ON l3.console_id = c3.id"
        f"  WHERE l3.checkpoint_ns = %s AND l3.{current} AND l3.session_id = %s"
        f"  AND l3.checkpoint_id = {lgc}.parent_checkpoint_id LIMIT 1),"
        f" EXISTS(SELECT 1 FROM {lgw} w WHERE w.session_id = %s AND w.checkpoint_ns = %s AND w.checkpoint_id = %s"
        f"  AND w.task_id = %s)"
        f" FROM {lgc} INNER JOIN {cp} c ON {lgc}.console_id = c.id"
        f" WHERE {lgc}.session_id = %s AND {lgc}.checkpoint_ns = %s AND {lgc}.checkpoint_id = %s AND {lgc}.{current}"
        f" LIMIT 1{lock}"
    )


def _bytes(value: Any) -> bytes | None:
    return bytes(value) if value is not None else None


def _name_parent_writes(
    session: AgentSession, checkpoint_ns: str, parent_id: str, parent_root: bytes, root: bytes
) -> None:
    """Once a checkpoint holds what its parent's tasks wrote (a chat step's new messages appended, a replaced
    channel's new value), the parent's writes name those values' places in its state (stored once) instead of
    holding them a second time (or as changes of the parent's values). Done by the next writes against that
    checkpoint, not by its put, which then waits for nothing and costs two statements fewer; a row being written
    is left to its writer, and writes named in another child's state (a branch) stay as they are."""
    table = connection.ops.quote_name(LangGraphWrites._meta.db_table)
    lock = " FOR UPDATE SKIP LOCKED" if connection.vendor == "postgresql" else ""  # SQLite: one writer anyway
    sql = (
        f"SELECT * FROM {table} WHERE session_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s"  # noqa: S608 - the table's quoted name; values are parameters
        f" AND (values_root IS NULL OR values_root <> %s){lock}"
    )  # written out: the ORM spent more CPU building it than the database running it, on every step's writes
    for row in LangGraphWrites.objects.raw(sql, [session.pk, escape_text(checkpoint_ns), escape_text(parent_id), root]):
        if row.values_root is not None and bytes(row.values_root) != parent_root:
            continue
        entries = [[idx, channel, value] for idx, channel, value in lgtuples.written_values(row)]
        if (named := _named_in_child(entries, parent_root, root)) is not None:
            LangGraphWrites.objects.filter(pk=row.pk).update(writes=jsoncodec.pack(named), values_root=root)


def _stored_once(entries: list[list[Any]], root: bytes, child: bytes | None) -> tuple[list[list[Any]], bytes | None]:
    """A task's first writes, and the root they refer to: named by their places in the state of the checkpoint's
    child when its put came first (as that put names the writes it finds); else small changes of a big value of
    the checkpoint's own state kept as changes (`_as_changes`)."""
    if child is not None and (shared := _named_in_child(entries, root, child)) is not None:
        return shared, child
    return _as_changes(entries, root)


def _named_in_child(entries: list[list[Any]], root: bytes, child: bytes) -> list[list[Any]] | None:
    """Writes against the checkpoint of `root` with the values its child's state (`child`) holds named by their
    places there (None: it holds none of them)."""
    try:
        before, after = store.load_shared(root), store.load_shared(child)
    except store.StateNotFound:
        return None
    if not isinstance(before, dict) or not isinstance(after, dict):
        return None
    appended: dict[tuple[str, bytes], int] = {}  # (channel, canonical JSON of an item) → its index in `after`
    for channel in {entry[1] for entry in entries}:
        old, new = before.get(channel), after.get(channel)
        if isinstance(new, list):
            for at in range(len(old) if isinstance(old, list) else 0, len(new)):
                appended.setdefault((channel, jsoncodec.canonical(new[at])), at)
    return _shared(entries, appended, after)


# ---- reading ---------------------------------------------------------------------------------------------


_CHANGES_FROM = 1024  # a smaller value is kept whole: its changes would save little


def _as_changes(entries: list[list[Any]], root: bytes) -> tuple[list[list[Any]], bytes | None]:
    """A task's writes with each big value that changes the written-to checkpoint's value of its channel a little
    (a memory dict with a few keys set) kept as those changes; and the root they apply to (None: none changed).
    Stored whole, such a value would be written twice before the next checkpoint names it in its state."""
    try:
        state = store.load_shared(root)
    except store.StateNotFound:
        return entries, None
    out, changed = [], False
    for entry in entries:
        idx, channel, value = entry
        held = state.get(channel) if isinstance(state, dict) else None
        size = len(jsoncodec.canonical(value)) if type(value) is type(held) and isinstance(value, dict) else 0
        if size >= _CHANGES_FROM:
            ops = diff.to_ops(diff.walk(held, value, strict=True))
            if len(jsoncodec.canonical(ops)) * 2 < size:
                out.append([idx, channel, None, None, ops])
                changed = True
                continue
        out.append(entry)
    return (out, root) if changed else (entries, None)


def _shared(
    entries: list[list[Any]], appended: dict[tuple[str, bytes], int], state: dict[str, Any]
) -> list[list[Any]] | None:
    """`entries` with the values `state` holds named by their places (None: it holds none of them)."""
    named = [_named(entry, appended, state) for entry in entries]
    if all(entry is None for entry in named):
        return None
    return [new or old for new, old in zip(named, entries, strict=True)]


def _named(entry: list[Any], appended: dict[tuple[str, bytes], int], state: dict[str, Any]) -> list[Any] | None:
    """[idx, channel, None, positions] for a write whose value (or each item of it) the state appended,
    [idx, channel, None, None] for one that is the channel's whole value in the state; else None."""
    if len(entry) != 3:
        return None
    idx, channel, value = entry
    if _is_whole(value, state.get(channel, _ABSENT)):
        return [idx, channel, None, None]
    if isinstance(value, list) and value:
        positions = [appended.get((channel, jsoncodec.canonical(part))) for part in value]
        if all(at is not None for at in positions):
            return [idx, channel, None, positions]
        return None
    at = appended.get((channel, jsoncodec.canonical(value)))
    return None if at is None else [idx, channel, None, at]


_ABSENT = object()


def _is_whole(value: Any, held: Any) -> bool:
    """Whether a written value is exactly the state's value of its channel (a LastValue channel's write): worth
    naming only for containers; sizes are compared first so a grown list is not encoded to find out."""
    if type(value) is not type(held) or not isinstance(value, dict | list) or not value:
        return False
    return len(value) == len(held) and value == held and jsoncodec.canonical(value) == jsoncodec.canonical(held)


def get_tuple(
    project: Project,
    *,
    thread_id: str,
    checkpoint_ns: str = "",
    checkpoint_id: str | None = None,
    base: int | None = None,
) -> dict[str, Any] | None:
    """The checkpoint tuple LangGraph's get_tuple returns: the one named, or the thread+ns's largest id. With
    `base` (a console checkpoint id of the project the reader holds), its channels as a patch against that one's."""
    _check_thread(thread_id, checkpoint_ns)
    session = find_thread(project, thread_id)
    if session is None:
        return None
    rows = lgtuples.rows().filter(session=session, checkpoint_ns=checkpoint_ns)
    if checkpoint_id is not None:
        rows = rows.filter(checkpoint_id=checkpoint_id)
    row = rows.order_by("-checkpoint_id").first()
    if row is None:
        return None
    return next(relative_tuples(project, lgtuples.tuples([row]), base))


def relative_tuples(project: Project, items: list[dict[str, Any]], base: int | None) -> Iterator[dict[str, Any]]:
    """`items` (a page, in order) each as a patch against the one before it, the first against `base` when that is
    a checkpoint of `project`; a base of another project, or none left, leaves the first whole. The reader
    decodes them in this order, so it holds each base when it reads a patch."""
    before: tuple[int, Any] | None = None
    if base is not None and items and base == items[0]["console"]["id"]:  # read again: its own state is the base
        before = (base, items[0]["checkpoint"]["channel_values"])
    elif base is not None:
        root = Checkpoint.objects.filter(pk=base, session__project=project).values_list("root", flat=True).first()
        before = (base, store.load_shared(bytes(root))) if root is not None else None
    for item in items:
        values = item["checkpoint"]["channel_values"]
        yield item if before is None else lgtuples.relative(item, *before)
        before = (item["console"]["id"], values)


def _matching(
    project: Project,
    thread_id: str | None,
    checkpoint_ns: str | None,
    checkpoint_id: str | None,
    before: str | None,
    filter: dict[str, Any] | None,  # noqa: A002 - LangGraph's name
) -> Any:
    """The current rows a list asks for, as far as the database can tell."""
    rows = lgtuples.rows().filter(session__project=project, session__source_format=SourceFormat.LANGGRAPH)
    if thread_id is not None:
        _check_thread(thread_id, checkpoint_ns or "")
        rows = rows.filter(session__external_id=thread_external_id(thread_id))
    if checkpoint_ns is not None:
        rows = rows.filter(checkpoint_ns=checkpoint_ns)
    if checkpoint_id is not None:
        rows = rows.filter(checkpoint_id=checkpoint_id)
    if before is not None:
        rows = rows.filter(checkpoint_id__lt=before)
    if filter:
        check_typed("filter", filter)
        if connection.vendor == "postgresql":  # SQLite has no JSON containment: iter_tuples' comparison alone filters
            rows = rows.filter(metadata__contains=filter)  # the field escapes it as it escaped what it stored
    return rows


def iter_tuples(
    project: Project,
    *,
    thread_id: str | None = None,
    checkpoint_ns: str | None = None,
    checkpoint_id: str | None = None,
    before: str | None = None,
    filter: dict[str, Any] | None = None,  # noqa: A002 - LangGraph's name
    limit: int | None = None,
    after: tuple[str, int] | None = None,
) -> Iterator[dict[str, Any]]:
    """LangGraph's list: newest id first, filtered at the database (on PostgreSQL metadata by containment), then
    compared exactly as LangGraph does, read PAGE tuples at a time. `after` continues past a tuple's (checkpoint_id,
    console id), as the API's cursor does."""
    rows = _matching(project, thread_id, checkpoint_ns, checkpoint_id, before, filter)
    rows = rows.order_by("-checkpoint_id", "-console_id")
    remaining = limit if limit is not None else -1
    while remaining:
        page = rows
        if after is not None:
            page = page.filter(Q(checkpoint_id__lt=after[0]) | Q(checkpoint_id=after[0], console_id__lt=after[1]))
        found = list(page[:PAGE])
        if not found:
            return
        after = (found[-1].checkpoint_id, found[-1].console_id)
        matching = [row for row in found if not filter or all(row.metadata.get(k) == v for k, v in filter.items())]
        for item in lgtuples.tuples(matching):
            yield item
            remaining -= 1
            if not remaining:
                return
        if len(found) < PAGE:
            return


# ---- deletions and copies the agent asks for ---------------------------------------------------------------


def delete_thread(project: Project, *, actor: Actor, thread_id: str) -> tuple[int, int]:
    """LangGraph's delete_thread: the thread goes whole, leaving a tombstone. Returns (checkpoints, writes)."""
    _check_thread(thread_id, "")
    session = find_thread(project, thread_id)
    if session is None:
        return 0, 0
    return cleanup.delete_langgraph_thread(session, actor=actor)


@transaction.atomic
def prune(project: Project, *, actor: Actor, thread_ids: list[str], strategy: str) -> tuple[int, int]:
    """LangGraph's prune: `keep_latest` keeps the latest checkpoint of each namespace of each thread (with its
    writes), `delete` deletes the threads. Returns (checkpoints, writes) deleted in all."""
    if strategy not in ("keep_latest", "delete"):
        raise InvalidInput("strategy", 'must be "keep_latest" or "delete"')
    totals = [0, 0]
    for thread_id in dict.fromkeys(thread_ids):
        _check_thread(thread_id, "")
        session = find_thread(project, thread_id)
        if session is None:
            continue
        if strategy == "delete":
            counts = cleanup.delete_langgraph_thread(session, actor=actor, action="langgraph_prune")
        else:
            latest = set(_latest_per_namespace(session))
            doomed = Checkpoint.objects.filter(session=session).exclude(pk__in=latest).values_list("pk", flat=True)
            counts = cleanup.delete_langgraph_checkpoints(
                session, list(doomed), actor=actor, action="langgraph_prune", details={"strategy": strategy}
            )
            set_head(session)
        totals[0] += counts[0]
        totals[1] += counts[1]
    return totals[0], totals[1]


def _latest_per_namespace(session: AgentSession) -> list[int]:
    """The console ids of the current checkpoint with the largest id in each namespace of the thread."""
    latest: dict[str, tuple[str, int]] = {}
    for ns, checkpoint_id, pk in _current_rows(session).values_list("checkpoint_ns", "checkpoint_id", "console_id"):
        if ns not in latest or checkpoint_id > latest[ns][0]:
            latest[ns] = (checkpoint_id, pk)
    return [pk for _, pk in latest.values()]


def _current_rows(session: AgentSession) -> Any:
    return LangGraphCheckpoint.objects.filter(session=session, current=True)


@transaction.atomic
def delete_for_runs(project: Project, *, actor: Actor, run_ids: list[str]) -> tuple[int, int]:
    """LangGraph's delete_for_runs: the checkpoints whose metadata run_id is listed, with their writes (in every
    thread of the project). Returns (checkpoints, writes) deleted."""
    if not all(isinstance(run_id, str) for run_id in run_ids):
        raise InvalidInput("run_ids", "must be strings")
    rows = LangGraphCheckpoint.objects.filter(
        session__project=project, session__source_format=SourceFormat.LANGGRAPH, run_id__in=list(set(run_ids))
    )
    by_session: dict[int, list[int]] = {}
    for session_id, pk in rows.order_by("session_id").values_list("session_id", "console_id"):
        by_session.setdefault(session_id, []).append(pk)
    totals = [0, 0]
    for session in AgentSession.objects.filter(pk__in=list(by_session)).order_by("pk"):
        counts = cleanup.delete_langgraph_checkpoints(
            session,
            by_session[session.pk],
            actor=actor,
            action="langgraph_delete_for_runs",
            details={"run_ids": run_ids},
        )
        set_head(session)
        totals[0] += counts[0]
        totals[1] += counts[1]
    return totals[0], totals[1]


@transaction.atomic
def copy_thread(project: Project, *, actor: Actor, source_thread_id: str, target_thread_id: str) -> tuple[int, int]:
    """LangGraph's copy_thread: every current checkpoint (every namespace) and pending write of the source, with
    the same ids, into the target thread; states are shared by root, nothing is stored again. Returns (checkpoints,
    writes) copied."""
    _check_thread(source_thread_id, "")
    _check_thread(target_thread_id, "")
    source = find_thread(project, source_thread_id)
    if source is None or thread_external_id(source_thread_id) == thread_external_id(target_thread_id):
        return 0, 0
    target = _thread_session(project, target_thread_id)
    rows = list(_current_rows(source).select_related("console").order_by("console__seq"))
    now = timezone.now()
    copies = [_copy_of(row.console, target, seq=target.last_seq + n, now=now) for n, row in enumerate(rows, 1)]
    LangGraphCheckpoint.objects.filter(
        session=target, current=True, checkpoint_id__in=[row.checkpoint_id for row in rows]
    ).update(current=False)  # replaced, as a put repeating their ids would
    Checkpoint.objects.bulk_create(copies)
    copied = {row.console_id: copy for row, copy in zip(rows, copies, strict=True)}
    for row, copy in zip(rows, copies, strict=True):
        parent = copied.get(row.console.parent_id) if row.console.parent_id else None
        copy.parent_id = parent.pk if parent else None
        copy.starts_branch = parent is not None and parent.seq != copy.seq - 1
        copy.subgraph_hop = copy.starts_branch and row.console.subgraph_hop  # the same order: the same hops
    Checkpoint.objects.bulk_update(copies, ["parent", "starts_branch", "subgraph_hop"])
    LangGraphCheckpoint.objects.bulk_create(
        LangGraphCheckpoint(
            console=copy,
            session=target,
            checkpoint_ns=row.checkpoint_ns,
            checkpoint_id=row.checkpoint_id,
            parent_checkpoint_id=row.parent_checkpoint_id,
            header=row.header,
            metadata=row.metadata,
            run_id=row.run_id,
        )
        for row, copy in zip(rows, copies, strict=True)
    )
    writes = _copy_writes(LangGraphWrites.objects.filter(session=source), target)
    if copies:
        tallies.count_in(copies, last_seq=copies[-1].seq, updated_at=now, last_seen_at=now)
    set_head(target)
    record_audit(
        actor,
        "langgraph_copy_thread",
        session=target,
        target=f"{source} → {target}",
        details={"source_thread_id": source_thread_id, "copied_checkpoints": len(rows), "copied_writes": writes},
    )
    return len(rows), writes


def _copy_of(checkpoint: Checkpoint, session: AgentSession, *, seq: int, now: datetime) -> Checkpoint:
    """A checkpoint of `session` sharing `checkpoint`'s stored state and what it says (zero copy)."""
    return Checkpoint(
        session=session,
        seq=seq,
        name=checkpoint.name,
        kind=checkpoint.kind,
        status=checkpoint.status,
        status_reason=checkpoint.status_reason,
        step=checkpoint.step,
        phase=checkpoint.phase,
        created_at=checkpoint.created_at,
        received_at=now,
        root=checkpoint.root,
        state_hash=checkpoint.state_hash,
        raw_bytes=checkpoint.raw_bytes,
        stored_bytes=0,
        calls_made=checkpoint.calls_made,
        preview=checkpoint.preview,
        tool_failed=checkpoint.tool_failed,
        metadata=checkpoint.metadata,
    )


def _copy_writes(rows: Any, target: AgentSession, *, checkpoint_id: str | None = None) -> int:
    """Copy pending-write rows into `target` (under `checkpoint_id` when given), replacing the same tasks' rows
    there. Returns how many writes."""
    copies = [
        LangGraphWrites(
            session=target,
            checkpoint_ns=row.checkpoint_ns,
            checkpoint_id=checkpoint_id or row.checkpoint_id,
            task_id=row.task_id,
            task_path=row.task_path,
            writes=row.writes,
            values_root=row.values_root,
            interrupted=row.interrupted,
            resumed=row.resumed,
            failed=row.failed,
        )
        for row in rows
    ]
    for copy in copies:
        LangGraphWrites.objects.filter(
            session=target, checkpoint_ns=copy.checkpoint_ns, checkpoint_id=copy.checkpoint_id, task_id=copy.task_id
        ).delete()
    LangGraphWrites.objects.bulk_create(copies)
    return sum(len(jsoncodec.unpack(copy.writes)) for copy in copies)


# ---- the console's restore and fork ----------------------------------------------------------------------

LINE_MAX = 500  # checkpoints a restore preview walks back to date the tool results it discards
LINE_BATCH = 50


def discarded_tool_results(head: Checkpoint, target: Checkpoint) -> list[dict[str, Any]]:
    """The tool results a restore of `target` takes out of a thread's messages: each ToolMessage the head's
    messages keep and the target's do not (LangGraph keeps the conversation, not a log of calls; an AIMessage
    asking for three calls is answered by three ToolMessages). Each as a call record (see
    `store.previews.tool_results_of`) with the `step` and `node` of the oldest checkpoint on the head's line
    that holds it: the step whose node ran the tool."""
    kept = previews.tool_results_of(store.load_shared(bytes(target.root)))
    discarded = {
        key: record
        for key, record in previews.tool_results_of(store.load_shared(bytes(head.root))).items()
        if key not in kept
    }
    for checkpoint in _line(head):
        held = discarded.keys() & previews.tool_results_of(store.load_shared(bytes(checkpoint.root))).keys()
        if not held:
            break
        nodes = checkpoint.metadata.get(lgnodes.KEY)
        ran = nodes.get("ran") if isinstance(nodes, dict) else None
        for key in held:
            discarded[key]["step"] = checkpoint.step
            discarded[key]["node"] = ", ".join(dict.fromkeys(map(str, ran))) if isinstance(ran, list) else ""
    return list(discarded.values())


def _line(head: Checkpoint) -> Iterator[Checkpoint]:
    """`head` and its ancestors, newest first, up to LINE_MAX, read LINE_BATCH rows at a time."""
    rows = Checkpoint.objects.filter(session_id=head.session_id).only(
        "pk", "seq", "parent_id", "root", "step", "metadata"
    )
    batch: dict[int, Checkpoint] = {}
    at: int | None = head.pk
    for _ in range(LINE_MAX):
        if at is None:
            return
        if at not in batch:
            seq = head.seq if at == head.pk else next(iter(rows.filter(pk=at).values_list("seq", flat=True)), None)
            if seq is None:
                return
            batch = {row.pk: row for row in rows.filter(seq__lte=seq).order_by("-seq")[:LINE_BATCH]}
        checkpoint = batch[at]
        yield checkpoint
        at = checkpoint.parent_id


_UUID6_TIME = (1 << 60) - 1


def next_checkpoint_id(largest: str) -> str:
    """An id just above `largest`, the thread's largest: a uuid6 (LangGraph's) one timestamp tick later with the
    same clock sequence and node, so the client's next id, minted from its clock, still sorts after it; any other
    uuid plus one; any other string extended (a longer string with the same start sorts after it)."""
    try:
        value = uuid.UUID(largest)
    except ValueError:
        return largest + "0"
    if str(value) != largest:
        return largest + "0"  # not in the canonical lower-case form: compare as LangGraph does, by string
    number = value.int
    if value.version == 6:
        timestamp = ((number >> 96) << 28) | (((number >> 80) & 0xFFFF) << 12) | ((number >> 64) & 0xFFF)
        if timestamp < _UUID6_TIME:
            timestamp += 1
            low = number & ((1 << 64) - 1)
            high = ((timestamp >> 28) << 32) | (((timestamp >> 12) & 0xFFFF) << 16) | (0x6 << 12) | (timestamp & 0xFFF)
            return str(uuid.UUID(int=(high << 64) | low))
    if number < (1 << 128) - 1:
        return str(uuid.UUID(int=number + 1))
    return largest + "0"


def _largest_id(session: AgentSession) -> str | None:
    rows = LangGraphCheckpoint.objects.filter(session=session).order_by("-checkpoint_id")
    return rows.values_list("checkpoint_id", flat=True).first()


def check_resumable(checkpoint: Checkpoint, *, action: str = "restore or fork") -> None:
    """Refuse a restore or fork of a subgraph's checkpoint: LangGraph resumes a thread from its root namespace,
    and a subgraph's namespace is named after the task that ran it, whose id derives from the parent graph's
    checkpoint id; so the agent could not take it up. The parent graph's checkpoint it ran from is named instead."""
    row = LangGraphCheckpoint.objects.filter(console=checkpoint).exclude(checkpoint_ns="").first()
    if row is None:
        return
    parents = row.metadata.get("parents")
    root_id = parents.get("") if isinstance(parents, dict) else None
    root = _current(row.session, "").filter(checkpoint_id=root_id).select_related("console").first()
    instead = f"#{root.console.seq}, the parent graph's checkpoint it ran from" if root else "a root checkpoint"
    raise CheckpointError(
        f"#{checkpoint.seq} is a checkpoint of subgraph {row.checkpoint_ns.split(':')[0]!r}: LangGraph resumes a "
        f"thread from its parent graph, so {action} {instead}"
    )


def record_restore(checkpoint: Checkpoint, restored: Checkpoint, *, now: datetime) -> None:
    """Give a console restore (or undo) of a LangGraph checkpoint its LangGraph side, in the restore's
    transaction: an id larger than every id in the thread, so LangGraph's next `invoke` continues from it; metadata
    source "fork" with `restored_from` and the operator's `restore_reason`; the restored checkpoint as parent; its
    header. No pending writes: LangGraph
    derives task ids from the checkpoint id, so the old tasks' writes would match no task of the new id, and the
    null task's (an earlier answer to an interrupt) would be taken again. As in LangGraph's own time travel, the
    tasks run again and an interrupt asks again (or takes the `Command(resume=…)` given)."""
    source = LangGraphCheckpoint.objects.filter(console=checkpoint).first()
    if source is None:
        return
    session = restored.session
    checkpoint_id = next_checkpoint_id(_largest_id(session) or source.checkpoint_id)
    kept = {key: value for key, value in source.metadata.items() if key != "restore_reason"}  # an earlier one's
    metadata = {**kept, "source": "fork", "restored_from": source.checkpoint_id}
    reason = restored.metadata.get("reason")
    if isinstance(reason, str) and reason:
        metadata["restore_reason"] = reason  # so the runner's get_state_history says why, as the console does
    _add_row(
        source, restored, session, checkpoint_id=checkpoint_id, metadata=metadata, parent=source.checkpoint_id, now=now
    )
    set_head(session)
    session.refresh_from_db(fields=["head", "status"])
    lginterrupts.after_head_moved(session, lginterrupts.head_row(session), resync=True)  # no writes: active again


def record_fork(checkpoint: Checkpoint, fork: AgentSession, first: Checkpoint, *, now: datetime) -> None:
    """Make a console fork of a LangGraph checkpoint a new thread (its id: the fork session's external id, as
    `thread_external_id` would map it back) whose first checkpoint has the same id and header, and of its pending
    writes only the interrupts: as in LangGraph's time travel, the tasks run again on the new thread (a tool that
    failed is retried) and an interrupt, even one answered since, waits for a `Command(resume=…)`."""
    source = LangGraphCheckpoint.objects.select_related("session").filter(console=checkpoint).first()
    if source is None:
        return
    thread_id = _decoded(fork.external_id)
    fork.external_id = thread_external_id(thread_id)
    fork.source_format = SourceFormat.LANGGRAPH
    fork.metadata = {**fork.metadata, "thread_id": thread_id}
    fork.save(update_fields=["external_id", "source_format", "metadata"])
    metadata = {
        **source.metadata,
        "source": "fork",
        "forked_from": source.checkpoint_id,
        "forked_from_thread": source.session.metadata.get("thread_id"),
    }
    _add_row(source, first, fork, checkpoint_id=source.checkpoint_id, metadata=metadata, parent=None, now=now)
    writes = LangGraphWrites.objects.filter(
        session=source.session, checkpoint_ns=source.checkpoint_ns, checkpoint_id=source.checkpoint_id
    )
    _copy_writes([_interrupt_only(row) for row in writes.filter(interrupted=True)], fork)


def _interrupt_only(row: LangGraphWrites) -> LangGraphWrites:
    """A task's row holding only its interrupt (not what it wrote, nor the answer it was given)."""
    interrupt = SPECIAL_WRITES["__interrupt__"]
    row.writes = jsoncodec.pack([entry for entry in jsoncodec.unpack(row.writes) if entry[0] == interrupt])
    row.resumed = row.failed = False
    return row


def _decoded(external_id: str) -> str:
    """The thread id `thread_external_id` maps to `external_id`, when it is one of its encodings."""
    codes = {"%25": "%", "%2F": "/", "%00": "\x00"}
    return re.sub("%25|%2F|%00", lambda match: codes[match.group(0)], external_id)


def check_channel_values(project: Project, values: dict[str, Any]) -> None:
    """Channel values an operator typed (a state edit): typed JSON LangGraph's serializer reads back, naming only
    callables the project's allow-list holds, as a put's values must."""
    for channel, value in values.items():
        check_typed(f"values.{channel}", value)
    check_types(project, ((f"values.{channel}", value) for channel, value in values.items()))


def record_edit(checkpoint: Checkpoint, edited: Checkpoint, channels: list[str], *, now: datetime) -> None:
    """Give a console edit of a LangGraph checkpoint its LangGraph side, in the edit's transaction, written as
    LangGraph's `update_state` writes a checkpoint, less what needs the graph (the console has none: no reducer
    applies, no `as_node`): metadata source "update" and step + 1; an id larger than every id in the thread, so
    the next `invoke(None, config)` continues from it; the edited checkpoint as parent; its header, with the
    changed channels' versions bumped past every version in it, `versions_seen` kept so that the tasks that were
    to run next (`branch:to:*`, sends) still run, `updated_channels` None. Pending writes stay with the old id,
    as for a restore."""
    source = LangGraphCheckpoint.objects.filter(console=checkpoint).first()
    if source is None:
        return
    session = edited.session
    checkpoint_id = next_checkpoint_id(_largest_id(session) or source.checkpoint_id)
    header = jsoncodec.unpack(source.header)
    versions = dict(header.get("channel_versions") or {})
    bumped = _next_version(list(versions.values()))
    header = {
        **header,
        "ts": now.isoformat(),
        "channel_versions": {**versions, **dict.fromkeys(channels, bumped)},
        # None, as update_state leaves it: a resume then considers every node, where a list would limit it to the
        # nodes those channels trigger (and a node waiting on `branch:to:*` would never run)
        "updated_channels": None,
    }
    step = _step(source.metadata)
    metadata: dict[str, Any] = {
        "source": "update",
        "step": (step if step is not None else -1) + 1,
        "parents": source.metadata.get("parents", {}),
        "edited_from": source.checkpoint_id,
        "edited": edited.metadata.get("edited", []),
    }
    reason = edited.metadata.get("reason")
    if isinstance(reason, str) and reason:
        metadata["edit_reason"] = reason  # the runner's get_state_history says why, as the console does
    LangGraphCheckpoint.objects.create(
        console=edited,
        session=session,
        checkpoint_ns=source.checkpoint_ns,
        checkpoint_id=checkpoint_id,
        parent_checkpoint_id=source.checkpoint_id,
        header=jsoncodec.pack(header),
        metadata=metadata,
    )
    nodes = checkpoint.metadata.get(lgnodes.KEY)
    edited.metadata = {
        **edited.metadata,
        "checkpoint_id": checkpoint_id,
        "checkpoint_ns": source.checkpoint_ns,
        # no node wrote it (as for a restore); what the edited checkpoint had next runs next
        lgnodes.KEY: {"ran": [], "next": nodes.get("next", []) if isinstance(nodes, dict) else []},
    }
    Checkpoint.objects.filter(pk=edited.pk).update(metadata=edited.metadata, step=metadata["step"])
    set_head(session)
    # as after a restore: the edit's head has no writes yet, so a failed or waiting thread is active again and
    # its node_error alert resolves (the end-to-end story found it left open)
    session.refresh_from_db(fields=["head", "status"])
    lginterrupts.after_head_moved(session, lginterrupts.head_row(session), resync=True)


def _next_version(versions: list[Any]) -> Any:
    """A channel version above every one of `versions`, in their form: LangGraph compares versions with `>` to
    find what changed; integers (InMemorySaver's early form) count on, strings (ConsoleSaver's, the other savers')
    are a zero-padded counter and a fraction, as `ConsoleSaver.get_next_version` makes them."""
    numbers = [v if isinstance(v, int) else int(str(v).split(".")[0] or 0) for v in versions if _counter(v)]
    top = max(numbers, default=0)
    if versions and all(isinstance(v, int) and not isinstance(v, bool) for v in versions):
        return top + 1
    return f"{top + 1:032}.{0:016}"


def _counter(version: Any) -> bool:
    if isinstance(version, bool):
        return False
    return isinstance(version, int) or (isinstance(version, str) and str(version).split(".")[0].isdigit())


def _add_row(
    source: LangGraphCheckpoint,
    checkpoint: Checkpoint,
    session: AgentSession,
    *,
    checkpoint_id: str,
    metadata: dict[str, Any],
    parent: str | None,
    now: datetime,
) -> None:
    header = {**jsoncodec.unpack(source.header), "ts": now.isoformat()}
    LangGraphCheckpoint.objects.create(
        console=checkpoint,
        session=session,
        checkpoint_ns=source.checkpoint_ns,
        checkpoint_id=checkpoint_id,
        parent_checkpoint_id=parent or "",
        header=jsoncodec.pack(header),
        metadata=metadata,
        run_id=source.run_id,
    )
    nodes = source.console.metadata.get(lgnodes.KEY)
    checkpoint.metadata = {
        **checkpoint.metadata,
        "checkpoint_id": checkpoint_id,
        "checkpoint_ns": source.checkpoint_ns,
        # no node wrote it; what the restored checkpoint had next runs next
        lgnodes.KEY: {"ran": [], "next": nodes.get("next", []) if isinstance(nodes, dict) else []},
    }
    Checkpoint.objects.filter(pk=checkpoint.pk).update(metadata=checkpoint.metadata)
