"""Audited changes to sign-in throttling (django-axes keeps the counters): a lockout, and lifting one."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from axes.models import AccessAttempt
from django.db import transaction

from ..audit import Actor, record_audit
from ..models import AuditEvent

SHOWN = 50  # username/address pairs an unlock event lists; the count covers them all


@transaction.atomic
def record_login_lockout(
    username: str,
    *,
    ip_address: str | None,
    path: str,
    locked: list[str],
    until: datetime | None,
    now: datetime | None = None,
) -> AuditEvent:
    """The attempt that reached the failure limit: the username tried is the actor (it may not exist)."""
    return record_audit(
        Actor(label=username[:200] or "(no username)"),
        "login_locked",
        target=path,
        details={
            "ip": ip_address,
            "locked": locked,
            "until": until.isoformat() if until else None,
        },
        now=now,
    )


@transaction.atomic
def reset_login_attempts(attempts: Iterable[AccessAttempt], *, actor: Actor) -> int:
    """Forget these failed-login counters, which lifts the lockouts they caused."""
    pks = [attempt.pk for attempt in attempts]
    rows = list(AccessAttempt.objects.filter(pk__in=pks).order_by("username", "ip_address"))
    if not rows:
        return 0
    AccessAttempt.objects.filter(pk__in=[row.pk for row in rows]).delete()
    record_audit(
        actor,
        "login_unlocked",
        target=", ".join(sorted({row.username for row in rows if row.username}))[:300],
        details={
            "count": len(rows),
            "attempts": [{"username": row.username, "ip": row.ip_address} for row in rows[:SHOWN]],
        },
    )
    return len(rows)
