"""Every console and admin page runs under the Content-Security-Policy without a violation or a console error.
The console's pages are walked once, by the accessibility test (tests/browser/test_accessibility.py), which checks
the policy and the console's errors on each page as it runs axe there; this module walks the admin's pages, the API
docs and the parts htmx loads.

Chromium enforces the policy the server sends; a `securitypolicyviolation` listener (conftest's
`csp_violations`, on for every browser test) and the console both report what it blocked.
"""

from __future__ import annotations

import re

import pytest
from django.utils import timezone
from django_celery_beat.models import CrontabSchedule, PeriodicTask
from playwright.sync_api import expect

from checkpoints.models import (
    AgentSession,
    Checkpoint,
    CheckpointKind,
    ImportJob,
    ImportJobStatus,
    Phase,
    Recovery,
)
from checkpoints.services import create_api_token

pytestmark = pytest.mark.django_db(transaction=True)


def console_pages(live_server_url: str) -> list[tuple[str, str]]:
    restore = Checkpoint.objects.filter(kind=CheckpointKind.RESTORE).select_related("session").first()
    assert restore is not None, "the demo has a restore (a timeline with a side branch)"
    session = restore.session
    checkpoint = Checkpoint.objects.filter(session=session).order_by("-seq").first()
    first = Checkpoint.objects.filter(session=session).order_by("seq").first()
    phase = Phase.objects.select_related("session").first()
    job = ImportJob.objects.create(
        project=session.project, archive="/nowhere.zip", original_name="runs.zip", status=ImportJobStatus.FAILED,
        started_at=timezone.now(), finished_at=timezone.now(), skipped=1, error_count=1,
        report={"errors": [{"path": "runs/bad.json", "error": "not JSON"}]},
    )  # fmt: skip
    token, _ = create_api_token(session.project, name="csp-check", read_only=True)
    recovery = Recovery.objects.create(
        project=session.project, action="restore", rule="last_good", reason="csp check", actor="root",
        state="finished", total=0,
    )  # fmt: skip
    return [
        ("overview", "/"),
        ("sessions", "/sessions/"),
        ("timeline", f"/sessions/{session.pk}/"),
        ("checkpoint", f"/checkpoints/{checkpoint.pk}/"),
        ("compare", f"/compare/?a={first.pk}&b={checkpoint.pk}"),
        ("alerts", "/alerts/"),
        ("audit", "/audit/"),
        ("retention", "/retention/"),
        ("jobs", "/jobs/"),
        ("import-upload", "/imports/"),
        ("import-job", f"/imports/{job.pk}/"),
        ("phase", f"/sessions/{phase.session_id}/phases/{phase.number}/"),
        ("fork", f"/checkpoints/{checkpoint.pk}/fork/"),
        ("restore", f"/checkpoints/{first.pk}/restore/"),
        ("token-projects", "/tokens/"),
        ("tokens", f"/projects/{session.project.slug}/tokens/"),
        ("token-revoke", f"/projects/{session.project.slug}/tokens/{token.pk}/revoke/"),
        ("recovery-preview", "/recoveries/new/?all=on&state=unresolved"),
        ("recovery", f"/recoveries/{recovery.pk}/"),
        ("api-docs", "/api/v1/docs"),
    ]


def admin_pages() -> list[tuple[str, str]]:
    crontab = CrontabSchedule.objects.create(minute="*/5")
    CrontabSchedule.objects.create(minute="0", hour="3")
    task = PeriodicTask.objects.create(name="CSP check", task="checkpoints.tasks.detect_drift", crontab=crontab)
    checkpoint = Checkpoint.objects.order_by("-pk").first()
    return [
        ("admin-index", "/admin/"),
        ("admin-checkpoints", "/admin/checkpoints/checkpoint/"),
        ("admin-checkpoint", f"/admin/checkpoints/checkpoint/{checkpoint.pk}/change/"),
        ("admin-audit", "/admin/checkpoints/auditevent/"),
        ("admin-tokens", "/admin/checkpoints/apitoken/"),
        ("admin-periodic-task", f"/admin/django_celery_beat/periodictask/{task.pk}/change/"),
        ("admin-access-attempts", "/admin/axes/accessattempt/"),
    ]


def test_every_admin_page_and_the_api_docs_run_under_the_policy_without_errors(
    page, live_server, demo, root, console_errors, csp_violations, screenshot
):
    page.goto(f"{live_server.url}/accounts/login/")
    screenshot("csp-login")
    page.get_by_label("Username").fill("root")
    page.get_by_label("Password").fill("root-password-1")
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{live_server.url}/")

    api_docs = [(name, path) for name, path in console_pages(live_server.url) if name == "api-docs"]
    for name, path in api_docs + admin_pages():
        response = page.goto(f"{live_server.url}{path}")
        assert response is not None and response.status == 200, f"{path} answered {response and response.status}"
        assert "'self'" in response.headers["content-security-policy"]
        page.wait_for_load_state("networkidle")
        screenshot(f"csp-{name}")
        assert (csp_violations, console_errors) == ([], []), f"on {path}"

    # the periodic task form's crontab help, moved out of django-celery-beat's inline script
    page.goto(f"{live_server.url}/admin/django_celery_beat/periodictask/")
    page.get_by_role("link", name="CSP check").click()
    page.locator("#id_crontab").select_option(label="0 3 * * * (m/h/dM/MY/d) UTC")
    expect(page.locator(".field-crontab .help")).to_contain_text("Translation: At 03:00")
    expect(page.locator(".field-crontab_translation")).to_be_hidden()

    # the timeline's htmx parts: a lazy state subtree, and the restore dialog opened and closed by console.js
    session = AgentSession.objects.filter(checkpoints__kind=CheckpointKind.RESTORE).first()
    page.goto(f"{live_server.url}/sessions/{session.pk}/")
    expect(page.locator(".elbow.from").first).to_be_visible()
    target = Checkpoint.objects.filter(session=session).order_by("seq").first()
    page.evaluate(f"htmx.ajax('GET', '/checkpoints/{target.pk}/restore/', {{target: 'body', swap: 'beforeend'}})")
    expect(page.get_by_role("dialog")).to_be_visible()
    page.get_by_role("dialog").get_by_role("link", name="Close").click()
    expect(page.get_by_role("dialog")).to_have_count(0)
    assert (csp_violations, console_errors) == ([], [])


def test_the_lockout_page_runs_under_the_policy(page, live_server, settings, csp_violations, screenshot):
    settings.AXES_FAILURE_LIMIT = 1
    page.goto(f"{live_server.url}/accounts/login/")
    page.get_by_label("Username").fill("mallory")
    page.get_by_label("Password").fill("guess")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Sign-in locked")).to_be_visible()
    expect(page.get_by_role("alert")).to_contain_text(re.compile(r"is locked for 15 minutes, until \d\d:\d\d"))
    screenshot("csp-locked-out")
    assert csp_violations == []


def test_the_timeline_graph_draws_branch_elbows_between_lane_centres(page, live_server, demo, root, screenshot):
    """The elbows lost their inline style: each lane draws its own piece, and the pieces must meet."""
    session = AgentSession.objects.filter(checkpoints__kind=CheckpointKind.RESTORE).first()
    page.goto(f"{live_server.url}/accounts/login/")
    page.get_by_label("Username").fill("root")
    page.get_by_label("Password").fill("root-password-1")
    page.get_by_role("button", name="Sign in").click()
    page.goto(f"{live_server.url}/sessions/{session.pk}/")
    start = page.locator(".elbow.from").first
    row = start.locator("xpath=ancestor::tr")
    pieces = row.locator(".elbow")
    boxes = [pieces.nth(i).bounding_box() for i in range(pieces.count())]
    assert len(boxes) >= 2
    for left, right in zip(boxes, boxes[1:], strict=False):
        assert abs(left["x"] + left["width"] - right["x"]) < 1  # no gap, no overlap
    lanes = row.locator(".lane")
    first_lane = lanes.nth(0).bounding_box()
    assert abs(boxes[0]["x"] - (first_lane["x"] + first_lane["width"] / 2)) < 1  # starts at the lane's centre
    header = page.locator("th.graph").bounding_box()
    assert header["width"] >= lanes.count() * first_lane["width"]  # the column holds every lane
    screenshot("csp-timeline-elbows")
