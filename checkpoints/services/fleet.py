"""Fleet recovery: restore (or fork) every session a shared failure broke, as one reviewed, audited, undoable batch.

1. **Select**: a filter (the Alerts and Sessions pages' filters, the API's `filter`) or a list of sessions, kept to
   what the caller may see (`Reach`); sessions they may see but not restore are counted as skipped.
2. **Preview** (`preview_recovery`): `targets.decide` for each session, a page of sessions at a time; nothing is
   written. `start_recovery` runs the very same plan and stores it as the recovery's items, so the job restores
   the targets the preview showed.
3. **Run** (`run_recovery`, a Celery job on the default queue): each item in its own transaction, under the
   session's lock: the rule is asked again; when the head moved along the same failed path (a looping agent kept
   writing) the same target is restored and the later checkpoints are counted as discarded; when the head left
   that path (someone restored it, the agent recovered) the session is skipped, never restored to a stale target.
   The item's result is written in the restore's transaction: a worker killed midway leaves each session restored
   once or untouched, and a rerun (`requeue_stalled`, from the every-minute sweep) does only the rest.
4. **Finish**: one `recovery` audit row naming every session of the batch (actor, reason, selection, counts; a
   row of no project, for staff, when the batch spans projects) and one `recovery.finished` event per project;
   notification rules hear of the batch once, not once per session.
5. **Undo** (`undo_recovery`): each restored session whose head is still the batch's restore goes back to the head
   it had before, as a new head (as a single undo does); one where the agent has written since is reported, not
   forced. Forks made by the batch are archived.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Exists, F, OuterRef, QuerySet
from django.utils import timezone

from ..audit import Actor, CheckpointError, HeadMoved, InvalidInput, NothingToUndo, record_audit
from ..models import (
    AgentSession,
    AgentSessionQuerySet,
    AlertSeverity,
    ApiToken,
    Checkpoint,
    CheckpointKind,
    DriftAlert,
    DriftAlertQuerySet,
    Project,
    Recovery,
    RecoveryAction,
    RecoveryItem,
    RecoveryResult,
    RecoveryState,
    SessionStatus,
)
from ..outbox import events
from ..registry.detectors import DETECTORS
from ..roles import OPERATE
from ..store.lineage import path_from, shapes_within
from . import heartbeats
from .cleanup import archive_session
from .drift import detect_after_restores
from .recovery import fork_session, restore_checkpoint, undo_restore
from .targets import TARGET_FIELDS, Decision, Skip, TargetRule, alerts_within, decide, on_path

logger = logging.getLogger(__name__)

PAGE = 200  # sessions decided (and held in memory) at a time
ALERT_STATES = ("open", "acknowledged", "resolved", "unresolved")


@dataclass(frozen=True)
class FleetFilter:
    """The one set of filters the Alerts page, the Sessions page and the API select sessions by. Alert fields
    select sessions with an alert matching all of them; `opened_*` bound the alert's opening (and, for the last
    good rule, the failures that count)."""

    project: str = ""  # a project's slug; the API's token names its project
    agent: str = ""
    alert_kind: str = ""
    severity: str = ""
    alert_state: str = ""  # open, acknowledged, resolved, or unresolved (open or acknowledged)
    status: str = ""
    opened_since: datetime | None = None
    opened_until: datetime | None = None
    search: str = ""

    def check(self) -> FleetFilter:
        if self.alert_kind and self.alert_kind not in DETECTORS:  # as the console's form offers them
            raise InvalidInput(
                "filter.alert_kind", f"{self.alert_kind[:40]!r} is none of {', '.join(DETECTORS.names())}"
            )
        if self.alert_state and self.alert_state not in ALERT_STATES:
            raise InvalidInput("filter.alert_state", f"{self.alert_state[:40]!r} is none of {', '.join(ALERT_STATES)}")
        if self.severity and self.severity not in AlertSeverity.values:
            raise InvalidInput("filter.severity", f"{self.severity[:40]!r} is none of {', '.join(AlertSeverity)}")
        if self.status and self.status not in SessionStatus.values:
            raise InvalidInput("filter.status", f"{self.status[:40]!r} is none of {', '.join(SessionStatus)}")
        if self.opened_since and self.opened_until and self.opened_since > self.opened_until:
            raise InvalidInput("filter.opened_until", "the window ends before it starts")
        return self

    @property
    def names_alerts(self) -> bool:
        return bool(self.alert_kind or self.severity or self.alert_state or self.opened_since or self.opened_until)

    def apply(self, sessions: AgentSessionQuerySet) -> AgentSessionQuerySet:
        if self.project:
            sessions = sessions.filter(project__slug=self.project)
        if self.agent:
            sessions = sessions.filter(agent=self.agent)
        if self.status:
            sessions = sessions.filter(status=self.status)
        if self.search:
            sessions = sessions.matching(self.search)
        if self.names_alerts:
            sessions = sessions.filter(Exists(self._alerts().filter(session=OuterRef("pk"))))
        return sessions

    def _alerts(self) -> DriftAlertQuerySet:
        alerts = alerts_within(
            DriftAlert.objects.all(), kind=self.alert_kind, since=self.opened_since, until=self.opened_until
        )
        if self.severity:
            alerts = alerts.filter(severity=self.severity)
        if self.alert_state == "unresolved":
            alerts = alerts.unresolved()
        elif self.alert_state:
            alerts = alerts.filter(state=self.alert_state)
        return alerts

    def as_json(self) -> dict[str, Any]:
        return {
            key: value.isoformat() if isinstance(value, datetime) else value
            for key, value in asdict(self).items()
            if value
        }


@dataclass(frozen=True)
class Reach:
    """What a caller may touch: the sessions they may see, and the projects where they may restore
    (None: every project they see)."""

    visible: AgentSessionQuerySet
    restorable: frozenset[int] | None = None
    project: Project | None = None  # a token's: the only project it reaches

    @classmethod
    def for_user(cls, user: Any) -> Reach:
        allowed = Project.objects.allowing(user, OPERATE).values_list("pk", flat=True)
        return cls(AgentSession.objects.visible_to(user), frozenset(allowed))

    @classmethod
    def for_token(cls, token: ApiToken) -> Reach:
        return cls(AgentSession.objects.filter(project_id=token.project_id), None, token.project)

    def may_restore(self, session: AgentSession) -> bool:
        return self.restorable is None or session.project_id in self.restorable


@dataclass(frozen=True)
class Selection:
    """What a recovery is asked to do: the action, the rule, and the sessions (a filter, or ids)."""

    action: str
    rule: TargetRule
    filter: FleetFilter = field(default_factory=FleetFilter)
    session_ids: tuple[int, ...] | None = None  # the console's ticked rows
    external_ids: tuple[str, ...] | None = None  # the API's `sessions` (in the token's project)

    def check(self) -> Selection:
        if self.action not in RecoveryAction.values:
            raise InvalidInput("action", f"{self.action[:40]!r} is neither restore nor fork")
        self.rule.check()
        self.filter.check()
        if self.session_ids is not None and not self.session_ids:
            raise InvalidInput("sessions", "tick at least one session")
        if self.external_ids is not None and not self.external_ids:
            raise InvalidInput("sessions", "name at least one session")
        return self

    def as_json(self) -> dict[str, Any]:
        chosen: dict[str, Any] = {"filter": self.filter.as_json()}
        if self.session_ids is not None:
            chosen["session_ids"] = list(self.session_ids)
        if self.external_ids is not None:
            chosen["sessions"] = list(self.external_ids)
        return chosen


def max_sessions() -> int:
    return int(settings.RECOVERY_MAX_SESSIONS)


def selected(selection: Selection, reach: Reach) -> AgentSessionQuerySet:
    """The sessions selected, of those the caller may see, in id order; InvalidInput past RECOVERY_MAX_SESSIONS."""
    sessions = selection.filter.apply(reach.visible)
    if selection.session_ids is not None:
        sessions = sessions.filter(pk__in=selection.session_ids)
    if selection.external_ids is not None:
        sessions = sessions.filter(external_id__in=selection.external_ids)
    count = sessions.count()
    if count > max_sessions():
        raise InvalidInput(
            "filter", f"selects {count:,} sessions; one batch recovers at most {max_sessions():,}: narrow the filter"
        )
    if count == 0:
        raise InvalidInput("filter", "selects no session you may see")
    return sessions.order_by("pk")


# ---- the plan: the preview and the job's items -----------------------------------------------------------


@dataclass(frozen=True)
class PlanRow:
    """One session of the plan: what the rule decided, or why it is skipped."""

    session: AgentSession
    decision: Decision | None
    skip: str = ""
    reason: str = ""

    @property
    def target(self) -> Checkpoint | None:
        return self.decision.target if self.decision and not self.skip else None

    @property
    def discarded_checkpoints(self) -> int:
        return self.decision.discards.checkpoints if self.decision and not self.skip else 0

    @property
    def discarded_tool_calls(self) -> int | None:
        return self.decision.discards.tool_calls if self.decision and not self.skip else 0


def plan(selection: Selection, reach: Reach) -> Iterator[PlanRow]:
    """The plan, a page of sessions at a time: decided by the one rule, permission and duplicates first."""
    sessions = selected(selection.check(), reach).select_related("project").defer("metadata", "live_root")
    last = 0
    while True:
        page = list(sessions.filter(pk__gt=last)[:PAGE])
        if not page:
            return
        last = page[-1].pk
        allowed = [session for session in page if reach.may_restore(session)]
        decided = decide(allowed, selection.rule)
        for session in page:
            decision = decided.get(session.pk)
            if decision is None:
                yield PlanRow(session, None, Skip.NO_PERMISSION, "you may see this session but not restore it")
            elif decision.skip:
                yield PlanRow(session, decision, decision.skip, decision.reason)
            else:
                yield PlanRow(session, decision)


@dataclass
class Totals:
    sessions: int = 0
    recover: int = 0  # to restore, or to fork
    skipped: int = 0
    discarded_checkpoints: int = 0
    discarded_tool_calls: int = 0
    skipped_by: Counter[str] = field(default_factory=Counter)

    def add(self, row: PlanRow) -> None:
        self.sessions += 1
        if row.skip:
            self.skipped += 1
            self.skipped_by[row.skip] += 1
            return
        self.recover += 1
        self.discarded_checkpoints += row.discarded_checkpoints
        self.discarded_tool_calls += row.discarded_tool_calls or 0


@dataclass
class FleetPreview:
    selection: Selection
    rows: list[PlanRow]  # the first `shown` rows; the totals count them all
    totals: Totals


def preview_recovery(selection: Selection, reach: Reach, *, shown: int | None = None) -> FleetPreview:
    """The dry run of `start_recovery`'s plan: every row decided, the first `shown` kept (all when None)."""
    totals, rows = Totals(), list[PlanRow]()
    for row in plan(selection, reach):
        totals.add(row)
        if shown is None or len(rows) < shown:
            rows.append(row)
    return FleetPreview(selection, rows, totals)


def _check_reason(reason: str) -> str:
    reason = reason.strip()
    if not reason:
        raise InvalidInput("reason", "say why: the audit log, every session's history and the batch keep it")
    if len(reason) > 500:
        raise InvalidInput("reason", "at most 500 characters")
    return reason


def start_recovery(
    selection: Selection, reach: Reach, *, actor: Actor, reason: str, start: Callable[[int], object]
) -> Recovery:
    """Store the plan as a queued recovery and queue its job once this commits (`start`: the task's `delay`;
    services do not import the tasks that call them). The items are the preview's rows, written a page at a time."""
    reason = _check_reason(reason)
    selection.check()
    with transaction.atomic():
        now = timezone.now()
        recovery = Recovery.objects.create(
            project=reach.project,
            action=selection.action,
            rule=selection.rule.rule,
            at=selection.rule.at,
            name=selection.rule.name,
            selection=selection.as_json(),
            reason=reason,
            created_by=actor.user,
            token=actor.token,
            actor=actor.label,
            created_at=now,
            heartbeat_at=now,
        )
        totals, projects, items = Totals(), set(), []
        for row in plan(selection, reach):
            totals.add(row)
            projects.add(row.session.project_id)
            items.append(_item(recovery, row))
            if len(items) >= PAGE:
                RecoveryItem.objects.bulk_create(items)
                items = []
        RecoveryItem.objects.bulk_create(items)
        if recovery.project is None and len(projects) == 1:
            recovery.project_id = next(iter(projects))
        recovery.total, recovery.skipped = totals.sessions, totals.skipped
        recovery.save(update_fields=["project", "total", "skipped"])
        record_audit(
            actor,
            "recovery_queued",
            project=recovery.project,
            target=str(recovery),
            reason=reason,
            details={
                "recovery": recovery.pk,
                "action": recovery.action,
                "rule": selection.rule.rule,
                **selection.as_json(),
                "sessions": totals.sessions,
                "to_recover": totals.recover,
                "skipped": totals.skipped,
                "discarded_checkpoints": totals.discarded_checkpoints,
            },
            now=now,
        )
        transaction.on_commit(lambda: heartbeats.send("recovery", recovery.pk, start), robust=True)
    return recovery


def _item(recovery: Recovery, row: PlanRow) -> RecoveryItem:
    decision = row.decision
    return RecoveryItem(
        recovery=recovery,
        session=row.session,
        target=decision.target if decision else None,
        target_seq=decision.target.seq if decision and decision.target else None,
        planned_head=decision.head if decision else None,
        discarded_checkpoints=row.discarded_checkpoints,
        discarded_tool_calls=row.discarded_tool_calls,
        result=RecoveryResult.SKIPPED if row.skip else RecoveryResult.PENDING,
        reason=f"{row.skip}: {row.reason}" if row.skip else "",
    )


# ---- the run ------------------------------------------------------------------------------------------


def claim_recovery(recovery_id: int, *, holder: str, now: datetime | None = None) -> bool:
    """Take the recovery for this worker (`heartbeats.claim`): a finished recovery is never taken again."""
    return heartbeats.claim(Recovery, recovery_id, holder=holder, now=now)


def beat_recovery(recovery_id: int, *, holder: str, now: datetime | None = None) -> None:
    """Proof of life, while this worker still holds it."""
    heartbeats.beat(Recovery, recovery_id, holder=holder, now=now)


def run_recovery(recovery_id: int, *, holder: str) -> dict[str, int]:
    """Do the pending items of a recovery this worker claimed, a page at a time, each session in its own
    transaction, then finish it.

    A session's item changes in the transaction that restores it, so whatever stops the worker leaves each
    session either restored (its item says so) or untouched (still pending, done by the next run). What the
    rule needs is read once a page (`_read_page`), and the failed/halted detectors run once a page over the
    sessions it restored (a rerun runs them first over every session the batch restored: a killed worker may
    have left a page of them unrun)."""
    recovery = Recovery.objects.select_related("created_by", "token").get(pk=recovery_id)
    actor, rule = _actor_of(recovery), _rule_of(recovery)
    if recovery.attempts > 1:
        _detect_restored(recovery)
    pending = RecoveryItem.objects.filter(recovery=recovery, result=RecoveryResult.PENDING).order_by("pk")
    last = 0
    while True:
        items = list(pending.filter(pk__gt=last).only(*ITEM_FIELDS)[:PAGE])
        if not items:
            break
        last = items[-1].pk
        if not Recovery.objects.filter(pk=recovery_id, worker=holder, state=RecoveryState.RUNNING).exists():
            return {"stopped": 1}  # another worker took it over: it does the rest (items are locked, never twice)
        page = _read_page(recovery, items, rule)
        results = [_recover_item(recovery, item, actor, page) for item in items]
        restored = [item.session_id for item, result in zip(items, results, strict=True) if result == "restored"]
        if restored:
            detect_after_restores(restored)
    return finish_recovery(recovery_id, holder=holder)


ITEM_FIELDS = [
    "id", "recovery_id", "session_id", "target_id", "target_seq", "planned_head_id", "result",
    "previous_head_id", "new_head_id", "discarded_checkpoints", "discarded_tool_calls",
]  # fmt: skip


def _actor_of(recovery: Recovery) -> Actor:
    if recovery.created_by is not None:
        return Actor.for_user(recovery.created_by)
    if recovery.token is not None:
        return Actor.for_token(recovery.token)
    return Actor.system(recovery.actor or "recovery")


@dataclass(frozen=True)
class _Page:
    """What the run reads once for a page of items before it locks any session: the sessions, the rule's decision
    for each, why one's head left the path the preview saw, why the batch may no longer restore in a project,
    and the sessions the batch restored (or forked) already. Under each session's lock its head is compared with
    the head decided on here: the same, the decision stands; moved, that session is read and decided again
    alone, under its lock (`_recover_item`)."""

    sessions: dict[int, AgentSession]
    decided: dict[int, Decision]
    targets: dict[int, Checkpoint]  # by id, with the columns a restore copies (the decisions' are slim)
    left_path: dict[int, str]  # session id → why its head is off the path the preview saw
    refused: dict[int, str]  # project id → why this batch may no longer restore there
    made: frozenset[int]


def _read_page(recovery: Recovery, items: Sequence[RecoveryItem], rule: TargetRule) -> _Page:
    """A page's reads, a fixed number of queries however many items (plus two per session without an alert,
    where the rule looks for the first failure on the head's path)."""
    ids = [item.session_id for item in items]
    sessions = AgentSession.objects.filter(pk__in=ids).select_related("project").defer("metadata", "live_root")
    found: dict[int, AgentSession] = {session.pk: session for session in sessions}
    decided = decide(list(found.values()), rule)
    targets = Checkpoint.objects.filter(pk__in=[d.target.pk for d in decided.values() if d.target and not d.skip])
    planned = Checkpoint.objects.filter(pk__in=[item.planned_head_id for item in items if item.planned_head_id])
    planned_heads = {c.pk: c for c in planned.only(*TARGET_FIELDS)}
    shapes = shapes_within(list(found))
    left_path: dict[int, str] = {}
    for item in items:
        decision, before = decided.get(item.session_id), planned_heads.get(item.planned_head_id or 0)
        head = decision.head if decision else None
        if head is None or before is None or item.target_id is None:
            left_path[item.session_id] = f"{Skip.HEAD_MOVED}: the head or the target the preview showed is gone"
        elif head.pk != before.pk and not on_path(path_from(item.session_id, head.seq, shapes), before):
            left_path[item.session_id] = (
                f"{Skip.HEAD_MOVED}: the head #{head.seq} left the path the preview saw (its head was #{before.seq})"
            )
    return _Page(
        found,
        decided,
        {c.pk: c for c in targets.defer("metadata", "preview")},
        left_path,
        _refused(recovery, {s.project for s in found.values()}),
        _made(recovery, ids),
    )


def _refused(recovery: Recovery, projects: set[Project]) -> dict[int, str]:
    """A person who lost the operator role since the preview restores nothing more; a revoked token neither.
    Asked again each page, of the person as they are now (not the copy the run started with)."""
    if recovery.created_by_id is not None:
        user = get_user_model().objects.filter(pk=recovery.created_by_id).first()
        return {
            project.pk: f"{Skip.NO_PERMISSION}: {recovery.actor} may no longer restore in {project.slug}"
            for project in projects
            if user is None or not (user.is_active and user.has_perm(OPERATE, project))
        }
    token = recovery.token
    if token is not None and not ApiToken.objects.usable().filter(pk=token.pk).exists():
        return {
            project.pk: f"{Skip.NO_PERMISSION}: the token {token.name!r} was revoked or expired" for project in projects
        }
    return {}


def _made(recovery: Recovery, session_ids: list[int]) -> frozenset[int]:
    """The sessions this batch restored (or forked) already: never a second one, whatever their item says."""
    if recovery.action == RecoveryAction.FORK:
        forks = AgentSession.objects.filter(forked_from__session_id__in=session_ids, metadata__recovery=recovery.pk)
        return frozenset(forks.values_list("forked_from__session_id", flat=True))
    made = Checkpoint.objects.filter(
        session_id__in=session_ids, kind=CheckpointKind.RESTORE, metadata__recovery=recovery.pk
    )
    return frozenset(made.values_list("session_id", flat=True))


class _Recorded(Exception):
    """The item is no longer pending: another run recorded it first (raised to undo what this one wrote)."""


def _recover_item(recovery: Recovery, item: RecoveryItem, actor: Actor, page: _Page) -> str:
    """One session in its own transaction, which ends by recording its item if the item is still pending (a
    conditional UPDATE: of two runs, the one that finds it recorded undoes its own work); its result, "" when
    another run did it."""
    try:
        with transaction.atomic():
            try:
                return _recover_locked(recovery, item, actor, page)
            except HeadMoved:
                # the head moved since the page was read (the agent kept writing, someone restored it): read and
                # decide this session again, under its lock
                list(AgentSession.objects.select_for_update(of=("self",)).filter(pk=item.session_id).values("pk"))
                return _recover_locked(recovery, item, actor, _read_page(recovery, [item], _rule_of(recovery)))
    except _Recorded:
        return ""  # an earlier run (or a worker that took over) recorded it: this transaction was undone
    except CheckpointError as exc:
        _mark(recovery, item.pk, RecoveryResult.FAILED, str(exc))
    except Exception as exc:  # one session's fault must not stop the batch: recorded, logged, the rest goes on
        logger.exception("recovery %s: session of item %s failed", recovery.pk, item.pk)
        _mark(recovery, item.pk, RecoveryResult.FAILED, f"internal error: {type(exc).__name__}")
    return RecoveryResult.FAILED


def _recover_locked(recovery: Recovery, item: RecoveryItem, actor: Actor, page: _Page) -> str:
    """Under the item's lock: skip, or restore (fork) the page's decision if the head is still the one decided on
    (HeadMoved otherwise, before anything is written); record the item."""
    session, decision = page.sessions.get(item.session_id), page.decided.get(item.session_id)
    skip = page.refused.get(session.project_id, "") if session else f"{Skip.NO_HEAD}: the session is gone"
    skip = skip or page.left_path.get(item.session_id, "")
    if not skip and decision is not None:
        if decision.skip:
            skip = f"{decision.skip}: {decision.reason}"
        elif decision.target is None or decision.target.pk != item.target_id:
            now_at = f"#{decision.target.seq}" if decision.target else "none"
            skip = f"{Skip.HEAD_MOVED}: the target moved from #{item.target_seq} to {now_at} since the preview"
    if not skip and item.session_id in page.made:
        skip = f"{Skip.IN_BATCH}: this batch restored the session already"
    if skip or session is None or decision is None or decision.target is None or decision.head is None:
        if session is not None and decision is not None and decision.head is not None:
            _expect_head(session, decision.head)  # a skip decided on a stale head is decided again
        return _set(recovery, item, RecoveryResult.SKIPPED, reason=skip or f"{Skip.HEAD_MOVED}: nothing to restore")
    item.previous_head = decision.head
    item.discarded_checkpoints = decision.discards.checkpoints  # counts what a looping agent wrote since
    item.discarded_tool_calls = decision.discards.tool_calls
    if recovery.action == RecoveryAction.FORK:
        _expect_head(session, decision.head)
        fork = fork_session(page.targets[decision.target.pk], actor=actor, reason=recovery.reason, recovery=recovery.pk)
        item.new_head_id = fork.head_id
        return _set(recovery, item, RecoveryResult.FORKED)
    item.new_head = restore_checkpoint(
        page.targets[decision.target.pk],
        actor=actor,
        reason=recovery.reason,
        recovery=recovery.pk,
        expect_head=decision.head.pk,
        detect=False,  # once for the page: run_recovery
    )
    return _set(recovery, item, RecoveryResult.RESTORED)


def _expect_head(session: AgentSession, head: Checkpoint) -> None:
    """Lock the session; HeadMoved when its head is no longer `head`."""
    now = AgentSession.objects.select_for_update(of=("self",)).filter(pk=session.pk).values_list("head_id", flat=True)
    if list(now) != [head.pk]:
        raise HeadMoved(f"the head of {session} moved from checkpoint {head.pk}")


def _detect_restored(recovery: Recovery) -> None:
    """The detectors over every session the batch restored, a page at a time (a rerun's first step)."""
    restored = recovery.items.filter(result=RecoveryResult.RESTORED).order_by("pk").values_list("session_id", flat=True)
    ids = list(restored.iterator(chunk_size=PAGE))
    for start in range(0, len(ids), PAGE):
        detect_after_restores(ids[start : start + PAGE])


def _rule_of(recovery: Recovery) -> TargetRule:
    chosen = (recovery.selection or {}).get("filter") or {}
    return TargetRule(
        recovery.rule,
        at=recovery.at,
        name=recovery.name,
        since=_time(chosen.get("opened_since")),
        until=_time(chosen.get("opened_until")),
        alert_kind=chosen.get("alert_kind", ""),
    )


def _time(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) and value else None


COUNTER: dict[str, str] = {
    RecoveryResult.RESTORED: "done",
    RecoveryResult.FORKED: "done",
    RecoveryResult.SKIPPED: "skipped",
    RecoveryResult.FAILED: "failed",
}


def _set(recovery: Recovery, item: RecoveryItem, result: str, *, reason: str = "") -> str:
    """Record the item's result if it is still pending (_Recorded otherwise), and count it on the recovery."""
    recorded = RecoveryItem.objects.filter(pk=item.pk, result=RecoveryResult.PENDING).update(
        result=result,
        reason=reason,
        previous_head=item.previous_head_id,
        new_head=item.new_head_id,
        discarded_checkpoints=item.discarded_checkpoints,
        discarded_tool_calls=item.discarded_tool_calls,
    )
    if not recorded:
        raise _Recorded
    item.result, item.reason = result, reason
    Recovery.objects.filter(pk=recovery.pk).update(**{COUNTER[result]: F(COUNTER[result]) + 1})
    return result


def _mark(recovery: Recovery, item_id: int, result: str, reason: str) -> None:
    try:
        with transaction.atomic():
            _set(recovery, RecoveryItem.objects.get(pk=item_id), result, reason=reason)
    except _Recorded:
        pass


@transaction.atomic
def finish_recovery(recovery_id: int, *, holder: str, now: datetime | None = None) -> dict[str, int]:
    """Mark it finished (once: a conditional UPDATE), write the batch's one `recovery` audit row and a
    `recovery.finished` event per project its sessions are in (a project's receivers hear of their sessions).

    The audit row names every session (as `project/external id`) with its result, the actor, reason, selection and
    counts. It belongs to the recovery's project when the batch stayed in one; a batch over several projects is a
    row of no project, which the audit log shows only to those who see every project (staff): a member of one
    project never reads another's session names in it, and still finds, per session, the `restore` row carrying
    the batch's id and reason (docs/fleet-recovery.md)."""
    now = now or timezone.now()
    if not Recovery.objects.filter(pk=recovery_id, worker=holder, state=RecoveryState.RUNNING).update(
        state=RecoveryState.FINISHED, finished_at=now
    ):
        return {"stopped": 1}
    recovery = Recovery.objects.select_related("created_by", "token").get(pk=recovery_id)
    actor = _actor_of(recovery)
    sessions: dict[str, str] = {}
    by_project: dict[int, Counter[str]] = defaultdict(Counter)
    slugs: dict[int, str] = {}
    rows = recovery.items.order_by("pk").values_list(
        "session__project_id", "session__project__slug", "session__external_id", "result"
    )
    for project_id, slug, external_id, result in rows.iterator(chunk_size=PAGE):
        sessions[f"{slug}/{external_id}"] = result
        by_project[project_id][result] += 1
        slugs[project_id] = slug
    counts = sum(by_project.values(), Counter[str]())
    details = {
        "recovery": recovery.pk,
        "action": recovery.action,
        "rule": recovery.rule,
        **recovery.selection,
        "counts": dict(sorted(counts.items())),
        "projects": {slugs[pk]: dict(sorted(by_project[pk].items())) for pk in sorted(by_project)},
        "sessions": sessions,
    }
    projects = list(Project.objects.filter(pk__in=list(by_project)).order_by("pk"))
    # one project: its members read the row; several: no project, read by staff only (see the docstring)
    project = projects[0] if len(projects) == 1 else None
    record_audit(
        actor, "recovery", project=project, target=str(recovery), reason=recovery.reason, details=details, now=now
    )
    for each in projects:
        events.publish_recovery_finished(recovery, each, counts=dict(by_project[each.pk]), actor=actor.label)
    return {"total": recovery.total, "done": recovery.done, "skipped": recovery.skipped, "failed": recovery.failed}


def fail_recovery(recovery_id: int, *, holder: str, error: str) -> None:
    """A bug stopped the run: the recovery says so instead of staying `running`; the sessions done stay done."""
    Recovery.objects.filter(pk=recovery_id, worker=holder, state=RecoveryState.RUNNING).update(
        state=RecoveryState.FAILED, error=error, finished_at=timezone.now()
    )


def requeue_stalled(start: Callable[[int], object], *, now: datetime | None = None, limit: int = 100) -> int:
    """Queue again the recoveries whose worker stopped beating or whose message never reached a worker."""
    return heartbeats.requeue_stalled(Recovery, "recovery", start, now=now, limit=limit)


# ---- undo --------------------------------------------------------------------------------------------


@dataclass
class UndoReport:
    undone: int = 0
    archived: int = 0
    kept: list[str] = field(default_factory=list)  # sessions the agent has written to since, left as they are


def undo_recovery(recovery: Recovery, *, actor: Actor, reason: str = "", now: datetime | None = None) -> UndoReport:
    """Undo the batch: each session it restored goes back to the head it had before (a new head, as a single
    undo), each fork it made is archived. A session whose head is no longer the batch's restore (the agent wrote
    since, or someone restored it again) is reported and left alone. Each session in its own transaction."""
    if recovery.state != RecoveryState.FINISHED:
        raise CheckpointError("the recovery has not finished: undo it once it has")
    if recovery.undone_at is not None:
        raise NothingToUndo(
            f"the recovery was undone already, by {recovery.undone_by} at {recovery.undone_at:%Y-%m-%d %H:%M} UTC"
        )
    now = now or timezone.now()
    reason = reason.strip() or f"undo of recovery {recovery.pk}"
    report = UndoReport()
    done = recovery.items.filter(result__in=[RecoveryResult.RESTORED, RecoveryResult.FORKED], undo="")
    for item in done.select_related("session", "new_head__session").order_by("pk").iterator(chunk_size=PAGE):
        with transaction.atomic():
            said = _undo_item(item, actor=actor, reason=reason, now=now)
            RecoveryItem.objects.filter(pk=item.pk).update(undo=said[:300])
        if said.startswith("undone"):
            report.undone += 1
        elif said.startswith("archived"):
            report.archived += 1
        else:
            report.kept.append(item.session.external_id)
    with transaction.atomic():
        Recovery.objects.filter(pk=recovery.pk).update(undone_at=now, undone_by=actor.label)
        recovery.undone_at, recovery.undone_by = now, actor.label
        record_audit(
            actor,
            "recovery_undo",
            project=recovery.project,
            target=str(recovery),
            reason=reason,
            details={
                "recovery": recovery.pk,
                "undone": report.undone,
                "archived": report.archived,
                "kept": report.kept,
            },
            now=now,
        )
    return report


def _undo_item(item: RecoveryItem, *, actor: Actor, reason: str, now: datetime) -> str:
    if item.result == RecoveryResult.FORKED:
        fork = item.new_head.session if item.new_head else None
        if fork is None:
            return "kept: the fork is gone"
        archive_session(fork, actor=actor, now=now)
        return f"archived fork {fork.external_id}"
    head_id = AgentSession.objects.select_for_update().values_list("head_id", flat=True).get(pk=item.session_id)
    if head_id != item.new_head_id:
        return "kept: the session has a newer head than the batch's restore (the agent wrote since); not forced"
    try:
        undone = undo_restore(item.session, actor=actor, reason=reason, now=now)
    except NothingToUndo as exc:
        return f"kept: {exc}"
    return f"undone: back to #{undone.metadata.get('restored_from_seq')} as new head #{undone.seq}"


def recovery_rows(recovery: Recovery, visible: AgentSessionQuerySet) -> QuerySet[RecoveryItem]:
    """The items a caller may see (a session of a project they cannot see is neither named nor counted)."""
    return (
        recovery.items.filter(session__in=visible)
        .select_related("session", "target", "new_head__session")
        .order_by("pk")
    )


def as_sequence(value: Sequence[Any] | None) -> tuple[Any, ...] | None:
    return tuple(dict.fromkeys(value)) if value is not None else None
