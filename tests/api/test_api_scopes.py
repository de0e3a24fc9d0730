"""Token scopes: one registry (models.Scope), every API operation naming the scope it needs in the OpenAPI schema,
the server enforcing exactly that scope before it looks at the body, and the command and the admin that set them."""

from __future__ import annotations

import re

import pytest
from django.core.management import CommandError
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkpoints.audit import InvalidInput
from checkpoints.models import ApiToken, AuditEvent, Scope
from checkpoints.services import Actor, authenticate_token, create_api_token, forget_tokens, set_token_scopes
from tests.helpers import command, select

API = "/api/v1"


def operations(client) -> list[tuple[str, str, dict]]:
    """(method, path, details) of every operation the published schema lists."""
    paths = client.get(f"{API}/openapi.json").json()["paths"]
    return [(method.upper(), path, details) for path, methods in paths.items() for method, details in methods.items()]


def concrete(path: str) -> str:
    """The path with its parameters filled in: an id that exists or not, the scope check comes first."""
    return re.sub(r"{[^}]+}", "1", path)


def call(client, method: str, path: str, secret: str, body: bytes = b"{not json"):
    return client.generic(
        method, concrete(path), body, content_type="application/json", headers={"Authorization": f"Bearer {secret}"}
    )


def test_every_operation_in_the_schema_names_one_registered_scope_in_its_extension_and_its_security(client):
    listed = operations(client)
    assert len(listed) > 30
    for method, path, details in listed:
        scope = details.get("x-required-scope")
        assert scope in Scope.values, (method, path)
        assert details["security"] == [{"TokenAuth": [scope]}], (method, path)
    needs = {(method, path): details["x-required-scope"] for method, path, details in listed}
    assert needs[("POST", f"{API}/langgraph/checkpoints")] == "write"
    assert needs[("POST", f"{API}/langgraph/checkpoint/get")] == "read"
    assert needs[("GET", f"{API}/sessions/{{external_id}}")] == "read"
    assert needs[("POST", f"{API}/sessions")] == "write"
    assert needs[("POST", f"{API}/sessions/{{external_id}}/interrupts/{{interrupt_id}}/answer")] == "answer"
    assert needs[("POST", f"{API}/recoveries/preview")] == "read"
    assert needs[("POST", f"{API}/recoveries")] == "recover"
    assert needs[("GET", f"{API}/recoveries/{{recovery_id}}")] == "read"
    assert needs[("POST", f"{API}/recoveries/{{recovery_id}}/undo")] == "recover"


def test_the_server_enforces_exactly_the_scope_each_operation_names(client, project):
    """A token holding every scope but the one named gets 403 naming it; one holding only that scope gets past."""
    tokens: dict[str, tuple[str, str]] = {}
    for scope in Scope.values:
        others = [other for other in Scope.values if other != scope]
        tokens[scope] = (
            create_api_token(project, name=f"all but {scope}", scopes=others)[1],
            create_api_token(project, name=f"only {scope}", scopes=[scope])[1],
        )
    for method, path, details in operations(client):
        scope = details["x-required-scope"]
        without, only = tokens[scope]
        refused = call(client, method, path, without)
        assert (refused.status_code, refused.json()) == (403, {"detail": f"this token lacks the {scope!r} scope"}), (
            method,
            path,
        )
        assert call(client, method, path, only).status_code != 403, (method, path)


def test_a_read_token_sending_a_huge_or_invalid_body_to_a_write_endpoint_gets_403_not_413_or_422(
    client, read_only_api, make_session, settings
):
    make_session("run-1")
    settings.CHECKPOINT_MAX_BODY_BYTES = 1_000
    secret = read_only_api.token
    huge = call(client, "POST", f"{API}/sessions/run-1/checkpoints", secret, b'{"state": "' + b"x" * 50_000 + b'"}')
    assert huge.status_code == 403 and huge.json() == {"detail": "this token lacks the 'write' scope"}
    invalid = call(client, "POST", f"{API}/langgraph/checkpoints", secret, b"\xff{not json")
    assert invalid.status_code == 403
    too_large_for_a_writer = call(client, "POST", f"{API}/sessions/run-1/checkpoints", "cpk_unknown", b"x" * 5_000)
    assert too_large_for_a_writer.status_code == 413  # the limit still holds for anyone else


def test_a_scope_check_costs_no_second_token_lookup(api, make_session):
    make_session("run-1")
    for _ in range(2):  # the first use writes the token's last_used_at
        forget_tokens()  # else the second request would find it remembered and look nothing up
        with CaptureQueriesContext(connection) as queries:
            assert api.get("/sessions/run-1").status_code == 200
    assert [query["sql"] for query in queries if "checkpoints_apitoken" in query["sql"]] == [queries[0]["sql"]]


# ---- choosing scopes -----------------------------------------------------------------------------------------


def test_create_api_token_takes_repeatable_scopes_and_read_only_is_read(db):
    out, err = command("create_api_token", "--project", "p", "--name", "writer", "--scope", "write")
    assert authenticate_token(out.strip()).scopes == ["write"] and "(write" in err
    out, _ = command("create_api_token", "--project", "p", "--name", "both", "--scope", "write", "--scope", "read")
    assert authenticate_token(out.strip()).scopes == ["read", "write"]
    out, _ = command("create_api_token", "--project", "p", "--name", "viewer", "--read-only")
    assert authenticate_token(out.strip()).scopes == ["read"]


def test_an_unknown_scope_is_a_clear_error_naming_the_known_ones_and_creates_nothing(db):
    with pytest.raises(CommandError, match=r"--scope 'admin' is no scope; the scopes are: read \(read sessions"):
        command("create_api_token", "--project", "p", "--name", "x", "--scope", "admin")
    with pytest.raises(CommandError, match="not allowed with argument"):
        command("create_api_token", "--project", "p", "--name", "x", "--scope", "write", "--read-only")
    assert not ApiToken.objects.exists()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(wanted=st.lists(st.sampled_from(Scope.values) | st.text(max_size=8), max_size=4))
def test_set_token_scopes_keeps_only_registered_scopes_and_audits_each_change(project, wanted):
    token = create_api_token(project, name="t")[0]
    before = list(token.scopes)
    events = AuditEvent.objects.filter(action="token_scopes_changed").count()
    if set(wanted) <= set(Scope.values):
        changed = set_token_scopes(token, scopes=wanted, actor=Actor.system("test"))
        stored = ApiToken.objects.get(pk=token.pk).scopes
        assert stored == [scope for scope in Scope.values if scope in wanted]
        assert changed == (stored != before)
        assert AuditEvent.objects.filter(action="token_scopes_changed").count() == events + changed
    else:
        with pytest.raises(InvalidInput, match="unknown scope"):
            set_token_scopes(token, scopes=wanted, actor=Actor.system("test"))
        assert ApiToken.objects.get(pk=token.pk).scopes == before
        assert AuditEvent.objects.filter(action="token_scopes_changed").count() == events


def test_the_admin_shows_a_tokens_scopes_with_their_descriptions_and_edits_them_audited(admin_client, project):
    token = create_api_token(project, name="agent")[0]
    url = reverse("admin:checkpoints_apitoken_change", args=[token.pk])
    page = admin_client.get(url)
    boxes = {box.get("value"): box.get("checked") is not None for box in select(page, "input[name=scopes]")}
    assert boxes == {"read": True, "write": True, "answer": False, "recover": False, "purge": False}  # never defaults
    assert Scope.WRITE.label in page.content.decode()

    saved = admin_client.post(url, {"name": "agent", "scopes": ["read"]})
    assert saved.status_code == 302
    assert ApiToken.objects.get(pk=token.pk).scopes == ["read"]
    event = AuditEvent.objects.get(action="token_scopes_changed")
    assert event.details == {"before": ["read", "write"], "after": ["read"]} and event.actor == "admin"

    refused = admin_client.post(url, {"name": "agent", "scopes": ["read", "root"]})
    assert refused.status_code == 200 and "root is not one of the available choices" in refused.content.decode()
    assert ApiToken.objects.get(pk=token.pk).scopes == ["read"]
