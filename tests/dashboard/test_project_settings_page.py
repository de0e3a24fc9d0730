"""Project settings: operators of a project edit the types its LangGraph values may name."""

from __future__ import annotations

import pytest
from django.urls import reverse
from hypothesis import given, settings
from hypothesis import strategies as st

from checkpoints.models import DEFAULT_TYPE_ALLOWLIST, AuditEvent, Project
from checkpoints.services import InvalidInput
from checkpoints.services.typeguard import parse_allowlist
from tests.helpers import select, text

pytestmark = pytest.mark.django_db
PAGE = "/projects/acme/settings/"


def form(*entries: str) -> dict[str, str]:
    return {"type_allowlist": "\n".join(entries)}


def test_the_route_is_named_and_the_notifications_pages_link_to_it(client, alice, project, grant, other_project):
    assert reverse("dashboard:project_settings", args=["acme"]) == PAGE
    client.force_login(alice)
    links = [a.get("href") for a in select(client.get("/notifications/acme/").content.decode(), "a")]
    grant(alice, other_project, "operator")
    listed = [a.get("href") for a in select(client.get("/notifications/").content.decode(), "a")]
    assert PAGE in links and PAGE in listed


def test_signed_out_visitors_are_sent_to_sign_in(client, project):
    response = client.get(PAGE)
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_operator_sees_the_default_list_and_saves_a_new_one_audited(client, alice, project):
    client.force_login(alice)
    shown = select(client.get(PAGE).content.decode(), "textarea[name=type_allowlist]")[0]
    assert text(shown).split() == list(DEFAULT_TYPE_ALLOWLIST)

    response = client.post(PAGE, form(*DEFAULT_TYPE_ALLOWLIST[1:], " myapp.state.Plan ", "", "myapp.tools."))

    assert response.status_code == 302 and response["Location"] == PAGE
    project.refresh_from_db()
    assert project.type_allowlist == [*DEFAULT_TYPE_ALLOWLIST[1:], "myapp.state.Plan", "myapp.tools."]
    event = AuditEvent.objects.get(action="set_type_allowlist")
    assert (event.actor, event.project, event.details) == (
        "alice",
        project,
        {"added": ["myapp.state.Plan", "myapp.tools."], "removed": [DEFAULT_TYPE_ALLOWLIST[0]]},
    )
    assert "Settings of acme saved." in text(select(client.get(PAGE).content.decode(), "#messages")[0])


@pytest.mark.parametrize(
    "bad", ["os.system; rm -rf /", "my app.Plan", "..", ".startswithdot", "a" * 301, "myapp.*", "1abc.Def"]
)
def test_a_bad_line_is_a_form_error_naming_it_and_nothing_changes(client, alice, project, bad):
    client.force_login(alice)

    response = client.post(PAGE, form("myapp.Plan", bad))

    assert response.status_code == 200
    assert "line 2" in text(select(response.content.decode(), ".errorlist")[0])
    project.refresh_from_db()
    assert project.type_allowlist == list(DEFAULT_TYPE_ALLOWLIST)
    assert not AuditEvent.objects.filter(action="set_type_allowlist").exists()


def test_viewers_get_403_and_other_projects_operators_get_404(client, alice, bob, project, other_project):
    client.force_login(bob)
    assert client.get(PAGE).status_code == 403
    assert client.post(PAGE, form("os.system")).status_code == 403
    client.force_login(alice)
    assert client.get("/projects/globex/settings/").status_code == 404
    assert client.post("/projects/globex/settings/", form("os.system")).status_code == 404
    assert Project.objects.get(slug="globex").type_allowlist == list(DEFAULT_TYPE_ALLOWLIST)


def test_other_methods_are_405(client, alice, project):
    client.force_login(alice)
    assert client.put(PAGE).status_code == 405
    assert client.delete(PAGE).status_code == 405


@given(st.lists(st.text(max_size=40), max_size=8))
@settings(max_examples=200)
def test_parsing_keeps_only_dotted_names_and_says_which_line_is_not_one(lines):
    try:
        entries = parse_allowlist("\n".join(lines))
    except InvalidInput as exc:
        assert "line " in str(exc)
        return
    for entry in entries:
        assert entry.strip() == entry and " " not in entry and ".." not in entry and not entry.startswith(".")
        assert all(part.isidentifier() for part in entry.rstrip(".").split("."))


def test_the_admin_saves_the_list_through_the_audited_service_and_refuses_a_bad_one(admin_client, project):
    url = reverse("admin:checkpoints_project_change", args=[project.pk])
    page = admin_client.get(url)
    assert page.status_code == 200
    base = {"slug": "acme", "name": "", "created_at_0": "2026-11-27", "created_at_1": "10:00:00"}
    inline = {
        "memberships-TOTAL_FORMS": "0",
        "memberships-INITIAL_FORMS": "0",
        "memberships-MIN_NUM_FORMS": "0",
        "memberships-MAX_NUM_FORMS": "1000",
    }

    refused = admin_client.post(url, {**base, **inline, "type_allowlist": '["os.system; x"]'})
    saved = admin_client.post(url, {**base, **inline, "type_allowlist": '["uuid.UUID", "myapp."]'})

    assert refused.status_code == 200 and "is not a dotted name" in refused.content.decode()
    assert saved.status_code == 302, saved.content.decode()[:3000]
    project.refresh_from_db()
    assert project.type_allowlist == ["uuid.UUID", "myapp."]
    assert AuditEvent.objects.get(action="set_type_allowlist").details["added"] == ["myapp."]
