"""API tokens in the console: every member of a project sees its tokens; its operators create one (shown once,
with the code that uses it) and revoke one after a confirmation page. Audited; other projects' tokens stay hidden."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkpoints.models import SCOPE_GRANTED_BY, ApiToken, AuditEvent, Scope
from checkpoints.services import Actor, InvalidInput, create_api_token
from tests.conftest import ApiClient
from tests.helpers import select, text

pytestmark = pytest.mark.django_db
PAGE = "/projects/acme/tokens/"


def form(name: str = "agent-7", access: str = "write", expiry: str = "90", expires_on: str = "") -> dict[str, str]:
    return {"name": name, "access": access, "expiry": expiry, "expires_on": expires_on}


def secret_in(response) -> str:
    return text(select(response, "#new-token")[0])


def test_the_routes_are_named_and_linked_from_project_settings_and_the_menu(client, alice, project):
    assert reverse("dashboard:tokens", args=["acme"]) == PAGE
    client.force_login(alice)
    settings_links = [a.get("href") for a in select(client.get("/projects/acme/settings/"), "a")]
    menu = [a.get("href") for a in select(client.get("/"), "nav.mainnav a")]
    assert PAGE in settings_links and "/tokens/" in menu
    assert client.get("/tokens/")["Location"] == PAGE  # one project: straight to it


def test_signed_out_visitors_are_sent_to_sign_in(client, project):
    for response in (client.get(PAGE), client.post(PAGE, form())):
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    assert not ApiToken.objects.exists()


def test_operator_creates_a_token_shown_once_with_the_code_that_uses_it(client, alice, project):
    client.force_login(alice)

    response = client.post(PAGE, form("agent-7"))

    assert response.status_code == 200
    secret = secret_in(response)
    token = ApiToken.objects.get()
    assert secret.startswith(f"cpk_{token.prefix}_") and token.scopes == ["read", "write"]
    assert token.expires_at is not None and timedelta(days=89) < token.expires_at - token.created_at <= timedelta(90)
    client_code = text(select(response, "#snippet-client")[0])
    saver_code = text(select(response, "#snippet-saver")[0])
    assert f'CheckpointClient("http://testserver", "{secret}")' in client_code and "project acme" in client_code
    assert f'ConsoleSaver("http://testserver", "{secret}")' in saver_code
    assert [b.get("data-copy") for b in select(response, "button[data-copy]")] == [
        "new-token", "snippet-client", "snippet-saver",
    ]  # fmt: skip
    assert "no-store" in response["Cache-Control"]
    assert secret not in str(dict(response.headers))  # not in a Location, a cookie or any header

    again = client.get(PAGE).content.decode()
    assert secret not in again and not select(again, "#new-token")
    assert secret not in str(dict(client.session))  # nothing kept for a later page
    row = select(again, f"#token-{token.pk}")[0]
    assert "agent-7" in text(row) and f"cpk_{token.prefix}_…" in text(row) and "read and write" in text(row)


def test_the_created_token_works_against_the_api_with_the_chosen_scope(client, alice, project):
    client.force_login(alice)
    reader = ApiClient(secret_in(client.post(PAGE, form("dashboard", access="read"))))
    writer = ApiClient(secret_in(client.post(PAGE, form("agent", access="write"))))

    assert writer.post("/sessions", {"external_id": "run-1", "agent": "a"}).status_code == 201
    assert reader.get("/sessions/run-1").status_code == 200
    refused = reader.post("/sessions", {"external_id": "run-2", "agent": "a"})
    assert refused.status_code == 403 and "lacks the 'write' scope" in refused.json()["detail"]
    assert ApiToken.objects.get(name="dashboard").scopes == ["read"]
    listed = text(select(client.get(PAGE), f"#token-{ApiToken.objects.get(name='dashboard').pk}")[0])
    assert "read only" in listed and "never" not in listed.split("Last used")[-1][:20]  # used: a time, not never


@pytest.mark.parametrize(("expiry", "days"), [("never", None), ("30", 30), ("365", 365)])
def test_expiry_choices_set_the_expiry(client, alice, project, expiry, days):
    client.force_login(alice)
    client.post(PAGE, form(expiry=expiry))
    token = ApiToken.objects.get()
    if days is None:
        assert token.expires_at is None
    else:
        assert abs(token.expires_at - token.created_at - timedelta(days=days)) < timedelta(seconds=1)


def test_an_expiry_date_ends_the_token_at_midnight_utc_that_day(client, alice, project):
    client.force_login(alice)
    day = datetime.now(UTC).date() + timedelta(days=10)
    client.post(PAGE, form(expiry="date", expires_on=day.isoformat()))
    assert ApiToken.objects.get().expires_at == datetime(day.year, day.month, day.day, tzinfo=UTC)


@pytest.mark.parametrize("days", [-1, 0, None])  # yesterday, today (its 00:00 UTC has passed), no date
def test_an_expiry_date_in_the_past_or_missing_is_a_form_error_and_no_token(client, alice, project, days):
    client.force_login(alice)
    expires_on = "" if days is None else (datetime.now(UTC).date() + timedelta(days=days)).isoformat()
    response = client.post(PAGE, form(expiry="date", expires_on=expires_on))
    assert response.status_code == 200 and not select(response, "#new-token")
    errors = text(select(response, "#token-form .errorlist")[0])
    assert "not in the future" in errors or "Choose the date" in errors
    assert not ApiToken.objects.exists() and not AuditEvent.objects.filter(action="token_created").exists()


def test_the_service_refuses_an_expiry_in_the_past(project):
    with pytest.raises(InvalidInput, match="not in the future"):
        create_api_token(project, name="x", expires_at=datetime(2020, 1, 1, tzinfo=UTC))
    with pytest.raises(InvalidInput, match="not in the future"):
        create_api_token(project, name="x", expires_in=timedelta(0))
    assert not ApiToken.objects.exists()


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("a" * 201, "at most 200 characters"),
        ("", "This field is required"),
        ("   ", "This field is required"),
        ("line\nbreak", "control characters"),
        ("nul\x00", "Null characters are not allowed"),
    ],
)
def test_a_bad_name_is_a_form_error_and_nothing_is_created(client, alice, project, name, error):
    client.force_login(alice)
    response = client.post(PAGE, form(name))
    assert response.status_code == 200 and error in text(select(response, "#token-form .errorlist")[0])
    assert not ApiToken.objects.exists() and not AuditEvent.objects.exists()


@pytest.mark.parametrize("bad", [{"access": "admin"}, {"expiry": "forever"}, {"expiry": "date", "expires_on": "x"}])
def test_a_forged_choice_is_a_form_error(client, alice, project, bad):
    client.force_login(alice)
    response = client.post(PAGE, {**form(), **bad})
    assert response.status_code == 200 and select(response, "#token-form .errorlist")
    assert not ApiToken.objects.exists()


def test_a_hostile_name_is_escaped_everywhere_it_is_shown(client, alice, project):
    client.force_login(alice)
    name = '<script>alert(1)</script><img src=x onerror="alert(2)">'
    created = client.post(PAGE, form(name)).content.decode()
    token = ApiToken.objects.get()
    pages = [created, client.get(PAGE).content.decode(), client.get(f"{PAGE}{token.pk}/revoke/").content.decode()]
    for html in pages:
        assert "<script>alert" not in html and "<img src=x" not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


@given(name=st.text(min_size=1, max_size=200).filter(lambda s: s.strip()))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_name_is_created_as_typed_or_refused_with_a_form_error(client, alice, project, name):
    client.force_login(alice)
    before = ApiToken.objects.count()
    response = client.post(PAGE, form(name))
    assert response.status_code == 200
    if select(response, "#new-token"):
        assert ApiToken.objects.order_by("-pk").first().name == name.strip()
    else:
        assert select(response, "#token-form .errorlist") and ApiToken.objects.count() == before


def test_creating_and_revoking_are_audited_with_the_operator(client, alice, project):
    client.force_login(alice)
    client.post(PAGE, form("agent-7", access="read", expiry="never"))
    token = ApiToken.objects.get()
    client.post(f"{PAGE}{token.pk}/revoke/")
    created, revoked = AuditEvent.objects.order_by("pk")
    assert (created.actor, created.action, created.project, created.target) == (
        "alice", "token_created", project, str(token),
    )  # fmt: skip
    assert created.details == {"scopes": ["read"], "expires_at": None}
    assert (revoked.actor, revoked.action, revoked.project) == ("alice", "revoke_token", project)


def test_revoking_asks_first_then_the_token_gets_401(client, alice, project):
    client.force_login(alice)
    secret = secret_in(client.post(PAGE, form("agent-7")))
    token = ApiToken.objects.get()
    api = ApiClient(secret)
    assert api.post("/sessions", {"external_id": "run-1", "agent": "a"}).status_code == 201
    url = f"{PAGE}{token.pk}/revoke/"

    preview = client.get(url)
    assert preview.status_code == 200 and "Revoke the token agent-7?" in text(select(preview, "h1")[0])
    token.refresh_from_db()
    assert token.revoked_at is None and api.get("/sessions/run-1").status_code == 200  # asking changed nothing

    done = client.post(url)
    assert done.status_code == 302 and done["Location"] == PAGE
    assert api.get("/sessions/run-1").status_code == 401
    page = client.get(PAGE)
    assert "revoked" in text(select(page, f"#token-{token.pk}")[0])
    assert not select(page, f"#token-{token.pk} a.btn-danger")
    assert client.post(url).status_code == 302 and AuditEvent.objects.filter(action="revoke_token").count() == 1


def test_viewers_see_the_list_but_cannot_create_or_revoke(client, bob, project):
    token, _ = create_api_token(project, name="agent-7")
    client.force_login(bob)
    page = client.get(PAGE)
    assert page.status_code == 200 and "agent-7" in text(select(page, f"#token-{token.pk}")[0])
    assert not select(page, "#token-form") and not select(page, "a[href*=revoke]")
    assert client.post(PAGE, form()).status_code == 403
    assert client.get(f"{PAGE}{token.pk}/revoke/").status_code == 403
    assert client.post(f"{PAGE}{token.pk}/revoke/").status_code == 403
    token.refresh_from_db()
    assert ApiToken.objects.count() == 1 and token.revoked_at is None


def test_other_projects_tokens_are_never_visible(client, alice, project, other_project, nobody):
    theirs, _ = create_api_token(other_project, name="globex-secret-agent")
    client.force_login(alice)
    assert client.get("/projects/globex/tokens/").status_code == 404
    assert client.post("/projects/globex/tokens/", form()).status_code == 404
    assert client.get(f"/projects/globex/tokens/{theirs.pk}/revoke/").status_code == 404
    assert client.post(f"{PAGE}{theirs.pk}/revoke/").status_code == 404  # their token under our project's URL
    assert "globex-secret-agent" not in client.get(PAGE).content.decode()
    client.force_login(nobody)
    assert client.get(PAGE).status_code == 403 and client.get("/tokens/").status_code == 403
    theirs.refresh_from_db()
    assert theirs.revoked_at is None and ApiToken.objects.count() == 1


def test_a_post_without_the_csrf_token_is_refused(alice, project):
    token, _ = create_api_token(project, name="agent-7")
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    assert client.post(PAGE, form()).status_code == 403
    assert client.post(f"{PAGE}{token.pk}/revoke/").status_code == 403
    token.refresh_from_db()
    assert ApiToken.objects.count() == 1 and token.revoked_at is None


def test_other_methods_are_405(client, alice, project):
    client.force_login(alice)
    assert client.put(PAGE).status_code == 405 and client.delete(PAGE).status_code == 405
    assert client.post("/tokens/").status_code == 405


def test_the_admins_token_list_links_to_the_console_to_add_one(admin_client, project):
    page = admin_client.get(reverse("admin:checkpoints_apitoken_changelist"))
    assert "/tokens/" in [a.get("href") for a in select(page, ".object-tools a")]
    assert admin_client.get(reverse("admin:checkpoints_apitoken_add")).status_code == 403


# ---- scopes beyond read and write (the Scope registry) ----------------------------------------------------------


def test_every_scope_of_the_registry_says_who_may_grant_it_and_the_page_offers_the_rest_as_boxes(
    client, alice, project
):
    assert set(SCOPE_GRANTED_BY) == set(Scope.values)
    client.force_login(alice)
    boxes = [box.get("value") for box in select(client.get(PAGE), "#token-form input[name=also]")]
    assert boxes == ["recover"]  # alice operates acme: she may restore (recover), not answer (an approver's)


def test_an_operator_grants_recover_and_the_token_runs_a_fleet_recovery(client, alice, project):
    client.force_login(alice)
    response = client.post(PAGE, {**form("on-call"), "also": ["recover"]})
    token = ApiToken.objects.get()
    assert token.scopes == ["read", "write", "recover"]
    assert "read and write; recover" in text(select(client.get(PAGE), f"#token-{token.pk}")[0])
    api = ApiClient(secret_in(response))
    ran = api.post("/recoveries", {"action": "restore", "target": {"rule": "last_good"}, "reason": "outage"})
    assert ran.status_code == 422  # past the scope check: no session selected in an empty project
    assert AuditEvent.objects.get(action="token_created").details["scopes"] == ["read", "write", "recover"]


def test_an_operator_cannot_grant_purge_which_no_role_holds(client, alice, project):
    client.force_login(alice)
    response = client.post(PAGE, {**form("scrubber"), "also": ["purge"]})
    assert response.status_code == 200 and not select(response, "#new-token")
    assert not ApiToken.objects.exists()


def test_an_operator_who_is_not_an_approver_cannot_grant_answer(client, alice, project):
    client.force_login(alice)
    response = client.post(PAGE, {**form("sneaky"), "also": ["answer"]})
    assert response.status_code == 200 and not select(response, "#new-token")
    assert "does not let you give a token answer" in text(select(response, "#token-form")[0])
    assert not ApiToken.objects.exists() and not AuditEvent.objects.exists()


def test_an_operator_and_approver_grants_answer(client, alice, project, grant):
    grant(alice, project, "approver")
    client.force_login(alice)
    assert [b.get("value") for b in select(client.get(PAGE), "#token-form input[name=also]")] == ["answer", "recover"]
    client.post(PAGE, {**form("reviewer-bot", access="read"), "also": ["answer"]})
    assert ApiToken.objects.get().scopes == ["read", "answer"]


@pytest.mark.parametrize("also", [["recover"], ["answer"], ["purge"], ["recover", "admin"]])
def test_a_viewer_or_an_approver_cannot_create_a_token_with_any_scope(client, bob, carol, project, also):
    for user in (bob, carol):
        client.force_login(user)
        assert client.post(PAGE, {**form("x", access="read"), "also": also}).status_code == 403
    assert not ApiToken.objects.exists()


def test_a_forged_scope_is_a_form_error_and_no_token(client, alice, project):
    client.force_login(alice)
    response = client.post(PAGE, {**form(), "also": ["admin"]})
    assert response.status_code == 200 and select(response, "#token-form .errorlist")
    assert not ApiToken.objects.exists()


def test_the_service_refuses_a_person_a_scope_their_role_does_not_allow(alice, bob, project):
    with pytest.raises(InvalidInput, match="does not let you give a token answer"):
        create_api_token(project, name="x", scopes=["read", "answer"], actor=Actor.for_user(alice))
    with pytest.raises(InvalidInput, match="does not let you give a token write, recover"):
        create_api_token(project, name="x", scopes=["read", "write", "recover"], actor=Actor.for_user(bob))
    assert not ApiToken.objects.exists()
    create_api_token(project, name="cli", scopes=["read", "answer", "recover"])  # the command: no person, no role
    assert ApiToken.objects.get().scopes == ["read", "answer", "recover"]
