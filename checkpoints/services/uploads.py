"""Uploaded archives of checkpoint files: kept, checked while the operator waits, then imported by a task.

The check reads the archive's index only (`archives.check`: nothing is unpacked), so a refusal comes
back at once; the `import_archive` task then unpacks that same stored file exactly once, running the
same check again first and counting the real bytes it writes. Unpacking while the operator waits
would write every byte twice and keep a web process busy for what a worker is there for.

The task is queued once the job's row commits. A broker that cannot be reached then leaves the job queued with
`UNSENT` in its report (the upload still succeeds); the every-minute sweep calls `resend_unsent` to queue it
once the broker is back.
"""

from __future__ import annotations

import logging
import secrets
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerUnreachable

from ..audit import Actor, record_audit
from ..models import ImportJob, ImportJobStatus
from ..outbox import events
from ..sources.archives import UnsafeArchive, archive_suffix, check, extract
from .batches import ImportReport
from .checkpoints import get_or_create_project
from .file_import import import_path

logger = logging.getLogger(__name__)
UNSENT = "unsent"  # a queued job's report key: its task could not be sent (the broker was unreachable)


def queue_import(
    upload: UploadedFile[bytes], *, project_slug: str, actor: Actor, start: Callable[[int], object]
) -> ImportJob:
    """Keep the upload, refuse it if unpacking it is unsafe (UnsafeArchive), else queue its import job.

    `start` queues the job's import (the `import_archive` task's `delay`) once this commits: services do not
    import the jobs wing that calls them."""
    try:
        archive = _save_upload(upload)
    except OSError as exc:  # a full disk, say: the operator gets a sentence, not a server error
        raise UnsafeArchive(f"The server could not store the upload: {exc.strerror or 'write failed'}.") from None
    try:
        index = check(archive)
        with transaction.atomic():
            project = get_or_create_project(project_slug)
            name = Path(upload.name or archive.name).name[:300]
            job = ImportJob.objects.create(
                project=project,
                archive=str(archive),
                original_name=name,
                created_by=actor.user,
                report={"files": len(index.files)},  # for the progress page until the import's report replaces it
            )
            details = {"job": job.pk, "bytes": upload.size, "files": len(index.files), "unpacked": index.declared_bytes}
            record_audit(actor, "upload", project=project, target=name, details=details)
            transaction.on_commit(lambda: _send(job.pk, start), robust=True)
    except BaseException:
        archive.unlink(missing_ok=True)
        raise
    return job


def _send(job_id: int, start: Callable[[int], object]) -> bool:
    """Queue the job's import; when the broker refuses, mark the job for `resend_unsent` instead of failing.
    Whether it was queued."""
    try:
        start(job_id)
    except BrokerUnreachable as exc:
        logger.warning("import job %s not queued, the broker is unreachable (the sweep resends it): %s", job_id, exc)
        report = ImportJob.objects.values_list("report", flat=True).get(pk=job_id)
        _update_job(job_id, report={**report, UNSENT: True})
        return False
    return True


def resend_unsent(start: Callable[[int], object], *, limit: int = 100) -> int:
    """Queue again the imports a broker outage left unsent; how many. Each is claimed by a conditional UPDATE
    that removes its mark first, so two sweeps never queue one job twice (a second message for a running job
    would import it again)."""
    sent = 0
    for job in ImportJob.objects.filter(status=ImportJobStatus.QUEUED, report__has_key=UNSENT)[:limit]:
        report = {key: value for key, value in job.report.items() if key != UNSENT}
        claimed = ImportJob.objects.filter(pk=job.pk, status=ImportJobStatus.QUEUED, report=job.report)
        if claimed.update(report=report) and _send(job.pk, start):
            sent += 1  # a job the broker still refuses is marked again and not counted
    return sent


def _save_upload(upload: UploadedFile[bytes]) -> Path:
    """Under a random name (the archive kind kept: `extract` goes by it), never the uploader's."""
    folder = Path(settings.VAR_DIR) / "uploads"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{secrets.token_hex(16)}{archive_suffix(upload.name or '')}"
    with path.open("xb") as out:
        for chunk in upload.chunks():
            out.write(chunk)
    return path


def run_import_job(job_id: int) -> dict[str, Any]:
    """Unpack an uploaded archive once and import it, keeping the job's counts current for the progress bar.

    1. Claim the queued job (a conditional UPDATE); a redelivered message finds it done and changes nothing,
       one for a job whose worker died imports again (the idempotency keys add nothing twice).
    2. `extract` checks the stored archive again and counts the real bytes: a lying header fails the job with
       its sentence and nothing is imported.
    3. Import, then record the report; the archive and the scratch folder go either way.
    """
    claimed = ImportJob.objects.filter(pk=job_id, status=ImportJobStatus.QUEUED).update(
        status=ImportJobStatus.RUNNING, started_at=timezone.now()
    )
    job = ImportJob.objects.select_related("project", "created_by").get(pk=job_id)
    if not claimed and job.status != ImportJobStatus.RUNNING:
        done: dict[str, Any] = job.report  # done already: a redelivered message changes nothing
        return done
    actor = Actor.for_user(job.created_by) if job.created_by else Actor.system("upload")
    archive = Path(job.archive)
    workdir = Path(tempfile.mkdtemp(prefix="import-", dir=settings.VAR_DIR))

    def progress(report: ImportReport) -> None:
        _update_job(job_id, imported=report.imported, skipped=report.skipped, error_count=len(report.errors))

    try:
        extract(archive, workdir)
        report = import_path(
            workdir, project=job.project, actor=actor, record_source=False, progress=progress, label=job.original_name
        )
    except (UnsafeArchive, OSError) as exc:
        message = str(exc) if isinstance(exc, UnsafeArchive) else f"The import stopped: {exc.strerror or 'I/O error'}."
        _fail_job(job, message)
        archive.unlink(missing_ok=True)
        return {"error": message}
    except Exception:
        # A bug, not the archive: the job must not stay "running" for ever; the traceback goes to the log.
        message = "The import stopped on an internal error (it was logged); what was imported before it stays."
        _fail_job(job, message)
        raise
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    result = _without_folder(report.as_dict(), workdir)
    _update_job(
        job_id,
        status=ImportJobStatus.DONE,
        imported=report.imported,
        skipped=report.skipped,
        error_count=len(report.errors),
        report=result,
        finished_at=timezone.now(),
    )
    archive.unlink(missing_ok=True)
    return result


def _update_job(job_id: int, **fields: Any) -> None:
    ImportJob.objects.filter(pk=job_id).update(**fields)


@transaction.atomic
def _fail_job(job: ImportJob, message: str) -> None:
    """The job failed with `message`, announced (import.failed) in the same transaction."""
    job.status, job.error = ImportJobStatus.FAILED, message
    _update_job(job.pk, status=job.status, error=message, finished_at=timezone.now())
    events.publish_import_failed(job)


def _without_folder(result: dict[str, Any], folder: Path) -> dict[str, Any]:
    """The report with the temporary folder cut from its paths and messages: it means nothing to the uploader."""
    for error in result["errors"]:
        for key in ("path", "error"):
            error[key] = error[key].replace(f"{folder}/", "").replace(str(folder), "the archive")
    return result
