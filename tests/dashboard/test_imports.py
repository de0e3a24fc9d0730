from __future__ import annotations

import io
import json
import os
import shutil
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import hypothesis
import pytest
from django.test import Client, TestCase, override_settings
from django.urls import reverse
from django.utils import timezone
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from checkpoints.models import AgentSession, AuditEvent, Checkpoint, ImportJob, ImportJobStatus, Project
from checkpoints.services import Actor, get_or_create_project
from checkpoints.services.file_import import import_path
from checkpoints.sources import formats
from checkpoints.tasks import import_archive
from tests.helpers import select, text
from tests.kits.archive_kit import (
    SMALL,
    hostile_archives,
    make_tar,
    make_zip,
    patch_zip,
    plausible_archives,
    tar_entry,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
ARES = FIXTURES / "ares"
UPLOAD_URL = reverse("dashboard:import_upload")


@pytest.fixture(autouse=True)
def var_dir(settings, tmp_path) -> Path:
    """Uploads, scratch folders and exports go to a folder of the test's own."""
    settings.VAR_DIR = tmp_path / "var"
    settings.VAR_DIR.mkdir()
    return settings.VAR_DIR


def uploads(var_dir: Path) -> list[Path]:
    folder = var_dir / "uploads"
    return sorted(folder.iterdir()) if folder.exists() else []


def zip_folder(folder: Path, archive: Path) -> Path:
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zipped:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                zipped.write(path, Path(folder.name) / path.relative_to(folder))
    return archive


def tar_folder(folder: Path, archive: Path) -> Path:
    with tarfile.open(archive, "w:gz") as tarred:
        tarred.add(folder, arcname=folder.name)
    return archive


def upload(client: Client, archive: Path, project: str = "acme", **extra):
    with archive.open("rb") as file:
        return client.post(UPLOAD_URL, {"project": project, "archive": file}, **extra)


def job_url(job: ImportJob) -> str:
    return reverse("dashboard:import_job", args=[job.pk])


def export_url(session: AgentSession, fmt: str | None) -> str:
    url = reverse("dashboard:session_export", args=[session.pk])
    return f"{url}?format={fmt}" if fmt is not None else url


def direct_import(folder: Path, slug: str):
    """What the command would import from `folder`: the counts an upload must match."""
    return import_path(folder, project=get_or_create_project(slug), actor=Actor.system("test"))


def states(session: AgentSession) -> list[tuple[str, str]]:
    return [(c.name, bytes(c.state_hash).hex()) for c in Checkpoint.objects.for_session(session).order_by("seq")]


@pytest.fixture
def running_job(alice, project) -> ImportJob:
    return ImportJob.objects.create(
        project=project, archive="/nowhere.zip", original_name="runs.zip", created_by=alice,
        status=ImportJobStatus.RUNNING, started_at=timezone.now(), imported=12, skipped=3,
    )  # fmt: skip


@pytest.fixture
def done_job(running_job, make_session) -> ImportJob:
    make_session("sess-a")
    running_job.status = ImportJobStatus.DONE
    running_job.error_count = 1
    running_job.report = {
        "imported": 12,
        "skipped": 3,
        "errors": [{"path": "runs/sess-z_4.json", "error": "truncated JSON at byte 812"}],
        "sessions": ["sess-a", "sess-gone"],
    }
    running_job.save()
    return running_job


# ---- roles and CSRF -------------------------------------------------------------------------------


def test_only_operators_see_the_import_link(client, alice, bob):
    client.force_login(bob)
    assert UPLOAD_URL not in client.get(reverse("dashboard:overview")).content.decode()
    client.force_login(alice)
    assert select(client.get(reverse("dashboard:overview")), f'a[href="{UPLOAD_URL}"]')


def test_upload_without_a_csrf_token_is_refused(alice, tmp_path, var_dir):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    assert upload(client, zip_folder(ARES, tmp_path / "runs.zip")).status_code == 403
    assert not ImportJob.objects.exists()
    assert uploads(var_dir) == []


def test_unknown_job_is_404(client, alice):
    client.force_login(alice)
    assert client.get(reverse("dashboard:import_job", args=[999_999])).status_code == 404


def test_another_projects_job_and_session_download_are_404(client, alice, other_project, make_session):
    theirs = ImportJob.objects.create(project=other_project, archive="/x.zip", original_name="theirs.zip")
    session = make_session("theirs", in_project=other_project)
    client.force_login(alice)
    assert client.get(job_url(theirs)).status_code == 404
    assert client.get(export_url(session, "ares")).status_code == 404
    assert "theirs.zip" not in client.get(UPLOAD_URL).content.decode()
    assert not AuditEvent.objects.filter(action="export").exists()


def test_a_member_uploads_only_into_projects_they_operate(
    client, alice, grant, other_project, tmp_path, var_dir, django_capture_on_commit_callbacks
):
    grant(alice, other_project, "viewer")
    client.force_login(alice)
    html = client.get(UPLOAD_URL).content.decode()
    offered = [option.get("value") for option in select(html, "#id_project option")]
    assert offered == ["", "acme"]  # a choice, of acme only
    assert "globex" not in html
    for slug in ("globex", "brand-new"):
        response = upload(client, zip_folder(ARES, tmp_path / "runs.zip"), project=slug)
        assert "You can import only into a project where you are an operator (acme)." in response.content.decode()
    assert not ImportJob.objects.exists() and uploads(var_dir) == []
    assert not Project.objects.filter(slug="brand-new").exists()


def test_files_naming_a_project_the_uploader_does_not_operate_go_into_the_chosen_one(
    client, alice, other_project, tmp_path, django_capture_on_commit_callbacks
):
    client.force_login(alice)
    with django_capture_on_commit_callbacks(execute=True):
        upload(client, zip_folder(FIXTURES / "haytham" / "handwritten", tmp_path / "haytham.zip"), project="acme")
    job = ImportJob.objects.get()
    assert job.status == "done" and job.imported > 0
    assert not Project.objects.filter(slug="project-123").exists()
    assert set(AgentSession.objects.values_list("project__slug", flat=True)) == {"acme"}
    assert job.report["notes"] == [
        "the files name project 'project-123' (projects/project-123/), where alice is not an operator: "
        "its sessions go into 'acme' instead"
    ]
    assert "where alice is not an operator" in client.get(job_url(job)).content.decode()


def test_a_staff_operators_upload_follows_the_project_the_files_name(
    client, staff_operator, tmp_path, django_capture_on_commit_callbacks
):
    client.force_login(staff_operator)
    with django_capture_on_commit_callbacks(execute=True):
        upload(client, zip_folder(FIXTURES / "haytham" / "handwritten", tmp_path / "haytham.zip"), project="acme")
    assert set(AgentSession.objects.values_list("project__slug", flat=True)) == {"project-123"}


# ---- the upload page ------------------------------------------------------------------------------


def test_upload_page_shows_the_form_projects_and_recent_jobs(client, alice, done_job, other_project, grant):
    grant(alice, other_project, "operator")
    client.force_login(alice)
    response = client.get(UPLOAD_URL)
    html = response.content.decode()
    assert response.status_code == 200
    [form] = select(html, "form[enctype='multipart/form-data']")
    assert form.cssselect("input[name=csrfmiddlewaretoken]")
    offered = [option.get("value") for option in form.cssselect("#id_project option, #project-slugs option")]
    assert "globex" in offered  # the projects alice operates, to pick from
    assert form.cssselect("#id_project[value=acme], #id_project option[value=acme][selected]")  # the last job's
    assert "runs.zip" in html and job_url(done_job) in html
    assert "512.0\xa0MB" in html


def test_upload_page_query_count_is_bounded(client, alice, project, django_assert_max_num_queries):
    for n in range(30):
        ImportJob.objects.create(project=project, archive=f"/x{n}.zip", original_name=f"x{n}.zip", created_by=alice)
    client.force_login(alice)
    client.get(UPLOAD_URL)
    with django_assert_max_num_queries(8):
        assert client.get(UPLOAD_URL).status_code == 200


def test_uploaded_zip_is_imported_with_the_commands_counts(
    client, alice, tmp_path, var_dir, django_capture_on_commit_callbacks
):
    expected = direct_import(ARES, "elsewhere")
    client.force_login(alice)
    with django_capture_on_commit_callbacks(execute=True):
        response = upload(client, zip_folder(ARES, tmp_path / "runs.zip"))
    job = ImportJob.objects.get()
    assert response.status_code == 302
    assert response["Location"] == job_url(job)
    assert (job.status, job.original_name, job.created_by, job.project.slug) == ("done", "runs.zip", alice, "acme")
    assert (job.imported, job.skipped, job.error_count) == (expected.imported, 0, len(expected.errors))
    assert expected.imported > 0
    assert job.report["imported"] == expected.imported
    assert sorted(job.report["sessions"]) == sorted(expected.sessions)
    project = Project.objects.get(slug="acme")
    assert sorted(AgentSession.objects.filter(project=project).values_list("external_id", flat=True)) == sorted(
        expected.sessions
    )
    for external_id in expected.sessions:
        imported = AgentSession.objects.get(project=project, external_id=external_id)
        original = AgentSession.objects.get(project__slug="elsewhere", external_id=external_id)
        assert states(imported) == states(original)
    assert uploads(var_dir) == []  # imported, then removed


def test_upload_writes_an_upload_and_an_import_audit_row(
    client, alice, tmp_path, project, django_capture_on_commit_callbacks
):
    client.force_login(alice)
    with django_capture_on_commit_callbacks(execute=True):
        upload(client, zip_folder(ARES, tmp_path / "runs.zip"))
    job = ImportJob.objects.get()
    uploaded = AuditEvent.objects.get(action="upload")
    assert (uploaded.actor_user, uploaded.project, uploaded.target) == (alice, project, "runs.zip")
    assert uploaded.details["job"] == job.pk
    assert AuditEvent.objects.get(action="import").actor_user == alice


def test_uploaded_tar_gz_is_imported_into_a_new_project_by_a_staff_operator(
    client, staff_operator, tmp_path, django_capture_on_commit_callbacks
):
    expected = direct_import(ARES, "elsewhere")
    client.force_login(staff_operator)
    with django_capture_on_commit_callbacks(execute=True):
        response = upload(client, tar_folder(ARES, tmp_path / "runs.tar.gz"), project="fresh-project")
    job = ImportJob.objects.get()
    assert response.status_code == 302
    assert (job.status, job.imported, job.project.slug) == ("done", expected.imported, "fresh-project")


def test_uploading_the_same_archive_twice_adds_nothing(client, alice, tmp_path, django_capture_on_commit_callbacks):
    archive = zip_folder(ARES, tmp_path / "runs.zip")
    client.force_login(alice)
    with django_capture_on_commit_callbacks(execute=True):
        upload(client, archive)
    count = Checkpoint.objects.count()
    with django_capture_on_commit_callbacks(execute=True):
        upload(client, archive)
    first, second = ImportJob.objects.order_by("pk")
    assert Checkpoint.objects.count() == count
    assert (second.imported, second.skipped) == (0, first.imported)


def test_upload_is_queued_only_when_the_transaction_commits(client, alice, tmp_path, var_dir):
    client.force_login(alice)
    response = upload(client, zip_folder(ARES, tmp_path / "runs.zip"))
    job = ImportJob.objects.get()
    assert response.status_code == 302
    assert job.status == ImportJobStatus.QUEUED
    assert not Checkpoint.objects.exists()
    assert [path.name for path in uploads(var_dir)] == [Path(job.archive).name]
    assert Path(job.archive).name != "runs.zip" and job.archive.endswith(".zip")


def test_a_queued_job_shows_as_queued_with_its_file_count_and_no_progress(client, alice, tmp_path, var_dir):
    client.force_login(alice)
    upload(client, zip_folder(ARES, tmp_path / "runs.zip"))
    job = ImportJob.objects.get()
    files = sum(1 for path in ARES.rglob("*") if path.is_file())
    assert job.report == {"files": files}
    html = client.get(job_url(job)).content.decode()
    assert "Waiting for a worker" in html and f"Queued: {files} files to read." in html
    [bar] = select(html, "[role=progressbar]")
    assert bar.get("class") == "import-bar import-bar-queued" and bar.get("aria-valuenow") == "0"  # nothing moves


def test_a_running_job_counts_what_it_has_read_of_how_many_files(client, alice, running_job):
    ImportJob.objects.filter(pk=running_job.pk).update(report={"files": 40})
    client.force_login(alice)
    html = client.get(job_url(running_job)).content.decode()
    [bar] = select(html, "[role=progressbar]")
    assert bar.get("aria-valuetext") == "15 checkpoints read so far from 40 files"
    assert "Reading the archive's 40 files: 15 checkpoints read so far" in html


def traversal_zip(tmp_path: Path) -> Path:
    return make_zip(tmp_path / "evil.zip", {"ok.json": b"{}", "../evil.json": b"{}"})


def absolute_tar(tmp_path: Path) -> Path:
    return make_tar(tmp_path / "evil.tar.gz", ("/etc/evil.json", b"{}"))


def symlink_tar(tmp_path: Path) -> Path:
    return make_tar(tmp_path / "links.tgz", tar_entry("runs/passwd.json", tarfile.SYMTYPE, linkname="/etc/passwd"))


def zip_bomb(tmp_path: Path) -> Path:
    return make_zip(tmp_path / "bomb.zip", {"zeros.json": bytes(8 * 1024 * 1024)})


def tar_bomb(tmp_path: Path) -> Path:
    return make_tar(tmp_path / "bomb.tar.gz", ("zeros.json", bytes(8 * 1024 * 1024)))


def corrupt_zip(tmp_path: Path) -> Path:
    archive = zip_folder(ARES, tmp_path / "broken.zip")
    archive.write_bytes(archive.read_bytes()[:-200])
    return archive


def corrupt_tar(tmp_path: Path) -> Path:
    path = tmp_path / "broken.tar.gz"
    path.write_bytes(b"this is not gzip at all" * 20)
    return path


def empty_zip(tmp_path: Path) -> Path:
    return make_zip(tmp_path / "empty.zip", {})


def wrong_extension(tmp_path: Path) -> Path:
    path = tmp_path / "runs.rar"
    path.write_bytes(b"Rar!\x1a\x07\x00")
    return path


@pytest.mark.parametrize(
    ("make_archive", "message"),
    [
        (traversal_zip, "&#x27;../evil.json&#x27; would be written outside the upload folder"),
        (absolute_tar, "&#x27;/etc/evil.json&#x27; would be written outside the upload folder"),
        (symlink_tar, "&#x27;runs/passwd.json&#x27; is a link"),
        (zip_bomb, "files that swell that much are built to fill up disks"),
        (tar_bomb, "archives that swell that much are built to fill up disks"),
        (corrupt_zip, "this file is not a zip archive, or it is truncated"),
        (corrupt_tar, "this file is not a gzip-compressed tar archive"),
        (empty_zip, "the archive holds no files"),
        (wrong_extension, "runs.rar is not an archive"),
    ],
)
def test_dangerous_or_broken_archives_are_refused_and_nothing_is_queued(
    client, alice, tmp_path, var_dir, make_archive, message, django_capture_on_commit_callbacks
):
    client.force_login(alice)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = upload(client, make_archive(tmp_path))
    assert response.status_code == 200
    assert message in response.content.decode()
    assert select(response, "[role=alert]")
    assert callbacks == []
    assert not ImportJob.objects.exists()
    assert not AgentSession.objects.exists()
    assert not AuditEvent.objects.exists()
    assert uploads(var_dir) == []
    assert [path.name for path in var_dir.iterdir()] == ["uploads"] or not any(var_dir.iterdir())  # no scratch left


def test_nothing_is_written_outside_by_a_refused_archive(client, alice, tmp_path, var_dir):
    client.force_login(alice)
    upload(client, traversal_zip(tmp_path))
    assert not (var_dir / "evil.json").exists()
    assert not list(var_dir.rglob("evil.json"))


def test_upload_without_a_file_or_project_is_an_error(client, alice):
    client.force_login(alice)
    response = client.post(UPLOAD_URL, {"project": ""})
    assert response.status_code == 200
    errors = [text(error) for error in select(response, ".errorlist li")]
    assert errors == ["This field is required."] * 2
    assert not ImportJob.objects.exists()


def test_project_must_be_a_slug(client, alice, tmp_path):
    client.force_login(alice)
    response = upload(client, zip_folder(ARES, tmp_path / "runs.zip"), project="no spaces/here")
    assert response.status_code == 200
    assert "Enter a valid “slug”" in response.content.decode()
    assert not Project.objects.filter(slug__contains="here").exists()


def test_upload_over_the_size_limit_is_refused(client, alice, tmp_path, settings, var_dir):
    settings.IMPORT_UPLOAD_MAX_BYTES = 1024
    client.force_login(alice)
    response = upload(client, zip_folder(ARES, tmp_path / "runs.zip"))
    assert response.status_code == 200
    assert "uploads are limited to 1.0\xa0KB" in response.content.decode()
    assert not ImportJob.objects.exists()
    assert uploads(var_dir) == []


# ---- the job page ---------------------------------------------------------------------------------


def test_running_job_page_polls_its_progress(client, alice, running_job):
    client.force_login(alice)
    html = client.get(job_url(running_job)).content.decode()
    assert select(html, "html") and "Importing…" in html
    [progress] = select(html, "#import-progress")
    assert (progress.get("hx-get"), progress.get("hx-trigger"), progress.get("hx-swap")) == (
        job_url(running_job),
        "every 1s",
        "outerHTML",
    )
    assert progress.cssselect("[role=progressbar]")
    counts = {text(term): text(term.getnext()) for term in progress.cssselect("dt")}
    assert (counts["Imported"], counts["Already present (skipped)"]) == ("12", "3")


def test_running_job_partial_keeps_polling(client, alice, running_job):
    client.force_login(alice)
    response = client.get(job_url(running_job), headers={"HX-Request": "true"})
    html = response.content.decode()
    assert response.status_code == 200
    assert html.lstrip().startswith('<section id="import-progress"')
    assert not select(html, "html")
    assert select(html, "#import-progress")[0].get("hx-trigger") == "every 1s"
    assert "HX-Request" in response["Vary"]


def test_finished_job_partial_stops_polling_and_shows_the_report(client, alice, done_job):
    client.force_login(alice)
    response = client.get(job_url(done_job), headers={"HX-Request": "true"})
    html = response.content.decode()
    assert response.status_code == 286  # htmx swaps it in, then stops polling
    assert not select(html, "[hx-trigger], [hx-get]")
    assert "Import finished" in html
    assert "runs/sess-z_4.json" in html and "truncated JSON at byte 812" in html
    session = AgentSession.objects.get(external_id="sess-a")
    assert reverse("dashboard:session_detail", args=[session.pk]) in html
    assert "sess-gone" in html and "no longer here" in html


def test_finished_job_full_page_is_a_normal_200(client, alice, done_job):
    client.force_login(alice)
    response = client.get(job_url(done_job))
    assert response.status_code == 200
    assert not select(response, "#import-progress[hx-trigger], #import-progress [hx-trigger]")


def test_failed_job_shows_why(client, alice, running_job):
    running_job.status = ImportJobStatus.FAILED
    running_job.error = "refused: 'x.json' is a link"
    running_job.save()
    client.force_login(alice)
    html = client.get(job_url(running_job)).content.decode()
    assert "Import failed" in html
    assert "refused: &#x27;x.json&#x27; is a link" in html
    assert "Nothing from this archive was imported." not in html  # 12 checkpoints went in before it stopped
    ImportJob.objects.filter(pk=running_job.pk).update(imported=0, skipped=0)
    assert "Nothing from this archive was imported." in client.get(job_url(running_job)).content.decode()


def test_job_page_query_count_is_bounded(client, alice, done_job, django_assert_max_num_queries):
    client.force_login(alice)
    client.get(job_url(done_job))
    with django_assert_max_num_queries(6):
        assert client.get(job_url(done_job), headers={"HX-Request": "true"}).status_code == 286


# ---- "Download as…" -------------------------------------------------------------------------------


@pytest.fixture
def ares_session(project) -> AgentSession:
    import_path(ARES, project=project, actor=Actor.system("test"))
    return AgentSession.objects.get(project=project, external_id="sess-a")


def test_session_page_offers_every_format_to_download(client, bob, ares_session):
    client.force_login(bob)
    html = client.get(reverse("dashboard:session_detail", args=[ares_session.pk])).content.decode()
    [form] = select(html, f'form[action="{reverse("dashboard:session_export", args=[ares_session.pk])}"]')
    assert [option.get("value") for option in form.cssselect("select[name=format] option")] == list(formats.names())
    assert [text(option) for option in form.cssselect("option[selected]")] == ["ares"]  # the format it came in


def test_download_re_imports_to_the_same_states(client, bob, ares_session, tmp_path, other_project):
    client.force_login(bob)  # a viewer may download
    response = client.get(export_url(ares_session, "ares"))
    assert response.status_code == 200
    assert response["Content-Type"] == "application/zip"
    assert response["Content-Disposition"] == 'attachment; filename="sess-a-ares.zip"'
    out = tmp_path / "download"
    with zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content))) as zipped:
        assert zipped.namelist()
        zipped.extractall(out)  # noqa: S202 - the export this test just downloaded
    report = import_path(out, project=other_project, actor=Actor.system("test"))
    assert report.sessions == ["sess-a"] and not report.errors
    again = AgentSession.objects.get(project=other_project, external_id="sess-a")
    assert states(again) == states(ares_session)
    assert again.head.state_hash == ares_session.head.state_hash


def test_download_writes_an_export_audit_row(client, bob, ares_session):
    client.force_login(bob)
    b"".join(client.get(export_url(ares_session, "kaizen")).streaming_content)
    event = AuditEvent.objects.get(action="export")
    assert (event.actor_user, event.session, event.details) == (bob, ares_session, {"format": "kaizen"})


@pytest.mark.parametrize("name", formats.names())
def test_a_session_downloads_in_every_format(client, alice, ares_session, name):
    client.force_login(alice)
    response = client.get(export_url(ares_session, name))
    assert response.status_code == 200
    with zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content))) as zipped:
        assert zipped.namelist()
    assert response["Content-Disposition"].endswith(f'sess-a-{name}.zip"')


def test_download_name_keeps_only_safe_characters_of_the_session_id(client, bob, ares_session):
    AgentSession.objects.filter(pk=ares_session.pk).update(external_id='../the "run"\r\nü')
    client.force_login(bob)
    response = client.get(export_url(ares_session, "ares"))
    assert response["Content-Disposition"] == "attachment; filename*=utf-8''..the_run%C3%BC-ares.zip"


@pytest.mark.parametrize("name", ["", "pdf", "../ares", "base", "os", "_jsonfiles"])
def test_download_in_an_unknown_format_is_400(client, alice, ares_session, name):
    client.force_login(alice)
    response = client.get(export_url(ares_session, name))
    assert response.status_code == 400
    assert "choose one of dreamos, breakpilot, ares, kaizen, haytham, langgraph" in response.content.decode()
    assert not AuditEvent.objects.filter(action="export").exists()


def test_download_without_a_format_is_400(client, alice, ares_session):
    client.force_login(alice)
    assert client.get(export_url(ares_session, None)).status_code == 400


def test_download_of_an_unknown_session_is_404(client, alice):
    client.force_login(alice)
    assert client.get(reverse("dashboard:session_export", args=[999_999]) + "?format=ares").status_code == 404


def test_user_without_a_role_cannot_download(client, nobody, ares_session):
    client.force_login(nobody)
    assert client.get(export_url(ares_session, "ares")).status_code == 403


# ---- regressions from issue #9 (item 6) and the archive boundary ----------------------------------

_WRITES: list[list[str]] = []  # the open recorders; an audit hook cannot be removed, so it is added once


def _record_writes(event: str, args: tuple[Any, ...]) -> None:
    if _WRITES and event == "open" and isinstance(args[0], str | bytes | os.PathLike):
        mode, flags = args[1], args[2]
        if (mode and set(str(mode)) & set("wxa+")) or (not mode and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)):
            _WRITES[-1].append(os.fsdecode(args[0]))


@pytest.fixture
def files_written() -> Iterator[list[str]]:
    """Every file this process opens for writing while the test runs (Python's audit hook: no mock)."""
    if not hasattr(sys, "_archive_test_hook"):
        sys.addaudithook(_record_writes)
        sys._archive_test_hook = True  # type: ignore[attr-defined]
    _WRITES.append([])
    yield _WRITES[-1]
    _WRITES.pop()


def test_a_zip_of_200_members_of_one_mib_is_refused_on_the_form(client, alice, tmp_path, var_dir):
    archive = make_zip(tmp_path / "bomb.zip", {f"f{n}.json": bytes(1024 * 1024) for n in range(200)})
    client.force_login(alice)
    response = upload(client, archive)
    assert response.status_code == 200
    assert (
        "× its compressed size, more than the limit of 100×: files that swell that much are built to fill up disks"
        in response.content.decode()
    )
    assert not ImportJob.objects.exists()
    assert uploads(var_dir) == []


@pytest.mark.parametrize(
    ("make_archive", "message"),
    [
        (lambda p: make_zip(p / "clash.zip", {"a": b"{}", "a/b": b"{}"}), "both a file and a folder"),
        (lambda p: patch_zip(make_zip(p / "aes.zip", {"a.json": b"{}"}), method=99), "(zip method 99)"),
        (lambda p: patch_zip(make_zip(p / "aes.zip", {"a.json": b"{}"}), method=99, flags=1), "is encrypted"),
        (lambda p: make_tar(p / "clash.tar.gz", ("a", b"{}"), ("a/b", b"{}")), "both a file and a folder"),
        (lambda p: make_tar(p / "long.tar.gz", ("x" * 300, b"{}")), "longer than 255 bytes"),
    ],
)
def test_clashes_encryption_and_unknown_methods_are_form_errors_not_500s(
    client, alice, tmp_path, var_dir, make_archive, message
):
    client.force_login(alice)
    response = upload(client, make_archive(tmp_path))
    html = response.content.decode()
    assert response.status_code == 200
    assert message in html and select(html, "[role=alert]")
    assert str(var_dir) not in html and str(tmp_path) not in html
    assert not ImportJob.objects.exists()
    assert uploads(var_dir) == []


def test_an_accepted_upload_is_unpacked_once_by_the_task_and_not_while_checking(
    client, alice, tmp_path, var_dir, files_written, django_capture_on_commit_callbacks
):
    archive = zip_folder(ARES, tmp_path / "runs.zip")
    members = len(zipfile.ZipFile(archive).namelist())
    client.force_login(alice)
    with django_capture_on_commit_callbacks() as callbacks:
        upload(client, archive)
    job = ImportJob.objects.get()
    assert [path for path in files_written if path.startswith(str(var_dir))] == [job.archive]  # the upload only
    files_written.clear()
    for callback in callbacks:
        callback()
    unpacked = [path for path in files_written if path.startswith(str(var_dir))]
    assert len(unpacked) == len(set(unpacked)) == members
    assert ImportJob.objects.get().status == ImportJobStatus.DONE


def queued_job(client, alice, archive: Path) -> ImportJob:
    """Upload `archive` and return its job, queued and not yet run."""
    client.force_login(alice)
    assert upload(client, archive).status_code == 302
    return ImportJob.objects.get()


def test_a_lying_header_found_while_unpacking_fails_the_job_with_a_sentence_and_imports_nothing(
    client, alice, tmp_path, var_dir
):
    """The index says 100 bytes; the data holds more. The check cannot know, the unpacking stops."""
    archive = patch_zip(zip_folder(ARES, tmp_path / "runs.zip"), size=lambda n: n // 2)
    job = queued_job(client, alice, archive)
    result = import_archive(job.pk)
    job.refresh_from_db()
    assert (job.status, job.error) == ("failed", "Refused: the zip archive is damaged or truncated and cannot be read.")
    assert result == {"error": job.error}
    assert not Checkpoint.objects.exists() and not AgentSession.objects.exists()
    assert not AuditEvent.objects.filter(action="import").exists()
    assert list(var_dir.iterdir()) == [var_dir / "uploads"] and uploads(var_dir) == []  # no folder, no upload left
    html = client.get(job_url(job)).content.decode()
    assert "Import failed" in html and "damaged or truncated" in html and str(var_dir) not in html


def test_a_bug_during_the_import_fails_the_job_instead_of_leaving_it_running(client, alice, tmp_path, monkeypatch):
    job = queued_job(client, alice, zip_folder(ARES, tmp_path / "runs.zip"))

    def broken(*args, **kwargs):  # fault injection: stands for any bug below the task
        raise KeyError("a bug")

    monkeypatch.setattr("checkpoints.services.uploads.import_path", broken)
    with pytest.raises(KeyError):
        import_archive(job.pk)
    job.refresh_from_db()
    assert job.status == ImportJobStatus.FAILED and job.finished_at is not None
    assert job.error.startswith("The import stopped on an internal error")


def test_a_redelivered_import_task_imports_nothing_twice(client, alice, tmp_path):
    job = queued_job(client, alice, zip_folder(ARES, tmp_path / "runs.zip"))
    first = import_archive(job.pk)
    count = Checkpoint.objects.count()
    assert first["imported"] == count > 0
    assert import_archive(job.pk) == first  # the message again, after the job finished
    assert Checkpoint.objects.count() == count
    assert AuditEvent.objects.filter(action="import").count() == 1


def test_a_job_whose_worker_died_imports_again_without_duplicates(client, alice, tmp_path):
    archive = zip_folder(ARES, tmp_path / "runs.zip")
    job = queued_job(client, alice, archive)
    kept = Path(job.archive).read_bytes()
    import_archive(job.pk)
    count = Checkpoint.objects.count()
    Path(job.archive).write_bytes(kept)  # as if the worker died after importing, before finishing the job
    ImportJob.objects.filter(pk=job.pk).update(status=ImportJobStatus.RUNNING)
    import_archive(job.pk)
    job.refresh_from_db()
    assert job.status == ImportJobStatus.DONE
    assert (job.imported, job.skipped) == (0, count)
    assert Checkpoint.objects.count() == count


def test_the_import_report_and_audit_name_the_upload_not_a_server_folder(client, alice, tmp_path, var_dir):
    folder = tmp_path / "runs"
    shutil.copytree(ARES, folder / "ares")
    (folder / "ares" / "sess-z_latest.json").write_text("sess-z_9.json")  # points to a file that is not there
    (folder / "notes.txt").write_text("not a checkpoint")
    job = queued_job(client, alice, zip_folder(folder, tmp_path / "runs.zip"))
    import_archive(job.pk)
    job.refresh_from_db()
    assert job.status == ImportJobStatus.DONE and job.error_count == 2
    report = json.dumps(job.report)
    assert "sess-z_latest.json" in report and "notes.txt" in report
    assert str(var_dir) not in report and "import-" not in report
    assert AuditEvent.objects.get(action="import").target == "runs.zip"
    html = client.get(job_url(job)).content.decode()
    assert "runs/ares/sess-z_latest.json" in html and str(var_dir) not in html


@hypothesis.settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(spec=st.one_of(hostile_archives, plausible_archives))
def test_generated_hostile_uploads_are_refused_on_the_form_or_imported_without_a_server_error(
    client, alice, tmp_path, var_dir, spec
):
    """Never a 5xx or an exception, nothing written outside VAR_DIR, no server path in any message,
    nothing imported (no job, no session, no audit row) for a refused archive."""
    example = Path(tempfile.mkdtemp(dir=tmp_path))
    try:
        upload_generated(client, alice, spec.build(example), tmp_path, var_dir)
    finally:
        shutil.rmtree(example)
    assert {path.name for path in tmp_path.iterdir()} == {"var"}  # nothing written beside it


def upload_generated(client: Client, alice: Any, archive: Path, tmp_path: Path, var_dir: Path) -> None:
    before = {model: model.objects.count() for model in (ImportJob, AgentSession, Checkpoint, AuditEvent)}
    limits = {f"IMPORT_ARCHIVE_{key.upper()}": value for key, value in asdict(SMALL).items()}
    client.force_login(alice)
    with override_settings(**limits), TestCase.captureOnCommitCallbacks(execute=True):
        response = upload(client, archive)
    html = response.content.decode()
    assert str(var_dir) not in html and str(tmp_path) not in html
    if response.status_code == 200:
        hypothesis.event("refused on the form")
        assert select(
            html, "[role=alert]"
        )  # the form's error: "Refused: …", or Django's "The submitted file is empty."
        assert {model: model.objects.count() for model in before} == before
    else:
        assert response.status_code == 302
        job = ImportJob.objects.latest("pk")
        hypothesis.event(f"accepted, then {job.status}")
        assert job.status in (ImportJobStatus.DONE, ImportJobStatus.FAILED)
        assert str(var_dir) not in job.error + json.dumps(job.report)
        if job.status == ImportJobStatus.FAILED:
            assert job.error.startswith("Refused: ")
            assert Checkpoint.objects.count() == before[Checkpoint]
    assert uploads(var_dir) == []
    assert sorted(path.name for path in var_dir.iterdir()) in ([], ["uploads"])  # no unpacked folder left


@pytest.mark.django_db(transaction=True)
def test_with_the_broker_down_an_upload_is_kept_and_the_sweep_queues_its_import_once_the_broker_is_back(
    client, alice, tmp_path, broker_down
):
    from checkpoints import tasks
    from checkpoints.services.uploads import UNSENT
    from config.celery import app

    client.force_login(alice)
    response = upload(client, zip_folder(ARES, tmp_path / "runs.zip"))  # real commit: the send fails after it
    assert response.status_code == 302
    job = ImportJob.objects.get()
    assert job.status == ImportJobStatus.QUEUED and job.report[UNSENT] is True
    swept = tasks.send_due_deliveries()
    assert swept == {
        "deliveries": 0,
        "imports": 0,
        "recoveries": 0,
        "purges": 0,
    }  # still down: marked for the next sweep
    assert ImportJob.objects.get().report[UNSENT] is True

    app.conf.task_always_eager = True  # the broker is back (tasks run inline)
    assert tasks.send_due_deliveries() == {"deliveries": 0, "imports": 1, "recoveries": 0, "purges": 0}
    job.refresh_from_db()
    assert job.status == ImportJobStatus.DONE and UNSENT not in job.report
    assert Checkpoint.objects.exists()
    imported = Checkpoint.objects.count()
    tasks.send_due_deliveries()  # nothing left to send: the import ran once
    assert Checkpoint.objects.count() == imported
