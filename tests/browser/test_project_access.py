"""A member of some projects browses the console: only their projects show, and only their roles' buttons."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps
from django.core.management import call_command
from playwright.sync_api import expect

from checkpoints.models import AgentSession, DriftAlert, JobRun, Project

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def member(alice, grant):
    """alice operates `research-agents` (and the empty `acme`), views `support-bots`, and is in no other project."""
    # transactional tests flush the rows data migrations installed: put the schedules back
    importlib.import_module("checkpoints.migrations.0008_default_retention_and_schedules").install(apps, None)
    call_command("seed_demo", "--small", verbosity=0)
    grant(alice, Project.objects.get(slug="research-agents"), "operator")
    grant(alice, Project.objects.get(slug="support-bots"), "viewer")
    return alice


def test_a_member_sees_only_their_projects_and_acts_only_where_they_operate(
    looks, page, live_server, sign_in, member, screenshot
):
    hidden = set(Project.objects.values_list("slug", flat=True)) - {"acme", "research-agents", "support-bots"}
    assert hidden  # the demo has projects alice is not in
    sign_in(member, everywhere=False)
    screenshot("access-overview")

    page.goto(f"{live_server.url}/sessions/")
    options = page.locator("#id_project option").all_inner_texts()
    assert options == ["All projects", "acme", "research-agents", "support-bots"]
    projects = set(page.locator(".session-table .project").all_inner_texts())
    assert projects <= {"research-agents", "support-bots"} and projects
    looks("access-sessions")

    page.goto(f"{live_server.url}/alerts/?state=")
    for alert in DriftAlert.objects.select_related("session__project").exclude(state="resolved"):
        row = page.locator(f"#alert-{alert.pk}")
        slug = alert.session.project.slug
        if slug in hidden:
            expect(row).to_have_count(0)
        else:
            expect(row.get_by_role("button", name="Acknowledge")).to_have_count(
                1 if slug == "research-agents" and alert.state == "open" else 0
            )
    looks("access-alerts")

    viewed = AgentSession.objects.filter(project__slug="support-bots").first()
    page.goto(f"{live_server.url}/sessions/{viewed.pk}/")
    expect(page.get_by_role("heading", level=1)).to_be_visible()
    expect(page.get_by_role("link", name="Restore", exact=False)).to_have_count(0)
    screenshot("access-viewed-session")

    page.goto(f"{live_server.url}/imports/")
    expect(page.locator("#id_project option")).to_have_text(["Choose a project", "acme", "research-agents"])
    screenshot("access-import")

    page.goto(f"{live_server.url}/jobs/")
    expect(page.get_by_text("only staff see them")).to_be_visible()
    expect(page.get_by_role("button", name="Run now")).to_have_count(0)
    screenshot("access-jobs")

    JobRun.objects.create(job="retention", status="succeeded", result={"deleted": 7, "kept": 90})
    page.goto(f"{live_server.url}/retention/")
    expect(page.get_by_text("the dry run above shows your projects' share")).to_be_visible()
    screenshot("access-retention")

    hidden_session = AgentSession.objects.filter(project__slug__in=hidden).first()
    response = page.goto(f"{live_server.url}/sessions/{hidden_session.pk}/")
    assert response.status == 404
    screenshot("access-404")


def test_an_admin_gives_someone_a_role_in_a_project(page, live_server, admin_user, bob, other_project, screenshot):
    page.goto(f"{live_server.url}/admin/login/")
    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill("password")
    page.get_by_role("button", name="Log in").click()
    page.goto(f"{live_server.url}/admin/checkpoints/project/{other_project.pk}/change/")
    screenshot("access-admin-project")
    inline = page.locator("#memberships-group")
    inline.locator("select[name='memberships-0-role']").select_option("operator")
    inline.locator(".select2-container").first.click()  # the user field searches as one types
    page.locator(".select2-search__field").fill("bob")
    page.locator(".select2-results__option", has_text="bob").click()
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator(".messagelist")).to_contain_text("was changed successfully")
    assert bob.project_memberships.filter(project=other_project, role="operator").exists()
