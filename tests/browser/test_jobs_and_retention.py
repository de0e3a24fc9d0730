from __future__ import annotations

import importlib
import re
from datetime import timedelta
from io import StringIO

import pytest
from django.apps import apps
from django.core.management import CommandError, call_command
from django.utils import timezone
from playwright.sync_api import expect

from checkpoints.models import AgentSession, Checkpoint, JobRun, RetentionPolicy

pytestmark = pytest.mark.django_db(transaction=True)


def test_operator_previews_retention_and_runs_a_job(page, live_server, sign_in, staff_operator, screenshot):
    # transactional tests flush the rows data migrations installed: put the defaults back
    importlib.import_module("checkpoints.migrations.0008_default_retention_and_schedules").install(apps, None)
    call_command("seed_demo", "--small")
    sign_in(staff_operator)
    page.goto(f"{live_server.url}/retention/")
    expect(page.get_by_role("heading", name="Retention", exact=True)).to_be_visible()
    screenshot("retention", guide=True)
    page.goto(f"{live_server.url}/jobs/")
    expect(page.get_by_role("heading", name="Jobs")).to_be_visible()
    row = page.locator("tr", has_text="Detect drift")
    row.get_by_role("button", name="Run now").click()
    expect(page.get_by_role("status").first).to_be_visible()
    assert JobRun.objects.filter(job="drift_detection", triggered_by="console:olga").exists()
    screenshot("jobs", guide=True)


def test_retention_run_now_asks_first_with_the_counts_by_kind(page, live_server, sign_in, staff_operator, widths):
    importlib.import_module("checkpoints.migrations.0008_default_retention_and_schedules").install(apps, None)
    call_command("seed_demo", "--small")
    RetentionPolicy.objects.filter(project=None, kind="step").update(keep_last=5)  # tighter than the demo's
    before = Checkpoint.objects.count()
    sign_in(staff_operator)
    page.goto(f"{live_server.url}/retention/")
    page.get_by_role("button", name="Run now…").click()
    expect(page.get_by_role("heading", name="Run retention now?")).to_be_visible()
    expect(page.get_by_role("cell", name="step", exact=True)).to_be_visible()
    assert Checkpoint.objects.count() == before  # asking deletes nothing
    widths("retention-confirm")
    page.get_by_role("button", name=re.compile(r"^Delete \d+ checkpoints now$")).click()
    expect(page.get_by_role("status").filter(has_text="Retention run queued")).to_be_visible()
    assert Checkpoint.objects.count() < before
    assert JobRun.objects.filter(job="retention", triggered_by="console:olga").exists()


def test_a_session_that_breaks_jobs_is_named_and_the_jobs_go_on(page, live_server, sign_in, alice, looks, poison):
    importlib.import_module("checkpoints.migrations.0008_default_retention_and_schedules").install(apps, None)
    call_command("seed_demo", "--small")
    bad = AgentSession.objects.filter(status="active").order_by("pk").first()
    poison(bad)
    for command in (["detect_drift"], ["apply_retention"], ["apply_retention", "--dry-run"]):
        with pytest.raises(CommandError):  # the dry run is what the Retention page shows
            call_command(*command, stdout=StringIO(), stderr=StringIO())
    silent = timezone.now() - timedelta(minutes=10)
    JobRun.objects.create(job="gc", started_at=silent, heartbeat_at=silent, worker="worker-7:4242:a1b2c3")
    sign_in(alice)

    page.goto(f"{live_server.url}/jobs/")
    row = page.locator("tr", has_text="Detect drift")
    expect(row.get_by_text("succeeded with errors")).to_be_visible()
    expect(row.get_by_role("link", name=str(bad))).to_be_visible()
    expect(
        page.locator("tr", has_text="Collect unreferenced chunks").get_by_text("not responding since")
    ).to_be_visible()
    looks("jobs-with-errors")

    page.goto(f"{live_server.url}/retention/")
    expect(page.get_by_text("1 session failed and was left out")).to_be_visible()
    looks("retention-with-errors")

    page.goto(f"{live_server.url}/audit/?actor=%40system")
    expect(page.get_by_role("cell", name="system:drift").first).to_be_visible()
    looks("audit-system-events")
