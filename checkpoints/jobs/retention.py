"""Retention (docs/jobs.md, "Retention"): which checkpoints the policies let go, and deleting them in short batches (each
through `services.cleanup.delete_expired`, the run audited by `record_retention_run`), throttled: at most
`RETENTION_BATCH_ROWS` checkpoints a batch and a `RETENTION_BATCH_PAUSE_MS` sleep between batches, so that agents
writing meanwhile find the CPU (and the database) free most of the time.

A policy is a set of *keep* rules; a checkpoint of the policy's kind is deleted when none of its rules keeps it:

- `keep_last` N: the newest N per session (`session` scope, by seq) or per agent across the agent's sessions in a
  project (`agent` scope, by creation time);
- `max_age`: checkpoints younger than it (created after `now - max_age`);
- `until_operation_done`: checkpoints whose operation is not done yet;
- `keep_first`: the session's first checkpoint; `keep_latest_per_name`: the session's newest of each name.

A project's policy for a kind overrides the global one; a disabled policy, a policy with no rule, or a kind with no
policy deletes nothing. Whatever the rules say, a pinned checkpoint, a session's head, a fork source, a restore
target and an unresolved alert's `last_good` (and its `checkpoint`) are never deleted.

LangGraph threads are kept whole (LangGraph's get_state_history reads every checkpoint) unless a policy says
`applies_to_langgraph`; even then the latest checkpoint of each namespace and a checkpoint waiting on an interrupt
(an `__interrupt__` pending write without a `__resume__`) stay.

Chunks are left alone: garbage collection sweeps the ones no checkpoint references any more. A session whose rows
cannot be read or deleted (bad data from before, a bug) is named in the result's `errors` and left as it was; the
other sessions are processed all the same (`services.batches.each_batch`).
"""

from __future__ import annotations

import heapq
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import F, Q, QuerySet, Window
from django.db.models.functions import RowNumber
from django.utils import timezone

from ..models import (
    AgentSession,
    Checkpoint,
    CheckpointKind,
    DriftAlert,
    LangGraphCheckpoint,
    LangGraphWrites,
    Project,
    RetentionPolicy,
    RetentionScope,
    SourceFormat,
)
from ..services.batches import Failures, concerns_the_whole_run, contained, each_batch
from ..services.cleanup import delete_expired, record_retention_run
from . import StopRequest

PREVIEW_SIZE = 200
PROJECT_PREVIEW = 50  # ids kept per project, so a recorded dry run can show each user their projects' share
PLAN_BATCH = 50  # sessions planned per savepoint, their rows read in one query

# (id, seq, name, kind, created_at, operation_done, pinned, parent_id): all retention reads of a checkpoint
Row = tuple[int, int, str, str, datetime, bool, bool, int | None]
ROW_FIELDS = ("id", "seq", "name", "kind", "created_at", "operation_done", "pinned", "parent_id")


@dataclass
class SessionPlan:
    """What retention deletes in one session, and the parent of each (to re-point their kept children)."""

    session_id: int
    project_id: int
    total: int
    delete: list[int]  # in seq order
    kinds: Counter[str]
    parents: dict[int, int | None]  # each id to delete → its parent


@dataclass
class Figures:
    """What a run deletes and keeps: in all, or in one project."""

    deleted: int = 0
    kept: int = 0
    by_kind: Counter[str] = field(default_factory=Counter)
    checkpoints: list[int] = field(default_factory=list)  # the lowest ids to delete, sorted

    def add(self, session_plan: SessionPlan, *, preview: int) -> None:
        """`preview` ids are kept, the lowest: the same whatever order a run applies its sessions in (a real run
        yields a session when its last batch is done), so a dry run shows what the real run deletes."""
        self.deleted += len(session_plan.delete)
        self.kept += session_plan.total - len(session_plan.delete)
        self.by_kind.update(session_plan.kinds)
        if session_plan.delete:
            lowest = heapq.nsmallest(preview, session_plan.delete)
            self.checkpoints = heapq.nsmallest(preview, [*self.checkpoints, *lowest])

    def counts(self) -> dict[str, Any]:
        return {
            "deleted": self.deleted,
            "kept": self.kept,
            "by_kind": dict(sorted(self.by_kind.items())),
            "checkpoints": list(self.checkpoints),
        }


@dataclass
class Plan(Figures):
    failures: Failures = field(default_factory=Failures)  # sessions that could not be planned or applied
    projects: dict[int, Figures] = field(default_factory=dict)

    def add(self, session_plan: SessionPlan, *, preview: int = PREVIEW_SIZE) -> None:
        super().add(session_plan, preview=preview)
        self.projects.setdefault(session_plan.project_id, Figures()).add(session_plan, preview=PROJECT_PREVIEW)

    def as_dict(self) -> dict[str, Any]:
        projects = {str(pk): figures.counts() for pk, figures in sorted(self.projects.items())}
        return {**self.counts(), **self.failures.as_dict(), "projects": projects}


def recorded_plan(result: dict[str, Any], *, projects: Iterable[int]) -> Plan:
    """A recorded run's figures in `projects` only: a dry run spans every project, a user sees their own."""
    plan = Plan()
    recorded = result.get("projects", {})
    for pk in sorted(projects):
        figures = recorded.get(str(pk))
        if figures is None:
            continue
        plan.deleted += figures["deleted"]
        plan.kept += figures["kept"]
        plan.by_kind.update(figures["by_kind"])
        plan.checkpoints.extend(figures["checkpoints"])
    return plan


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
    scope = "; LangGraph threads too" if policy.applies_to_langgraph else ""
    return "".join([text, *(f", plus {rule.removeprefix('keep ')}" for rule in rules[1:]), scope])


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
        self._agent_keep: dict[tuple[str, int], set[int]] = {}

    def policy(self, project_id: int, kind: str, *, langgraph: bool = False) -> RetentionPolicy | None:
        policy = self.project.get((project_id, kind)) or self.global_.get(kind)
        if policy is None or not policy.enabled or (langgraph and not policy.applies_to_langgraph):
            return None
        has_rule = (
            policy.keep_last is not None
            or policy.max_age is not None
            or policy.until_operation_done
            or policy.keep_first
            or policy.keep_latest_per_name
        )
        return policy if has_rule else None

    def agent_keep(self, policy: RetentionPolicy) -> set[int]:
        """The newest `keep_last` checkpoints of the policy's kind of each agent in each project: every agent in
        one query (ids of different agents never meet, so one set serves them all)."""
        key = (policy.kind, policy.keep_last or 0)
        if key not in self._agent_keep:
            newest = Window(
                RowNumber(),
                partition_by=[F("session__project_id"), F("session__agent")],
                order_by=[F("created_at").desc(), F("id").desc()],
            )
            ranked = Checkpoint.objects.filter(kind=policy.kind).annotate(rank=newest).filter(rank__lte=key[1])
            self._agent_keep[key] = set(ranked.order_by().values_list("id", flat=True)) if key[1] else set()
        return self._agent_keep[key]


Session = tuple[int, int, int | None, str]  # (id, project_id, head_id, source_format)


def _plan_session(rules: _Rules, session: Session, rows: list[Row], kept: set[int]) -> SessionPlan:
    """`rows` are the session's checkpoints in seq order; `kept` what its LangGraph side protects."""
    session_id, project_id, head_id, source_format = session
    langgraph = source_format == SourceFormat.LANGGRAPH
    protected = {head_id, *kept} if head_id else set(kept)
    protected.update(parent for _, _, _, kind, _, _, _, parent in rows if kind == CheckpointKind.RESTORE and parent)
    first_id = rows[0][0] if rows else None
    by_kind: dict[str, list[Row]] = {}
    for row in rows:
        by_kind.setdefault(row[3], []).append(row)

    delete: set[int] = set()
    kinds: Counter[str] = Counter()
    for kind, kind_rows in by_kind.items():
        policy = rules.policy(project_id, kind, langgraph=langgraph)
        if policy is None:
            continue
        keep = _kept(rules, policy, kind_rows, first_id)
        for pk, _, _, _, _, _, pinned, _ in kind_rows:
            if pk not in keep and not pinned and pk not in protected and pk not in rules.protected:
                delete.add(pk)
                kinds[kind] += 1

    ordered = [row[0] for row in rows if row[0] in delete]
    parents = {row[0]: row[7] for row in rows if row[0] in delete}
    return SessionPlan(session_id, project_id, len(rows), ordered, kinds, parents)


def _kept(rules: _Rules, policy: RetentionPolicy, kind_rows: list[Row], first_id: int | None) -> set[int]:
    """The ids the policy keeps of one kind's rows (in seq order); `first_id` is the session's first checkpoint."""
    keep: set[int] = set()
    if policy.keep_last is not None:
        if policy.keep_last_scope == RetentionScope.AGENT:
            keep |= rules.agent_keep(policy)
        elif policy.keep_last:
            keep.update(row[0] for row in kind_rows[-policy.keep_last :])
    if policy.max_age is not None:
        cutoff = rules.now - policy.max_age  # younger than max_age: one exactly max_age old goes
        keep.update(row[0] for row in kind_rows if row[4] > cutoff)
    if policy.until_operation_done:
        keep.update(row[0] for row in kind_rows if not row[5])
    if policy.keep_first and first_id is not None:
        keep.add(first_id)
    if policy.keep_latest_per_name:
        latest = {row[2]: row[0] for row in kind_rows if row[2]}  # rows are in seq order: the last one wins
        keep.update(latest.values())
    return keep


def _plan_sessions(rules: _Rules, sessions: list[Session]) -> list[SessionPlan]:
    """One query reads the rows of every session in the batch (not one per session)."""
    rows: dict[int, list[Row]] = {session[0]: [] for session in sessions}
    query = (
        Checkpoint.objects.filter(session_id__in=list(rows))
        .order_by("session_id", "seq")
        .values_list("session_id", *ROW_FIELDS)
    )
    for row in query:
        rows[row[0]].append(row[1:])
    kept = _langgraph_kept([session[0] for session in sessions if session[3] == SourceFormat.LANGGRAPH])
    return [_plan_session(rules, session, rows[session[0]], kept.get(session[0], set())) for session in sessions]


def _langgraph_kept(session_ids: list[int]) -> dict[int, set[int]]:
    """What LangGraph threads need whatever a policy says, by session: the latest checkpoint of each namespace,
    and each checkpoint with an interrupt no resume has answered (a graph waits on it)."""
    kept: dict[int, set[int]] = {}
    if not session_ids:
        return kept
    rows = LangGraphCheckpoint.objects.filter(session_id__in=session_ids, current=True)
    latest: dict[tuple[int, str], tuple[str, int]] = {}
    by_id: dict[tuple[int, str, str], int] = {}
    for session_id, ns, checkpoint_id, pk in rows.values_list(
        "session_id", "checkpoint_ns", "checkpoint_id", "console_id"
    ):
        by_id[(session_id, ns, checkpoint_id)] = pk
        if (session_id, ns) not in latest or checkpoint_id > latest[(session_id, ns)][0]:
            latest[(session_id, ns)] = (checkpoint_id, pk)
    for (session_id, _), (_, pk) in latest.items():
        kept.setdefault(session_id, set()).add(pk)
    flags: dict[tuple[int, str, str], tuple[bool, bool]] = {}  # → (an interrupt, a resume) among its writes
    writes = LangGraphWrites.objects.filter(session_id__in=session_ids).filter(Q(interrupted=True) | Q(resumed=True))
    for session_id, ns, checkpoint_id, interrupt, resume in writes.values_list(
        "session_id", "checkpoint_ns", "checkpoint_id", "interrupted", "resumed"
    ):
        seen = flags.get((session_id, ns, checkpoint_id), (False, False))
        flags[(session_id, ns, checkpoint_id)] = (seen[0] or interrupt, seen[1] or resume)
    for key, (interrupt, resume) in flags.items():
        if interrupt and not resume and key in by_id:
            kept.setdefault(key[0], set()).add(by_id[key])
    return kept


def iter_session_plans(
    *, failures: Failures, now: datetime | None = None, sessions: QuerySet[AgentSession] | None = None
) -> Iterator[SessionPlan]:
    """Sessions (of `sessions`, default all) planned PLAN_BATCH at a time, so memory holds a few sessions' ids,
    never a whole store's states.

    A session whose rows cannot be read is recorded in `failures` and yields no plan: nothing of it is deleted.
    """
    rules = _Rules(now or timezone.now())
    chosen = AgentSession.objects.all() if sessions is None else sessions
    rows = chosen.order_by("pk").values_list("pk", "project_id", "head_id", "source_format")

    for plans in each_batch(
        rows.iterator(chunk_size=1000),
        lambda batch: _plan_sessions(rules, batch),
        failures,
        size=PLAN_BATCH,
        key=lambda session: session[0],
    ):
        yield from plans


def plan_retention(*, now: datetime | None = None, sessions: QuerySet[AgentSession] | None = None) -> Plan:
    plan = Plan()
    for session_plan in iter_session_plans(now=now, failures=plan.failures, sessions=sessions):
        plan.add(session_plan)
    return plan


@dataclass
class Throttle:
    """Retention's delete step, one batch at a time, with a sleep of `pause` seconds before every batch but the
    first: while retention sleeps, writers have the CPU and the database to themselves (docs/jobs.md). Before
    each batch (and after its pause) it reads `stop`: once set, no batch starts, and `stopped` says why."""

    pause: float
    stop: StopRequest | None = None
    batches: int = 0
    stopped: str = ""

    def ready(self) -> bool:
        """Pause if a batch came before; False (and no pause) once the run is asked to stop."""
        if not self._go_on():
            return False
        if self.batches and self.pause > 0:
            time.sleep(self.pause)
        return self._go_on()

    def _go_on(self) -> bool:
        if self.stop is not None and self.stop.is_set():
            self.stopped = self.stop.reason or "asked to stop"
        return not self.stopped

    def delete(self, ids: list[int], parents: dict[int, int | None]) -> list[tuple[int, str]]:
        self.batches += 1
        return delete_expired(ids, parents)


def _applied(
    plans: Iterable[SessionPlan], *, batch_size: int, throttle: Throttle, failures: Failures
) -> Iterator[SessionPlan]:
    """Each plan, applied: what was really deleted, in the order planned, as one or more pieces whose figures add
    up to the session's.

    Every batch holds `batch_size` checkpoints (the last one of a run fewer): a session's deletions are cut into
    pieces in seq order that fill the batches, so a session of 598 at 500 a batch takes one batch and a fifth of
    the next, shared with the sessions after it (a batch costs the same ten statements, a commit and a pause
    whatever its size; a batch of 500 and one of 98 a session made the pauses most of a run's time). Once a piece
    of a session fails, its later pieces are not tried: the next run plans it again from what is left.

    Once the throttle is stopped nothing more is planned or deleted: a session cut short yields what its done
    batches deleted, the sessions after it yield nothing (their figures are the next run's)."""
    group: list[SessionPlan] = []
    room = batch_size
    for session_plan in plans:
        for piece in _pieces(session_plan, room, batch_size):
            group.append(piece)
            room -= len(piece.delete)
            if room == 0:
                yield from _apply_group(group, throttle=throttle, failures=failures)
                group, room = [], batch_size
                if throttle.stopped:
                    return
    yield from _apply_group(group, throttle=throttle, failures=failures)


def _pieces(session_plan: SessionPlan, first: int, size: int) -> Iterator[SessionPlan]:
    """The session's deletions in pieces of `first`, then `size`, in seq order (a plan with nothing to delete is
    one empty piece, for its figures). Each piece but the last counts as many checkpoints as it deletes, the last
    the rest of the session, so the kept ones are counted once; all hold one map of parents, from which a batch
    takes what it found protected (a later piece's children must see it)."""
    parents = dict(session_plan.parents)
    delete, start, step = session_plan.delete, 0, first
    while len(delete) - start > step:
        yield SessionPlan(
            session_plan.session_id, session_plan.project_id, step, delete[start : start + step], Counter(), parents
        )
        start, step = start + step, size
    yield SessionPlan(
        session_plan.session_id, session_plan.project_id, session_plan.total - start, delete[start:], Counter(), parents
    )


def _apply_group(group: list[SessionPlan], *, throttle: Throttle, failures: Failures) -> list[SessionPlan]:
    """Delete the planned checkpoints of a few pieces of sessions in one batch. When it fails, each piece is tried
    on its own, so the session at fault is named and the others are done. A piece of a session that failed in an
    earlier batch deletes nothing."""
    live = [piece for piece in group if not failures.failed(piece.session_id)]
    skipped = [_unapplied(piece) for piece in group if failures.failed(piece.session_id)]
    ids = [pk for piece in live for pk in piece.delete]
    if not ids:
        return skipped + live
    if not throttle.ready():
        return []
    # A batch of one piece takes its session's own map: a copy would cost the whole session's map again in each of
    # its batches. What the batch takes out of it stays out even if the batch fails, which is harmless: a failed
    # batch of one piece ends the session's run (below), so no later piece reads the map.
    if len(live) == 1:
        parents = live[0].parents
    else:
        parents = {pk: parent for piece in live for pk, parent in piece.parents.items()}
    try:
        deleted = throttle.delete(ids, parents)
    except Exception as exc:
        if len(live) == 1:  # the batch was this session's own: trying it alone again would be the same batch
            failures.record(live[0].session_id, exc)
            return [*skipped, _unapplied(live[0])]
        if concerns_the_whole_run(exc):
            raise
        return skipped + [
            _unapplied(piece)
            if failures.failed(piece.session_id)
            else _apply_alone(piece, throttle=throttle, failures=failures, paused=not index)
            for index, piece in enumerate(live)
        ]
    kinds = dict(deleted)
    done = skipped
    for piece in live:
        failures.succeeded([piece.session_id])
        for pk in piece.delete:
            if pk not in parents:  # found protected: it stays, and the session's later pieces hang children from it
                piece.parents.pop(pk, None)
        gone = [pk for pk in piece.delete if pk in kinds]
        done.append(
            SessionPlan(piece.session_id, piece.project_id, piece.total, gone, Counter(kinds[pk] for pk in gone), {})
        )
    return done


def _unapplied(piece: SessionPlan) -> SessionPlan:
    return SessionPlan(piece.session_id, piece.project_id, piece.total, [], Counter(), {})


def _apply_alone(piece: SessionPlan, *, throttle: Throttle, failures: Failures, paused: bool) -> SessionPlan:
    """One piece of a shared batch that failed, tried again in a batch of its own; returns what was really
    deleted. A failure is rolled back whole and recorded in `failures` (the session's later pieces are then not
    tried: the next run plans it again from what is left). `paused`: the throttle already paused for it (the
    shared batch's pause). The piece's map of parents loses what the batch found protected (`_pieces` shares it
    with the session's other pieces)."""
    deleted: list[tuple[int, str]] = []
    with contained(piece.session_id, failures):
        if paused or throttle.ready():
            deleted = throttle.delete(piece.delete, piece.parents)
    gone = [pk for pk, _ in deleted]
    return SessionPlan(piece.session_id, piece.project_id, piece.total, gone, Counter(kind for _, kind in deleted), {})


def apply_retention(
    *,
    dry_run: bool = False,
    now: datetime | None = None,
    batch_size: int | None = None,
    pause: float | None = None,
    stop: StopRequest | None = None,
) -> dict[str, Any]:
    """Delete what the policies let go.

    1. Plan one session at a time (ids and a few columns, never states).
    2. Per batch of `batch_size` checkpoints (default `RETENTION_BATCH_ROWS`; sessions with little to delete share
       one), in its own short transaction, `pause` seconds after the previous one (default
       `RETENTION_BATCH_PAUSE_MS`): check the protections again (a checkpoint pinned or restored meanwhile
       survives), re-point the children of the rest to their nearest kept ancestor (the timeline stays a tree),
       then delete them.
    3. One `retention` audit row with the counts.

    `stop` (set by the heartbeat when the run loses its lock, or by the command on SIGTERM) ends the run between
    two batches, never inside one: what the done batches deleted is counted, audited and left consistent, the
    result's `stopped` says why, and the next run plans what is left.

    A session that fails in step 1 or 2 is named in the result's `errors` (with `error_count` and
    `sessions_done`); the run goes on with the others.
    """
    now = now or timezone.now()
    plan = Plan()
    plans = iter_session_plans(now=now, failures=plan.failures)
    throttle = None
    if not dry_run:
        # an operator's 0 or negative must neither stop every run (a zero step) nor sleep a negative time
        batch_size = max(1, batch_size or settings.RETENTION_BATCH_ROWS)
        pause = max(0.0, settings.RETENTION_BATCH_PAUSE_MS / 1000 if pause is None else pause)
        throttle = Throttle(pause, stop)
        plans = _applied(plans, batch_size=batch_size, throttle=throttle, failures=plan.failures)
    for session_plan in plans:
        plan.add(session_plan)
    result = plan.as_dict()
    if throttle is not None and throttle.stopped:
        result["stopped"] = throttle.stopped
    if not dry_run:
        record_retention_run(result, now=now)
    return result
