"""What the watch job writes: a watched folder's scan state, and the `source_missing` alerts of its sessions.

Opening and resolving an alert writes its AuditEvent (actor `system:watch`) in the same transaction; the scan
state (what was seen, when, the last error) is the job's bookkeeping and is not audited.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from django.db import transaction

from ..models import AgentSession, AlertKind, AlertSeverity, DriftAlert, WatchedSource
from . import drift

WATCH_ACTOR = "system:watch"


def record_scan(
    source: WatchedSource, *, now: datetime, seen: dict[str, list[int]] | None = None, error: str | None = None
) -> None:
    """The folder was scanned at `now`; `seen` (its files' signature) and `error` are stored when given."""
    fields: dict[str, Any] = {"last_scan_at": now}
    if seen is not None:
        fields["seen"] = seen
    if error is not None:
        fields["last_error"] = error
    WatchedSource.objects.filter(pk=source.pk).update(**fields)


def _sessions_from(source: WatchedSource) -> list[AgentSession]:
    return list(AgentSession.objects.filter(project=source.project, source_path__startswith=str(Path(source.path))))


@transaction.atomic
def report_folder_missing(source: WatchedSource, *, now: datetime) -> None:
    """The folder is gone: say so on the source and open one alert per session imported from it (once)."""
    message = f"The watched folder {source.path} is gone; its agents' checkpoints are no longer imported."
    record_scan(source, now=now, error=message)
    for session in _sessions_from(source):
        if not DriftAlert.objects.filter(session=session, kind=AlertKind.SOURCE_MISSING).unresolved().exists():
            alert = DriftAlert.objects.create(
                session=session,
                kind=AlertKind.SOURCE_MISSING,
                severity=AlertSeverity.WARNING,
                message=message,
                evidence={"folder": source.path, "format": source.format},
                opened_at=now,
            )
            drift.audit_alert(alert, "alert_opened", actor=WATCH_ACTOR, reason=message, now=now)


def report_folder_back(source: WatchedSource, *, now: datetime) -> None:
    """The folder is there: resolve its sessions' `source_missing` alerts, if any are open."""
    gone = DriftAlert.objects.filter(session__in=_sessions_from(source), kind=AlertKind.SOURCE_MISSING).unresolved()
    for alert in gone.select_related("session"):
        drift.resolve_by_detector(alert, actor=WATCH_ACTOR, reason=f"the watched folder {source.path} is back", now=now)
