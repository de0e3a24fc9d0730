"""Celery tasks: thin, idempotent wrappers that take ids and call the operation of the same name."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from celery import shared_task
from django.conf import settings
from django.db import OperationalError
from django.utils import timezone

from . import services, watching
from .archives import UnsafeArchive, extract
from .importing import ImportReport, import_path
from .jobs import run_job
from .models import ImportJob, ImportJobStatus


@shared_task(acks_late=True, time_limit=3600, soft_time_limit=3500)
def import_archive(job_id: int) -> dict[str, object]:
    """Unpack an uploaded archive once and import it, keeping the job's counts current for the progress bar.

    The upload's index was checked while the operator waited; `extract` checks it again (the stored
    file is what gets unpacked) and counts the real bytes, so a lying header fails the job with its
    sentence and nothing is imported. A redelivered message finds the job done and changes nothing;
    one for a job whose worker died imports again, and the idempotency keys add nothing twice.
    """
    claimed = ImportJob.objects.filter(pk=job_id, status=ImportJobStatus.QUEUED).update(
        status=ImportJobStatus.RUNNING, started_at=timezone.now()
    )
    job = ImportJob.objects.select_related("project", "created_by").get(pk=job_id)
    if not claimed and job.status != ImportJobStatus.RUNNING:
        return job.report  # done already: a redelivered message changes nothing
    actor = services.Actor.for_user(job.created_by) if job.created_by else services.Actor.system("upload")
    archive = Path(job.archive)
    workdir = Path(tempfile.mkdtemp(prefix="import-", dir=settings.VAR_DIR))

    def progress(report: ImportReport) -> None:
        ImportJob.objects.filter(pk=job_id).update(
            imported=report.imported, skipped=report.skipped, error_count=len(report.errors)
        )

    try:
        extract(archive, workdir)
        report = import_path(
            workdir, project=job.project, actor=actor, record_source=False, progress=progress, label=job.original_name
        )
    except (UnsafeArchive, OSError) as exc:
        message = str(exc) if isinstance(exc, UnsafeArchive) else f"The import stopped: {exc.strerror or 'I/O error'}."
        ImportJob.objects.filter(pk=job_id).update(
            status=ImportJobStatus.FAILED, error=message, finished_at=timezone.now()
        )
        archive.unlink(missing_ok=True)
        return {"error": message}
    except Exception:
        # A bug, not the archive: the job must not stay "running" for ever; the traceback goes to the log.
        message = "The import stopped on an internal error (it was logged); what was imported before it stays."
        ImportJob.objects.filter(pk=job_id).update(
            status=ImportJobStatus.FAILED, error=message, finished_at=timezone.now()
        )
        raise
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    result = _without_folder(report.as_dict(), workdir)
    ImportJob.objects.filter(pk=job_id).update(
        status=ImportJobStatus.DONE,
        imported=report.imported,
        skipped=report.skipped,
        error_count=len(report.errors),
        report=result,
        finished_at=timezone.now(),
    )
    archive.unlink(missing_ok=True)
    return result


def _without_folder(result: dict[str, Any], folder: Path) -> dict[str, Any]:
    """The report with the temporary folder cut from its paths and messages: it means nothing to the uploader."""
    for error in result["errors"]:
        for key in ("path", "error"):
            error[key] = error[key].replace(f"{folder}/", "").replace(str(folder), "the archive")
    return result


@shared_task(acks_late=True, time_limit=3600, soft_time_limit=3500)
def scan_watched_sources() -> dict[str, int]:
    return run_job("watched_sources", watching.scan_all).result


# Periodic jobs: idempotent, acks_late (a killed worker's job is redelivered), one run at a time
# (run_job's lock), time-limited, retried with backoff when the database hiccups.
PERIODIC: dict[str, Any] = {
    "acks_late": True,
    "time_limit": 3600,
    "soft_time_limit": 3500,
    "autoretry_for": (OperationalError,),
    "retry_backoff": True,
    "max_retries": 5,
}


@shared_task(**PERIODIC)
def apply_retention(dry_run: bool = False, triggered_by: str = "beat") -> dict[str, Any]:
    from .retention import apply_retention as work

    result = run_job("retention", lambda: work(dry_run=dry_run), triggered_by=triggered_by, dry_run=dry_run).result
    if not dry_run:  # the retention page previews the next run from the newest dry run: keep it current
        apply_retention.delay(dry_run=True, triggered_by="after retention")
    return result


@shared_task(**PERIODIC)
def take_routine_checkpoints(triggered_by: str = "beat") -> dict[str, Any]:
    from .routine import take_routine_checkpoints as work

    return run_job("routine_checkpoints", work, triggered_by=triggered_by).result


@shared_task(**PERIODIC)
def detect_drift(triggered_by: str = "beat") -> dict[str, Any]:
    from .drift import detect_all as work

    return run_job("drift_detection", work, triggered_by=triggered_by).result


@shared_task(**PERIODIC)
def collect_garbage(triggered_by: str = "beat") -> dict[str, Any]:
    from .gc import collect_garbage as work

    return run_job("gc", work, triggered_by=triggered_by).result


__all__ = ["import_archive", "scan_watched_sources"]
