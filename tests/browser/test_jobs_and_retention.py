from __future__ import annotations

import importlib

import pytest
from django.apps import apps
from django.core.management import call_command
from playwright.sync_api import expect

from checkpoints.models import JobRun

pytestmark = pytest.mark.django_db(transaction=True)


def test_operator_previews_retention_and_runs_a_job(page, live_server, sign_in, staff_operator, screenshot):
    # transactional tests flush the rows data migrations installed: put the defaults back
    importlib.import_module("checkpoints.migrations.0008_default_retention_and_schedules").install(apps, None)
    call_command("seed_demo", "--small")
    sign_in(staff_operator)
    page.goto(f"{live_server.url}/retention/")
    expect(page.get_by_role("heading", name="Retention", exact=True)).to_be_visible()
    screenshot("retention")
    page.goto(f"{live_server.url}/jobs/")
    expect(page.get_by_role("heading", name="Jobs")).to_be_visible()
    row = page.locator("tr", has_text="Detect drift")
    row.get_by_role("button", name="Run now").click()
    expect(page.get_by_role("status").first).to_be_visible()
    assert JobRun.objects.filter(job="drift_detection", triggered_by="console:olga").exists()
    screenshot("jobs")
