"""Uploading archives of checkpoint files, following their import jobs, and downloading a session in a format.

An upload's index is checked before anything is queued (`archives.check`, which unpacks nothing), so a
dangerous or unreadable archive (path traversal, links, clashing names, too many members or bytes, a
compression bomb, an encrypted or damaged zip) is refused on the form while the operator waits, with
the check's own sentence. The `import_archive` Celery task then unpacks that stored file once and
imports it; its job page polls a partial every second until the job is finished.
"""

from __future__ import annotations

import tempfile
import zipfile
from pathlib import Path
from typing import Any

from django.conf import settings
from django.http import FileResponse, HttpResponse, HttpResponseBadRequest, HttpResponseBase
from django.shortcuts import redirect
from django.utils.text import get_valid_filename
from django.views.decorators.http import require_GET, require_http_methods
from django_htmx.http import HttpResponseStopPolling

from checkpoints.models import AgentSession, ImportJob, Project
from checkpoints.roles import in_every_project
from checkpoints.services import Actor
from checkpoints.services.exports import record_export
from checkpoints.services.uploads import queue_import
from checkpoints.sources import formats
from checkpoints.sources.archives import Limits, UnsafeArchive
from checkpoints.sources.formats.langgraph import ExportRefused
from checkpoints.store.masking import Masker, masked_reads
from checkpoints.tasks import import_archive

from ..forms import UploadForm
from ..presenters.secrets import masker
from .common import OPERATE, HtmxHttpRequest, console, get_import_job_for_user, get_session_for_user, render_page

RECENT_JOBS = 15
ERRORS_SHOWN = 200  # rows of a report's error table; the count above it is the whole number
SESSIONS_SHOWN = 100


@console(OPERATE)
@require_http_methods(["GET", "POST"])
def import_upload(request: HtmxHttpRequest) -> HttpResponse:
    max_bytes = settings.IMPORT_UPLOAD_MAX_BYTES
    posted = request.method == "POST"
    operated = Project.objects.allowing(request.user, OPERATE).order_by("slug")
    may_create = in_every_project(request.user, OPERATE)
    jobs = ImportJob.objects.allowing(request.user, OPERATE)
    projects = list(operated.values_list("slug", flat=True))
    first = "imported" if may_create else projects[0] if len(projects) == 1 else ""
    form = UploadForm(
        request.POST if posted else None,
        request.FILES if posted else None,
        initial={"project": jobs.values_list("project__slug", flat=True).first() or first},
        max_bytes=max_bytes,
        projects=projects,
        may_create=may_create,
    )
    if posted and form.is_valid():
        data, actor = form.cleaned_data, Actor.for_user(request.user)
        try:
            job = queue_import(data["archive"], project_slug=data["project"], actor=actor, start=import_archive.delay)
        except UnsafeArchive as exc:
            form.add_error("archive", str(exc))
        else:
            return redirect("dashboard:import_job", job.pk)
    context = {
        "form": form,
        "max_bytes": max_bytes,
        "project_slugs": form.projects if may_create else [],
        "jobs": jobs.select_related("project", "created_by")[:RECENT_JOBS],
        "format_names": formats.names(),
        "limits": Limits.from_settings(),
    }
    return render_page(request, "dashboard/import_upload.html", context)


@console(OPERATE)
@require_GET
def import_job(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    job = get_import_job_for_user(request, pk)
    context = {"job": job, **_report(job, request.user)}
    response = render_page(request, "dashboard/import_job.html", context, "import-progress")
    if job.finished and request.htmx:
        response.status_code = HttpResponseStopPolling.status_code  # 286: htmx swaps it in, then stops polling
    return response


@console()
@require_GET
def session_export(request: HtmxHttpRequest, pk: int) -> HttpResponseBase:
    session = get_session_for_user(request, pk)
    name = request.GET.get("format", "")
    if name not in formats.names():
        message = f"Unknown format {name!r}: choose one of {', '.join(formats.names())}."
        return HttpResponseBadRequest(message, content_type="text/plain; charset=utf-8")
    try:
        archive = export_zip(session, name)
    except ExportRefused as exc:
        return HttpResponse(f"Not exported: {exc}.", status=409, content_type="text/plain; charset=utf-8")
    record_export(session, actor=Actor.for_user(request.user), format_name=name)
    filename = get_valid_filename(f"{session.external_id}-{name}.zip")
    return FileResponse(archive, as_attachment=True, filename=filename, content_type="application/zip")


# ---- the work behind the views --------------------------------------------------------------------


def _report(job: ImportJob, user: Any) -> dict[str, Any]:
    """The finished job's report, ready to show: errors capped, sessions with links where the user sees them."""
    if not job.finished:
        return {}
    errors = job.report.get("errors", [])
    ids = job.report.get("sessions", [])[:SESSIONS_SHOWN]
    found: dict[str, AgentSession] = {}
    sessions = AgentSession.objects.visible_to(user).filter(external_id__in=ids).select_related("project")
    for session in sessions.order_by("pk"):
        if session.external_id not in found or session.project_id == job.project_id:  # the job's project first
            found[session.external_id] = session
    elapsed = job.finished_at - job.started_at if job.finished_at and job.started_at else None
    return {
        "elapsed": elapsed,
        "errors": errors[:ERRORS_SHOWN],
        "errors_hidden": max(len(errors) - ERRORS_SHOWN, 0),
        "sessions": [(external_id, found.get(external_id)) for external_id in ids],
        "sessions_hidden": max(len(job.report.get("sessions", [])) - SESSIONS_SHOWN, 0),
    }


def _mask_file(path: Path, mask: Masker) -> None:
    """A text file's found values masked where they sit (a binary one, a SQLite file or a gzip, holds only the
    states `masked_reads` masked)."""
    if not path.is_file():
        return
    try:
        text = path.read_bytes().decode()
    except UnicodeDecodeError:
        return
    masked = mask.text(text)
    if masked is not text:
        path.write_text(masked)


def export_zip(session: AgentSession, name: str) -> Any:
    """The session written in format `name`, zipped into an anonymous temporary file (read from the start); its
    states with the project's found secrets masked, as every download a person makes (`export_checkpoints` and
    write-back keep the real ones)."""
    with tempfile.TemporaryDirectory(prefix="export-", dir=settings.VAR_DIR) as scratch:
        folder = Path(scratch)
        mask = masker(session.project)
        with masked_reads(mask):
            formats.get(name).export(session, folder)
        if mask.active:  # what the exporter wrote from the checkpoints' rows (names, status reasons) too
            for path in folder.rglob("*"):
                _mask_file(path, mask)
        archive = tempfile.TemporaryFile()  # noqa: SIM115 (FileResponse closes it once sent)
        with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zipped:
            for path in sorted(p for p in folder.rglob("*") if p.is_file()):
                zipped.write(path, path.relative_to(folder).as_posix())
    archive.seek(0)
    return archive
