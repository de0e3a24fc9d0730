from __future__ import annotations

from datetime import UTC, datetime, timedelta

import orjson
import pytest

from checkpoints.models import AgentSession, ApiToken, AuditEvent, Checkpoint, Chunk, DriftAlert
from checkpoints.services import Actor, create_api_token


@pytest.fixture
def session(api):
    response = api.post("/sessions", {"external_id": "run-1", "agent": "agent-7", "title": "Refactor"})
    assert response.status_code == 201, response.content
    return AgentSession.objects.get(external_id="run-1")


def create(api, state, session="run-1", **fields):
    return api.post(f"/sessions/{session}/checkpoints", {"state": state, **fields})


def nested(depth):
    value = 0
    for _ in range(depth):
        value = [value]
    return value


# ---- authentication and scope ------------------------------------------------------------------


def test_requests_without_a_token_get_401(session, client):
    response = client.get("/api/v1/sessions/run-1")
    assert response.status_code == 401
    assert "detail" in response.json()


def test_an_unknown_or_revoked_token_gets_401(session, api, api_as):
    assert api_as("cpk_nope_nope").get("/sessions/run-1").status_code == 401
    ApiToken.objects.update(revoked_at=datetime.now(UTC))
    assert api.get("/sessions/run-1").status_code == 401


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_an_api_call_after_the_database_dropped_its_connection_is_answered(session, api):
    """The token's lookup doubles as the connection's health check: a connection PostgreSQL closed (a restart,
    an idle timeout) is replaced and the call goes on, instead of a 500 to an agent in the middle of a run."""
    from django.db import connection

    assert api.get(f"/sessions/{session.external_id}").status_code == 200
    dropped = connection.connection.info.backend_pid
    other = connection.copy()
    with other.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [dropped])
    other.close()
    assert api.get(f"/sessions/{session.external_id}").status_code == 200
    assert connection.connection.info.backend_pid != dropped


def test_tokens_are_stored_only_as_hashes(token_secret):
    token = ApiToken.objects.get()
    assert token_secret not in (token.token_hash, token.prefix)
    assert token_secret.startswith(f"cpk_{token.prefix}_")


def test_a_read_only_token_reads_but_cannot_write(session, api, read_only_api):
    assert create(api, {"n": 1}).status_code == 201
    assert read_only_api.get("/sessions/run-1").status_code == 200
    response = create(read_only_api, {"n": 2})
    assert response.status_code == 403
    assert response.json() == {"detail": "this token lacks the 'write' scope"}
    assert Checkpoint.objects.count() == 1


def test_a_token_sees_nothing_of_another_project(session, api, api_as, other_project):
    checkpoint_id = create(api, {"n": 1}).json()["id"]
    stranger = api_as(create_api_token(other_project, name="other")[1])
    assert stranger.get("/sessions/run-1").status_code == 404
    assert stranger.get(f"/checkpoints/{checkpoint_id}").status_code == 404
    assert stranger.post(f"/checkpoints/{checkpoint_id}/restore", {}).status_code == 404


# ---- sessions ------------------------------------------------------------------------------------


def test_posting_a_session_twice_updates_it(session, api):
    response = api.post("/sessions", {"external_id": "run-1", "agent": "agent-7", "title": "New title"})
    assert response.status_code == 200
    assert response.json()["title"] == "New title"
    assert AgentSession.objects.count() == 1


def test_session_detail_has_counts_and_sizes(session, api):
    create(api, {"messages": ["a" * 5000]})
    create(api, {"messages": ["a" * 5000, "b" * 10]})
    body = api.get("/sessions/run-1").json()
    assert body["checkpoint_count"] == 2
    assert body["raw_bytes"] == sum(c.raw_bytes for c in Checkpoint.objects.all())
    assert 0 < body["stored_bytes"] < body["raw_bytes"]
    assert body["head"]["seq"] == 2


def test_unknown_session_gets_404_with_a_message(api):
    response = api.get("/sessions/nope")
    assert response.status_code == 404
    assert response.json() == {"detail": "no session 'nope' in project 'acme'"}


# ---- creating checkpoints ----------------------------------------------------------------------


def test_create_returns_201_and_the_checkpoint(session, api):
    response = create(api, {"task": "x"}, name="task_started", kind="step", step=1, metadata={"a": 1})
    assert response.status_code == 201
    body = response.json()
    assert (body["seq"], body["name"], body["kind"], body["step"], body["metadata"]) == (
        1,
        "task_started",
        "step",
        1,
        {"a": 1},
    )
    assert body["parent"] is None
    second = create(api, {"task": "y"}).json()
    assert second["parent"] == body["id"] and second["seq"] == 2


def test_create_with_a_parent_branches_from_it_and_resume_returns_the_branch(session, api):
    first = create(api, {"task": "x"}).json()
    create(api, {"task": "y"})
    branch = create(api, {"task": "x, again"}, parent=first["id"])
    assert branch.status_code == 201, branch.content
    assert (branch.json()["parent"], branch.json()["seq"]) == (first["id"], 3)
    resumed = api.get("/sessions/run-1/resume").json()
    assert resumed["checkpoint"]["id"] == branch.json()["id"]
    assert resumed["state"] == {"task": "x, again"}


def test_a_parent_from_another_session_gets_422_naming_it_and_writes_nothing(session, api):
    api.post("/sessions", {"external_id": "run-2", "agent": "agent-7"})
    elsewhere = create(api, {"n": 0}, session="run-2").json()
    before = Checkpoint.objects.count()
    response = create(api, {"n": 1}, parent=elsewhere["id"])
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "parent"]
    assert "not a checkpoint of this session" in response.json()["detail"][0]["msg"]
    assert Checkpoint.objects.count() == before


def test_repeating_an_idempotency_key_returns_the_original_with_200(session, api):
    first = create(api, {"n": 1}, idempotency_key="k1")
    again = create(api, {"n": 1}, idempotency_key="k1")
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    assert Checkpoint.objects.count() == 1


def test_failed_and_halted_checkpoints_mark_the_session(session, api):
    create(api, {"n": 1}, status="halted", status_reason="loop detector: same call 4 times")
    body = api.get("/sessions/run-1").json()
    assert body["status"] == "halted"
    assert body["head"]["status_reason"] == "loop detector: same call 4 times"


@pytest.mark.parametrize(
    ("raw", "status", "detail"),
    [
        (b'{"state": {', 400, "malformed JSON"),
        (b'{"state": NaN}', 400, "malformed JSON"),
        (b'{"state": [Infinity]}', 400, "malformed JSON"),
        (b'{"state": 1e999}', 400, "malformed JSON"),
        (b'{"state": {"big": 123456789012345678901234567890, "x": NaN}}', 400, "NaN is not valid JSON"),
        (b"[1, 2]", 400, "must be a JSON object"),
        (b"\xff\xfe", 400, "malformed JSON"),
    ],
)
def test_malformed_bodies_get_400_and_write_nothing(session, api, raw, status, detail):
    response = create(api, None) if raw is None else api.post("/sessions/run-1/checkpoints", raw=raw)
    assert response.status_code == status
    assert detail in response.json()["detail"]
    assert Checkpoint.objects.count() == 0 and Chunk.objects.count() == 0


@pytest.mark.parametrize(
    "body",
    [
        {"state": {}, "kind": "nonsense"},
        {"state": {}, "status": "exploded"},
        {"state": {}, "step": "seven"},
        {"state": {}, "name": ["not", "a", "string"]},
        {"state": {}, "created_at": "yesterday"},
        {"state": {}, "metadata": [1, 2]},
        {"state": {}, "unknown_field": 1},
        {"name": "no state"},
    ],
)
def test_wrong_types_get_422_with_field_errors_and_write_nothing(session, api, body):
    response = api.post("/sessions/run-1/checkpoints", body)
    assert response.status_code == 422
    assert isinstance(response.json()["detail"], list)
    assert Checkpoint.objects.count() == 0


def test_nesting_deeper_than_the_limit_gets_422(session, api, settings):
    settings.CHECKPOINT_MAX_DEPTH = 50
    assert create(api, nested(49)).status_code == 201
    response = create(api, nested(51))
    assert response.status_code == 422
    assert "deeper than 50" in response.json()["detail"]
    assert Checkpoint.objects.count() == 1


def test_a_body_over_the_size_limit_gets_413(session, api, settings):
    settings.CHECKPOINT_MAX_BODY_BYTES = 10_000
    response = create(api, {"blob": "x" * 20_000})
    assert response.status_code == 413
    assert "larger than 10000 bytes" in response.json()["detail"]
    assert Checkpoint.objects.count() == 0


def test_big_integers_survive_exactly(session, api):
    created = api.post("/sessions/run-1/checkpoints", raw=b'{"state": {"n": 123456789012345678901234567890}}')
    assert created.status_code == 201
    body = api.get(f"/checkpoints/{created.json()['id']}")
    assert b'"n":123456789012345678901234567890' in body.content


def test_creating_in_an_unknown_session_gets_404(api):
    assert create(api, {}, session="ghost").status_code == 404


# ---- batch -----------------------------------------------------------------------------------


def test_batch_creates_checkpoints_for_several_sessions_in_order(session, api):
    api.post("/sessions", {"external_id": "run-2", "agent": "agent-8"})
    items = [{"session": "run-1", "state": {"n": i}, "name": f"s{i}"} for i in range(3)]
    items.append({"session": "run-2", "state": {"n": 0}})
    response = api.post("/checkpoints/batch", {"checkpoints": items})
    assert response.status_code == 201
    assert response.json()["created"] == 4
    run1 = list(Checkpoint.objects.filter(session__external_id="run-1").order_by("seq"))
    assert [c.name for c in run1] == ["s0", "s1", "s2"]
    assert [c.parent_id for c in run1] == [None, run1[0].pk, run1[1].pk]
    assert AgentSession.objects.get(external_id="run-1").head_id == run1[2].pk


def test_a_batch_with_one_bad_state_writes_nothing(session, api):
    items = [{"session": "run-1", "state": {"n": i}} for i in range(3)]
    items[2]["state"] = nested(210)
    response = api.post("/checkpoints/batch", {"checkpoints": items})
    assert response.status_code == 422
    assert Checkpoint.objects.count() == 0 and Chunk.objects.count() == 0


def test_a_batch_naming_an_unknown_session_writes_nothing(session, api):
    items = [{"session": "run-1", "state": {}}, {"session": "ghost", "state": {}}]
    response = api.post("/checkpoints/batch", {"checkpoints": items})
    assert response.status_code == 404 and "ghost" in response.json()["detail"]
    assert Checkpoint.objects.count() == 0


def test_a_batch_repeating_idempotency_keys_reports_them_as_existing(session, api):
    create(api, {"n": 0}, idempotency_key="a")
    items = [{"session": "run-1", "state": {"n": 0}, "idempotency_key": "a"}, {"session": "run-1", "state": {}}]
    assert api.post("/checkpoints/batch", {"checkpoints": items}).json()["existing"] == 1
    assert Checkpoint.objects.count() == 2


# ---- listing and reading -------------------------------------------------------------------------


@pytest.fixture
def history(session, api):
    start = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
    for i in range(12):
        create(
            api,
            {"step": i},
            name="tests_passed" if i % 4 == 0 else "step",
            kind="routine" if i % 3 == 0 else "step",
            status="failed" if i == 7 else "completed",
            created_at=(start + timedelta(minutes=10 * i)).isoformat(),
        )
    return start


def test_list_filters_by_name_kind_status_and_time(history, api):
    def seqs(**params):
        return [item["seq"] for item in api.get("/sessions/run-1/checkpoints", params).json()["items"]]

    assert seqs(name="tests_passed") == [1, 5, 9]
    assert seqs(kind="routine") == [1, 4, 7, 10]
    assert seqs(status="failed") == [8]
    since = (history + timedelta(minutes=30)).isoformat()
    until = (history + timedelta(minutes=50)).isoformat()
    assert seqs(since=since, until=until) == [4, 5, 6]
    assert api.get("/sessions/run-1/checkpoints", {"kind": "bogus"}).status_code == 422


def test_list_pages_with_a_cursor_without_gaps_or_repeats(history, api):
    seen, cursor = [], None
    while True:
        params = {"limit": 5, **({"cursor": cursor} if cursor else {})}
        page = api.get("/sessions/run-1/checkpoints", params).json()
        seen += [item["seq"] for item in page["items"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert seen == list(range(1, 13))
    newest = api.get("/sessions/run-1/checkpoints", {"order": "desc", "limit": 2}).json()
    assert [item["seq"] for item in newest["items"]] == [12, 11]
    assert api.get("/sessions/run-1/checkpoints", {"cursor": "abc"}).status_code == 400


def test_get_returns_the_full_state(session, api):
    state = {"messages": [{"role": "user", "content": "héllo " * 2000}], "memory": {"k": [1, 2.5, None, True]}}
    checkpoint_id = create(api, state).json()["id"]
    body = api.get(f"/checkpoints/{checkpoint_id}").json()
    assert body["state"] == state
    assert len(body["state_hash"]) == 32


def test_unknown_checkpoint_gets_404(api):
    assert api.get("/checkpoints/999999").status_code == 404


def test_diff_between_two_checkpoints(session, api):
    a = create(api, {"messages": ["hi"], "goal": "a"}).json()["id"]
    b = create(api, {"messages": ["hi", "there"], "goal": "b"}).json()["id"]
    body = api.get(f"/checkpoints/{a}/diff/{b}").json()
    assert body["summary"]["text"] == "1 changed, 1 added, 1 list item appended"
    assert {(c["op"], c["path"]) for c in body["changes"]} == {("changed", "goal"), ("added", "messages[1]")}


def test_summary_counts_by_name_kind_and_status(history, api):
    body = api.get("/sessions/run-1/summary").json()
    assert body["checkpoint_count"] == 12
    assert body["by_name"] == {"tests_passed": 3, "step": 9}
    assert body["by_kind"] == {"routine": 4, "step": 8}
    assert body["by_status"] == {"completed": 11, "failed": 1}
    assert body["first"]["seq"] == 1 and body["last"]["seq"] == 12
    assert body["duration_seconds"] == 110 * 60


def test_summary_counts_leave_out_deleted_checkpoints(history, api):
    from checkpoints.services.cleanup import delete_checkpoints

    gone = Checkpoint.objects.filter(session__external_id="run-1", name="tests_passed")  # #1, #5, #9
    delete_checkpoints(list(gone.values_list("pk", flat=True)), actor=Actor.system("test"))

    body = api.get("/sessions/run-1/summary").json()
    assert body["checkpoint_count"] == 9
    assert body["by_name"] == {"step": 9}
    assert body["by_kind"] == {"routine": 3, "step": 6}
    assert body["by_status"] == {"completed": 8, "failed": 1}
    assert body["first"]["seq"] == 2 and body["last"]["seq"] == 12
    assert api.get("/sessions/run-1").json()["checkpoint_count"] == 9


# ---- restore, fork, resume, live state ----------------------------------------------------------


def test_restore_moves_the_head_keeps_history_and_is_audited(session, api):
    ids = [create(api, {"n": i}).json()["id"] for i in range(3)]
    response = api.post(f"/checkpoints/{ids[0]}/restore", {"reason": "drifted"})
    assert response.status_code == 201
    restored = response.json()
    assert (restored["kind"], restored["parent"], restored["seq"]) == ("restore", ids[0], 4)
    resume = api.get("/sessions/run-1/resume").json()
    assert resume["state"] == {"n": 0}
    assert resume["restore_generation"] == 1
    assert resume["checkpoint"]["id"] == restored["id"]
    assert Checkpoint.objects.count() == 4
    event = AuditEvent.objects.get(action="restore")
    assert (event.actor, event.reason) == ("token:agent", "drifted")


def test_restore_by_a_read_only_token_is_refused(session, api, read_only_api):
    checkpoint_id = create(api, {"n": 1}).json()["id"]
    assert read_only_api.post(f"/checkpoints/{checkpoint_id}/restore", {}).status_code == 403
    assert AuditEvent.objects.filter(action="restore").count() == 0


def test_fork_creates_a_session_sharing_the_state(session, api):
    checkpoint_id = create(api, {"n": 1, "big": "x" * 50_000}).json()["id"]
    chunks = Chunk.objects.count()
    response = api.post(f"/checkpoints/{checkpoint_id}/fork", {"title": "Try B"})
    assert response.status_code == 201
    fork = response.json()
    assert (fork["title"], fork["forked_from"], fork["head"]["kind"]) == ("Try B", checkpoint_id, "fork")
    assert api.get(f"/sessions/{fork['external_id']}/resume").json()["state"]["n"] == 1
    assert Chunk.objects.count() == chunks


def test_fork_to_an_existing_external_id_gets_409(session, api):
    checkpoint_id = create(api, {"n": 1}).json()["id"]
    response = api.post(f"/checkpoints/{checkpoint_id}/fork", {"external_id": "run-1"})
    assert response.status_code == 409
    assert AgentSession.objects.count() == 1


def test_resume_of_a_session_without_checkpoints_gets_404(session, api):
    response = api.get("/sessions/run-1/resume")
    assert response.status_code == 404 and "no checkpoint" in response.json()["detail"]


def test_live_state_is_stored_and_marks_the_heartbeat(session, api):
    response = api.put("/sessions/run-1/live-state", {"state": {"progress": 0.4}})
    assert response.status_code == 200
    session.refresh_from_db()
    assert session.last_seen_at is not None and session.live_root
    assert api.put("/sessions/run-1/live-state", raw=b'{"state": NaN}').status_code == 400


# ---- alerts and schema -------------------------------------------------------------------------


def test_alerts_are_listed_with_filters(session, api):
    DriftAlert.objects.create(session=session, kind="stalled", message="no progress")
    DriftAlert.objects.create(session=session, kind="repetition", message="same call", state="resolved")
    assert [a["kind"] for a in api.get("/alerts", {"state": "open"}).json()] == ["stalled"]
    assert len(api.get("/alerts", {"session": "run-1"}).json()) == 2
    assert api.get("/alerts", {"kind": "repetition"}).json()[0]["state"] == "resolved"


def test_alerts_are_listed_newest_first_whatever_their_state(session, api):
    at = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
    kinds = ["stalled", "repetition", "error_rate", "failed"]
    for minutes, (kind, state) in enumerate(zip(kinds, ["open", "resolved", "acknowledged", "open"], strict=True)):
        DriftAlert.objects.create(
            session=session, kind=kind, message=kind, state=state, opened_at=at + timedelta(minutes=minutes // 2)
        )
    listed = api.get("/alerts").json()
    assert [alert["kind"] for alert in listed] == ["failed", "error_rate", "repetition", "stalled"]


def test_openapi_schema_describes_the_endpoints(client):
    response = client.get("/api/v1/openapi.json")
    assert response.status_code == 200
    paths = orjson.loads(response.content)["paths"]
    assert "/api/v1/sessions/{external_id}/checkpoints" in paths
    assert "/api/v1/checkpoints/{checkpoint_id}/restore" in paths


def test_a_naive_created_at_is_taken_as_utc(session, api):
    body = create(api, {}, created_at="2026-03-02T08:00:00").json()
    assert body["created_at"].startswith("2026-03-02T08:00:00") and body["created_at"].endswith(("Z", "+00:00"))


def test_an_unknown_api_url_gets_a_json_404(api):
    response = api.get("/no/such/thing")
    assert response.status_code == 404
    assert response.json()["detail"].startswith("no such endpoint")


def test_a_refused_host_header_gets_a_json_400_from_the_api_and_html_elsewhere(client, session):
    # Django refuses a Host outside ALLOWED_HOSTS before any view runs; an API client still gets JSON.
    response = client.get("/api/v1/sessions", HTTP_HOST="9")
    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert "Host header" in response.json()["detail"]
    page = client.get("/", HTTP_HOST="9")
    assert page.status_code == 400 and page["Content-Type"].startswith("text/html")


def test_a_session_id_with_a_slash_is_refused(api):
    assert api.post("/sessions", {"external_id": "team/run", "agent": "a"}).status_code == 422
    assert AgentSession.objects.count() == 0
