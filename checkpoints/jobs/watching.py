"""Watched folders: import what is new or changed since the last scan; alert when a folder vanishes."""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from typing import Any

from django.utils import timezone

from .. import services
from ..models import WatchedSource
from ..services.batches import Failures, ImportReport, contained
from ..services.file_import import import_path
from ..services.watched import record_scan, report_folder_back, report_folder_missing


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
        report_folder_missing(source, now=now)
        return None
    report_folder_back(source, now=now)
    current = signature(folder)
    if current == source.seen:
        record_scan(source, now=now)
        return None
    report = import_path(
        folder, fmt=source.format, project=source.project, actor=services.Actor.system(f"watch:{source.pk}")
    )
    errors = "; ".join(f"{e['path']}: {e['error']}" for e in report.errors[:20])
    # A session whose stored rows broke its import is tried again next scan: its files stay unseen.
    seen = source.seen if report.failed_sessions else current
    record_scan(source, now=now, seen=seen, error=errors)
    return report


class SessionsNotImported(Exception):
    """Some sessions of a folder could not take its files (their stored rows broke); the others were imported."""

    def __init__(self, report: ImportReport) -> None:
        failed = report.failed_sessions
        first = next(e["error"] for e in report.errors if e["path"].startswith("session "))
        super().__init__(f"{len(failed)} session(s) not imported, tried again next scan: {', '.join(failed)} ({first})")


def _source_label(pk: int) -> str:
    return WatchedSource.objects.filter(pk=pk).values_list("path", flat=True).first() or f"watched folder #{pk}"


def scan_all() -> dict[str, Any]:
    """Scan every enabled folder; one whose import fails is named in the result's `errors`, the others go on."""
    failures = Failures(unit="source", label=_source_label)
    scanned = imported = 0
    for source in WatchedSource.objects.filter(enabled=True).select_related("project").order_by("pk"):
        scanned += 1
        report = None
        with contained(source.pk, failures):
            report = scan_source(source)
            imported += report.imported if report else 0
        if report and report.failed_sessions:
            failures.record(source.pk, SessionsNotImported(report))
    return {"scanned": scanned, "imported": imported, **failures.as_dict()}
