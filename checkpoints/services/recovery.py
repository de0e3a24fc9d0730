"""Operator actions on a session's history: restore, undo, fork, pin, and what a restore would change.

Nothing here deletes history: restore and fork add checkpoints that share the target's stored state.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone
from jsonpointer import JsonPointer, JsonPointerException

from .. import store
from ..audit import Actor, CheckpointError, HeadMoved, InvalidInput, NothingToUndo, max_length, record_audit
from ..humanize import short_value
from ..models import AgentSession, Checkpoint, CheckpointKind, CheckpointStatus, SessionStatus, SourceFormat
from ..outbox import events
from ..sources import formats
from ..store import diff_checkpoints, jsoncodec, tallies
from ..store.diff import Diff, diff_states
from ..store.history import Discards, discards
from . import langgraph
from .alerts import reopen_resolved_since
from .checkpoints import CheckpointInput, check_json_field, ingest_checkpoints
from .drift import STATUS_KINDS, detect_after_ingest

log = logging.getLogger(__name__)


@transaction.atomic
def restore_checkpoint(
    checkpoint: Checkpoint,
    *,
    actor: Actor,
    reason: str = "",
    now: datetime | None = None,
    recovery: int | None = None,
    expect_head: int | None = None,
    detect: bool = True,
) -> Checkpoint:
    """Make `checkpoint` the state the agent resumes from, without deleting anything.

    1. A new `restore` checkpoint R, child of the target, sharing its stored state (zero copy).
    2. The session's head moves to R and its restore generation increments, so a polling agent
       sees that it must reload.
    3. An audit row records who, why, and the previous head (what "Undo" goes back to).

    `recovery` names the fleet recovery the restore is part of (services.fleet): recorded on the checkpoint and
    the audit row, and the `session.restored` event goes to webhooks but not to notification rules, which hear
    of the batch once. `expect_head`: HeadMoved, and nothing written, unless the session's head (read under its
    lock) is still that checkpoint. `detect=False` leaves the failed/halted detectors to the caller, which runs
    them once for many sessions (a fleet recovery's page) instead of once per restore.
    """
    now = now or timezone.now()
    # the project with it: the audit row's target names the session by its project's slug
    session = (
        AgentSession.objects.select_for_update(of=("self",)).select_related("project").get(pk=checkpoint.session_id)
    )
    if expect_head is not None and session.head_id != expect_head:
        raise HeadMoved(f"the head of {session} is checkpoint {session.head_id}, not {expect_head}")
    # retention deletes under the same lock: a restore that waited for it finds its target gone, and says so
    # instead of failing at commit on the missing parent
    if not Checkpoint.objects.filter(pk=checkpoint.pk).exists():
        raise CheckpointError(f"checkpoint #{checkpoint.seq} of {session} was deleted (retention) before the restore")
    if session.source_format == SourceFormat.LANGGRAPH:
        langgraph.check_resumable(checkpoint)
    previous_head = session.head_id
    batch = {"recovery": recovery} if recovery is not None else {}
    restored = _new_head(
        session, checkpoint, name=f"restore of #{checkpoint.seq}", reason=reason, now=now, undo_of=batch, detect=detect
    )
    record_audit(
        actor,
        "restore",
        session=session,
        checkpoint=restored,
        target=f"{session} #{checkpoint.seq}",
        reason=reason,
        details={"target_seq": checkpoint.seq, "previous_head": previous_head, "new_seq": restored.seq, **batch},
        now=now,
    )
    events.publish_restored(session, restored, checkpoint, actor=actor.label, recovery=recovery)
    return restored


UNDOABLE = (CheckpointKind.RESTORE, CheckpointKind.EDIT)  # heads that record the head they replaced


@transaction.atomic
def undo_restore(session: AgentSession, *, actor: Actor, reason: str = "", now: datetime | None = None) -> Checkpoint:
    """Give the agent back exactly the state it had before the latest restore.

    1. Under the session's lock: its head must be a restore R (not itself an undo) whose previous head H
       is still there.
    2. A new head U (kind `restore`, child of H, sharing H's state) marked `undo_of` R: agents that order
       checkpoints by their own ids resume from the newest, so the old state comes back as a new head; the
       restore generation increments again, so a polling agent reloads.
    3. U carries H's status and the session gets back the status it had before R; a failed or halted alert
       that R resolved reopens (the same incident: the agent is given the failed state again).
    4. An `undo` audit row naming R, its target and H; R's own `restore` row stays.
    """
    now = now or timezone.now()
    locked = AgentSession.objects.select_for_update().get(pk=session.pk)
    restore = Checkpoint.objects.filter(pk=locked.head_id, kind__in=UNDOABLE).first()
    previous_pk = restore.metadata.get("previous_head") if restore and "undo_of" not in restore.metadata else None
    previous = Checkpoint.objects.filter(pk=previous_pk, session=locked).first() if previous_pk else None
    if restore is None or previous is None:
        raise NothingToUndo("the session's head is not a restore that can be undone")
    undone_what = f"{restore.kind} #{restore.seq}"  # "restore #N", or "edit #N" for an edit of the state
    undone = _new_head(
        locked,
        previous,
        name=f"undo of {undone_what}",
        reason=reason or f"undo {undone_what}",
        now=now,
        undo_of={"undo_of": restore.pk, "undo_of_seq": restore.seq},
        # U stands for H: a failed or halted H is failed or halted again, and so is the session
        status=(previous.status, previous.status_reason),
        session_status=restore.metadata.get("previous_status"),
    )
    reopen_resolved_since(
        locked,
        STATUS_KINDS,
        since=restore.created_at,
        actor=actor,
        reason=f"undo of restore #{restore.seq}: the head is #{previous.seq}'s state again",
        now=now,
    )
    record_audit(
        actor,
        "undo",
        session=locked,
        checkpoint=undone,
        target=f"{locked} {undone_what}",
        reason=reason or f"undo {undone_what}",
        details={
            "undone_seq": restore.seq,
            "undone_target_seq": restore.metadata.get("restored_from_seq"),
            "restored_seq": previous.seq,
            "new_seq": undone.seq,
            "restore_generation": locked.restore_generation,
        },
        now=now,
    )
    events.publish_restored(locked, undone, previous, actor=actor.label)
    return undone


def _new_head(
    session: AgentSession,
    checkpoint: Checkpoint,
    *,
    name: str,
    reason: str,
    now: datetime,
    undo_of: dict[str, int] | None = None,  # also: the recovery a restore is part of
    status: tuple[str, str] = (CheckpointStatus.COMPLETED, ""),
    session_status: str | None = None,
    detect: bool = True,
) -> Checkpoint:
    """A `restore` checkpoint sharing `checkpoint`'s state, made the head of `session` (locked by the caller)
    with the next restore generation; written back to the agent's files where it was imported from. A failed,
    halted or completed session becomes active unless `session_status` says what it is."""
    previous_head, previous_status = session.head_id, session.status
    session.last_seq += 1
    session.restore_generation += 1
    restored = Checkpoint.objects.create(
        session=session,
        seq=session.last_seq,
        parent=checkpoint,
        starts_branch=checkpoint.seq != session.last_seq - 1,
        name=name,
        kind=CheckpointKind.RESTORE,
        status=status[0],
        status_reason=status[1],
        **_sharing_state(checkpoint, now=now),
        calls_made=checkpoint.calls_made,  # no call made here: the path's calls are the target's
        metadata={
            "restored_from": checkpoint.pk,
            "restored_from_seq": checkpoint.seq,
            "previous_head": previous_head,
            "previous_status": previous_status,
            "restore_generation": session.restore_generation,
            "reason": reason,
            **(undo_of or {}),
        },
    )
    session.head = restored
    if session_status in SessionStatus.values:
        session.status = session_status
    elif session.status in (SessionStatus.FAILED, SessionStatus.HALTED, SessionStatus.COMPLETED):
        session.status = SessionStatus.ACTIVE
    session.updated_at = now
    # the session's own changes ride on the tallies' UPDATE of it: one round trip, not two
    tallies.count_in(
        [restored],
        **{name: getattr(session, name) for name in ("last_seq", "restore_generation", "head", "status", "updated_at")},
    )
    if session.source_format == SourceFormat.LANGGRAPH:
        langgraph.record_restore(checkpoint, restored, now=now)
    if session.write_back and session.source_path and session.source_format:
        transaction.on_commit(lambda: write_back_restore(restored.pk))
    if detect:
        transaction.on_commit(lambda: detect_after_ingest([session.pk]))  # a failed or halted alert clears now
    return restored


@dataclass(frozen=True)
class StateEdit:
    """One value an operator sets: `pointer` (RFC 6901: "/memory/goal", "/messages/3/content", "" for the whole
    state) names where in the state, `value` what it becomes. An object may gain a key, a list an item ("/-")."""

    pointer: str
    value: Any


@dataclass(frozen=True)
class EditPreview:
    """What an edit would store, shown before the operator saves it; nothing is stored to make it."""

    checkpoint: Checkpoint
    after: Any
    paths: list[str]  # the pointers edited, in the order given
    channels: list[str]  # the top-level keys whose value changes (a LangGraph thread's channels)
    diff: Diff  # from the checkpoint's state to the edited one


def check_editable(checkpoint: Checkpoint, *, session: AgentSession | None = None) -> None:
    """CheckpointError for a checkpoint whose state cannot be edited into a head (a LangGraph subgraph's)."""
    if (session or checkpoint.session).source_format == SourceFormat.LANGGRAPH:
        langgraph.check_resumable(checkpoint, action="edit")


def preview_edit(checkpoint: Checkpoint, edits: list[StateEdit], *, session: AgentSession | None = None) -> EditPreview:
    """The state `edits` make of `checkpoint`'s, checked as `edit_state` checks it: InvalidInput naming the
    edit at fault, or CheckpointError for a checkpoint that cannot be edited."""
    session = session or checkpoint.session
    is_thread = session.source_format == SourceFormat.LANGGRAPH
    check_editable(checkpoint, session=session)
    if not edits:
        raise InvalidInput("edits", "name at least one value to change")
    before = store.load_shared(bytes(checkpoint.root))
    after = before
    for number, edit in enumerate(edits):
        field = f"edits.{number}"
        check_json_field(field, edit.value)
        try:
            pointer = JsonPointer(edit.pointer)
        except (JsonPointerException, TypeError) as exc:
            raise InvalidInput(field, f"{short_value(edit.pointer, 80)!r} is not a JSON pointer ({exc})") from None
        if is_thread and not pointer.parts:
            raise InvalidInput(field, "name a channel: a LangGraph state is its channels' values (/messages/0/content)")
        try:
            after = pointer.set(after, edit.value, inplace=False)  # a copy: `before` is the store's shared object
        except (JsonPointerException, LookupError, TypeError) as exc:
            raise InvalidInput(
                field, f"{short_value(edit.pointer, 80)!r} names no place in the state ({exc})"
            ) from None
    check_json_field("state", after)
    if store.state_digest(after) == bytes(checkpoint.state_hash):
        raise InvalidInput("edits", f"the edit changes nothing: #{checkpoint.seq} already holds these values")
    channels = _changed_keys(before, after, [JsonPointer(edit.pointer).parts[:1] for edit in edits])
    if is_thread:
        langgraph.check_channel_values(session.project, {channel: after[channel] for channel in channels})
    return EditPreview(checkpoint, after, [edit.pointer for edit in edits], channels, diff_states(before, after))


def _changed_keys(before: Any, after: Any, firsts: list[list[str]]) -> list[str]:
    """The top-level keys among those the edits name whose value changes, compared as stored (canonical JSON:
    Python's 1 == 1.0 == True would hide a change of type)."""
    if not isinstance(before, dict) or not isinstance(after, dict):
        return []
    named = dict.fromkeys(key for first in firsts for key in first)
    return [
        key
        for key in named
        if key in after and (key not in before or jsoncodec.canonical(before[key]) != jsoncodec.canonical(after[key]))
    ]


@transaction.atomic
def edit_state(
    checkpoint: Checkpoint, edits: list[StateEdit], *, actor: Actor, reason: str, now: datetime | None = None
) -> Checkpoint:
    """Save `checkpoint`'s state with `edits` applied as the session's new head, undoable like a restore.

    1. Under the session's lock, the edited state is checked (`preview_edit`) and stored through the store as
       a new `edit` checkpoint E, child of the checkpoint edited; no reducer or node runs: values are replaced.
    2. E becomes the head and the restore generation increments, so a polling agent reloads; E records the
       previous head, so Undo (`undo_restore`) goes back to it. A LangGraph thread gets E as a checkpoint
       written as LangGraph's `update_state` writes one (`langgraph.record_edit`).
    3. An `edit_state` audit row (who, why, which paths) and the `session.restored` event a restore publishes.
    """
    now = now or timezone.now()
    reason = reason.strip()
    if not reason:
        raise InvalidInput("reason", "say why the state is edited: the audit log and the agent's history keep it")
    session = AgentSession.objects.locked_for_ingest().get(pk=checkpoint.session_id)
    preview = preview_edit(checkpoint, edits, session=session)
    previous_head, previous_status = session.head_id, session.status
    session.restore_generation += 1
    item = CheckpointInput(
        state=preview.after,
        name=f"edit of #{checkpoint.seq}",
        kind=CheckpointKind.EDIT,
        step=checkpoint.step,
        phase=checkpoint.phase,
        created_at=now,
        metadata={
            "edited_from": checkpoint.pk,
            "edited_from_seq": checkpoint.seq,
            "edited": preview.paths,
            "previous_head": previous_head,
            "previous_status": previous_status,
            "restore_generation": session.restore_generation,
            "reason": reason,
        },
        parent=checkpoint.pk,
    )
    [(edited, _)] = ingest_checkpoints([(session, [item])], now=now, savepoint=False, locked=True)
    if session.status in (SessionStatus.FAILED, SessionStatus.HALTED, SessionStatus.COMPLETED):
        session.status = SessionStatus.ACTIVE
    session.updated_at = now
    session.save(update_fields=["restore_generation", "status", "updated_at"])
    if session.source_format == SourceFormat.LANGGRAPH:
        langgraph.record_edit(checkpoint, edited, preview.channels, now=now)
    if session.write_back and session.source_path and session.source_format:
        transaction.on_commit(lambda: write_back_restore(edited.pk))
    transaction.on_commit(lambda: detect_after_ingest([session.pk]))  # a failed or halted alert clears now
    record_audit(
        actor,
        "edit_state",
        session=session,
        checkpoint=edited,
        target=f"{session} #{checkpoint.seq}",
        reason=reason,
        details={
            "edited_seq": checkpoint.seq,
            "paths": preview.paths,
            "changes": len(preview.diff.entries),
            "previous_head": previous_head,
            "new_seq": edited.seq,
        },
        now=now,
    )
    events.publish_restored(session, edited, checkpoint, actor=actor.label)
    return edited


def _sharing_state(checkpoint: Checkpoint, *, now: datetime) -> dict[str, Any]:
    """The columns of a new checkpoint that holds `checkpoint`'s state by reference (restore, fork): the same
    tree and hash, no bytes stored for it."""
    return {
        "step": checkpoint.step,
        "phase": checkpoint.phase,
        "created_at": now,
        "received_at": now,
        "root": checkpoint.root,
        "state_hash": checkpoint.state_hash,
        "raw_bytes": checkpoint.raw_bytes,
        "stored_bytes": 0,
    }


def write_back_restore(checkpoint_id: int) -> list[Path]:
    """Write a restore back to a file-based agent, in its own format, in its own folder, after the restore commits.

    Failure is audited, never raised: the restore itself stands."""
    checkpoint = Checkpoint.objects.select_related("session__project").get(pk=checkpoint_id)
    session = checkpoint.session
    actor = Actor.system("write-back")
    try:
        written = formats.get(session.source_format).write_back(session, checkpoint, Path(session.source_path))
    except Exception as exc:  # a full disk or a vanished folder must not undo the restore
        log.exception("write-back of checkpoint %s failed", checkpoint_id)
        record_audit(actor, "write_back_failed", session=session, checkpoint=checkpoint, details={"error": str(exc)})
        return []
    record_audit(
        actor,
        "write_back",
        session=session,
        checkpoint=checkpoint,
        details={"files": [str(path) for path in written], "format": session.source_format},
    )
    return written


EXTERNAL_ID_MAX = max_length(AgentSession, "external_id")
TITLE_MAX = max_length(AgentSession, "title")


def _fork_id(source: AgentSession, number: int) -> str:
    suffix = f"-fork-{number}"
    return source.external_id[: EXTERNAL_ID_MAX - len(suffix)] + suffix


def _fork_title(source: AgentSession, checkpoint: Checkpoint) -> str:
    suffix = f" at #{checkpoint.seq}"
    name = source.title or source.external_id
    room = TITLE_MAX - len("Fork of ") - len(suffix)
    return f"Fork of {short_value(name, room)}{suffix}"


def fork_session(
    checkpoint: Checkpoint,
    *,
    actor: Actor,
    title: str = "",
    external_id: str = "",
    now: datetime | None = None,
    reason: str = "",
    recovery: int | None = None,
) -> AgentSession:
    """A new session starting from `checkpoint`; its first checkpoint shares the stored state (O(1)).

    Without an id the fork is named `<source>-fork-<n>`; when a concurrent fork takes the name first,
    the next number is tried. `recovery` names the fleet recovery it is part of (kept in the fork's metadata).
    """
    source = checkpoint.session
    if source.source_format == SourceFormat.LANGGRAPH:
        langgraph.check_resumable(checkpoint)
    if external_id:
        try:
            return _fork(
                checkpoint, actor=actor, title=title, external_id=external_id, now=now, reason=reason, recovery=recovery
            )
        except IntegrityError:
            raise CheckpointError(f"a session {external_id!r} already exists in {source.project}") from None
    number = AgentSession.objects.filter(project=source.project).forks_of(source).count() + 1
    for _ in range(100):
        candidate = _fork_id(source, number)
        if not AgentSession.objects.filter(project=source.project, external_id=candidate).exists():
            try:
                return _fork(
                    checkpoint,
                    actor=actor,
                    title=title,
                    external_id=candidate,
                    now=now,
                    reason=reason,
                    recovery=recovery,
                )
            except IntegrityError:
                pass  # taken by a concurrent fork since the check
        number += 1
    raise CheckpointError(f"no free fork id after {candidate!r}; name the fork")


@transaction.atomic  # a savepoint when nested: a taken id leaves the caller's transaction usable
def _fork(
    checkpoint: Checkpoint,
    *,
    actor: Actor,
    title: str,
    external_id: str,
    now: datetime | None,
    reason: str = "",
    recovery: int | None = None,
) -> AgentSession:
    now = now or timezone.now()
    source = checkpoint.session
    batch = {"recovery": recovery} if recovery is not None else {}
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
        metadata={"forked_from_session": source.external_id, "forked_from_seq": checkpoint.seq, **batch},
    )
    first = Checkpoint.objects.create(
        session=fork,
        seq=1,
        name=f"fork of {source.external_id} #{checkpoint.seq}"[: Checkpoint._meta.get_field("name").max_length],
        kind=CheckpointKind.FORK,
        status=CheckpointStatus.COMPLETED,
        **_sharing_state(checkpoint, now=now),
        calls_made=0,  # the fork's own path starts here
        metadata={"forked_from": checkpoint.pk},
    )
    tallies.count_in([first])
    fork.head = first
    fork.save(update_fields=["head"])
    if source.source_format == SourceFormat.LANGGRAPH:
        langgraph.record_fork(checkpoint, fork, first, now=now)
    record_audit(
        actor,
        "fork",
        session=source,
        checkpoint=checkpoint,
        target=f"{source} #{checkpoint.seq} → {fork.external_id}",
        reason=reason,
        details={"fork_session": fork.external_id, "fork_session_id": fork.pk, **batch},
        now=now,
    )
    events.publish_forked(fork, checkpoint, actor=actor.label, recovery=recovery)
    return fork


@transaction.atomic
def pin_checkpoint(checkpoint: Checkpoint, *, actor: Actor, pinned: bool = True, reason: str = "") -> Checkpoint:
    """Pinned checkpoints are never removed by retention."""
    # the session's lock first, as retention's batches take it before they check what is pinned: a pin lands
    # before a batch's check or after its commit, never in between (where the batch would delete it)
    list(AgentSession.objects.select_for_update().filter(pk=checkpoint.session_id).values_list("pk"))
    # claimed with a conditional UPDATE: of two concurrent pins, one changes the row and is audited
    if Checkpoint.objects.filter(pk=checkpoint.pk, pinned=not pinned).update(pinned=pinned):
        record_audit(
            actor,
            "pin" if pinned else "unpin",
            session=checkpoint.session,
            checkpoint=checkpoint,
            reason=reason,
        )
    checkpoint.pinned = pinned
    return checkpoint


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
    if head is not None and session.source_format == SourceFormat.LANGGRAPH:
        forgotten = langgraph.discarded_tool_results(head, checkpoint)
        dropped = discards(checkpoint)  # its calls counted from the AIMessages: the ToolMessages are the truth here
        return RestorePreview(checkpoint, head, changes, forgotten, Discards(dropped.checkpoints, len(forgotten)))
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
