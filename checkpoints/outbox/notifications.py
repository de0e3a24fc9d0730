"""Notification rules: which of a project's events go to which channel, and the deliveries an event gets from them.

`deliveries_for(event)` is called by `events.publish` inside the emitting transaction: it reads the enabled
rules once and the quiet periods once, whatever the number of rules. A rule inside its quiet period for the
same condition (the event's `dedupe_key` and type) still gets its delivery, SUPPRESSED: kept, shown in the
log, not sent. The quiet period counts from the last delivery that was not suppressed, so a condition that
keeps flapping notifies once per period. `job.failed` belongs to no project (jobs run for all of them): it
goes to the matching rules of every project.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Max, Q
from django.utils import timezone

from ..audit import Actor, InvalidInput, record_audit
from ..models import (
    SEVERITY_RANKS,
    Channel,
    Delivery,
    DeliveryStatus,
    Event,
    EventType,
    NotificationRule,
    Project,
    ProjectRole,
)
from ..registry.detectors import DETECTORS
from . import channels
from .channels import InvalidTarget
from .deliveries import new_secret, send_now
from .wanted import forget_wanted

ALERT_EVENTS = frozenset({EventType.ALERT_OPENED, EventType.ALERT_ESCALATED, EventType.ALERT_RESOLVED})
# What a rule may send; checkpoint.created is for event webhooks (a message per checkpoint floods a channel).
RULE_EVENTS = [
    EventType.ALERT_OPENED,
    EventType.ALERT_ESCALATED,
    EventType.ALERT_RESOLVED,
    EventType.PHASE_WAITING,
    EventType.PHASE_FEEDBACK,
    EventType.INTERRUPT_WAITING,
    EventType.INTERRUPT_ANSWERED,
    EventType.JOB_FAILED,
    EventType.IMPORT_FAILED,
    EventType.SESSION_RESTORED,
    EventType.SESSION_FORKED,
    EventType.RECOVERY_FINISHED,
]
BATCHED = {EventType.SESSION_RESTORED, EventType.SESSION_FORKED}  # a fleet recovery's: told once, as the batch
APPROVERS_EMAILED = {EventType.PHASE_WAITING, EventType.INTERRUPT_WAITING}  # rule or not
RULE_FIELDS = ("name", "events", "alert_kinds", "min_severity", "channel", "target", "quiet_minutes", "enabled")


# ---- matching: the deliveries an event gets ------------------------------------------------------------


def deliveries_for(event: Event) -> list[Delivery]:
    """The deliveries the rules (and, for a waiting phase or interrupt, the project's approvers) want for `event`, unsaved:
    `events.publish` saves them with the event."""
    if event.type not in RULE_EVENTS:  # checkpoint.created on every ingest: no query
        return []
    if event.type in BATCHED and (event.data or {}).get("recovery"):  # recovery.finished tells the rules once
        return []
    rules = [rule for rule in _candidate_rules(event) if matches(rule, event)]
    quiet = _quiet_rules(rules, event)
    deliveries = [
        Delivery(
            event=event,
            rule=rule,
            channel=rule.channel,
            target=rule.target,
            status=DeliveryStatus.SUPPRESSED if rule.pk in quiet else DeliveryStatus.PENDING,
            next_attempt_at=None if rule.pk in quiet else event.created_at,
            created_at=event.created_at,
        )
        for rule in rules
    ]
    if event.type in APPROVERS_EMAILED and event.project_id is not None:
        deliveries += [
            Delivery(event=event, channel=Channel.EMAIL, target=email, next_attempt_at=event.created_at)
            for email in approver_emails(event.project_id)
        ]
    return deliveries


def _candidate_rules(event: Event) -> list[NotificationRule]:
    rules = NotificationRule.objects.filter(enabled=True)
    if event.project_id is not None:
        rules = rules.filter(project_id=event.project_id)
    elif event.type != EventType.JOB_FAILED:
        return []
    return list(rules.order_by("pk"))


def matches(rule: NotificationRule, event: Event) -> bool:
    """Does `rule` want `event`: its type, and for alerts their kind and severity."""
    if event.type not in rule.events:
        return False
    if event.type not in ALERT_EVENTS:
        return True
    alert = (event.data or {}).get("alert") or {}
    if rule.alert_kinds and alert.get("kind") not in rule.alert_kinds:
        return False
    return SEVERITY_RANKS.get(alert.get("severity", ""), 0) >= SEVERITY_RANKS.get(rule.min_severity, 0)


def _quiet_rules(rules: Sequence[NotificationRule], event: Event) -> set[int]:
    """The rules that notified about the same condition (dedupe key and type) within their quiet period."""
    quiet_ones = [rule for rule in rules if rule.quiet_minutes and event.dedupe_key]
    if not quiet_ones:
        return set()
    longest = max(rule.quiet_minutes for rule in quiet_ones)
    last_sent = dict(
        Delivery.objects.filter(
            rule__in=quiet_ones,
            event__dedupe_key=event.dedupe_key,
            event__type=event.type,
            created_at__gte=event.created_at - timedelta(minutes=longest),
        )
        .exclude(status=DeliveryStatus.SUPPRESSED)
        .order_by()
        .values("rule_id")
        .annotate(last=Max("created_at"))
        .values_list("rule_id", "last")
    )
    return {
        rule.pk
        for rule in quiet_ones
        if rule.pk in last_sent and event.created_at - last_sent[rule.pk] < timedelta(minutes=rule.quiet_minutes)
    }


def approver_emails(project_id: int) -> list[str]:
    """The addresses of the project's approvers (its members with that role, and staff of the approver group)."""
    users = get_user_model().objects.filter(is_active=True).exclude(email="")
    approvers = users.filter(
        Q(project_memberships__project_id=project_id, project_memberships__role=ProjectRole.APPROVER)
        | Q(is_staff=True, groups__name=ProjectRole.APPROVER)
    )
    return sorted(set(approvers.values_list("email", flat=True)))


# ---- rules: validated, created, changed, deleted, tested (audited) -------------------------------------


def check_rule_target(channel: str, target: str) -> None:
    """Raise InvalidTarget unless `channel` can send to `target` (its module's check: channels/)."""
    channels.check_target(channel, target)


def target_error(channel: str | None, target: str | None) -> str:
    """A form's error for the target field ("" when fine or when either field already has its own error)."""
    if not channel or not target:
        return ""
    try:
        check_rule_target(channel, target)
    except InvalidTarget as exc:
        return str(exc).removeprefix("target: ")
    return ""


def _check_rule(fields: dict[str, Any]) -> None:
    check_rule_target(fields["channel"], fields["target"])
    unknown = set(fields["events"]) - set(RULE_EVENTS) or set(fields.get("alert_kinds", [])) - set(DETECTORS.names())
    if unknown or not fields["events"]:
        raise InvalidInput("events", f"Not events or alert kinds a rule can send: {sorted(unknown) or 'none'}.")


def _secret_for(rule: NotificationRule) -> str:
    """A new signing secret when the rule's channel signs its deliveries and the rule has none, else ""."""
    kind = channels.kind_of(rule.channel)
    return new_secret() if kind is not None and kind.signed and not rule.secret else ""


def _rule_changed(rule: NotificationRule) -> None:
    """The event types a project wants are cached (events.wanted_types): forget them."""
    forget_wanted(rule.project_id)


def _described(rule: NotificationRule) -> dict[str, Any]:
    """What the audit row keeps of a rule (never its secret)."""
    return {name: getattr(rule, name) for name in RULE_FIELDS}


@transaction.atomic
def create_rule(project: Project, *, actor: Actor, **fields: Any) -> tuple[NotificationRule, str]:
    """A new rule, and the secret that signs a webhook channel's deliveries ("" for other channels): shown
    once by the caller, as an API token's."""
    _check_rule(fields)
    rule = NotificationRule(project=project, created_by=actor.user, **fields)
    rule.secret = secret = _secret_for(rule)
    rule.save()
    record_audit(actor, "create_rule", project=project, target=f"rule {rule.name}", details=_described(rule))
    _rule_changed(rule)
    return rule, secret


@transaction.atomic
def update_rule(rule: NotificationRule, *, actor: Actor, **fields: Any) -> tuple[NotificationRule, str]:
    """Change a rule; returns it and a new secret when it became a signed webhook without one (else "")."""
    before = _described(rule)
    _check_rule({**before, **fields})
    for name, value in fields.items():
        setattr(rule, name, value)
    secret = _secret_for(rule)
    rule.secret = secret or rule.secret
    rule.save()
    changed = {name: [before[name], value] for name, value in _described(rule).items() if before[name] != value}
    record_audit(actor, "update_rule", project=rule.project, target=f"rule {rule.name}", details=changed)
    _rule_changed(rule)
    return rule, secret


@transaction.atomic
def delete_rule(rule: NotificationRule, *, actor: Actor) -> int:
    """Delete a rule; its past deliveries stay in the log, those still waiting to be sent are not sent.
    Returns how many deliveries it leaves in the log."""
    kept = rule.deliveries.count()
    rule.deliveries.filter(status=DeliveryStatus.PENDING).update(
        status=DeliveryStatus.FAILED, next_attempt_at=None, last_error="Its rule was deleted; not sent."
    )
    record_audit(actor, "delete_rule", project=rule.project, target=f"rule {rule.name}", details=_described(rule))
    _rule_changed(rule)
    rule.delete()
    return kept


def send_test(rule: NotificationRule, *, actor: Actor, now: datetime | None = None) -> Delivery:
    """ "Send test": a `ping` event to this rule alone, sent now (once, while the operator waits) and recorded
    in the delivery log like any other."""
    now = now or timezone.now()
    with transaction.atomic():
        message = f"Test of the rule {rule.name!r} of {rule.project.slug}, sent by {actor.label}."
        event = Event.objects.create(
            project=rule.project, type=EventType.PING, created_at=now, data={"message": message}
        )
        delivery = Delivery.objects.create(
            event=event, rule=rule, channel=rule.channel, target=rule.target, created_at=now, next_attempt_at=None
        )
        record_audit(actor, "test_rule", project=rule.project, target=f"rule {rule.name}", now=now)
    return send_now(delivery)
