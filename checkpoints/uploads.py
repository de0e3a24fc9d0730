"""Uploaded archives of checkpoint files: kept, checked while the operator waits, then imported by a task."""

from __future__ import annotations

import secrets
import shutil
import tempfile
from pathlib import Path

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction

from .archives import UnsafeArchive, archive_suffix, extract
from .models import ImportJob
from .services import Actor, get_or_create_project, record_audit
from .tasks import import_archive


def queue_import(upload: UploadedFile, *, project_slug: str, actor: Actor) -> ImportJob:
    """Keep the upload, refuse it if unpacking it is unsafe (UnsafeArchive), else queue its import job."""
    archive = _save_upload(upload)
    try:
        _check_archive(archive)
        with transaction.atomic():
            project = get_or_create_project(project_slug)
            name = Path(upload.name or archive.name).name[:300]
            job = ImportJob.objects.create(
                project=project, archive=str(archive), original_name=name, created_by=actor.user
            )
            record_audit(actor, "upload", project=project, target=name, details={"job": job.pk, "bytes": upload.size})
            transaction.on_commit(lambda: import_archive.delay(job.pk))
    except BaseException:
        archive.unlink(missing_ok=True)
        raise
    return job


def _save_upload(upload: UploadedFile) -> Path:
    """Under a random name (the archive kind kept: `extract` goes by it), never the uploader's."""
    folder = Path(settings.VAR_DIR) / "uploads"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{secrets.token_hex(16)}{archive_suffix(upload.name or '')}"
    with path.open("xb") as out:
        for chunk in upload.chunks():
            out.write(chunk)
    return path


def _check_archive(archive: Path) -> None:
    """A dry run of the task's unpacking, into a scratch folder that is removed again."""
    scratch = Path(tempfile.mkdtemp(prefix="upload-check-", dir=settings.VAR_DIR))
    try:
        if extract(archive, scratch) == 0:
            raise UnsafeArchive("refused: the archive holds no files")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
