from __future__ import annotations

from django.contrib.auth import get_user_model

from checkpoints.models import AgentSession, ApiToken, AuditEvent, Project
from checkpoints.services import authenticate_token
from tests.helpers import command, select


def test_create_api_token_prints_a_working_token_once_and_stores_its_hash(db):
    out, err = command("create_api_token", "--project", "new-proj", "--name", "ci-agent")
    secret = out.strip()
    token = ApiToken.objects.get()
    assert Project.objects.filter(slug="new-proj").exists()
    assert authenticate_token(secret) == token
    assert token.scopes == ["read", "write"]
    assert secret not in token.token_hash and "shown once" in err
    assert AuditEvent.objects.filter(action="token_created").exists()


def test_create_api_token_read_only(db):
    out, _ = command("create_api_token", "--project", "p", "--name", "dash", "--read-only")
    assert authenticate_token(out.strip()).scopes == ["read"]


def test_bootstrap_creates_an_admin_once_and_prints_the_login(db):
    out, _ = command("bootstrap", "--no-demo", "--port", "8123")
    assert "http://127.0.0.1:8123/" in out
    password = out.split("user admin, password ")[1].split()[0]
    admin = get_user_model().objects.get(username="admin")
    assert admin.is_superuser and admin.check_password(password)
    again, _ = command("bootstrap", "--no-demo")
    assert password not in again
    assert get_user_model().objects.count() == 1


def test_the_printed_login_sees_every_demo_project(client, demo):
    out, _ = command("bootstrap", "--no-demo")
    password = out.split("user admin, password ")[1].split()[0]
    assert "sees every project" in out and "members" in out
    signed_in = client.post("/accounts/login/", {"username": "admin", "password": password})
    assert signed_in.status_code == 302
    offered = {option.get("value") for option in select(client.get("/sessions/?sort=created"), "#id_project option")}
    assert set(Project.objects.values_list("slug", flat=True)) <= offered
    assert client.get("/").context["counts"]["total"] == AgentSession.objects.count()
