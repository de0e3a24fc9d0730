"""The API's boundary: odd or hostile input gets a 4xx naming the field and writes nothing; legal JSON is kept
exactly (NUL characters, integers beyond 64 bits, emoji, -0.0, 1e300); nothing answers 500."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.db import IntegrityError, connection, transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkpoints import services
from checkpoints.models import AgentOutput, AgentSession, AuditEvent, Checkpoint, Phase
from checkpoints.services import CheckpointInput, InvalidInput, create_checkpoint


@pytest.fixture
def session(api):
    assert api.post("/sessions", {"external_id": "run-1", "agent": "agent-7"}).status_code == 201
    return AgentSession.objects.get(external_id="run-1")


def post_json(api, path, body, method="post"):
    """Sends what orjson cannot encode (integers beyond 64 bits) with the standard library."""
    return api.send(method, path, raw=json.dumps(body, ensure_ascii=False).encode())


def read(response):
    return json.loads(response.content)


def exactly(value):
    """Equal as JSON text: 1 ≠ 1.0 ≠ true, -0.0 ≠ 0.0."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def field_errors(response):
    return [".".join(str(part) for part in error["loc"]) for error in response.json()["detail"]]


def counts():
    return (AgentSession.objects.count(), Checkpoint.objects.count(), Phase.objects.count(), AuditEvent.objects.count())


# ---- timestamps -------------------------------------------------------------------------------------

BAD_TIMES = [
    "0001-01-01T00:00:00+14:00",  # PostgreSQL stores it (a BC time in UTC) but psycopg cannot read it back
    "9999-12-31T23:59:59-14:00",
    "1969-12-31T23:59:59Z",
    "9000-01-01T00:00:00Z",
]


@pytest.mark.parametrize("moment", BAD_TIMES)
def test_a_created_at_out_of_range_gets_422_naming_it_and_the_session_stays_readable(session, api, moment):
    before = counts()
    response = api.post("/sessions/run-1/checkpoints", {"state": {}, "created_at": moment})
    assert response.status_code == 422, response.content
    assert field_errors(response) == ["body.payload.created_at"]
    assert "between 1970-01-01 and 9000-01-01" in response.json()["detail"][0]["msg"]
    assert counts() == before
    batch = api.post("/checkpoints/batch", {"checkpoints": [{"session": "run-1", "state": {}, "created_at": moment}]})
    assert batch.status_code == 422
    assert counts() == before
    assert api.get("/sessions/run-1").status_code == 200
    assert api.get("/sessions/run-1/checkpoints").status_code == 200


@pytest.mark.parametrize(
    ("moment", "utc"),
    [
        ("2026-01-01T10:00:00+14:00", datetime(2025, 12, 31, 20, 0, tzinfo=UTC)),
        # Python takes offsets to ±23:59, PostgreSQL to ±15:59: converted to UTC before it is stored
        ("2026-01-01T10:00:00+16:00", datetime(2025, 12, 31, 18, 0, tzinfo=UTC)),
        ("2026-01-01T10:00:00", datetime(2026, 1, 1, 10, 0, tzinfo=UTC)),
    ],
)
def test_a_time_with_any_offset_python_reads_is_stored_in_utc(session, api, moment, utc):
    response = api.post("/sessions/run-1/checkpoints", {"state": {}, "created_at": moment})
    assert response.status_code == 201
    assert Checkpoint.objects.get().created_at == utc
    assert len(api.get("/sessions/run-1/checkpoints", {"since": moment}).json()["items"]) == 1


@pytest.mark.parametrize("parameter", ["since", "until"])
def test_a_time_filter_out_of_range_gets_422(session, api, parameter):
    response = api.get("/sessions/run-1/checkpoints", {parameter: "0001-01-01T00:00:00+14:00"})
    assert response.status_code == 422
    assert field_errors(response) == [f"query.{parameter}"]


def test_phase_times_out_of_range_get_422(session, api):
    response = api.put("/sessions/run-1/phases/1", {"name": "plan", "started_at": "0001-01-01T00:00:00+14:00"})
    assert response.status_code == 422
    assert field_errors(response) == ["body.payload.started_at"]
    assert not Phase.objects.exists()


def test_importers_and_commands_get_the_same_time_check(session):
    with pytest.raises(InvalidInput, match="created_at"):
        create_checkpoint(session, CheckpointInput(state={}, created_at=datetime(1, 1, 1, tzinfo=UTC)))
    assert not Checkpoint.objects.exists()


def test_the_database_refuses_a_time_out_of_range_from_any_code_path(session, make_checkpoint):
    checkpoint = make_checkpoint(session, {})
    with pytest.raises(IntegrityError), transaction.atomic():
        Checkpoint.objects.filter(pk=checkpoint.pk).update(created_at=datetime(1960, 1, 1, tzinfo=UTC))


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_migrating_repairs_times_stored_before_the_range_check():
    """An install that stored such a time (it stopped retention for every project) is repaired on upgrade."""
    from django.db.migrations.executor import MigrationExecutor

    from tests.kits.migration_kit import old_executor

    executor = old_executor(connection)  # 0008 is one of the squashed set's: back through 0.1's files
    executor.migrate([("checkpoints", "0008_default_retention_and_schedules")])
    executor.loader.build_graph()
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO checkpoints_project (slug, name, created_at) VALUES ('p', 'p', now()) RETURNING id")
        project = cursor.fetchone()[0]
        cursor.execute(
            "INSERT INTO checkpoints_agentsession (project_id, external_id, agent, title, status, execution_mode,"
            " last_seq, restore_generation, metadata, source_path, source_format, write_back, created_at, updated_at)"
            " VALUES (%s, 's', 'a', '', 'active', '', 1, 0, '{}', '', '', false, now(), now()) RETURNING id",
            [project],
        )
        session = cursor.fetchone()[0]
        cursor.execute(
            "INSERT INTO checkpoints_checkpoint (session_id, seq, name, kind, status, status_reason, created_at,"
            " received_at, root, state_hash, raw_bytes, stored_bytes, pinned, operation_id, operation_done,"
            " idempotency_key, metadata) VALUES (%s, 1, '', 'step', 'completed', '',"
            " '0001-01-01T00:00:00+14:00', '2026-11-26T00:00:00Z', '\\x00', '\\x00', 0, 0, false, '', false, '',"
            " '{\"n\": 1}')",
            [session],
        )
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
    checkpoint = Checkpoint.objects.get()
    assert checkpoint.created_at == datetime(2026, 11, 26, tzinfo=UTC)
    assert checkpoint.metadata["n"] == 1
    assert checkpoint.metadata["created_at_out_of_range"].startswith("0001-12-31")


# ---- values JSON holds that the database does not ------------------------------------------------

HOSTILE = {
    "nul": "a\x00b",
    "key\x00with nul": "\ue000e and \ue000 kept as sent",
    "big": 2**70,
    "negative big": -(2**90),
    "emoji": "🧭 ✓ 汉字",
    "floats": [1e300, -0.0, 0.1, 1e16, 5e-324],
    "nested": {"ids": [12345678901234567890123, 1]},
}


def test_metadata_with_nul_big_integers_and_odd_floats_round_trips(session, api):
    response = post_json(api, "/sessions", {"external_id": "odd", "agent": "a", "metadata": HOSTILE})
    assert response.status_code == 201, response.content
    assert exactly(read(response)["metadata"]) == exactly(HOSTILE)
    assert exactly(read(api.get("/sessions/odd"))["metadata"]) == exactly(HOSTILE)
    created = post_json(api, "/sessions/odd/checkpoints", {"state": HOSTILE, "metadata": HOSTILE})
    assert created.status_code == 201, created.content
    listed = read(api.get("/sessions/odd/checkpoints"))["items"][0]
    assert exactly(listed["metadata"]) == exactly(HOSTILE)
    got = read(api.get(f"/checkpoints/{listed['id']}"))
    assert exactly(got["state"]) == exactly(HOSTILE)
    assert exactly(read(api.get("/sessions/odd/resume"))["state"]) == exactly(HOSTILE)


def test_metadata_filters_find_values_with_nul(session, api):
    post_json(api, "/sessions/run-1/checkpoints", {"state": {}, "metadata": {"tag": "a\x00b"}})
    assert Checkpoint.objects.filter(metadata__tag="a\x00b").count() == 1
    assert Checkpoint.objects.filter(metadata__tag="ab").count() == 0


def test_diff_of_states_with_big_integers(session, api):
    first = post_json(api, "/sessions/run-1/checkpoints", {"state": {"n": 2**70, "s": "a\x00"}})
    second = post_json(api, "/sessions/run-1/checkpoints", {"state": {"n": 2**71, "s": "a\x00b"}})
    response = api.get(f"/checkpoints/{read(first)['id']}/diff/{read(second)['id']}")
    assert response.status_code == 200, response.content
    changes = {change["path"]: change for change in read(response)["changes"]}
    assert changes["n"]["old"] == 2**70 and changes["n"]["new"] == 2**71


@pytest.mark.parametrize(
    "field",
    ["name", "status_reason"],  # free text is stored as sent
)
def test_free_text_with_nul_is_stored_as_sent(session, api, field):
    response = api.post("/sessions/run-1/checkpoints", {"state": {}, field: "before\x00after"})
    assert response.status_code == 201, response.content
    assert getattr(Checkpoint.objects.get(), field) == "before\x00after"
    assert read(api.get("/sessions/run-1/checkpoints"))["items"][0][field] == "before\x00after"
    if field == "name":  # the summary's counts by name keep it too
        assert read(api.get("/sessions/run-1/summary"))["by_name"] == {"before\x00after": 1}


def test_session_title_phase_and_output_text_with_nul_are_stored(session, api):
    assert api.post("/sessions", {"external_id": "run-1", "agent": "a", "title": "t\x00"}).json()["title"] == "t\x00"
    assert api.put("/sessions/run-1/phases/1", {"name": "plan\x00", "errors": ["e\x00"]}).status_code == 201
    output = {"agent_name": "writer", "content": "# out\x00put", "error": "boom\x00", "tools_used": ["t\x00"]}
    assert api.post("/sessions/run-1/phases/1/outputs", output).status_code == 201
    stored = AgentOutput.objects.get()
    assert (stored.content, stored.error, stored.tools_used) == ("# out\x00put", "boom\x00", ["t\x00"])
    assert Phase.objects.get().errors == ["e\x00"]


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/sessions", {"external_id": "a\x00b", "agent": "x"}, "external_id"),
        ("/sessions", {"external_id": "ok", "agent": "x\x00"}, "agent"),
        ("/sessions/run-1/checkpoints", {"state": {}, "idempotency_key": "k\x00"}, "idempotency_key"),
        ("/sessions/run-1/checkpoints", {"state": {}, "operation_id": "o\x00"}, "operation_id"),
    ],
)
def test_identifiers_with_nul_get_422_naming_the_field(session, api, path, body, field):
    before = counts()
    response = api.post(path, body)
    assert response.status_code == 422
    assert field_errors(response) == [f"body.payload.{field}"]
    assert "NUL" in response.json()["detail"][0]["msg"]
    assert counts() == before


def test_lookups_with_nul_find_nothing_instead_of_failing(session, api):
    assert api.get("/sessions/a\x00b").status_code == 404
    assert api.get("/sessions/run-1/checkpoints", {"name": "a\x00b"}).json()["items"] == []
    assert api.get("/alerts", {"session": "a\x00b"}).json() == []


@pytest.mark.parametrize("digits", ["", ', "n": 12345678901234567890123'])
def test_a_lone_surrogate_gets_422_naming_where_it_is(session, api, digits):
    before = counts()
    raw = '{"state": {"messages": ["ok", "\\ud800"]' + digits + "}}"
    response = api.post("/sessions/run-1/checkpoints", raw=raw)
    assert response.status_code == 422, response.content
    assert response.json()["detail"][0]["loc"] == ["body", "state", "messages", 1]
    assert counts() == before


# ---- numbers --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/sessions/run-1/checkpoints", {"state": {}, "step": 2**31}, "step"),
        ("/sessions/run-1/checkpoints", {"state": {}, "phase": -(2**31) - 1}, "phase"),
        ("/sessions/run-1/phases/1", {"name": "p", "retry_count": 2**31}, "retry_count"),
        ("/sessions/run-1/phases/1", {"name": "p", "tokens_in": 2**63}, "tokens_in"),
        ("/sessions/run-1/phases/1", {"name": "p", "cost": 1e6}, "cost"),
    ],
)
def test_numbers_beyond_their_column_get_422(session, api, path, body, field):
    before = counts()
    response = post_json(api, path, body, method="put" if "phases" in path else "post")
    assert response.status_code == 422, response.content
    assert field_errors(response) == [f"body.payload.{field}"]
    assert counts() == before


def test_output_token_counts_beyond_64_bits_get_422(session, api):
    api.put("/sessions/run-1/phases/1", {"name": "p"})
    response = post_json(api, "/sessions/run-1/phases/1/outputs", {"agent_name": "w", "tokens_out": 2**63})
    assert response.status_code == 422
    assert not AgentOutput.objects.exists()


def test_a_negative_step_is_legal(session, api):
    """LangGraph's input checkpoint has step -1."""
    assert api.post("/sessions/run-1/checkpoints", {"state": {}, "step": -1}).json()["step"] == -1


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("put", "/sessions/run-1/phases/-1", 422),
        ("put", "/sessions/run-1/phases/2147483648", 422),
        ("get", "/checkpoints/99999999999999999999999", 422),
        ("get", "/checkpoints/1/diff/99999999999999999999999", 422),
        ("post", "/checkpoints/99999999999999999999999/restore", 422),
    ],
)
def test_path_numbers_out_of_range_get_4xx(session, api, method, path, status):
    response = api.send(method, path, {"name": "p"}) if method != "get" else api.get(path)
    assert response.status_code == status


@pytest.mark.parametrize("cursor", ["²", "1" * 40, "-1", "x"])
def test_a_cursor_this_api_did_not_return_gets_400(session, api, cursor):
    response = api.get("/sessions/run-1/checkpoints", {"cursor": cursor})
    assert response.status_code == 400
    assert response.json() == {"detail": "cursor is not one this API returned"}


def nested(depth):
    """Deeper than the limit (200), within what JSON parsers take."""
    value: object = 0
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    ("path", "body", "field", "method"),
    [
        ("/sessions", {"external_id": "x", "agent": "a", "metadata": nested(400)}, "metadata", "post"),
        ("/sessions/run-1/checkpoints", {"state": {}, "metadata": nested(400)}, "metadata", "post"),
        ("/sessions/run-1/phases/1", {"name": "p", "errors": [nested(400)]}, "errors", "put"),
    ],
)
def test_json_fields_nested_too_deep_get_422(session, api, path, body, field, method):
    before = counts()
    response = post_json(api, path, body, method)
    assert response.status_code == 422, response.content
    assert field_errors(response) == [f"body.payload.{field}"]
    assert "deeper than" in response.json()["detail"][0]["msg"]
    assert counts() == before


# ---- fork -----------------------------------------------------------------------------------------


def test_forking_a_session_with_a_200_character_id_and_300_character_title(api):
    long_id, long_title = "s" * 200, "T" * 300
    assert api.post("/sessions", {"external_id": long_id, "agent": "a", "title": long_title}).status_code == 201
    checkpoint = api.post(f"/sessions/{long_id}/checkpoints", {"state": {"n": 1}}).json()
    first = api.post(f"/checkpoints/{checkpoint['id']}/fork", {})
    second = api.post(f"/checkpoints/{checkpoint['id']}/fork", {})
    assert (first.status_code, second.status_code) == (201, 201), first.content
    ids = {first.json()["external_id"], second.json()["external_id"]}
    assert ids == {"s" * 193 + "-fork-1", "s" * 193 + "-fork-2"}
    assert len(first.json()["title"]) <= 300 and first.json()["title"].endswith(" at #1")


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_forks_each_get_their_own_session(project):
    source, _ = services.upsert_session(project, external_id="src", agent="a")
    checkpoint = create_checkpoint(source, CheckpointInput(state={"n": 1}))[0]
    results: list[object] = []
    barrier = threading.Barrier(6)

    def fork() -> None:
        barrier.wait()
        try:
            results.append(services.fork_session(checkpoint, actor=services.Actor.system("test")).external_id)
        except Exception as exc:  # the assertion below shows what went wrong
            results.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=fork) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == [f"src-fork-{n}" for n in range(1, 7)], results


def test_forking_onto_a_taken_id_gets_409_and_writes_nothing(session, api):
    checkpoint = api.post("/sessions/run-1/checkpoints", {"state": {}}).json()
    before = counts()
    response = api.post(f"/checkpoints/{checkpoint['id']}/fork", {"external_id": "run-1"})
    assert response.status_code == 409
    assert counts() == before


# ---- sizes and scopes -----------------------------------------------------------------------------


def test_a_million_unknown_fields_get_one_short_error(session, api):
    body = {"state": {}, **{f"k{n}": 1 for n in range(1_000_000)}}
    response = api.post("/sessions/run-1/checkpoints", body)
    assert response.status_code == 422
    assert len(response.content) < 2_000
    assert "unknown field(s): 'k0'" in response.content.decode() and "999990 more" in response.content.decode()


def test_field_errors_are_capped_with_a_count(session, api):
    body = {"checkpoints": [{"session": "run-1", "state": {}, "step": "x"} for _ in range(5000)]}
    response = api.post("/checkpoints/batch", body)
    assert response.status_code == 422
    assert len(response.json()["detail"]) == 20 and response.json()["error_count"] == 5000
    assert len(response.content) < 10_000


def test_a_read_only_token_is_refused_before_its_body_is_read(session, read_only_api):
    response = read_only_api.post("/sessions/run-1/checkpoints", raw=b"{not json")
    assert response.status_code == 403
    assert response.json() == {"detail": "this token lacks the 'write' scope"}


def test_a_non_numeric_content_length_gets_400(session, api):
    response = api.client.post(
        "/api/v1/sessions/run-1/checkpoints",
        b"{}",
        content_type="application/json",
        headers={"Authorization": f"Bearer {api.token}"},
        CONTENT_LENGTH="12x",
    )
    assert response.status_code == 400


# ---- idempotency ----------------------------------------------------------------------------------


def test_a_repeated_key_with_the_same_body_returns_the_original(session, api):
    body = {"state": {"n": 1}, "idempotency_key": "k1", "metadata": {"big": 2**70}}
    first = post_json(api, "/sessions/run-1/checkpoints", body)
    again = post_json(api, "/sessions/run-1/checkpoints", body)
    assert (first.status_code, again.status_code) == (201, 200)
    assert read(again)["id"] == read(first)["id"]


@pytest.mark.parametrize(
    "change", [{"state": {"n": 2}}, {"name": "other"}, {"metadata": {"m": 1}}, {"created_at": "2026-01-01T00:00:00Z"}]
)
def test_a_repeated_key_with_a_different_body_gets_409_naming_what_differs(session, api, change):
    api.post("/sessions/run-1/checkpoints", {"state": {"n": 1}, "idempotency_key": "k1"})
    response = api.post("/sessions/run-1/checkpoints", {"state": {"n": 1}, "idempotency_key": "k1", **change})
    assert response.status_code == 409
    assert f"different {next(iter(change))}" in response.json()["detail"]
    assert Checkpoint.objects.count() == 1


def test_a_batch_repeating_a_key_with_different_bodies_gets_409_and_writes_nothing(session, api):
    items = [{"session": "run-1", "state": {"n": n}, "idempotency_key": "k"} for n in (1, 2)]
    response = api.post("/checkpoints/batch", {"checkpoints": items})
    assert response.status_code == 409
    assert "appears twice in the batch with a different state" in response.json()["detail"]
    assert not Checkpoint.objects.exists()


# ---- tokens ---------------------------------------------------------------------------------------


def test_an_expired_token_gets_401(project, api_as):
    token, secret = services.create_api_token(project, name="short", expires_in=timedelta(hours=1))
    client = api_as(secret)
    assert client.get("/alerts").status_code == 200
    token.expires_at = datetime.now(UTC) - timedelta(seconds=1)
    token.save()
    assert client.get("/alerts").status_code == 401


def test_create_api_token_expires_in_sets_the_expiry_and_audits(project, capsys):
    call_command("create_api_token", "--project", "acme", "--name", "ci", "--expires-in", "90d")
    token = project.tokens.get(name="ci")
    assert timedelta(days=89, hours=23) < token.expires_at - token.created_at <= timedelta(days=90)
    assert AuditEvent.objects.get(action="token_created").details["expires_at"] == token.expires_at.isoformat()
    assert capsys.readouterr().out.strip().startswith(f"cpk_{token.prefix}_")


def test_create_api_token_refuses_a_malformed_expiry(project):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="use a number and d, h or m"):
        call_command("create_api_token", "--project", "acme", "--name", "ci", "--expires-in", "soon")


def test_requests_beyond_the_rate_limit_get_429_per_token(project, api_as, settings):
    from django.core.cache import cache

    cache.clear()
    settings.API_RATE_LIMIT = "3/min"
    first, second = (api_as(services.create_api_token(project, name=name)[1]) for name in ("one", "two"))
    assert [first.get("/alerts").status_code for _ in range(4)] == [200, 200, 200, 429]
    limited = first.get("/alerts")
    assert limited.json() == {"detail": "Too many requests."} and int(limited["Retry-After"]) > 0
    assert second.get("/alerts").status_code == 200
    cache.clear()


# ---- generated documents --------------------------------------------------------------------------

# the escapes the store uses must come back as sent too
_TEXT = st.text(
    st.characters(exclude_categories=["Cs"]) | st.sampled_from(["\x00", "\ue000", "e", "f", "0", "😀"]), max_size=12
) | st.sampled_from(["\ue000f1.5", "\ue000e", "\ue0000", "\ue000fnot a float"])
_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _TEXT
)
JSON = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(state=JSON, metadata=st.dictionaries(_TEXT, JSON, max_size=4))
def test_any_json_round_trips_exactly_as_state_and_metadata(session, api, state, metadata):
    created = post_json(api, "/sessions/run-1/checkpoints", {"state": state, "metadata": metadata})
    assert created.status_code == 201, created.content
    got = read(api.get(f"/checkpoints/{read(created)['id']}"))
    assert exactly(got["state"]) == exactly(state)
    assert exactly(got["metadata"]) == exactly(metadata)
    previous = got["parent"] or got["id"]
    assert api.get(f"/checkpoints/{previous}/diff/{got['id']}").status_code == 200


def test_a_hostile_document_shows_in_the_console_and_exports_exactly(session, api, client, alice, tmp_path):
    """create → get (above) → the console's pages → download → a Dream.OS export → import again: exact."""
    first = read(post_json(api, "/sessions/run-1/checkpoints", {"state": {"n": 0}, "metadata": HOSTILE}))
    second = read(post_json(api, "/sessions/run-1/checkpoints", {"state": HOSTILE, "metadata": HOSTILE}))
    client.force_login(alice)
    page = client.get(f"/checkpoints/{second['id']}/")
    assert page.status_code == 200 and "🧭 ✓ 汉字" in page.content.decode()
    assert client.get(f"/compare/?a={first['id']}&b={second['id']}").status_code == 200
    assert client.get(f"/sessions/{session.pk}/").status_code == 200
    download = client.get(f"/checkpoints/{second['id']}/download/")
    assert exactly(json.loads(download.content)) == exactly(HOSTILE)

    call_command("export_checkpoints", "run-1", "--format", "dreamos", "--out", str(tmp_path))
    exported = [json.loads(path.read_bytes()) for path in sorted(tmp_path.iterdir())]
    assert exactly(exported[-1]["state"]) == exactly(HOSTILE)
    call_command("import_checkpoints", str(tmp_path), "--format", "dreamos", "--project", "copy")
    imported = Checkpoint.objects.filter(session__project__slug="copy").order_by("seq").last()
    got = read(api.get(f"/checkpoints/{second['id']}"))["state"]
    assert exactly(got) == exactly(HOSTILE)
    from checkpoints import store

    assert exactly(store.load_state(bytes(imported.root))) == exactly(HOSTILE)
