"""An operator uploads an archive of checkpoint files and watches its import finish, in Chromium."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import pytest
from django.urls import reverse
from django.utils import timezone
from playwright.sync_api import expect

from checkpoints.models import ImportJob, ImportJobStatus
from tests.kits.archive_kit import make_zip, patch_zip

pytestmark = pytest.mark.django_db(transaction=True)

ARES = Path(__file__).resolve().parents[1] / "fixtures" / "ares"


@pytest.fixture(autouse=True)
def var_dir(settings, tmp_path) -> Path:
    settings.VAR_DIR = tmp_path / "var"
    settings.VAR_DIR.mkdir()
    return settings.VAR_DIR


def ares_zip(tmp_path: Path) -> Path:
    archive = tmp_path / "ares-runs.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        for path in sorted(ARES.iterdir()):
            zipped.write(path, f"ares/{path.name}")
    return archive


def test_operator_uploads_an_archive_and_sees_the_report(
    looks, page, live_server, sign_in, alice, tmp_path, screenshot
):
    sign_in(alice)
    page.get_by_role("link", name="Import").click()
    expect(page.get_by_role("heading", name="Import checkpoints")).to_be_visible()
    page.get_by_label("Project").select_option("acme")  # a project alice operates
    page.get_by_label("Archive").set_input_files(ares_zip(tmp_path))
    page.get_by_role("button", name="Upload and import").click()

    expect(page).to_have_url(re.compile(r"/imports/\d+/$"))
    progress = page.locator("#import-progress")
    expect(progress.get_by_role("heading", name="Import finished")).to_be_visible()
    job = ImportJob.objects.get()
    assert job.status == ImportJobStatus.DONE and job.imported > 0
    expect(progress.locator(".import-counts")).to_contain_text(str(job.imported))
    expect(progress.get_by_role("link", name="sess-a")).to_be_visible()
    looks("import-job")
    screenshot("import-job", guide=True)

    page.get_by_role("link", name="sess-a").click()
    expect(page.get_by_label("Download as")).to_have_value("ares")  # the format it came in
    screenshot("import-session-download")
    with page.expect_download() as download:
        page.get_by_label("Download as").select_option("kaizen")
        page.get_by_role("button", name="Download").click()
    assert download.value.suggested_filename == "sess-a-kaizen.zip"

    page.goto(f"{live_server.url}{reverse('dashboard:import_upload')}")
    expect(page.get_by_role("link", name="ares-runs.zip")).to_be_visible()
    looks("import-upload")


def test_a_dangerous_archive_is_refused_on_the_form(page, live_server, sign_in, alice, tmp_path, screenshot):
    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("../../evil.json", "{}")
    sign_in(alice)
    page.goto(f"{live_server.url}{reverse('dashboard:import_upload')}")
    page.get_by_label("Archive").set_input_files(archive)
    page.get_by_role("button", name="Upload and import").click()
    expect(page.get_by_role("alert")).to_contain_text("would be written outside the upload folder")
    assert not ImportJob.objects.exists()
    screenshot("import-refused")


def test_job_page_polls_until_the_job_finishes(page, live_server, sign_in, alice, project, screenshot):
    job = ImportJob.objects.create(
        project=project, archive="/nowhere.zip", original_name="big-tree.tar.gz", created_by=alice,
        status=ImportJobStatus.RUNNING, started_at=timezone.now(), imported=1200, skipped=40,
    )  # fmt: skip
    polls: list[str] = []
    job_path = reverse("dashboard:import_job", args=[job.pk])
    page.on("request", lambda request: polls.append(request.url) if request.url.endswith(job_path) else None)
    sign_in(alice)
    page.goto(f"{live_server.url}{job_path}")
    expect(page.get_by_role("heading", name="Importing…")).to_be_visible()
    expect(page.get_by_role("progressbar")).to_be_visible()
    screenshot("import-job-running")

    ImportJob.objects.filter(pk=job.pk).update(imported=2500)
    expect(page.locator(".import-counts")).to_contain_text("2500")  # the next poll brought the new count
    ImportJob.objects.filter(pk=job.pk).update(
        status=ImportJobStatus.DONE,
        imported=3000,
        error_count=1,
        report={
            "imported": 3000,
            "skipped": 40,
            "errors": [{"path": "tree/run-7/step_12.json", "error": "truncated JSON"}],
            "sessions": [],
        },
    )
    expect(page.get_by_role("heading", name="Import finished")).to_be_visible()
    expect(page.get_by_role("cell", name="truncated JSON")).to_be_visible()
    screenshot("import-job-errors")
    finished_at = len(polls)
    page.wait_for_timeout(2500)
    assert len(polls) == finished_at  # polling stopped


def test_a_bomb_is_refused_on_the_form_and_a_forged_zip_fails_its_job_with_a_sentence(
    page, live_server, sign_in, alice, tmp_path, screenshot
):
    bomb = make_zip(tmp_path / "bomb.zip", {f"f{n}.json": bytes(1024 * 1024) for n in range(200)})
    sign_in(alice)
    page.goto(f"{live_server.url}{reverse('dashboard:import_upload')}")
    page.get_by_label("Archive").set_input_files(bomb)
    page.get_by_role("button", name="Upload and import").click()
    expect(page.get_by_role("alert")).to_contain_text(
        "× its compressed size, more than the limit of 100×: files that swell that much are built to fill up disks"
    )
    screenshot("import-refused-bomb")
    assert not ImportJob.objects.exists()

    forged = patch_zip(ares_zip(tmp_path), size=lambda n: n // 2)  # the index passes; the data holds more
    page.get_by_label("Archive").set_input_files(forged)
    page.get_by_role("button", name="Upload and import").click()
    expect(page.get_by_role("heading", name="Import failed")).to_be_visible()
    expect(page.get_by_role("alert")).to_have_text(
        "Nothing from this archive was imported. Refused: the zip archive is damaged or truncated and cannot be read."
    )
    screenshot("import-failed-forged")
    assert ImportJob.objects.get().status == ImportJobStatus.FAILED
