"""Watched folders: import what is new or changed since the last scan; alert when a folder vanishes."""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

from django.db import transaction
from django.utils import timezone

from . import services
from .importing import ImportReport, import_path
from .models import AgentSession, AlertKind, AlertSeverity, AlertState, DriftAlert, WatchedSource


def signature(folder: Path) -> dict[str, list[int]]:
    """Every file under `folder` by relative path → [size, mtime in ns]: names and stat only, no reading."""
    found: dict[str, list[int]] = {}
    for directory, _, files in os.walk(folder):
        for name in files:
            path = Path(directory, name)
            stat = path.stat()
            found[str(path.relative_to(folder))] = [stat.st_size, stat.st_mtime_ns]
    return found


def scan_source(source: WatchedSource, *, now: datetime | None = None) -> ImportReport | None:
    """Import `source` if anything changed since the last scan; None when nothing did.

    Imports are idempotent, so reading the folder again only adds what is new.
    """
    now = now or timezone.now()
    folder = Path(source.path)
    if not folder.is_dir():
        _folder_missing(source, now)
        return None
    _folder_back(source, now)
    current = signature(folder)
    if current == source.seen:
        WatchedSource.objects.filter(pk=source.pk).update(last_scan_at=now)
        return None
    report = import_path(
        folder, fmt=source.format, project=source.project, actor=services.Actor.system(f"watch:{source.pk}")
    )
    errors = "; ".join(f"{e['path']}: {e['error']}" for e in report.errors[:20])
    WatchedSource.objects.filter(pk=source.pk).update(seen=current, last_scan_at=now, last_error=errors)
    return report


def _sessions_from(source: WatchedSource) -> list[AgentSession]:
    return list(AgentSession.objects.filter(project=source.project, source_path__startswith=str(Path(source.path))))


@transaction.atomic
def _folder_missing(source: WatchedSource, now: datetime) -> None:
    message = f"The watched folder {source.path} is gone; its agents' checkpoints are no longer imported."
    WatchedSource.objects.filter(pk=source.pk).update(last_scan_at=now, last_error=message)
    for session in _sessions_from(source):
        if not DriftAlert.objects.filter(session=session, kind=AlertKind.SOURCE_MISSING).unresolved().exists():
            DriftAlert.objects.create(
                session=session,
                kind=AlertKind.SOURCE_MISSING,
                severity=AlertSeverity.WARNING,
                message=message,
                evidence={"folder": source.path, "format": source.format},
                opened_at=now,
            )


def _folder_back(source: WatchedSource, now: datetime) -> None:
    sessions = _sessions_from(source)
    DriftAlert.objects.filter(session__in=sessions, kind=AlertKind.SOURCE_MISSING).unresolved().update(
        state=AlertState.RESOLVED, resolved_at=now
    )


def scan_all() -> dict[str, int]:
    scanned = imported = 0
    for source in WatchedSource.objects.filter(enabled=True).select_related("project"):
        report = scan_source(source)
        scanned += 1
        imported += report.imported if report else 0
    return {"scanned": scanned, "imported": imported}
