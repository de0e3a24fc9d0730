"""Clean-up: deleting checkpoints by hand (the admin site), archiving and purging sessions, revoking tokens, and
retention's delete step (`delete_expired`, which the retention job calls batch by batch).

Deletion never touches a protected checkpoint: the protections are retention's own (`protected_among`, below):
pinned, a session's head, a fork source, a restore target, an unresolved alert's `last_good` or `checkpoint`.
Each function is one transaction and records its AuditEvent in it.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache, reduce
from typing import Any

from django.db import connection, transaction
from django.db.models import SET_NULL, Case, F, ForeignObjectRel, Model, Q, When
from django.db.models.expressions import RawSQL
from django.utils import timezone

from ..audit import Actor, record_audit
from ..models import (
    AgentSession,
    Checkpoint,
    CheckpointKind,
    DriftAlert,
    LangGraphCheckpoint,
    LangGraphTombstone,
    LangGraphWrites,
    SessionStatus,
    checkpoint_id_order,
)
from ..store import arrays, jsoncodec, tallies
from ..store.lineage import mark_branch_starts, reattach_children

BATCH_SIZE = 500


@dataclass
class Deletion:
    """What a clean-up deleted and what it refused, as `project/session #seq name` labels."""

    deleted: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)

    def extend(self, other: Deletion) -> None:
        self.deleted.extend(other.deleted)
        self.refused.extend(other.refused)


def _label(checkpoint: Checkpoint) -> str:
    return f"{checkpoint.session} {checkpoint}"


def is_protected(checkpoint: Checkpoint) -> bool:
    return bool(protected_among([checkpoint.pk]))


@transaction.atomic
def delete_checkpoints(ids: Iterable[int], *, actor: Actor, reason: str = "") -> Deletion:
    """Delete the given checkpoints except the protected ones, which are refused.

    1. Read the checkpoints; the protected ones are refused.
    2. Check the protections again, and take what goes out of its sessions' tallies (under their locks).
    3. Kept children of deleted checkpoints move to their nearest kept ancestor (the timeline stays a tree).
    4. Delete.
    5. One `delete_checkpoints` audit row per session, naming what was deleted and refused.
    """
    rows = list(
        Checkpoint.objects.filter(pk__in=list(ids))
        .select_related("session__project")
        .only("id", "seq", "name", "kind", "parent_id", "session__external_id", "session__project__slug")
        .order_by("session_id", "seq")
    )
    protected = protected_among(row.pk for row in rows)
    doomed = {row.pk: row.parent_id for row in rows if row.pk not in protected}
    if doomed:
        gone = set(doomed) - protected_among(doomed)
        tallies.forget(gone)  # first: its session locks come before any row lock, as in every deleter
        moved = reattach_children(list(doomed), doomed)
        _forget_langgraph(list(gone))
        Checkpoint.objects.filter(pk__in=list(gone)).delete()
        mark_branch_starts(pk for pk, _ in moved)
    else:
        gone = set()

    result = Deletion()
    by_session: dict[int, list[Checkpoint]] = {}
    for row in rows:
        by_session.setdefault(row.session_id, []).append(row)
        (result.deleted if row.pk in gone else result.refused).append(_label(row))
    for session_rows in by_session.values():
        session = session_rows[0].session
        deleted = [row.seq for row in session_rows if row.pk in gone]
        refused = [row.seq for row in session_rows if row.pk not in gone]
        record_audit(
            actor,
            "delete_checkpoints",
            session=session,
            target=f"{session}: {len(deleted)} checkpoint{'s' * (len(deleted) != 1)}",
            reason=reason,
            details={"deleted_seqs": deleted, "refused_seqs": refused},
        )
    return result


def clear_recovery_checkpoints(session: AgentSession, *, actor: Actor) -> Deletion:
    """Recovery checkpoints are kept "until manually cleared": this is the clearing (protected ones stay)."""
    ids = list(
        Checkpoint.objects.filter(session=session, kind=CheckpointKind.RECOVERY)
        .order_by("seq")
        .values_list("pk", flat=True)
    )
    result = Deletion()
    for start in range(0, len(ids), BATCH_SIZE):
        result.extend(delete_checkpoints(ids[start : start + BATCH_SIZE], actor=actor, reason="clear recovery"))
    return result


@transaction.atomic
def archive_session(session: AgentSession, *, actor: Actor, now: datetime | None = None) -> bool:
    """Mark a session archived; returns False when it already was."""
    now = now or timezone.now()
    changed = (
        AgentSession.objects.filter(pk=session.pk)
        .exclude(status=SessionStatus.ARCHIVED)
        .update(status=SessionStatus.ARCHIVED, updated_at=now)
    )
    if changed:
        session.status = SessionStatus.ARCHIVED
        record_audit(actor, "archive_session", session=session, now=now)
    return bool(changed)


@transaction.atomic
def purge_session(session: AgentSession, *, actor: Actor) -> int:
    """Delete a session with its checkpoints, phases and alerts; returns how many checkpoints went.

    References into the session (forks of its checkpoints, audit rows) are cleared with UPDATEs first, so the
    checkpoints are deleted in batches without Django collecting a million rows. Chunks are left to GC; the
    session's tallies go with it.
    """
    checkpoints = Checkpoint.objects.filter(session=session)
    count = checkpoints.count()
    record_audit(
        actor,
        "purge_session",
        project=session.project,
        target=str(session),
        details={"session_id": session.pk, "external_id": session.external_id, "checkpoints": count},
    )
    _purge(session)
    return count


def _purge(session: AgentSession) -> None:
    checkpoints = Checkpoint.objects.filter(session=session)
    AgentSession.objects.filter(pk=session.pk).update(head=None, forked_from=None)
    AgentSession.objects.forks_of(session).update(forked_from=None)
    checkpoints.exclude(parent=None).update(parent=None)
    ids = list(checkpoints.order_by("seq").values_list("pk", flat=True))
    for start in range(0, len(ids), BATCH_SIZE):
        Checkpoint.objects.filter(pk__in=ids[start : start + BATCH_SIZE]).delete()
    AgentSession.objects.filter(pk=session.pk).delete()


# ---- deletions a LangGraph agent's owner asks for (delete_thread, prune, delete_for_runs) ----------------


def _write_count(rows: Any) -> int:
    return sum(len(jsoncodec.unpack(data)) for data in rows.values_list("writes", flat=True))


@transaction.atomic
def delete_langgraph_thread(
    session: AgentSession, *, actor: Actor, action: str = "langgraph_delete_thread"
) -> tuple[int, int]:
    """Delete a LangGraph thread whole (its session, every checkpoint and pending write) and leave a tombstone, so
    a late put naming a checkpoint of it is refused rather than bringing it back. Returns the LangGraph
    checkpoints and pending writes deleted."""
    # First, so that writes in flight (under KEY SHARE, see services.langgraph) are counted and deleted too
    list(AgentSession.objects.select_for_update().filter(pk=session.pk).values_list("pk"))
    checkpoints = LangGraphCheckpoint.objects.filter(session=session, current=True).count()
    writes = _write_count(LangGraphWrites.objects.filter(session=session))
    record_audit(
        actor,
        action,
        project=session.project,
        target=str(session),
        details={
            "thread_id": session.metadata.get("thread_id"),
            "external_id": session.external_id,
            "deleted_checkpoints": checkpoints,
            "deleted_writes": writes,
        },
    )
    tombstone, _ = LangGraphTombstone.objects.get_or_create(
        project_id=session.project_id, external_id=session.external_id
    )
    tombstone.deleted_at = timezone.now()
    tombstone.newest_checkpoint_id = _newest_id(session, tombstone.newest_checkpoint_id)
    tombstone.save(update_fields=["deleted_at", "newest_checkpoint_id"])
    _purge(session)
    return checkpoints, writes


def _newest_id(session: AgentSession, before: str) -> str:
    """The newest checkpoint id (in time order) the thread's checkpoints, old versions and writes name, or the
    tombstone's `before` (a thread deleted twice) when newer."""
    ids = [before] if before else []
    ids += LangGraphCheckpoint.objects.filter(session=session).values_list("checkpoint_id", flat=True).iterator()
    ids += LangGraphWrites.objects.filter(session=session).values_list("checkpoint_id", flat=True).iterator()
    return max(ids, key=checkpoint_id_order, default="")


@transaction.atomic
def delete_langgraph_checkpoints(
    session: AgentSession, ids: Iterable[int], *, actor: Actor, action: str, details: dict[str, Any] | None = None
) -> tuple[int, int]:
    """Delete checkpoints of a LangGraph thread its agent's owner named (prune, delete_for_runs): no protection
    refuses them, as LangGraph's own savers refuse none. Kept children move to their nearest kept ancestor,
    references to the deleted go, and so do the pending writes of the LangGraph checkpoints deleted. The caller
    sets the head again. Returns the LangGraph checkpoints (current ones) and pending writes deleted."""
    doomed = dict(Checkpoint.objects.filter(session=session, pk__in=list(ids)).values_list("pk", "parent_id"))
    if not doomed:
        return 0, 0
    gone = list(doomed)
    current = set(
        LangGraphCheckpoint.objects.filter(console__in=gone, current=True).values_list("checkpoint_ns", "checkpoint_id")
    )
    tallies.forget(gone)  # first: its session lock comes before any row lock
    moved = reattach_children(gone, doomed)
    AgentSession.objects.filter(head__in=gone).update(head=None)
    AgentSession.objects.filter(forked_from__in=gone).update(forked_from=None)
    clear_history(gone)
    LangGraphCheckpoint.objects.filter(console__in=gone).delete()
    Checkpoint.objects.filter(pk__in=gone).delete()
    mark_branch_starts(pk for pk, _ in moved)
    writes = 0
    by_ns: dict[str, list[str]] = {}
    for ns, checkpoint_id in current:
        by_ns.setdefault(ns, []).append(checkpoint_id)
    for ns, checkpoint_ids in by_ns.items():
        rows = LangGraphWrites.objects.filter(session=session, checkpoint_ns=ns, checkpoint_id__in=checkpoint_ids)
        writes += _write_count(rows)
        rows.delete()
    record_audit(
        actor,
        action,
        session=session,
        target=f"{session}: {len(current)} LangGraph checkpoint{'s' * (len(current) != 1)}",
        details={
            "deleted_checkpoints": len(current),
            "deleted_writes": writes,
            "deleted_ids": sorted(gone),
            **(details or {}),
        },
    )
    return len(current), writes


def delete_expired(ids: list[int], parents: dict[int, int | None]) -> list[tuple[int, str]]:
    """Retention's delete step for one batch, in one short transaction: keep what became protected since planning, move the children of the rest to
    their nearest kept ancestor (the timeline stays a tree), clear every other reference to them, delete them.

    `parents` maps the ids planned for deletion to their parents; the ones found protected leave it (they stay,
    and children may hang from them). A parent is older (lower seq) than its child and batches go in seq order,
    so each ancestor of this batch's children that `parents` still holds is gone or goes now.

    The references are cleared here, one statement per table that names a checkpoint, not by Django's delete
    collector: heads, fork sources and unresolved alerts' checkpoints are protected, so what remains are children
    (`parent`) and the records of what happened (`history_references`).
    """
    with transaction.atomic():
        # The sessions' locks before the check: ingest, restore, undo and pin take them too, so none of them can
        # add a protection (a new head, a restore target, a pin) between the check and the delete.
        tallies.lock_sessions(ids)
        protected = protected_among(ids)
        for pk in protected:
            parents.pop(pk, None)
        doomed = tallies.forget([pk for pk in ids if pk not in protected], locked=True)  # before any row lock
        if not doomed:
            return []
        gone = arrays.ids([pk for pk, _ in doomed])
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:  # a batch lost in a crash is deleted by the next run: no fsync wait
                cursor.execute("SET LOCAL synchronous_commit TO OFF")
        moved = reattach_children(gone, parents)
        clear_history(gone)
        _forget_langgraph(gone)
        Checkpoint.objects.filter(pk__in=gone)._raw_delete(Checkpoint.objects.db)
        mark_branch_starts(pk for pk, _ in moved)
    return doomed


@cache
def history_references() -> dict[type[Model], list[str]]:
    """Every column that names a checkpoint in a record of what happened (alerts, audit rows, secret findings,
    recovery items: `on_delete=SET_NULL`), by model: what a deletion clears. Read from the models, so that a
    reference added later is cleared too; the ones deleting handles otherwise are left out (a session's head and
    fork source are protections or cleared by the caller, a child's `parent` is re-pointed, a LangGraph row goes
    with its checkpoint)."""
    handled = {(AgentSession, "head"), (AgentSession, "forked_from"), (Checkpoint, "parent")}
    found: dict[type[Model], list[str]] = {}
    for relation in Checkpoint._meta.get_fields(include_hidden=True):
        if not isinstance(relation, ForeignObjectRel) or relation.related_model is None:
            continue
        model, name = relation.related_model, relation.field.name
        if (model, name) in handled or relation.on_delete is not SET_NULL:
            continue
        found.setdefault(model, []).append(name)
    return found


def clear_history(gone: list[int] | RawSQL) -> None:
    """Set to NULL, in one UPDATE per table, every `history_references` column naming a checkpoint of `gone`: the
    record stays, without its link. (The database refuses a DELETE of a checkpoint such a column still names.)"""
    for model, names in history_references().items():
        rows = model._default_manager
        if len(names) == 1:
            rows.filter(**{f"{names[0]}__in": gone}).update(**{names[0]: None})
            continue
        named = reduce(operator.or_, (Q(**{f"{name}__in": gone}) for name in names))
        cleared = {name: Case(When(Q(**{f"{name}__in": gone}), then=None), default=F(name)) for name in names}
        rows.filter(named).update(**cleared)


def _forget_langgraph(gone: list[int] | RawSQL) -> None:
    """The LangGraph rows of checkpoints retention or the admin deletes (only a policy meant for LangGraph threads
    reaches them), with the pending writes of the current ones: a write row naming no checkpoint would keep its
    values' chunks alive for ever."""
    rows = LangGraphCheckpoint.objects.filter(console__in=gone)
    current = list(rows.filter(current=True).values_list("session_id", "checkpoint_ns", "checkpoint_id"))
    rows._raw_delete(rows.db)
    for session_id, ns, checkpoint_id in current:
        LangGraphWrites.objects.filter(session_id=session_id, checkpoint_ns=ns, checkpoint_id=checkpoint_id).delete()


def record_retention_run(result: dict[str, Any], *, now: datetime) -> None:
    """The `retention` audit row of a real run, with its counts and, for a run stopped part-way, why (the batches
    themselves are not audited one by one: a run deletes hundreds of thousands)."""
    record_audit(
        Actor.system("retention"),
        "retention",
        target="all projects",
        details={key: result[key] for key in ("deleted", "kept", "by_kind", "error_count", "stopped") if key in result},
        now=now,
    )


def protected_among(ids: Iterable[int]) -> set[int]:
    """Which of `ids` a protection keeps now: pinned, a head, a fork source, a restore target or an unresolved
    alert's checkpoint (pinned, restored or forked since planning, too). Each test looks the batch's own ids up
    in an index of the referencing column, never reads a whole table."""
    batch = arrays.ids(list(ids))
    unresolved = DriftAlert.objects.unresolved().order_by()
    found = (
        Checkpoint.objects.filter(pk__in=batch, pinned=True)
        .order_by()
        .values_list("pk")
        .union(
            AgentSession.objects.filter(head__in=batch).values_list("head_id"),
            AgentSession.objects.filter(forked_from__in=batch).values_list("forked_from_id"),
            Checkpoint.objects.filter(parent__in=batch, kind=CheckpointKind.RESTORE)
            .order_by()
            .values_list("parent_id"),
            unresolved.filter(last_good__in=batch).values_list("last_good_id"),
            unresolved.filter(checkpoint__in=batch).values_list("checkpoint_id"),
        )
    )
    return {pk for (pk,) in found}
