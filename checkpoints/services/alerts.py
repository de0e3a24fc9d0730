"""Drift alerts an operator acknowledges or resolves, and those an undo reopens: each claimed with a conditional
UPDATE, audited once."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from ..audit import Actor, record_audit
from ..models import AgentSession, AlertState, DriftAlert, EventType
from ..outbox import events


@transaction.atomic
def acknowledge_alert(alert: DriftAlert, *, actor: Actor, now: datetime | None = None) -> DriftAlert:
    """Someone is on it: the alert stays visible but stops asking for attention."""
    now = now or timezone.now()
    claimed = DriftAlert.objects.filter(pk=alert.pk, state=AlertState.OPEN).update(
        state=AlertState.ACKNOWLEDGED, acknowledged_by=actor.user, acknowledged_at=now
    )
    if not claimed:  # acknowledged or resolved meanwhile: whoever did it was audited
        alert.refresh_from_db(fields=["state", "acknowledged_by", "acknowledged_at"])
        return alert
    alert.state, alert.acknowledged_by, alert.acknowledged_at = AlertState.ACKNOWLEDGED, actor.user, now
    record_audit(actor, "acknowledge", session=alert.session, target=f"{alert.kind} alert #{alert.pk}", now=now)
    return alert


@transaction.atomic
def resolve_alert(alert: DriftAlert, *, actor: Actor, reason: str = "", now: datetime | None = None) -> DriftAlert:
    now = now or timezone.now()
    claimed = (
        DriftAlert.objects.filter(pk=alert.pk)
        .exclude(state=AlertState.RESOLVED)
        .update(state=AlertState.RESOLVED, resolved_at=now)
    )
    if not claimed:  # resolved meanwhile: whoever did it was audited
        alert.refresh_from_db(fields=["state", "resolved_at"])
        return alert
    alert.state, alert.resolved_at = AlertState.RESOLVED, now
    record_audit(
        actor, "resolve", session=alert.session, target=f"{alert.kind} alert #{alert.pk}", reason=reason, now=now
    )
    events.publish_alert(EventType.ALERT_RESOLVED, alert)
    return alert


def reopen_resolved_since(
    session: AgentSession, kinds: list[str], *, since: datetime, actor: Actor, reason: str, now: datetime
) -> list[DriftAlert]:
    """Reopen the newest alert of each of `kinds` resolved at or after `since`, unless the session has an
    unresolved one of that kind again: an undo gives the agent back a state whose incident the restore had
    closed, and it is the same incident. Each reopening is audited and published as alert.opened."""
    reopened = []
    resolved = DriftAlert.objects.filter(session=session, kind__in=kinds, state=AlertState.RESOLVED)
    open_kinds = set(DriftAlert.objects.unresolved().filter(session=session).values_list("kind", flat=True))
    newest: dict[str, DriftAlert] = {}
    for alert in resolved.filter(resolved_at__gte=since).order_by("-resolved_at", "-pk"):
        newest.setdefault(alert.kind, alert)
    for kind, alert in newest.items():
        if kind in open_kinds:
            continue
        state = AlertState.ACKNOWLEDGED if alert.acknowledged_at else AlertState.OPEN
        if not DriftAlert.objects.filter(pk=alert.pk, state=AlertState.RESOLVED).update(state=state, resolved_at=None):
            continue
        alert.state, alert.resolved_at, alert.session = state, None, session
        record_audit(
            actor,
            "alert_reopened",
            session=session,
            target=f"{alert.kind} alert #{alert.pk}",
            reason=reason,
            details={"alert_id": alert.pk, "kind": alert.kind, "severity": alert.severity},
            now=now,
        )
        events.publish_alert(EventType.ALERT_OPENED, alert)
        reopened.append(alert)
    return reopened
