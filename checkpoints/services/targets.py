"""Where a session goes back to: the one rule the single alert's "Restore last good" and a fleet recovery both ask.

Every rule reads the head's path (the head and its ancestors, `store.lineage`), never a side branch:

- **last good**: the `last_good` of the session's unresolved alert (the alert a row shows, else its oldest one with a
  last good inside the window); without one, the newest healthy checkpoint on the path before the session's first
  failure inside the window (failed, halted, or a tool call that failed);
- **before**: the checkpoint on the path made just before a time;
- **named**: the newest checkpoint of that name on the path before the first failure in the window (before the head
  when nothing failed).

A session is skipped, with its reason, when the rule finds nothing, when the target is the head (a restore would
discard nothing), when the agent recovered by itself (its head is a healthy checkpoint after the failure, on the
same path), or when the alert's last good is no longer on the head's path (someone restored it elsewhere).

The whole list costs a few queries plus two per session a failure is looked for in (index ranges: the path's seq
spans on `checkpoint_trouble` and on (session, seq)).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from django.db.models import Q, prefetch_related_objects

from ..audit import CheckpointError, InvalidInput
from ..humanize import short_value
from ..models import TROUBLE, AgentSession, Checkpoint, DriftAlert, DriftAlertQuerySet, RecoveryRule, SourceFormat
from ..store.history import Discards, discards_for
from ..store.lineage import Span, path_from, shapes_within
from . import langgraph

TARGET_FIELDS = ["id", "session_id", "seq", "name", "status", "tool_failed", "created_at", "calls_made", "kind"]


class Skip(StrEnum):
    """Why a session is left as it is; the sentence each gives is `Decision.reason`."""

    NO_HEAD = "no_head"
    NO_FAILURE = "no_failure"
    NO_HEALTHY_ANCESTOR = "no_healthy_ancestor"
    RECOVERED = "recovered"
    NOTHING_BEFORE = "nothing_before"
    NO_NAMED = "no_named"
    IS_HEAD = "is_head"
    NOT_RESUMABLE = "not_resumable"
    HEAD_MOVED = "head_moved"
    IN_BATCH = "in_batch"
    NO_PERMISSION = "no_permission"


@dataclass(frozen=True)
class TargetRule:
    """A rule and its arguments: `at` for `before`, `name` for `named`; `since`/`until` bound the failures (and
    the alerts) that count, `alert_kind` which alerts' last good counts."""

    rule: str = RecoveryRule.LAST_GOOD
    at: datetime | None = None
    name: str = ""
    since: datetime | None = None
    until: datetime | None = None
    alert_kind: str = ""

    def check(self) -> TargetRule:
        """InvalidInput naming the field a rule lacks; the rule itself when it is whole."""
        if self.rule not in RecoveryRule.values:
            raise InvalidInput("target.rule", f"{short_value(self.rule, 40)!r} is none of {', '.join(RecoveryRule)}")
        if self.rule == RecoveryRule.BEFORE and self.at is None:
            raise InvalidInput("target.at", "the 'before' rule needs the time to go back before")
        if self.rule == RecoveryRule.NAMED and not self.name.strip():
            raise InvalidInput("target.name", "the 'named' rule needs the checkpoint name to go back to")
        if self.since and self.until and self.since > self.until:
            raise InvalidInput("filter.opened_until", "the window ends before it starts")
        return self


@dataclass(frozen=True)
class Decision:
    """What the rule found for one session: a target, or why there is none."""

    session: AgentSession
    head: Checkpoint | None
    target: Checkpoint | None
    skip: Skip | None = None
    reason: str = ""
    failure: Checkpoint | None = None  # the first failure the target comes before (None: the rule needs none)
    discards: Discards = field(default_factory=lambda: Discards(0, 0))

    @property
    def restorable(self) -> bool:
        return self.skip is None and self.target is not None


def decide(
    sessions: Sequence[AgentSession], rule: TargetRule, *, alerts: Mapping[int, DriftAlert] | None = None
) -> dict[int, Decision]:
    """Each session's decision, by session id. `alerts` (session id → alert) names the alert whose last good
    the `last_good` rule takes; without it the session's own unresolved alerts are read."""
    if not sessions:
        return {}
    heads = {
        head.pk: head
        for head in Checkpoint.objects.filter(pk__in=[s.head_id for s in sessions if s.head_id]).only(*TARGET_FIELDS)
    }
    if rule.rule == RecoveryRule.LAST_GOOD and alerts is None:
        alerts = _alerts_with_last_good([s.pk for s in sessions], rule)
    shapes = shapes_within([s.pk for s in sessions if s.head_id in heads])
    found: dict[int, Decision] = {}
    for session in sessions:
        head = heads.get(session.head_id) if session.head_id else None
        if head is None:
            found[session.pk] = Decision(session, None, None, Skip.NO_HEAD, "the session has no checkpoint")
            continue
        path = path_from(session.pk, head.seq, shapes)
        alert = (alerts or {}).get(session.pk)
        found[session.pk] = _decide_one(session, head, path, rule, alert)
    return _with_discards(found)


def on_path(path: Iterable[Span], checkpoint: Checkpoint) -> bool:
    return any(span.holds(checkpoint) for span in path)


def _decide_one(
    session: AgentSession, head: Checkpoint, path: list[Span], rule: TargetRule, alert: DriftAlert | None
) -> Decision:
    if rule.rule == RecoveryRule.BEFORE:
        assert rule.at is not None  # noqa: S101 - TargetRule.check
        target = _newest_on_path(session, path, Q(created_at__lt=rule.at))
        if target is None:
            return Decision(
                session,
                head,
                None,
                Skip.NOTHING_BEFORE,
                f"no checkpoint on the head's path before {rule.at:%Y-%m-%d %H:%M} UTC",
            )
        return _checked(Decision(session, head, target))
    if rule.rule == RecoveryRule.LAST_GOOD and alert is not None and alert.last_good is not None:
        target = alert.last_good
        if not on_path(path, target):
            reason = f"the head #{head.seq} left the failed path: the alert's last good #{target.seq} is not on it"
            return Decision(session, head, target, Skip.HEAD_MOVED, reason, alert.checkpoint)
        return _checked(Decision(session, head, target, failure=alert.checkpoint))
    failure = _first_failure(session, path, rule)
    if failure is not None and head.seq > failure.seq and not _troubled(head):
        reason = f"the agent recovered by itself: its head #{head.seq} is healthy, after the failure at #{failure.seq}"
        return Decision(session, head, None, Skip.RECOVERED, reason, failure)
    if rule.rule == RecoveryRule.NAMED:
        before = failure.seq if failure is not None else head.seq + 1
        target = _newest_on_path(session, path, Q(name=rule.name, seq__lt=before))
        if target is None:
            where = f"before the failure at #{failure.seq}" if failure else "on the head's path"
            return Decision(
                session,
                head,
                None,
                Skip.NO_NAMED,
                f"no checkpoint named {short_value(rule.name, 60)!r} {where}",
                failure,
            )
        return _checked(Decision(session, head, target, failure=failure))
    if failure is None:
        return Decision(session, head, None, Skip.NO_FAILURE, "nothing failed on the head's path in the window")
    target = _newest_on_path(session, path, ~TROUBLE & Q(seq__lt=failure.seq))
    if target is None:
        reason = f"no healthy checkpoint on the head's path before the failure at #{failure.seq}"
        return Decision(session, head, None, Skip.NO_HEALTHY_ANCESTOR, reason, failure)
    return _checked(Decision(session, head, target, failure=failure))


def _checked(decision: Decision) -> Decision:
    """A target the rule found, refused when it is the head or a LangGraph subgraph's checkpoint."""
    target, head = decision.target, decision.head
    assert target is not None and head is not None  # noqa: S101 - only called with both
    if target.pk == head.pk:
        reason = f"the target #{target.seq} is the head: a restore would discard nothing"
        return Decision(decision.session, head, target, Skip.IS_HEAD, reason, decision.failure)
    if decision.session.source_format == SourceFormat.LANGGRAPH:
        try:
            langgraph.check_resumable(target)
        except CheckpointError as exc:
            return Decision(decision.session, head, target, Skip.NOT_RESUMABLE, str(exc), decision.failure)
    return decision


def _troubled(checkpoint: Checkpoint) -> bool:
    return checkpoint.status in ("failed", "halted") or checkpoint.tool_failed


def _spans(path: list[Span]) -> Q:
    ranges = Q()
    for span in path:
        ranges |= Q(seq__gte=span.low, seq__lte=span.high)
    return ranges


def _newest_on_path(session: AgentSession, path: list[Span], condition: Q) -> Checkpoint | None:
    rows = Checkpoint.objects.filter(session_id=session.pk).filter(_spans(path)).filter(condition)
    return rows.only(*TARGET_FIELDS).order_by("-seq").first()


def _first_failure(session: AgentSession, path: list[Span], rule: TargetRule) -> Checkpoint | None:
    window = Q()
    if rule.since:
        window &= Q(created_at__gte=rule.since)
    if rule.until:
        window &= Q(created_at__lte=rule.until)
    rows = Checkpoint.objects.filter(session_id=session.pk).filter(_spans(path)).filter(TROUBLE).filter(window)
    return rows.only(*TARGET_FIELDS).order_by("seq").first()


def alerts_within(
    alerts: DriftAlertQuerySet, *, kind: str = "", since: datetime | None = None, until: datetime | None = None
) -> DriftAlertQuerySet:
    """The alerts of `kind` opened in the window (the selection's filter and the rule read the same)."""
    if kind:
        alerts = alerts.filter(kind=kind)
    if since:
        alerts = alerts.filter(opened_at__gte=since)
    if until:
        alerts = alerts.filter(opened_at__lte=until)
    return alerts


def _alerts_with_last_good(session_ids: list[int], rule: TargetRule) -> dict[int, DriftAlert]:
    """Each session's oldest unresolved alert with a last good (of `alert_kind`, opened in the window)."""
    alerts = DriftAlert.objects.unresolved().filter(session_id__in=session_ids, last_good__isnull=False)
    alerts = alerts_within(alerts, kind=rule.alert_kind, since=rule.since, until=rule.until)
    found: dict[int, DriftAlert] = {}
    rows = alerts.select_related("last_good", "checkpoint").order_by("opened_at", "pk")
    for alert in rows.only(
        "id",
        "session_id",
        "kind",
        "opened_at",
        *(f"last_good__{f}" for f in TARGET_FIELDS),
        *(f"checkpoint__{f}" for f in TARGET_FIELDS),
    ):
        found.setdefault(alert.session_id, alert)
    return found


def _with_discards(found: dict[int, Decision]) -> dict[int, Decision]:
    """The decisions with what restoring each target discards (three queries for them all)."""
    targets = [d.target for d in found.values() if d.target is not None and d.skip is not Skip.IS_HEAD]
    measured = discards_for(targets)
    return {
        pk: Decision(d.session, d.head, d.target, d.skip, d.reason, d.failure, measured[d.target.pk])
        if d.target is not None and d.target.pk in measured
        else d
        for pk, d in found.items()
    }


def alert_targets(alerts: Sequence[DriftAlert]) -> dict[int, Decision]:
    """The decision behind each unresolved alert's "Restore last good", by alert id: `decide` with that alert's
    last good, so the button and a fleet recovery never disagree. A session with two alerts on one page is
    decided once per alert. The alerts' own checkpoints (the failure a decision names) are read in one query: the
    alert list asked for each of its 30 rows' (40 queries a page at ~8,000 open alerts)."""
    prefetch_related_objects([alert for alert in alerts if alert.last_good_id is not None], "checkpoint")
    rounds: list[dict[int, DriftAlert]] = []
    for alert in alerts:
        if alert.last_good_id is None:
            continue
        free = next((batch for batch in rounds if alert.session_id not in batch), None)
        if free is None:
            free = {}
            rounds.append(free)
        free[alert.session_id] = alert
    found: dict[int, Decision] = {}
    for batch in rounds:
        decided = decide([alert.session for alert in batch.values()], TargetRule(), alerts=batch)
        found.update({alert.pk: decided[session_id] for session_id, alert in batch.items()})
    return found
