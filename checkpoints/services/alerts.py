"""Drift alerts an operator acknowledges or resolves: each claimed with a conditional UPDATE, audited once."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from ..audit import Actor, record_audit
from ..models import AlertState, DriftAlert, EventType
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
