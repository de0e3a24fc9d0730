"""Retention (DESIGN section 8): which checkpoints the policies let go, and deleting them in short batches.

A policy is a set of *keep* rules; a checkpoint of the policy's kind is deleted when none of its rules keeps it:

- `keep_last` N: the newest N per session (`session` scope, by seq) or per agent across the agent's sessions in a
  project (`agent` scope, by creation time);
- `max_age`: checkpoints younger than it;
- `until_operation_done`: checkpoints whose operation is not done yet;
- `keep_first`: the session's first checkpoint; `keep_latest_per_name`: the session's newest of each name.

A project's policy for a kind overrides the global one; a disabled policy, a policy with no rule, or a kind with no
policy deletes nothing. Whatever the rules say, a pinned checkpoint, a session's head, a fork source, a restore
target and an unresolved alert's `last_good` (and its `checkpoint`) are never deleted.

Chunks are left alone: garbage collection sweeps the ones no checkpoint references any more. A session whose rows
cannot be read or deleted (bad data from before, a bug) is named in the result's `errors` and left as it was; the
other sessions are processed all the same (`jobs.each_batch`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from . import tallies
from .jobs import Failures, contained, each_batch
from .lineage import mark_branch_starts
from .models import AgentSession, Checkpoint, CheckpointKind, DriftAlert, Project, RetentionPolicy, RetentionScope

PREVIEW_SIZE = 200
PLAN_BATCH = 50  # sessions planned per savepoint

# (id, seq, name, kind, created_at, operation_done, pinned, parent_id): all retention reads of a checkpoint
Row = tuple[int, int, str, str, datetime, bool, bool, int | None]
ROW_FIELDS = ("id", "seq", "name", "kind", "created_at", "operation_done", "pinned", "parent_id")


@dataclass
class SessionPlan:
    """What retention deletes in one session, and where the kept children of deleted checkpoints move."""

    session_id: int
    total: int
    delete: list[int]  # in seq order
    kinds: Counter[str]
    repoint: dict[int, tuple[int, int | None]]  # kept child id → (its deleted parent, its nearest kept ancestor)


@dataclass
class Plan:
    deleted: int = 0
    kept: int = 0
    by_kind: Counter[str] = field(default_factory=Counter)
    checkpoints: list[int] = field(default_factory=list)  # the first PREVIEW_SIZE ids to delete
    failures: Failures = field(default_factory=Failures)  # sessions that could not be planned or applied

    def add(self, session_plan: SessionPlan) -> None:
        self.deleted += len(session_plan.delete)
        self.kept += session_plan.total - len(session_plan.delete)
        self.by_kind.update(session_plan.kinds)
        room = PREVIEW_SIZE - len(self.checkpoints)
        if room > 0:
            self.checkpoints.extend(session_plan.delete[:room])

    def as_dict(self) -> dict[str, Any]:
        return {
            "deleted": self.deleted,
            "kept": self.kept,
            "by_kind": dict(sorted(self.by_kind.items())),
            "checkpoints": list(self.checkpoints),
            **self.failures.as_dict(),
        }


def describe(policy: RetentionPolicy) -> str:
    """The policy's rules in words, for the console."""
    rules = []
    if policy.keep_last is not None:
        rules.append(f"keep the last {policy.keep_last} per {policy.keep_last_scope}")
    if policy.max_age is not None:
        days, seconds = policy.max_age.days, policy.max_age.seconds
        age = f"{days} day{'s' * (days != 1)}" if days and not seconds else f"{policy.max_age}"
        rules.append(f"keep for {age}")
    if policy.until_operation_done:
        rules.append("keep until its operation is done")
    if policy.keep_first:
        rules.append("the session's first checkpoint")
    if policy.keep_latest_per_name:
        rules.append("the latest of each name")
    if not rules:
        return "keep everything (no rule)"
    text = rules[0] if rules[0].startswith("keep") else f"keep {rules[0]}"
    return "".join([text, *(f", plus {rule.removeprefix('keep ')}" for rule in rules[1:])])


def policies_in_force(*, projects: QuerySet[Project] | None = None) -> list[RetentionPolicy]:
    """Global policies first, then each project's overrides (of `projects` only, when given)."""
    policies = RetentionPolicy.objects.select_related("project")
    if projects is not None:
        policies = policies.filter(Q(project__isnull=True) | Q(project__in=projects))
    return list(policies.order_by(F("project__slug").asc(nulls_first=True), "kind"))


class _Rules:
    """The policies resolved per (project, kind), the protections, and the per-agent keep sets (computed lazily)."""

    def __init__(self, now: datetime) -> None:
        self.now = now
        self.global_: dict[str, RetentionPolicy] = {}
        self.project: dict[tuple[int, str], RetentionPolicy] = {}
        for policy in RetentionPolicy.objects.all():
            if policy.project_id is None:
                self.global_[policy.kind] = policy
            else:
                self.project[(policy.project_id, policy.kind)] = policy
        alerts = DriftAlert.objects.unresolved().order_by()
        self.protected: set[int] = set(
            AgentSession.objects.filter(forked_from__isnull=False)
            .order_by()
            .values_list("forked_from_id", flat=True)
            .union(
                alerts.filter(last_good__isnull=False).values_list("last_good_id", flat=True),
                alerts.filter(checkpoint__isnull=False).values_list("checkpoint_id", flat=True),
            )
        )
        self._agent_keep: dict[tuple[int, str, str], set[int]] = {}

    def policy(self, project_id: int, kind: str) -> RetentionPolicy | None:
        policy = self.project.get((project_id, kind)) or self.global_.get(kind)
        if policy is None or not policy.enabled:
            return None
        has_rule = (
            policy.keep_last is not None
            or policy.max_age is not None
            or policy.until_operation_done
            or policy.keep_first
            or policy.keep_latest_per_name
        )
        return policy if has_rule else None

    def agent_keep(self, project_id: int, agent: str, policy: RetentionPolicy) -> set[int]:
        key = (project_id, agent, policy.kind)
        if key not in self._agent_keep:
            newest = (
                Checkpoint.objects.filter(session__project_id=project_id, session__agent=agent, kind=policy.kind)
                .order_by("-created_at", "-id")
                .values_list("id", flat=True)
            )
            self._agent_keep[key] = set(newest[: policy.keep_last or 0])
        return self._agent_keep[key]


def _plan_session(rules: _Rules, session_id: int, project_id: int, agent: str, head_id: int | None) -> SessionPlan:
    rows: list[Row] = list(Checkpoint.objects.filter(session_id=session_id).order_by("seq").values_list(*ROW_FIELDS))
    protected = {head_id} if head_id else set()
    protected.update(parent for _, _, _, kind, _, _, _, parent in rows if kind == CheckpointKind.RESTORE and parent)
    first_id = rows[0][0] if rows else None
    by_kind: dict[str, list[Row]] = {}
    for row in rows:
        by_kind.setdefault(row[3], []).append(row)

    delete: set[int] = set()
    kinds: Counter[str] = Counter()
    for kind, kind_rows in by_kind.items():
        policy = rules.policy(project_id, kind)
        if policy is None:
            continue
        keep: set[int] = set()
        if policy.keep_last is not None:
            if policy.keep_last_scope == RetentionScope.AGENT:
                keep |= rules.agent_keep(project_id, agent, policy)
            elif policy.keep_last:
                keep.update(row[0] for row in kind_rows[-policy.keep_last :])
        if policy.max_age is not None:
            cutoff = rules.now - policy.max_age
            keep.update(row[0] for row in kind_rows if row[4] >= cutoff)
        if policy.until_operation_done:
            keep.update(row[0] for row in kind_rows if not row[5])
        if policy.keep_first and first_id is not None:
            keep.add(first_id)
        if policy.keep_latest_per_name:
            latest = {row[2]: row[0] for row in kind_rows if row[2]}  # rows are in seq order: the last one wins
            keep.update(latest.values())
        for pk, _, _, _, _, _, pinned, _ in kind_rows:
            if pk not in keep and not pinned and pk not in protected and pk not in rules.protected:
                delete.add(pk)
                kinds[kind] += 1

    repoint: dict[int, tuple[int, int | None]] = {}
    if delete:
        parents = {row[0]: row[7] for row in rows}
        for pk, parent in parents.items():
            if pk in delete or parent is None or parent not in delete:
                continue
            ancestor: int | None = parent
            while ancestor is not None and ancestor in delete:
                ancestor = parents.get(ancestor)
            repoint[pk] = (parent, ancestor)
    ordered = [row[0] for row in rows if row[0] in delete]
    return SessionPlan(session_id=session_id, total=len(rows), delete=ordered, kinds=kinds, repoint=repoint)


def iter_session_plans(
    *, failures: Failures, now: datetime | None = None, sessions: QuerySet[AgentSession] | None = None
) -> Iterator[SessionPlan]:
    """Sessions (of `sessions`, default all) planned PLAN_BATCH at a time, so memory holds a few sessions' ids,
    never a whole store's states.

    A session whose rows cannot be read is recorded in `failures` and yields no plan: nothing of it is deleted.
    """
    rules = _Rules(now or timezone.now())
    rows = (AgentSession.objects.all() if sessions is None else sessions).order_by("pk")
    rows = rows.values_list("pk", "project_id", "agent", "head_id")

    def plan_batch(batch: list[tuple[int, int, str, int | None]]) -> list[SessionPlan]:
        return [_plan_session(rules, *session) for session in batch]

    for plans in each_batch(
        rows.iterator(chunk_size=1000), plan_batch, failures, size=PLAN_BATCH, key=lambda session: session[0]
    ):
        yield from plans


def plan_retention(*, now: datetime | None = None, sessions: QuerySet[AgentSession] | None = None) -> Plan:
    plan = Plan()
    for session_plan in iter_session_plans(now=now, failures=plan.failures, sessions=sessions):
        plan.add(session_plan)
    return plan


def still_protected() -> Q:
    """Protections checked again at delete time: a checkpoint pinned, restored or forked since planning stays."""
    return (
        Q(pinned=True)
        | Q(pk__in=AgentSession.objects.filter(head__isnull=False).values("head_id"))
        | Q(pk__in=AgentSession.objects.filter(forked_from__isnull=False).values("forked_from_id"))
        | Q(pk__in=Checkpoint.objects.filter(kind=CheckpointKind.RESTORE, parent__isnull=False).values("parent_id"))
        | Q(pk__in=DriftAlert.objects.unresolved().filter(last_good__isnull=False).values("last_good_id"))
        | Q(pk__in=DriftAlert.objects.unresolved().filter(checkpoint__isnull=False).values("checkpoint_id"))
    )


def _apply_session(session_plan: SessionPlan, *, batch_size: int, failures: Failures) -> SessionPlan:
    """Delete a session's planned checkpoints in batches; returns what was really deleted.

    A batch that fails is rolled back whole and recorded in `failures`; the batches before it stay done (each
    left the timeline a tree), the ones after it are not tried.
    """
    done: list[int] = []
    kinds: Counter[str] = Counter()
    with contained(session_plan.session_id, failures):
        for start in range(0, len(session_plan.delete), batch_size):
            batch = session_plan.delete[start : start + batch_size]
            deleted = _delete_batch(batch, session_plan.repoint)
            done.extend(pk for pk, _ in deleted)
            kinds.update(kind for _, kind in deleted)
    return SessionPlan(session_plan.session_id, session_plan.total, done, kinds, session_plan.repoint)


def _delete_batch(ids: list[int], repoint: dict[int, tuple[int, int | None]]) -> list[tuple[int, str]]:
    """One short transaction: move the kept children of `ids` to their nearest kept ancestor, then delete `ids`."""
    batch = set(ids)
    with transaction.atomic():
        doomed = list(
            Checkpoint.objects.filter(pk__in=ids).exclude(still_protected()).order_by("seq").values_list("id", "kind")
        )
        tallies.forget([pk for pk, _ in doomed])  # first: its session lock comes before any row lock
        moved = [Checkpoint(pk=child, parent_id=new) for child, (old, new) in repoint.items() if old in batch]
        if moved:
            Checkpoint.objects.bulk_update(moved, ["parent"])
        if doomed:
            Checkpoint.objects.filter(pk__in=[pk for pk, _ in doomed]).only("pk").delete()
        mark_branch_starts(row.pk for row in moved)
    return doomed


def apply_retention(*, dry_run: bool = False, now: datetime | None = None, batch_size: int = 500) -> dict[str, Any]:
    """Delete what the policies let go.

    1. Plan one session at a time (ids and a few columns, never states).
    2. Per batch of `batch_size`, in its own short transaction: re-point kept children of the batch's checkpoints to
       their nearest kept ancestor (the timeline stays a tree), then delete the batch, checking the protections
       again so a checkpoint pinned or restored meanwhile survives.
    3. One `retention` audit row with the counts.

    A session that fails in step 1 or 2 is named in the result's `errors` (with `error_count` and
    `sessions_done`); the run goes on with the others.
    """
    from .services import Actor, record_audit

    now = now or timezone.now()
    plan = Plan()
    for session_plan in iter_session_plans(now=now, failures=plan.failures):
        if dry_run or not session_plan.delete:
            plan.add(session_plan)
            continue
        plan.add(_apply_session(session_plan, batch_size=batch_size, failures=plan.failures))
    result = plan.as_dict()
    if not dry_run:
        record_audit(
            Actor.system("retention"),
            "retention",
            target="all projects",
            details={key: result[key] for key in ("deleted", "kept", "by_kind", "error_count")},
            now=now,
        )
    return result
