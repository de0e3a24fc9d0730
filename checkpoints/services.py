"""Operations on sessions and checkpoints, shared by the API, the console, commands and jobs.

Each write is one transaction and records its AuditEvent in it. Nothing here deletes history:
restore and fork add checkpoints that share the target's stored state.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import F, Field, Max, Min, Model, Q
from django.utils import timezone

from . import jsoncodec, limits, store, tallies
from .diff import Diff, diff_states
from .history import Discards, discards
from .jsoncodec import InvalidJSON
from .models import (
    AgentSession,
    AlertState,
    ApiToken,
    AuditEvent,
    Checkpoint,
    CheckpointKind,
    CheckpointStatus,
    DriftAlert,
    Project,
    SessionCount,
    SessionStatus,
    TalliedField,
)
from .previews import Preview, preview_of

if TYPE_CHECKING:
    from django.contrib.auth.models import User


class CheckpointError(Exception):
    """A domain rule refused the operation; the message is meant for the operator or agent."""


class InvalidState(CheckpointError):
    pass


class InvalidInput(CheckpointError):
    """A field's value is outside what can be stored (a time out of range, a step beyond 32 bits…)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class IdempotencyConflict(CheckpointError):
    """An idempotency key seen before came with a different checkpoint."""

    def __init__(self, message: str, *, differences: Sequence[str] = (), seq: int | None = None) -> None:
        super().__init__(message)
        self.differences = list(differences)  # the fields that differ ("state", "created_at", …)
        self.seq = seq  # the stored checkpoint holding the key, when there is one


class NothingToUndo(CheckpointError):
    pass


@dataclass(frozen=True)
class Actor:
    """Who acts: a console user, an API token, or the system (jobs and commands)."""

    label: str
    user: User | None = None
    token: ApiToken | None = None

    @classmethod
    def system(cls, label: str = "system") -> Actor:
        return cls(label=label)

    @classmethod
    def for_user(cls, user: User) -> Actor:
        return cls(label=user.get_username(), user=user)

    @classmethod
    def for_token(cls, token: ApiToken) -> Actor:
        return cls(label=f"token:{token.name}", token=token)


def _max_length(model: type[Model], name: str) -> int:
    """A CharField's max_length, to cut a generated value to what the column holds."""
    field = model._meta.get_field(name)
    if not isinstance(field, Field) or field.max_length is None:
        raise TypeError(f"{model.__name__}.{name} has no max_length")
    return field.max_length


TARGET_MAX = _max_length(AuditEvent, "target")


class AuditFields(TypedDict, total=False):
    """What an audit row says besides who did what: `record_audit` and `audit_event` take the same."""

    project: Project | None
    session: AgentSession | None
    checkpoint: Checkpoint | None
    target: str
    reason: str
    details: dict[str, Any] | None
    now: datetime | None


def record_audit(actor: Actor, action: str, **fields: Unpack[AuditFields]) -> AuditEvent:
    event = audit_event(actor, action, **fields)
    event.save()
    return event


def audit_event(
    actor: Actor,
    action: str,
    *,
    project: Project | None = None,
    session: AgentSession | None = None,
    checkpoint: Checkpoint | None = None,
    target: str = "",
    reason: str = "",
    details: dict[str, Any] | None = None,
    now: datetime | None = None,
) -> AuditEvent:
    """The AuditEvent `record_audit` saves, unsaved: for a job that writes many in one statement."""
    # the session's project by id: a job auditing many sessions does not load each one's project
    project_id = project.pk if project is not None else session.project_id if session is not None else None
    return AuditEvent(
        actor_user=actor.user,
        actor_token=actor.token,
        actor=actor.label,
        action=action,
        project_id=project_id,
        session=session,
        checkpoint=checkpoint,
        target=(target or (str(checkpoint) if checkpoint else str(session) if session else ""))[:TARGET_MAX],
        reason=reason,
        details=details or {},
        created_at=now or timezone.now(),
    )


# ---- projects, sessions, tokens ----------------------------------------------------------------


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


@transaction.atomic
def create_api_token(
    project: Project,
    *,
    name: str,
    read_only: bool = False,
    expires_in: timedelta | None = None,
    actor: Actor | None = None,
    now: datetime | None = None,
) -> tuple[ApiToken, str]:
    """Return the token row and its secret; the secret is shown once and only its hash is kept."""
    now = now or timezone.now()
    prefix = secrets.token_hex(4)
    secret = f"cpk_{prefix}_{secrets.token_urlsafe(32)}"
    token = ApiToken.objects.create(
        project=project,
        name=name,
        prefix=prefix,
        token_hash=hash_token(secret),
        scopes=["read"] if read_only else ["read", "write"],
        created_at=now,
        expires_at=now + expires_in if expires_in else None,
    )
    if actor is not None:
        expires = token.expires_at.isoformat() if token.expires_at else None
        record_audit(
            actor,
            "token_created",
            project=project,
            target=str(token),
            details={"scopes": token.scopes, "expires_at": expires},
        )
    return token, secret


def hash_token(secret: str) -> str:
    # Tokens carry 256 random bits: a fast hash is enough, as for GitHub's tokens.
    return hashlib.sha256(secret.encode()).hexdigest()


def authenticate_token(secret: str, *, now: datetime | None = None) -> ApiToken | None:
    now = now or timezone.now()
    token = ApiToken.objects.usable(now=now).select_related("project").filter(token_hash=hash_token(secret)).first()
    if token is not None and (token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60):
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token


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
    groups: Sequence[tuple[AgentSession, Sequence[CheckpointInput]]], *, now: datetime | None = None
) -> list[tuple[Checkpoint, bool]]:
    """Store checkpoints for one or more sessions in one transaction: all of them, or none.

    1. States are stored first, each as a patch against the one before it (outside the session
       lock: content-addressed chunks can be written by anyone at any time).
    2. Under a row lock on each session: next seqs, parents, head, in a few bulk statements.
    """
    now = now or timezone.now()
    results: dict[int, tuple[Checkpoint, bool]] = {}  # position in the input → (checkpoint, created)
    repeats: list[tuple[int, int]] = []
    position = -1
    inputs: dict[int, CheckpointInput] = {}  # the first item of each idempotency key, by position
    with transaction.atomic():
        batch = store.ChunkBatch()
        planned: list[tuple[AgentSession, list[_New], _Parents]] = []
        for session, items in groups:
            for item in items:
                _check_input(item)
            existing = _existing_by_key(session, [item.idempotency_key for item in items])
            parents = _Parents(session, items)
            base = _head_root(session)
            new: list[_New] = []
            first_with_key: dict[str, int] = {}
            for item in items:
                position += 1
                if item.idempotency_key in existing:
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
                parent_root = parents.base_for(item, base)
                try:
                    saved = store.save_state(item.state, base=parent_root, batch=batch)
                except InvalidJSON as exc:
                    raise InvalidState(str(exc)) from exc
                base = saved.root
                parents.saved(item, saved.root)
                new.append((position, item, saved, preview_of(item.state, _state_or_none(parent_root))))
            planned.append((session, new, parents))
        batch.flush()
        recovered: set[int] = set()
        for session, new, parents in planned:
            for at, checkpoint, created in _insert_checkpoints(session, new, parents, now, recovered):
                results[at] = (checkpoint, created)
    # Drift detectors that need no state, once committed, only where something alarming arrived (a failed
    # or halted checkpoint, an oversized state) or a failed or halted session goes on healthily (its alert
    # clears): the normal path pays nothing. The rest run in the drift job every few minutes (DESIGN section 7).
    touched = [session.pk for session, new, _ in planned if any(_alarming(item, saved) for _, item, saved, _ in new)]
    touched += sorted(recovered - set(touched))
    if touched:
        from .drift import detect_after_ingest

        transaction.on_commit(lambda: detect_after_ingest(touched))
    for repeat, first in repeats:
        results[repeat] = (results[first][0], False)
    return [results[index] for index in range(position + 1)]


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
    if sum((item.parent is not None, bool(item.parent_key), item.new_root)) > 1:
        raise InvalidInput("parent", "give a parent id, a parent key or a new root, not several")


class _Parents:
    """The stored checkpoints that inputs name as parents: checked to be the session's, with seq and root."""

    def __init__(self, session: AgentSession, items: Sequence[CheckpointInput]) -> None:
        ids = {item.parent for item in items if item.parent is not None}
        keys = {item.parent_key for item in items if item.parent_key}
        self.by_id: dict[int, tuple[int, bytes, int | None]] = {}  # pk → (seq, root, calls_made)
        self.by_key: dict[str, int] = {}  # idempotency key → pk
        if ids or keys:
            rows = Checkpoint.objects.filter(session=session).filter(Q(pk__in=ids) | Q(idempotency_key__in=keys))
            for pk, seq, key, root, calls in rows.values_list("pk", "seq", "idempotency_key", "root", "calls_made"):
                self.by_id[pk] = (seq, bytes(root), calls)
                if key:
                    self.by_key[key] = pk
        if missing := sorted(ids - self.by_id.keys()):
            raise InvalidInput("parent", f"checkpoint {missing[0]} is not a checkpoint of this session")
        self.batch_roots: dict[str, bytes] = {}  # idempotency key → root, of inputs earlier in this call

    def base_for(self, item: CheckpointInput, previous: bytes | None) -> bytes | None:
        """The root to store the item's state against: its parent's, the likeliest to be close."""
        if item.new_root:
            return None
        if item.parent is not None:
            return self.by_id[item.parent][1]
        if item.parent_key:
            if item.parent_key in self.batch_roots:
                return self.batch_roots[item.parent_key]
            if item.parent_key not in self.by_key:
                raise InvalidInput("parent_key", f"no checkpoint of this session has the key {item.parent_key!r}")
            return self.by_id[self.by_key[item.parent_key]][1]
        return previous

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
        return store.digest(jsoncodec.encode(state)[0])
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
    if _state_digest(first.state) != _state_digest(item.state):
        differ.append("state")
    if differ:
        raise IdempotencyConflict(
            f"idempotency key {item.idempotency_key!r} appears twice in the batch with a different {', '.join(differ)}",
            differences=differ,
        )


def _alarming(item: CheckpointInput, saved: store.Saved) -> bool:
    return item.status in _SESSION_STATUS_FOR or saved.raw_bytes > settings.DRIFT_STATE_MAX_BYTES


def _existing_by_key(session: AgentSession, keys: list[str]) -> dict[str, Checkpoint]:
    wanted = {key for key in keys if key}
    if not wanted:
        return {}
    found = Checkpoint.objects.filter(session=session, idempotency_key__in=wanted).select_related("session")
    return {checkpoint.idempotency_key: checkpoint for checkpoint in found}


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
) -> list[tuple[int, Checkpoint, bool]]:
    """Insert under the session's row lock; adds the session to `recovered` when it was failed or halted and
    its new head is healthy (the run went on: the session is active again)."""
    if not new:
        return []
    locked = (
        AgentSession.objects.select_for_update(of=("self",))
        .annotate(head_seq=F("head__seq"), head_calls=F("head__calls_made"))
        .get(pk=session.pk)
    )
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
    _bulk_insert(rows, parent_rows)
    tallies.count_in(rows, last_seq=seq, head=rows[-1], status=status, updated_at=now, last_seen_at=now)
    session.last_seq, session.head, session.status = seq, rows[-1], status
    if locked.status in _STOPPED and status not in _STOPPED:
        recovered.add(locked.pk)
    return results + [(position, row, True) for position, row in zip(positions, rows, strict=True)]


def _bulk_insert(rows: list[Checkpoint], parent_rows: dict[int, int]) -> None:
    """Insert `rows`; `parent_rows` (index in rows → index of its parent in rows) links the rows whose parent is
    inserted with them."""
    ids = _reserve_checkpoint_ids(len(rows))
    if ids:
        for row, pk in zip(rows, ids, strict=True):
            row.pk = pk
        for child, parent in parent_rows.items():
            rows[child].parent_id = ids[parent]
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
    AgentSession.objects.filter(pk=session.pk).update(
        live_root=saved.root, live_state_at=now, last_seen_at=now, updated_at=now
    )
    session.live_root, session.live_state_at, session.last_seen_at = saved.root, now, now
    return session


# ---- operator actions --------------------------------------------------------------------------


@transaction.atomic
def restore_checkpoint(
    checkpoint: Checkpoint, *, actor: Actor, reason: str = "", now: datetime | None = None
) -> Checkpoint:
    """Make `checkpoint` the state the agent resumes from, without deleting anything.

    1. A new `restore` checkpoint R, child of the target, sharing its stored state (zero copy).
    2. The session's head moves to R and its restore generation increments, so a polling agent
       sees that it must reload.
    3. An audit row records who, why, and the previous head (what "Undo" goes back to).
    """
    now = now or timezone.now()
    session = AgentSession.objects.select_for_update().get(pk=checkpoint.session_id)
    previous_head = session.head_id
    restored = _new_head(session, checkpoint, name=f"restore of #{checkpoint.seq}", reason=reason, now=now)
    record_audit(
        actor,
        "restore",
        session=session,
        checkpoint=restored,
        target=f"{session} #{checkpoint.seq}",
        reason=reason,
        details={"target_seq": checkpoint.seq, "previous_head": previous_head, "new_seq": restored.seq},
        now=now,
    )
    return restored


@transaction.atomic
def undo_restore(session: AgentSession, *, actor: Actor, reason: str = "", now: datetime | None = None) -> Checkpoint:
    """Give the agent back exactly the state it had before the latest restore.

    1. Under the session's lock: its head must be a restore R (not itself an undo) whose previous head H
       is still there.
    2. A new head U (kind `restore`, child of H, sharing H's state) marked `undo_of` R: agents that order
       checkpoints by their own ids resume from the newest, so the old state comes back as a new head; the
       restore generation increments again, so a polling agent reloads.
    3. An `undo` audit row naming R, its target and H; R's own `restore` row stays.
    """
    now = now or timezone.now()
    locked = AgentSession.objects.select_for_update().get(pk=session.pk)
    restore = Checkpoint.objects.filter(pk=locked.head_id, kind=CheckpointKind.RESTORE).first()
    previous_pk = restore.metadata.get("previous_head") if restore and "undo_of" not in restore.metadata else None
    previous = Checkpoint.objects.filter(pk=previous_pk, session=locked).first() if previous_pk else None
    if restore is None or previous is None:
        raise NothingToUndo("the session's head is not a restore that can be undone")
    undone = _new_head(
        locked,
        previous,
        name=f"undo of restore #{restore.seq}",
        reason=reason or f"undo restore #{restore.seq}",
        now=now,
        undo_of={"undo_of": restore.pk, "undo_of_seq": restore.seq},
    )
    record_audit(
        actor,
        "undo",
        session=locked,
        checkpoint=undone,
        target=f"{locked} restore #{restore.seq}",
        reason=reason or f"undo restore #{restore.seq}",
        details={
            "undone_seq": restore.seq,
            "undone_target_seq": restore.metadata.get("restored_from_seq"),
            "restored_seq": previous.seq,
            "new_seq": undone.seq,
            "restore_generation": locked.restore_generation,
        },
        now=now,
    )
    return undone


def _new_head(
    session: AgentSession,
    checkpoint: Checkpoint,
    *,
    name: str,
    reason: str,
    now: datetime,
    undo_of: dict[str, int] | None = None,
) -> Checkpoint:
    """A `restore` checkpoint sharing `checkpoint`'s state, made the head of `session` (locked by the caller)
    with the next restore generation; written back to the agent's files where it was imported from."""
    previous_head = session.head_id
    session.last_seq += 1
    session.restore_generation += 1
    restored = Checkpoint.objects.create(
        session=session,
        seq=session.last_seq,
        parent=checkpoint,
        starts_branch=checkpoint.seq != session.last_seq - 1,
        name=name,
        kind=CheckpointKind.RESTORE,
        status=CheckpointStatus.COMPLETED,
        step=checkpoint.step,
        phase=checkpoint.phase,
        created_at=now,
        received_at=now,
        root=checkpoint.root,
        state_hash=checkpoint.state_hash,
        raw_bytes=checkpoint.raw_bytes,
        stored_bytes=0,
        calls_made=checkpoint.calls_made,  # no call made here: the path's calls are the target's
        metadata={
            "restored_from": checkpoint.pk,
            "restored_from_seq": checkpoint.seq,
            "previous_head": previous_head,
            "restore_generation": session.restore_generation,
            "reason": reason,
            **(undo_of or {}),
        },
    )
    tallies.count_in([restored])
    session.head = restored
    if session.status in (SessionStatus.FAILED, SessionStatus.HALTED, SessionStatus.COMPLETED):
        session.status = SessionStatus.ACTIVE
    session.updated_at = now
    session.save(update_fields=["last_seq", "restore_generation", "head", "status", "updated_at"])
    if session.write_back and session.source_path and session.source_format:
        from .writeback import write_back_restore

        transaction.on_commit(lambda: write_back_restore(restored.pk))
    from .drift import detect_after_ingest  # drift imports services to audit: a cycle at module level

    transaction.on_commit(lambda: detect_after_ingest([session.pk]))  # a failed or halted alert clears now
    return restored


EXTERNAL_ID_MAX = _max_length(AgentSession, "external_id")
TITLE_MAX = _max_length(AgentSession, "title")


def _fork_id(source: AgentSession, number: int) -> str:
    suffix = f"-fork-{number}"
    return source.external_id[: EXTERNAL_ID_MAX - len(suffix)] + suffix


def _fork_title(source: AgentSession, checkpoint: Checkpoint) -> str:
    suffix = f" at #{checkpoint.seq}"
    name = source.title or source.external_id
    room = TITLE_MAX - len("Fork of ") - len(suffix)
    return f"Fork of {name if len(name) <= room else name[: room - 1] + '…'}{suffix}"


def fork_session(
    checkpoint: Checkpoint,
    *,
    actor: Actor,
    title: str = "",
    external_id: str = "",
    now: datetime | None = None,
) -> AgentSession:
    """A new session starting from `checkpoint`; its first checkpoint shares the stored state (O(1)).

    Without an id the fork is named `<source>-fork-<n>`; when a concurrent fork takes the name first,
    the next number is tried.
    """
    source = checkpoint.session
    if external_id:
        try:
            return _fork(checkpoint, actor=actor, title=title, external_id=external_id, now=now)
        except IntegrityError:
            raise CheckpointError(f"a session {external_id!r} already exists in {source.project}") from None
    number = AgentSession.objects.filter(project=source.project, forked_from__session=source).count() + 1
    for _ in range(100):
        candidate = _fork_id(source, number)
        if not AgentSession.objects.filter(project=source.project, external_id=candidate).exists():
            try:
                return _fork(checkpoint, actor=actor, title=title, external_id=candidate, now=now)
            except IntegrityError:
                pass  # taken by a concurrent fork since the check
        number += 1
    raise CheckpointError(f"no free fork id after {candidate!r}; name the fork")


@transaction.atomic  # a savepoint when nested: a taken id leaves the caller's transaction usable
def _fork(checkpoint: Checkpoint, *, actor: Actor, title: str, external_id: str, now: datetime | None) -> AgentSession:
    now = now or timezone.now()
    source = checkpoint.session
    fork = AgentSession.objects.create(
        project=source.project,
        external_id=external_id,
        agent=source.agent,
        title=title or _fork_title(source, checkpoint),
        execution_mode=source.execution_mode,
        forked_from=checkpoint,
        last_seq=1,
        created_at=now,
        updated_at=now,
        last_seen_at=now,
        metadata={"forked_from_session": source.external_id, "forked_from_seq": checkpoint.seq},
    )
    first = Checkpoint.objects.create(
        session=fork,
        seq=1,
        name=f"fork of {source.external_id} #{checkpoint.seq}"[: Checkpoint._meta.get_field("name").max_length],
        kind=CheckpointKind.FORK,
        status=CheckpointStatus.COMPLETED,
        step=checkpoint.step,
        phase=checkpoint.phase,
        created_at=now,
        received_at=now,
        root=checkpoint.root,
        state_hash=checkpoint.state_hash,
        raw_bytes=checkpoint.raw_bytes,
        stored_bytes=0,
        calls_made=0,  # the fork's own path starts here
        metadata={"forked_from": checkpoint.pk},
    )
    tallies.count_in([first])
    fork.head = first
    fork.save(update_fields=["head"])
    record_audit(
        actor,
        "fork",
        session=source,
        checkpoint=checkpoint,
        target=f"{source} #{checkpoint.seq} → {fork.external_id}",
        details={"fork_session": fork.external_id, "fork_session_id": fork.pk},
        now=now,
    )
    return fork


@transaction.atomic
def request_job_run(job: str, *, actor: Actor, details: dict[str, Any] | None = None) -> AuditEvent:
    """An operator asked for a background job to run now (the caller queues it once this commits); `details`
    keep what the operator was shown, e.g. the counts a retention run was expected to delete."""
    return record_audit(actor, "run_job", target=job, details=details)


@transaction.atomic
def pin_checkpoint(checkpoint: Checkpoint, *, actor: Actor, pinned: bool = True, reason: str = "") -> Checkpoint:
    """Pinned checkpoints are never removed by retention."""
    if checkpoint.pinned != pinned:
        Checkpoint.objects.filter(pk=checkpoint.pk).update(pinned=pinned)
        checkpoint.pinned = pinned
        record_audit(
            actor,
            "pin" if pinned else "unpin",
            session=checkpoint.session,
            checkpoint=checkpoint,
            reason=reason,
        )
    return checkpoint


# ---- reading -----------------------------------------------------------------------------------


def diff_checkpoints(a: Checkpoint, b: Checkpoint) -> Diff:
    return diff_states(store.load_shared(bytes(a.root)), store.load_shared(bytes(b.root)))


def session_totals(session: AgentSession) -> dict[str, int]:
    """The session's running tallies (checkpoints.tallies), read afresh: `session` may have been loaded before
    its latest checkpoints were stored."""
    return AgentSession.objects.filter(pk=session.pk).values("checkpoint_count", "raw_bytes", "stored_bytes").get()


def session_summary(session: AgentSession) -> dict[str, Any]:
    """Counts by name, kind and status; first and last checkpoint; duration (the Breakpilot analytics).

    The counts are the session's tallies, the rest reads the (session, seq) and (session, created_at) indexes at
    their ends: a few rows whatever the session's length."""
    checkpoints = Checkpoint.objects.filter(session=session)
    by: dict[str, dict[str, int]] = {tallied: {} for tallied in TalliedField.values}
    for tallied, value, count in SessionCount.objects.filter(session=session).values_list("field", "value", "count"):
        by[tallied][value] = count
    span = checkpoints.order_by().aggregate(first=Min("created_at"), last=Max("created_at"))
    first = checkpoints.order_by("seq").first()
    last = checkpoints.order_by("-seq").first()
    duration = (span["last"] - span["first"]).total_seconds() if span["first"] and span["last"] else 0.0
    return {
        **session_totals(session),
        "by_name": by["name"],
        "by_kind": by["kind"],
        "by_status": by["status"],
        "first": first,
        "last": last,
        "first_at": span["first"],
        "last_at": span["last"],
        "duration_seconds": duration,
    }


@transaction.atomic
def acknowledge_alert(alert: DriftAlert, *, actor: Actor, now: datetime | None = None) -> DriftAlert:
    """Someone is on it: the alert stays visible but stops asking for attention."""
    now = now or timezone.now()
    if alert.state == AlertState.OPEN:
        DriftAlert.objects.filter(pk=alert.pk, state=AlertState.OPEN).update(
            state=AlertState.ACKNOWLEDGED, acknowledged_by=actor.user, acknowledged_at=now
        )
        alert.state, alert.acknowledged_by, alert.acknowledged_at = AlertState.ACKNOWLEDGED, actor.user, now
        record_audit(actor, "acknowledge", session=alert.session, target=f"{alert.kind} alert #{alert.pk}", now=now)
    return alert


@transaction.atomic
def resolve_alert(alert: DriftAlert, *, actor: Actor, reason: str = "", now: datetime | None = None) -> DriftAlert:
    now = now or timezone.now()
    if alert.state != AlertState.RESOLVED:
        DriftAlert.objects.filter(pk=alert.pk).exclude(state=AlertState.RESOLVED).update(
            state=AlertState.RESOLVED, resolved_at=now
        )
        alert.state, alert.resolved_at = AlertState.RESOLVED, now
        record_audit(
            actor, "resolve", session=alert.session, target=f"{alert.kind} alert #{alert.pk}", reason=reason, now=now
        )
    return alert


@dataclass
class RestorePreview:
    """What a restore would change, shown before the operator confirms."""

    target: Checkpoint
    head: Checkpoint | None
    diff: Diff  # from the current head to the target
    forgotten_tool_calls: list[Any]  # tool calls in the head's state that the target does not have
    discards: Discards  # what leaves the agent's path: kept in the history, no longer the agent's memory


def restore_preview(checkpoint: Checkpoint) -> RestorePreview:
    session = checkpoint.session
    head = (
        session.head
        if session.head_id is None or AgentSession.head.is_cached(session)
        else session.checkpoints.filter(pk=session.head_id).first()
    )
    changes = diff_checkpoints(head, checkpoint) if head else diff_states({}, {})
    found: list[Any] = []
    for entry in changes.entries:
        if entry.op != "removed":
            continue
        if any(isinstance(part, str) and "tool_call" in part for part in entry.path):
            found.append(entry.old)
        elif isinstance(entry.old, dict) and isinstance(entry.old.get("tool_calls"), list):
            found.extend(entry.old["tool_calls"])
    return RestorePreview(checkpoint, head, changes, _once_each(found), discards(checkpoint))


def _once_each(calls: list[Any]) -> list[Any]:
    """A call often stands twice in a state (in the message that made it and in a tool-call log):
    records sharing an id are kept once, the fuller one winning."""
    merged: dict[Any, Any] = {}
    for position, call in enumerate(calls):
        key = call.get("id") if isinstance(call, dict) and call.get("id") else ("position", position)
        if key not in merged or len(call) > len(merged[key]):
            merged[key] = call
    return list(merged.values())
