"""Uploaded archives of checkpoint files: kept, checked while the operator waits, then imported by a task.

The check reads the archive's index only (`archives.check`: nothing is unpacked), so a refusal comes
back at once; the `import_archive` task then unpacks that same stored file exactly once, running the
same check again first and counting the real bytes it writes. Unpacking while the operator waits
would write every byte twice and keep a web process busy for what a worker is there for.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction

from .archives import UnsafeArchive, archive_suffix, check
from .models import ImportJob
from .services import Actor, get_or_create_project, record_audit
from .tasks import import_archive


def queue_import(upload: UploadedFile, *, project_slug: str, actor: Actor) -> ImportJob:
    """Keep the upload, refuse it if unpacking it is unsafe (UnsafeArchive), else queue its import job."""
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
