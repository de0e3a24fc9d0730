"""Storing checkpoints: projects and sessions created on first use, batches ingested in one transaction.

A repeated idempotency key returns the stored checkpoint and adds nothing; a different checkpoint under a
used key is refused.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any, NamedTuple

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.db.models.expressions import DatabaseDefault
from django.utils import timezone

from .. import limits, store
from ..audit import BaseMoved, HistoryPurged, IdempotencyConflict, InvalidInput, InvalidState
from ..fields import escape_text, unescape_text
from ..metrics import record_ingest
from ..models import (
    AgentSession,
    Checkpoint,
    CheckpointKind,
    CheckpointStatus,
    Chunk,
    Project,
    SessionStatus,
    SourceFormat,
)
from ..models.written import Columns
from ..outbox import events
from ..store import arrays, jsoncodec, purging, tallies
from ..store.jsoncodec import InvalidJSON
from ..store.patching import PatchFailed, apply_patch
from ..store.previews import Preview, preview_of
from .drift import detect_after_ingest
from .findings import threshold
from .secrets import Added, scan_ingested


def get_or_create_project(slug: str) -> Project:
    project, _ = Project.objects.get_or_create(slug=slug, defaults={"name": slug})
    return project


def upsert_session(
    project: Project,
    *,
    external_id: str,
    agent: str,
    title: str | None = None,
    execution_mode: str | None = None,
    metadata: dict[str, Any] | None = None,
    merge_metadata: bool = False,
) -> tuple[AgentSession, bool]:
    """Create the session, or update the fields given for an existing one.

    With `merge_metadata` the given keys are added to the stored ones (an incremental import must
    not drop what an earlier one recorded); otherwise they replace them.
    """
    if metadata is not None:
        check_json_field("metadata", metadata)
    if merge_metadata and metadata:
        stored = AgentSession.objects.filter(project=project, external_id=external_id).values_list(
            "metadata", flat=True
        )
        metadata = {**(stored.first() or {}), **metadata}
    updates: dict[str, Any] = {"agent": agent, "updated_at": timezone.now()}
    for name, value in (("title", title), ("execution_mode", execution_mode), ("metadata", metadata)):
        if value is not None:
            updates[name] = value
    session, created = AgentSession.objects.update_or_create(project=project, external_id=external_id, defaults=updates)
    return session, created


# ---- creating checkpoints ----------------------------------------------------------------------


@dataclass
class CheckpointInput:
    state: Any
    name: str = ""
    kind: str = CheckpointKind.STEP
    status: str = CheckpointStatus.COMPLETED
    status_reason: str = ""
    step: int | None = None
    phase: int | None = None
    created_at: datetime | None = None
    idempotency_key: str = ""
    operation_id: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    # Where it hangs in the session's tree. By default after the one before it in the same call, or
    # after the head; else an earlier checkpoint of the session named by id or by idempotency key (stored,
    # or earlier in the same call), or none at all (`new_root`: a new run in the same session).
    parent: int | None = None
    parent_key: str = ""
    new_root: bool = False
    # The state what this checkpoint added is told from, when not its parent's: a LangGraph subgraph's first step
    # holds the conversation its input carried in (in the parent's "__start__"), which it did not add.
    previous: Any = None
    # Instead of `state`: an RFC 6902 patch against the session's head (or the item before it in the same call),
    # which `base` (a checkpoint id) or `base_seq` and `restore_generation` say the agent last saw (else BaseMoved).
    state_patch: list[dict[str, Any]] | None = None
    base: int | None = None
    base_seq: int | None = None
    restore_generation: int | None = None
    # Set by ingest: the head (pk) and restore generation the patch was applied to, checked again under the lock.
    expected_head: tuple[int, int] | None = None


_New = tuple[int, CheckpointInput, store.Saved, Preview]  # a checkpoint to insert: its place in the results

_SESSION_STATUS_FOR: dict[str, SessionStatus] = {
    CheckpointStatus.FAILED: SessionStatus.FAILED,
    CheckpointStatus.HALTED: SessionStatus.HALTED,
}
_STOPPED = set(_SESSION_STATUS_FOR.values())


def create_checkpoint(session: AgentSession, item: CheckpointInput) -> tuple[Checkpoint, bool]:
    """Store one checkpoint after the session's head; returns (checkpoint, created).

    A repeated idempotency key returns the original checkpoint and creates nothing.
    """
    return ingest_checkpoints([(session, [item])])[0]


def ingest_checkpoints(
    groups: Sequence[tuple[AgentSession, Sequence[CheckpointInput]]],
    *,
    now: datetime | None = None,
    savepoint: bool = True,
    locked: bool = False,
    parents: Mapping[int, ParentRow] | None = None,
) -> list[tuple[Checkpoint, bool]]:
    """Store checkpoints for one or more sessions in one transaction: all of them, or none. Called inside a
    transaction, a failure undoes only this call (a savepoint) unless `savepoint` is False: then it undoes the
    caller's whole transaction, as a caller that never goes on after a failure wants (two statements fewer).
    A caller that read the sessions with `AgentSession.objects.locked_for_ingest()` in its transaction says
    `locked`, and one that read the parents its inputs name (checked to be theirs) passes them as `parents`:
    a statement fewer each, for a hot path such as LangGraph's put.

    1. States are stored first, each as a patch against the one before it (outside the session
       lock: content-addressed chunks can be written by anyone at any time).
    2. Under a row lock on each session: next seqs, parents, head, in a few bulk statements.
    """
    started = time.perf_counter()
    now = now or timezone.now()
    results: dict[int, tuple[Checkpoint, bool]] = {}  # position in the input → (checkpoint, created)
    repeats: list[tuple[int, int]] = []
    position = -1
    inputs: dict[int, CheckpointInput] = {}  # the first item of each idempotency key, by position
    with transaction.atomic(savepoint=savepoint):
        batch = store.ChunkBatch()
        planned: list[tuple[AgentSession, list[_New], _Parents]] = []
        for session, items in groups:
            purging.forget_cached_states(session.purge_generation)
            for item in items:
                _check_input(item)
            existing = _existing_by_key(session, [item.idempotency_key for item in items])
            session_parents = _Parents(session, items, parents or {})
            base: bytes | None | Callable[[], bytes | None] = partial(_head_root, session)  # read if needed
            new: list[_New] = []
            first_with_key: dict[str, int] = {}
            for item in items:
                position += 1
                if item.idempotency_key in existing:  # matched before any base is resolved: a retry never reapplies
                    _check_same_checkpoint(existing[item.idempotency_key], item)
                    results[position] = (existing[item.idempotency_key], False)
                    continue
                if item.idempotency_key in first_with_key:  # repeated within this batch
                    first = first_with_key[item.idempotency_key]
                    _check_same_input(inputs[first], item)
                    repeats.append((position, first))
                    continue
                if item.idempotency_key:
                    first_with_key[item.idempotency_key] = position
                    inputs[position] = item
                parent_root = (
                    session_parents.base_for(item, base)
                    if item.state_patch is None
                    else _apply_item_patch(session, item, item.state_patch, base, after_new=bool(new))
                )
                try:
                    saved = store.save_state(item.state, base=parent_root, batch=batch, max_bytes=_max_bytes(item))
                except InvalidJSON as exc:
                    raise InvalidState(str(exc)) from exc
                base = saved.root
                session_parents.saved(item, saved.root)
                previous = item.previous if item.previous is not None else _state_or_none(parent_root)
                new.append((position, item, saved, preview_of(item.state, previous)))
            planned.append((session, new, session_parents))
        recovered: set[int] = set()
        stored: list[tuple[AgentSession, Checkpoint]] = []
        for session, new, found in planned:
            inserted = _insert_checkpoints(session, new, found, now, recovered, read_locked=locked, chunks=batch)
            results.update({at: (checkpoint, created) for at, checkpoint, created in inserted})
            stored += [(session, checkpoint) for _, checkpoint, created in inserted if created]
        batch.flush()  # what no session's lock took with it (every item a repeat)
        scan_ingested(
            [
                Added(session, results[at][0], saved.added, item.metadata)
                for session, new, _ in planned
                for at, item, saved, _ in new
                if results[at][1]
            ],
            now=now,
        )
        events.publish_checkpoints_created(stored)
    seconds = time.perf_counter() - started
    slugs = _project_slugs(session for session, _ in groups)
    ingested = [(slugs[c.session.project_id], c.kind, c.status) for c, created in results.values() if created]
    transaction.on_commit(partial(record_ingest, ingested, seconds))  # counted once it is stored for good
    # Drift detectors that need no state, once committed, only where something alarming arrived (a failed
    # or halted checkpoint, an oversized state) or a failed or halted session goes on healthily (its alert
    # clears): the normal path pays nothing. The rest run in the drift job every few minutes (docs/drift.md).
    max_bytes = threshold("state_max_bytes")
    touched = [
        session.pk for session, new, _ in planned if any(_alarming(item, saved, max_bytes) for _, item, saved, _ in new)
    ]
    touched += sorted(recovered - set(touched))
    if touched:
        transaction.on_commit(lambda: detect_after_ingest(touched))
    for repeat, first in repeats:
        results[repeat] = (results[first][0], False)
    return [results[index] for index in range(position + 1)]


def _max_bytes(item: CheckpointInput) -> int | None:
    """A patched state is held to the size a body may give a whole state (a patch is small, its result need not be)."""
    return settings.CHECKPOINT_MAX_BODY_BYTES if item.state_patch is not None else None


def _project_slugs(sessions: Iterable[AgentSession]) -> dict[int, str]:
    """Project id → slug, for the metrics' labels: from the sessions' projects when loaded, else one query."""
    slugs, missing = {}, set()
    for session in sessions:
        if AgentSession.project.is_cached(session):
            slugs[session.project_id] = session.project.slug
        else:
            missing.add(session.project_id)
    if missing := missing - slugs.keys():
        slugs.update(Project.objects.filter(pk__in=missing).values_list("pk", "slug"))
    return slugs


@transaction.atomic
def take_routine_checkpoint(session: AgentSession, item: CheckpointInput, *, now: datetime) -> bool:
    """Store a checkpoint the routine job took from the live state; returns whether it was new.

    The job took it, not the agent: it is no heartbeat, so `last_seen_at` goes back to what it was (unless the
    agent was heard from meanwhile).
    """
    [(_, created)] = ingest_checkpoints([(session, [item])], now=now)
    if created:
        AgentSession.objects.filter(pk=session.pk, last_seen_at=now).update(last_seen_at=session.last_seen_at)
    return created


def _state_or_none(root: bytes | None) -> Any:
    """The parent's state to tell what a checkpoint added (in the store's memory: it was just patched against)."""
    try:
        return store.load_shared(root) if root is not None else None
    except store.StateNotFound:
        return None


def _check_input(item: CheckpointInput) -> None:
    """What the API's schema checks, for every other caller too (importers, commands)."""
    try:
        if item.created_at is not None:
            item.created_at = limits.as_utc(item.created_at)
    except limits.OutOfRange as exc:
        raise InvalidInput("created_at", str(exc)) from None
    for name in ("step", "phase"):
        try:
            limits.check_int(getattr(item, name))
        except limits.OutOfRange as exc:
            raise InvalidInput(name, str(exc)) from None
    check_json_field("metadata", item.metadata)
    if item.state_patch is not None and (item.parent is not None or item.parent_key or item.new_root):
        raise InvalidInput("state_patch", "a patch applies to the head (or to `base`): give no parent with it")
    if item.state_patch is None and (item.base is not None or item.base_seq is not None):
        raise InvalidInput("base", "base goes with a state_patch")
    if item.base is not None and item.base_seq is not None:
        raise InvalidInput("base", "name the base by id or by seq, not both")
    if sum((item.parent is not None, bool(item.parent_key), item.new_root)) > 1:
        raise InvalidInput("parent", "give a parent id, a parent key or a new root, not several")


def _apply_item_patch(
    session: AgentSession,
    item: CheckpointInput,
    operations: list[dict[str, Any]],
    previous: bytes | None | Callable[[], bytes | None],
    *,
    after_new: bool,
) -> bytes:
    """Resolve the patch's base, check it is what the agent last saw, and set `item.state` to the patched state;
    returns the base's root (the new state is stored against it). An item after a new one of the same session in
    the same call patches that one (`previous`); the first patches the head."""
    if after_new:
        if item.base is not None or item.base_seq is not None:
            raise InvalidInput("base", "an item after another of its session in one call patches that one: no base")
        root = previous() if callable(previous) else previous
        if root is None:  # not reached: the item before it was stored against something
            raise InvalidInput("state_patch", "no state to patch")
    else:
        head = _head_for_patch(session)
        generation = session.restore_generation
        if item.base is not None or item.base_seq is not None:
            _check_base_named(session, item, head)
        if head is None:
            raise InvalidInput("state_patch", "the session has no checkpoint to patch yet: send a full state first")
        if item.restore_generation is not None and item.restore_generation != generation:
            raise BaseMoved(head_id=head.pk, head_seq=head.seq, restore_generation=generation)
        item.expected_head = (head.pk, generation)
        root = bytes(head.root)
    try:
        item.state = apply_patch(store.load_shared(root), operations)
    except PatchFailed as exc:
        raise InvalidInput("state_patch", str(exc)) from None
    except store.StateNotFound as exc:
        raise InvalidState(f"the base's state cannot be read: {exc}") from exc
    return root


def _head_for_patch(session: AgentSession) -> Checkpoint | None:
    if not AgentSession.head.is_cached(session):
        found = Checkpoint.objects.filter(pk=session.head_id).only("pk", "seq", "root") if session.head_id else None
        session.head = found.first() if found is not None else None
    return session.head


def _check_base_named(session: AgentSession, item: CheckpointInput, head: Checkpoint | None) -> None:
    """The base the agent names must be the head: another checkpoint of the session means the head moved (409),
    one that is not the session's is a bad request (422)."""
    if head is not None and (item.base == head.pk or item.base_seq == head.seq):
        return
    named = Q(pk=item.base) if item.base is not None else Q(seq=item.base_seq)
    if not Checkpoint.objects.filter(named, session=session).exists():
        which = f"checkpoint {item.base}" if item.base is not None else f"seq {item.base_seq}"
        raise InvalidInput("base", f"{which} is not a checkpoint of this session")
    raise BaseMoved(
        head_id=head.pk if head else None, head_seq=head.seq if head else None,
        restore_generation=session.restore_generation,
    )  # fmt: skip


def _patched_like(existing: Checkpoint, item: CheckpointInput) -> Any:
    """The state a retried patch stood for: applied to the base it names, else to the parent of the checkpoint its
    key stored (a retry after a lost answer then matches it, whatever the head is now; a repeat sent against the
    checkpoint it made, too); None when it does not apply (a different one)."""
    if item.base is not None or item.base_seq is not None:
        named = Q(pk=item.base) if item.base is not None else Q(seq=item.base_seq)
        base = Checkpoint.objects.filter(named, session_id=existing.session_id)
    elif existing.parent_id is not None:
        base = Checkpoint.objects.filter(pk=existing.parent_id)
    else:
        return None
    root = base.values_list("root", flat=True).first()
    if root is None or item.state_patch is None:
        return None
    try:
        return apply_patch(store.load_shared(bytes(root)), item.state_patch)
    except (PatchFailed, store.StateNotFound):
        return None


class ParentRow(NamedTuple):
    """What ingest reads of a parent checkpoint."""

    seq: int
    root: bytes
    calls_made: int | None


class _Parents:
    """The stored checkpoints that inputs name as parents: checked to be the session's, with seq and root."""

    def __init__(self, session: AgentSession, items: Sequence[CheckpointInput], known: Mapping[int, ParentRow]) -> None:
        self.by_id: dict[int, ParentRow] = dict(known)
        ids = {item.parent for item in items if item.parent is not None} - self.by_id.keys()
        keys = {item.parent_key for item in items if item.parent_key}
        self.by_key: dict[str, int] = {}  # idempotency key → pk
        if ids or keys:
            rows = Checkpoint.objects.filter(session=session).filter(Q(pk__in=ids) | Q(idempotency_key__in=keys))
            for pk, seq, key, root, calls in rows.values_list("pk", "seq", "idempotency_key", "root", "calls_made"):
                self.by_id[pk] = ParentRow(seq, bytes(root), calls)
                if key:
                    self.by_key[key] = pk
        if missing := sorted(ids - self.by_id.keys()):
            raise InvalidInput("parent", f"checkpoint {missing[0]} is not a checkpoint of this session")
        self.batch_roots: dict[str, bytes] = {}  # idempotency key → root, of inputs earlier in this call

    def base_for(self, item: CheckpointInput, previous: bytes | None | Callable[[], bytes | None]) -> bytes | None:
        """The root to store the item's state against: its parent's, the likeliest to be close. `previous`
        (the one before it, or a function reading the head's) serves an item that names no parent."""
        if item.new_root:
            return None
        if item.parent is not None:
            return self.by_id[item.parent].root
        if item.parent_key:
            if item.parent_key in self.batch_roots:
                return self.batch_roots[item.parent_key]
            if item.parent_key not in self.by_key:
                raise InvalidInput("parent_key", f"no checkpoint of this session has the key {item.parent_key!r}")
            return self.by_id[self.by_key[item.parent_key]].root
        return previous() if callable(previous) else previous

    def saved(self, item: CheckpointInput, root: bytes) -> None:
        if item.idempotency_key:
            self.batch_roots[item.idempotency_key] = root


def check_json_field(name: str, value: Any) -> None:
    """A JSON column's value: plain JSON (any text, any integer) nested no deeper than the states may be."""
    try:
        jsoncodec.check_value(value, max_depth=settings.CHECKPOINT_MAX_DEPTH)
    except InvalidJSON as exc:
        raise InvalidInput(name, str(exc)) from None


# compared as they are; metadata is compared without where the file lay (_located)
_COMPARED = ("name", "kind", "status", "status_reason", "step", "phase", "operation_id")


def _state_digest(state: Any) -> bytes:
    try:
        return store.state_digest(state)
    except InvalidJSON as exc:
        raise InvalidState(str(exc)) from exc


def _located(metadata: Any) -> Any:
    """Metadata without where an importer found the file: the same checkpoint may be read from another place."""
    return {k: v for k, v in metadata.items() if k != "source_path"} if isinstance(metadata, dict) else metadata


def checkpoint_differences(existing: Checkpoint, item: CheckpointInput) -> list[str]:
    """The fields in which `item` is not the stored checkpoint `existing` (none: it is the same one)."""
    differ = [name for name in _COMPARED if getattr(existing, name) != getattr(item, name)]
    if _located(existing.metadata) != _located(item.metadata):
        differ.append("metadata")
    if item.parent is not None and item.parent != existing.parent_id:
        differ.append("parent")
    if item.created_at is not None and item.created_at != existing.created_at:
        differ.append("created_at")
    if _state_digest(item.state) != bytes(existing.state_hash):
        differ.append("state")
    return differ


def _check_same_checkpoint(existing: Checkpoint, item: CheckpointInput) -> None:
    """A retry must repeat its request: a different checkpoint under a used key is refused, not dropped."""
    if item.state_patch is not None and item.expected_head is None:  # a retried patch: what it stood for then
        item.state = _patched_like(existing, item)
    if differ := checkpoint_differences(existing, item):
        raise IdempotencyConflict(
            f"idempotency key {item.idempotency_key!r} was used for checkpoint #{existing.seq} with a different "
            f"{', '.join(differ)}; send a new key for a new checkpoint",
            differences=differ,
            seq=existing.seq,
        )


def _check_same_input(first: CheckpointInput, item: CheckpointInput) -> None:
    differ = [name for name in (*_COMPARED, "created_at") if getattr(first, name) != getattr(item, name)]
    if _located(first.metadata) != _located(item.metadata):
        differ.append("metadata")
    if first.state_patch is not None or item.state_patch is not None:
        patches = [(i.state_patch, i.base, i.base_seq, i.restore_generation) for i in (first, item)]
        if patches[0] != patches[1]:
            differ.append("state")
    elif _state_digest(first.state) != _state_digest(item.state):
        differ.append("state")
    if differ:
        raise IdempotencyConflict(
            f"idempotency key {item.idempotency_key!r} appears twice in the batch with a different {', '.join(differ)}",
            differences=differ,
        )


def _alarming(item: CheckpointInput, saved: store.Saved, max_bytes: int) -> bool:
    return item.status in _SESSION_STATUS_FOR or saved.raw_bytes > max_bytes


def _existing_by_key(session: AgentSession, keys: list[str]) -> dict[str, Checkpoint]:
    wanted = {key for key in keys if key}
    if not wanted:
        return {}
    found = _keyed_ids(session.pk, wanted)
    if not found:  # the usual answer: the rows (a retry's) are read only when there are some
        return {}
    rows = Checkpoint.objects.filter(pk__in=found.values()).select_related("session")
    return {checkpoint.idempotency_key: checkpoint for checkpoint in rows}


def _keyed_ids(session_id: int, keys: Collection[str]) -> dict[str, int]:
    """Idempotency key → id of the session's checkpoints stored under `keys`, in a statement written out: every
    create asks twice (before storing its state and again under the lock), and the ORM spent ten times the
    database's time building the statement (1.2–1.8 ms a look-up against 0.12–0.16 ms, bench/load.py's agents)."""
    table = connection.ops.quote_name(Checkpoint._meta.db_table)
    marks = ", ".join(["%s"] * len(keys))
    sql = f"SELECT idempotency_key, id FROM {table} WHERE session_id = %s AND idempotency_key IN ({marks})"  # noqa: S608 - the table's quoted name and placeholders; values are parameters
    with connection.cursor() as cursor:
        cursor.execute(sql, [session_id, *(escape_text(key) for key in keys)])
        return {unescape_text(key): pk for key, pk in cursor.fetchall()}


def locked_for_ingest(where: str, params: list[Any], *, before: str = "") -> AgentSession | None:
    """`AgentSession.objects.locked_for_ingest()`'s row that `where` picks (`{table}` names the sessions' table), in
    a statement written out: the same row lock and the head's `head_seq` and `head_calls`. Every create and every
    LangGraph put reads it, and the ORM spent more CPU building the statement than the database running it.
    `before` goes ahead of the SELECT (a WITH of `arrays.statement` whose parameters lead `params`: the statement is
    bound on the server)."""
    found = _session_and_head("h.seq, h.calls_made", where, params, before=before, lock=True)
    if found is None:
        return None
    session, head = found
    session.head_seq, session.head_calls = head  # type: ignore[attr-defined]  # the join's, as raw() set them
    return session


def session_with_head(project: Project, external_id: str) -> AgentSession | None:
    """The project's session of that id with its head's id, seq and root (what a create reads of it: the base of a
    patch and of the next state), in one statement written out; the session's `project` is `project`."""
    where = "{table}.project_id = %s AND {table}.external_id = %s"
    found = _session_and_head("h.seq, h.root", where, [project.pk, escape_text(external_id)])
    if found is None:
        return None
    session, (head_seq, head_root) = found
    session.project = project
    head = None
    if session.head_id is not None:
        known = {"id": session.head_id, "session_id": session.pk, "seq": head_seq, "root": head_root}
        fields = [f.attname for f in Checkpoint._meta.concrete_fields if f.attname in known]
        head = Checkpoint.from_db(connection.alias, fields, [known[name] for name in fields])  # the rest deferred
    session.head = head
    return session


_SESSION = Columns(AgentSession, AgentSession._meta.db_table)


def _session_and_head(
    head_columns: str, where: str, params: list[Any], *, before: str = "", lock: bool = False
) -> tuple[AgentSession, tuple[Any, ...]] | None:
    """The session `where` picks, built as the ORM would, and `head_columns` of its head (`h`; NULLs without one),
    in one statement; `lock` takes ingest's row lock on PostgreSQL."""
    quote = connection.ops.quote_name
    table, checkpoints = quote(AgentSession._meta.db_table), quote(Checkpoint._meta.db_table)
    locking = f" FOR NO KEY UPDATE OF {table}" if lock and connection.vendor == "postgresql" else ""
    sql = (
        f"{before}SELECT {_SESSION.sql(connection)}, {head_columns} FROM {table}"  # noqa: S608 - the tables' quoted names and fixed columns; values are parameters
        f" LEFT OUTER JOIN {checkpoints} h ON {table}.head_id = h.id WHERE {where.format(table=table)}{locking}"
    )
    with arrays.cursor() if before else connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        return None
    return _SESSION.build(connection, row[: _SESSION.width]), tuple(row[_SESSION.width :])


def _head_root(session: AgentSession) -> bytes | None:
    """The root to store the next state against: the session's head.

    Any stored root is a correct base (a patch names its base); the head is merely the likeliest to
    be close. A head already loaded with the session (the API loads it) saves a query.
    """
    if AgentSession.head.is_cached(session):
        return bytes(session.head.root) if session.head is not None else None
    root = AgentSession.objects.filter(pk=session.pk).values_list("head__root", flat=True).first()
    return bytes(root) if root is not None else None


def _insert_checkpoints(
    session: AgentSession,
    new: list[_New],
    parents: _Parents,
    now: datetime,
    recovered: set[int],
    *,
    read_locked: bool,
    chunks: store.ChunkBatch,
) -> list[tuple[int, Checkpoint, bool]]:
    """Insert under the session's row lock (`read_locked`: `session` was read under it), with the `chunks` the states
    need; adds the session to `recovered` when it was failed or halted and its new head is healthy (the run went on:
    it is active again)."""
    if not new:
        return []
    if read_locked:
        chunks.flush()
    locked: Any = session if read_locked else _lock_for_ingest(session.pk, chunks)
    if locked.purge_generation != session.purge_generation:  # the states were stored against a purged head
        raise HistoryPurged
    # A concurrent writer may have used the same idempotency key while we stored states.
    taken = _existing_by_key(locked, [item.idempotency_key for _, item, _, _ in new])
    rows: list[Checkpoint] = []
    positions: list[int] = []
    row_of_key: dict[str, int] = {}  # idempotency key → index in rows
    parent_rows: dict[int, int] = {}  # index in rows → index of its parent in rows (not stored yet)
    seq = locked.last_seq
    status = locked.status
    head = _Parent(pk=locked.head_id, seq=locked.head_seq, calls=locked.head_calls if locked.head_id else 0)
    results: list[tuple[int, Checkpoint, bool]] = []
    for position, item, saved, preview in new:
        if item.idempotency_key and item.idempotency_key in taken:
            _check_same_checkpoint(taken[item.idempotency_key], item)
            results.append((position, taken[item.idempotency_key], False))
            continue
        if item.expected_head is not None and item.expected_head != (locked.head_id, locked.restore_generation):
            # moved while the state was stored (a restore or another writer): the transaction undoes it all
            raise BaseMoved(head_id=locked.head_id, head_seq=head.seq, restore_generation=locked.restore_generation)
        seq += 1
        parent = _parent_of(item, head, parents, taken, rows, row_of_key)
        if parent.row is not None:
            parent_rows[len(rows)] = parent.row
        if item.idempotency_key:
            row_of_key[item.idempotency_key] = len(rows)
        rows.append(
            Checkpoint(
                session=locked,
                seq=seq,
                parent_id=parent.pk,
                starts_branch=seq > 1 and parent.seq != seq - 1,
                name=item.name,
                kind=item.kind,
                status=item.status,
                status_reason=item.status_reason,
                step=item.step,
                phase=item.phase,
                created_at=item.created_at or now,
                received_at=now,
                root=saved.root,
                state_hash=saved.state_hash,
                raw_bytes=saved.raw_bytes,
                stored_bytes=saved.stored_bytes,
                calls_made=None if parent.calls is None else parent.calls + preview.tool_calls,
                preview=preview.text,
                tool_failed=preview.tool_failed,
                operation_id=item.operation_id,
                idempotency_key=item.idempotency_key,
                metadata=item.metadata,
            )
        )
        positions.append(position)
        status = _SESSION_STATUS_FOR.get(item.status) or (SessionStatus.ACTIVE if status in _STOPPED else status)
    if not rows:
        return results
    if locked.source_format == SourceFormat.LANGGRAPH:
        _mark_subgraph_hops(rows, parent_rows)
    _bulk_insert(rows, parent_rows)
    tallies.count_in(rows, last_seq=seq, head=rows[-1], status=status, updated_at=now, last_seen_at=now)
    session.last_seq, session.head, session.status = seq, rows[-1], status
    session.restore_generation = locked.restore_generation
    if locked.status in _STOPPED and status not in _STOPPED:
        recovered.add(locked.pk)
    return results + [(position, row, True) for position, row in zip(positions, rows, strict=True)]


def _lock_for_ingest(pk: int, chunks: store.ChunkBatch) -> AgentSession:
    """The session read under ingest's row lock (`locked_for_ingest`), with the chunks waiting inserted first. On
    PostgreSQL in one statement (the insert a WITH of the locking SELECT: a round trip fewer a create)."""
    before, params = "", list[Any]()
    if connection.vendor != "postgresql":
        chunks.flush()
    elif waiting := chunks.take():
        insert, params = arrays.statement(Chunk, waiting, ignore_conflicts=True)
        before = f"WITH chunks AS ({insert}) "
    found = locked_for_ingest("{table}.id = %s", [*params, pk], before=before)
    if found is None:
        raise AgentSession.DoesNotExist(f"no session {pk}")
    chunks.flush_rewrites()  # a keyframe's segment, compressed again (store._rebase), after the D node went in
    return found


def _mark_subgraph_hops(rows: list[Checkpoint], parent_rows: dict[int, int]) -> None:
    """Mark the branch starts of a LangGraph thread that are no branch of its path, so that the timeline lays out
    only the real ones (`path_points`): a subgraph's checkpoints share the thread's seqs, so its run's first (a new
    root in its namespace) and the root graph's next checkpoint (whose parent is older than the run) both start a
    branch. The latter only continues its parent when it is that parent's first child; a later one is time travel.
    One query, on the parents' index, for the root-graph candidates."""

    def parent_key(index: int) -> int | tuple[str, int] | None:
        return ("row", parent_rows[index]) if index in parent_rows else rows[index].parent_id

    candidates: set[int] = set()
    for index, row in enumerate(rows):
        if not row.starts_branch:
            continue
        if isinstance(row.metadata, dict) and row.metadata.get("checkpoint_ns"):
            row.subgraph_hop = True
        elif row.kind != CheckpointKind.RESTORE and parent_key(index) is not None:
            candidates.add(index)
    if not candidates:
        return
    stored = {rows[index].parent_id for index in candidates if index not in parent_rows}
    parented = set(
        Checkpoint.objects.filter(parent_id__in=stored)
        .exclude(kind=CheckpointKind.RESTORE)
        .values_list("parent_id", flat=True)
    )
    for index, row in enumerate(rows):
        key = parent_key(index)
        if index in candidates and key not in parented:
            row.subgraph_hop = True
        if row.kind != CheckpointKind.RESTORE and key is not None:
            parented.add(key)


def _bulk_insert(rows: list[Checkpoint], parent_rows: dict[int, int]) -> None:
    """Insert `rows`; `parent_rows` (index in rows → index of its parent in rows) links the rows whose parent is
    inserted with them."""
    ids = _reserve_checkpoint_ids(len(rows)) if parent_rows else []  # else the insert's own ids will do
    if ids:
        for row, pk in zip(rows, ids, strict=True):
            row.pk = pk
        for child, parent in parent_rows.items():
            rows[child].parent_id = ids[parent]
    if connection.vendor == "postgresql" and not any(isinstance(v, DatabaseDefault) for v in _db_defaulted(rows)):
        arrays.insert(Checkpoint, rows, with_ids=bool(ids))
    else:
        Checkpoint.objects.bulk_create(rows, batch_size=500)
    if not ids:  # parents stored in the same statement: their ids are known now
        for child, parent in parent_rows.items():
            rows[child].parent_id = rows[parent].pk
        Checkpoint.objects.bulk_update([rows[child] for child in parent_rows], ["parent"], batch_size=500)


@dataclass(frozen=True)
class _Parent:
    """Where a new checkpoint hangs: a stored checkpoint (`pk`), one inserted in the same statement (`row`, its
    index among the rows), or nothing (a new root); with the parent's seq and calls_made."""

    pk: int | None = None
    row: int | None = None
    seq: int | None = None
    calls: int | None = 0


def _parent_of(
    item: CheckpointInput,
    head: _Parent,
    parents: _Parents,
    taken: dict[str, Checkpoint],
    rows: list[Checkpoint],
    row_of_key: dict[str, int],
) -> _Parent:
    """The parent `_insert_checkpoints` gives `item`: as named by id or key, else the one before it in the call,
    else the session's head."""
    if item.parent is not None:
        seq, _, calls = parents.by_id[item.parent]
        return _Parent(pk=item.parent, seq=seq, calls=calls)
    if item.parent_key and item.parent_key not in row_of_key:
        stored = taken.get(item.parent_key)  # a concurrent writer may have stored the parent meanwhile
        if stored is not None:
            return _Parent(pk=stored.pk, seq=stored.seq, calls=stored.calls_made)
        pk = parents.by_key[item.parent_key]
        seq, _, calls = parents.by_id[pk]
        return _Parent(pk=pk, seq=seq, calls=calls)
    if item.parent_key or (not item.new_root and rows):
        index = row_of_key[item.parent_key] if item.parent_key else len(rows) - 1
        return _Parent(row=index, seq=rows[index].seq, calls=rows[index].calls_made)
    return _Parent() if item.new_root else head


def _db_defaulted(rows: list[Checkpoint]) -> Iterator[Any]:
    """The values of the columns with a database default: a row built without one holds DatabaseDefault, which
    only bulk_create turns into DEFAULT."""
    for column in _DB_DEFAULTED:
        for row in rows:
            yield getattr(row, column.attname)


_DB_DEFAULTED = [f for f in Checkpoint._meta.concrete_fields if f.has_db_default()]


def _reserve_checkpoint_ids(count: int) -> list[int]:
    """Ids for `count` checkpoints about to be inserted, on PostgreSQL, so that a row whose parent is stored in
    the same statement is written once: setting `parent` afterwards would write every such row again (an indexed
    column: no HOT update, one dead row per checkpoint). Empty where ids come only from the insert (SQLite)."""
    if connection.vendor != "postgresql":
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT nextval(pg_get_serial_sequence(%s, 'id')) FROM generate_series(1, %s) ORDER BY 1",
            [Checkpoint._meta.db_table, count],
        )
        return [pk for (pk,) in cursor.fetchall()]


def record_live_state(session: AgentSession, *, state: Any, now: datetime | None = None) -> AgentSession:
    """A heartbeat with the agent's current state; routine checkpoints are taken from it."""
    now = now or timezone.now()
    base = bytes(session.live_root) if session.live_root else _head_root(session)
    try:
        saved = store.save_state(state, base=base)
    except InvalidJSON as exc:
        raise InvalidState(str(exc)) from exc
    fields = {"live_state_at": now, "last_seen_at": now, "updated_at": now}
    # A purge may have rewritten the session's history (and deleted the old live root) since it was read.
    if not AgentSession.objects.filter(pk=session.pk, purge_generation=session.purge_generation).update(
        live_root=saved.root, **fields
    ):
        saved = store.save_state(state)
        AgentSession.objects.filter(pk=session.pk).update(live_root=saved.root, **fields)
    session.live_root, session.live_state_at, session.last_seen_at = saved.root, now, now
    return session
