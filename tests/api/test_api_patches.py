"""`state_patch`: a checkpoint sent as an RFC 6902 patch against the head, refused (409 `base_moved`) when an
operator restored or undid since, 422 naming the operation that does not apply; nothing stored on either."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from checkpoints.models import AgentSession, Checkpoint
from checkpoints.services import Actor, CheckpointInput, create_api_token, create_checkpoint, tokens, undo_restore

pytestmark = pytest.mark.django_db


@pytest.fixture
def session(api) -> AgentSession:
    assert api.post("/sessions", {"external_id": "run-1", "agent": "agent-7"}).status_code == 201
    return AgentSession.objects.get(external_id="run-1")


def post(api: Any, body: dict[str, Any], session: str = "run-1") -> Any:
    return api.post(f"/sessions/{session}/checkpoints", body)


def state_of(api: Any, checkpoint_id: int) -> Any:
    return api.get(f"/checkpoints/{checkpoint_id}").json()["state"]


@pytest.fixture
def first(session, api) -> dict[str, Any]:
    response = post(api, {"state": {"messages": ["hi"], "step": 1, "scratch": {"a": 1}}})
    assert response.status_code == 201, response.content
    return response.json()


def test_a_patch_against_the_head_stores_the_patched_state(first, api):
    patch = [
        {"op": "add", "path": "/messages/-", "value": "hello"},
        {"op": "replace", "path": "/step", "value": 2},
        {"op": "remove", "path": "/scratch"},
    ]
    response = post(api, {"state_patch": patch, "base": {"id": first["id"]}, "restore_generation": 0, "name": "s2"})
    assert response.status_code == 201, response.content
    created = response.json()
    assert created["parent"] == first["id"] and created["seq"] == 2 and created["restore_generation"] == 0
    assert state_of(api, created["id"]) == {"messages": ["hi", "hello"], "step": 2}
    assert state_of(api, first["id"]) == {"messages": ["hi"], "step": 1, "scratch": {"a": 1}}  # the base unchanged


def test_a_patch_without_a_base_applies_to_the_head_and_a_base_may_be_named_by_seq(first, api):
    assert post(api, {"state_patch": [{"op": "replace", "path": "/step", "value": 2}]}).status_code == 201
    response = post(api, {"state_patch": [{"op": "replace", "path": "/step", "value": 3}], "base": {"seq": 2}})
    assert response.status_code == 201, response.content
    assert state_of(api, response.json()["id"])["step"] == 3


def assert_base_moved(response: Any, head: Checkpoint, generation: int) -> None:
    assert response.status_code == 409, response.content
    body = response.json()
    assert body["code"] == "base_moved"
    assert body["head"] == {"id": head.pk, "seq": head.seq}
    assert body["restore_generation"] == generation
    assert "base_moved" in body["detail"]


def test_a_patch_after_an_operator_restored_gets_base_moved_and_stores_nothing(first, api):
    second = post(api, {"state_patch": [{"op": "replace", "path": "/step", "value": 2}]}).json()
    assert api.post(f"/checkpoints/{first['id']}/restore", {"reason": "bad turn"}).status_code == 201
    head = AgentSession.objects.get().head
    count = Checkpoint.objects.count()
    patch = {"state_patch": [{"op": "replace", "path": "/step", "value": 3}], "base": {"id": second["id"]}}
    assert_base_moved(post(api, patch), head, 1)
    # the generation alone tells it too, for an agent that sends no base
    stale = {"state_patch": [{"op": "replace", "path": "/step", "value": 3}], "restore_generation": 0}
    assert_base_moved(post(api, stale), head, 1)
    assert Checkpoint.objects.count() == count
    assert state_of(api, head.pk) == state_of(api, first["id"])


def test_a_patch_after_an_undo_gets_base_moved_though_the_state_is_its_base_again(first, api):
    second = post(api, {"state_patch": [{"op": "replace", "path": "/step", "value": 2}]}).json()
    api.post(f"/checkpoints/{first['id']}/restore", {})
    session = AgentSession.objects.get()
    undo_restore(session, actor=Actor.system())
    session.refresh_from_db()
    assert state_of(api, session.head_id) == state_of(api, second["id"])
    patch = {
        "state_patch": [{"op": "replace", "path": "/step", "value": 3}],
        "base": {"id": second["id"]},
        "restore_generation": 0,
    }
    assert_base_moved(post(api, patch), session.head, 2)
    current = {**patch, "base": {"id": session.head_id}, "restore_generation": 2}
    assert post(api, current).status_code == 201


def test_a_retried_patch_returns_what_it_stored_even_after_the_head_moved(first, api):
    body = {"state_patch": [{"op": "add", "path": "/messages/-", "value": "x"}], "idempotency_key": "k-2"}
    stored = post(api, {**body, "base": {"id": first["id"]}})
    assert stored.status_code == 201
    post(api, {"state": {"other": True}})  # the head moves on
    again = post(api, {**body, "base": {"id": first["id"]}})
    assert again.status_code == 200, again.content
    assert again.json()["id"] == stored.json()["id"]
    assert Checkpoint.objects.count() == 3
    changed = post(api, {**body, "state_patch": [{"op": "add", "path": "/messages/-", "value": "y"}]})
    assert changed.status_code == 409 and "code" not in changed.json()  # the reused key's 409, not base_moved
    assert "idempotency key" in changed.json()["detail"]


def test_a_create_reads_only_what_it_needs_and_no_checkpoint_row_whole(first, api, monkeypatch):
    """What every agent's every step costs (docs/benchmarks.md, bench/load.py): the session with its head's id, seq
    and root in one read, the idempotency key looked up by (key, id) before storing and again under the session's
    lock, and
    no checkpoint row read whole unless the key was used before (a retry)."""
    monkeypatch.setattr(tokens, "REMEMBER_SECONDS", 60.0)  # the token as a busy agent's: remembered
    post(api, {"state_patch": [{"op": "replace", "path": "/step", "value": 2}], "idempotency_key": "k-2"})
    body = {"state_patch": [{"op": "add", "path": "/messages/-", "value": "x"}], "idempotency_key": "k-3"}
    with CaptureQueriesContext(connection) as create:
        assert post(api, body).status_code == 201
    sql = [q["sql"] for q in create.captured_queries if not q["sql"].startswith(("SAVEPOINT", "RELEASE SAVEPOINT"))]
    # chunks: the state's (on PostgreSQL the new ones go in with the locking read: WITH chunks AS (INSERT …) SELECT)
    reads = [
        s for s in sql if s.startswith(("SELECT", "WITH chunks AS")) and not s.startswith('SELECT "checkpoints_chunk"')
    ]
    assert len(reads) == 4, "\n".join(reads)  # the session and its head, the key; under the lock, both again
    assert not any('"checkpoints_checkpoint"."metadata"' in s for s in sql)  # no checkpoint row read whole
    with CaptureQueriesContext(connection) as retry:
        again = post(api, body)
    assert again.status_code == 200 and again.json()["seq"] == 3
    assert any('"checkpoints_checkpoint"."metadata"' in q["sql"] for q in retry.captured_queries)  # the retry's row


def test_ids_and_keys_holding_the_escape_character_reach_their_session_and_their_retry(api):
    """The session's id and the idempotency key are read by statements written out: the column's escaping of NUL
    (a private-use character) is applied and undone there as the ORM does."""
    external_id, key = "run-\ue000-1", "key-\ue000-\ue0000"
    assert api.post("/sessions", {"external_id": external_id, "agent": "a"}).status_code == 201
    first = post(api, {"state": {"n": 1}}, session=external_id)
    assert first.status_code == 201, first.content
    body = {"state_patch": [{"op": "replace", "path": "/n", "value": 2}], "idempotency_key": key}
    stored = post(api, {**body, "base": {"id": first.json()["id"]}}, session=external_id)
    assert stored.status_code == 201, stored.content
    again = post(api, {**body, "base": {"id": first.json()["id"]}}, session=external_id)
    assert again.status_code == 200 and again.json()["id"] == stored.json()["id"]
    assert Checkpoint.objects.get(pk=stored.json()["id"]).idempotency_key == key
    assert post(api, {"state": {}}, session="run-\ue0000-1").status_code == 404  # escaped, not confused


@pytest.mark.parametrize(
    ("operation", "named"),
    [
        ({"op": "remove", "path": "/nothing"}, "operation 1 (remove '/nothing')"),
        ({"op": "replace", "path": "/messages/7", "value": 1}, "operation 1 (replace '/messages/7')"),
        ({"op": "test", "path": "/step", "value": 99}, "operation 1 (test '/step')"),
        ({"op": "add", "path": "/step/x", "value": 1}, "operation 1 (add '/step/x')"),
        ({"op": "move", "from": "/nope", "path": "/x"}, "operation 1 (move '/x')"),
        ({"op": "add", "path": "no-slash", "value": 1}, "operation 1 (add 'no-slash')"),
    ],
)
def test_a_patch_that_does_not_apply_gets_422_naming_the_operation_and_stores_nothing(first, api, operation, named):
    patch = [{"op": "replace", "path": "/step", "value": 5}, operation]
    response = post(api, {"state_patch": patch})
    assert response.status_code == 422, response.content
    assert named in str(response.json()["detail"])
    assert Checkpoint.objects.count() == 1
    assert state_of(api, first["id"])["step"] == 1  # the first operation touched no stored state


@pytest.mark.parametrize(
    "body",
    [
        {"state": {"a": 1}, "state_patch": []},
        {},
        {"state_patch": [{"op": "jump", "path": "/a"}]},
        {"state_patch": [{"op": "add", "path": "/a", "value": 1, "extra": 2}]},
        {"state_patch": [], "base": {"id": 1, "seq": 1}},
        {"state_patch": [], "base": {}},
        {"state": {"a": 1}, "base": {"id": 1}},
        {"state_patch": [], "parent": 1},
        {"state_patch": {"op": "add"}},
    ],
)
def test_malformed_patch_requests_get_422_and_store_nothing(first, api, body):
    response = post(api, body)
    assert response.status_code == 422, response.content
    assert Checkpoint.objects.count() == 1


def test_a_base_from_another_session_or_project_gets_422(first, api, other_project, make_session):
    post(api, {"state": {"n": 1}}, session="run-1")
    assert api.post("/sessions", {"external_id": "run-2", "agent": "a"}).status_code == 201
    elsewhere = post(api, {"state": {"n": 2}}, session="run-2").json()
    response = post(api, {"state_patch": [], "base": {"id": elsewhere["id"]}})
    assert response.status_code == 422 and "not a checkpoint of this session" in str(response.json())
    stranger = make_session("run-1", in_project=other_project)
    foreign, _ = create_checkpoint(stranger, CheckpointInput(state={"secret": 1}))
    response = post(api, {"state_patch": [], "base": {"id": foreign.pk}})
    assert response.status_code == 422 and "secret" not in response.content.decode()


def test_a_patch_to_a_session_without_checkpoints_gets_422(session, api):
    response = post(api, {"state_patch": [{"op": "add", "path": "/a", "value": 1}]})
    assert response.status_code == 422 and "send a full state first" in str(response.json())


def test_a_patch_of_another_project_session_gets_404(first, api_as, other_project):
    stranger = api_as(create_api_token(other_project, name="other")[1])
    response = post(stranger, {"state_patch": []})
    assert response.status_code == 404


def test_a_patch_nesting_deeper_than_the_limit_gets_422(first, api, settings):
    settings.CHECKPOINT_MAX_DEPTH = 10
    deep: Any = 0
    for _ in range(12):
        deep = [deep]
    response = post(api, {"state_patch": [{"op": "add", "path": "/deep", "value": deep}]})
    assert response.status_code == 422
    inside = {"state_patch": [{"op": "add", "path": "/scratch/x", "value": [[[[[[[[[0]]]]]]]]]}]}
    assert post(api, inside).status_code == 422  # 9 levels below 2: too deep where it lands
    assert Checkpoint.objects.count() == 1


def test_a_patch_over_the_body_limit_gets_413(first, api, settings):
    settings.CHECKPOINT_MAX_BODY_BYTES = 10_000
    patch = [{"op": "add", "path": "/messages/-", "value": "x" * 100} for _ in range(200)]
    assert post(api, {"state_patch": patch}).status_code == 413
    assert Checkpoint.objects.count() == 1


def test_batch_items_patch_the_head_then_each_the_one_before(first, api):
    items = [
        {"session": "run-1", "state_patch": [{"op": "add", "path": "/messages/-", "value": "a"}], "base": {"id": first["id"]}},
        {"session": "run-1", "state_patch": [{"op": "add", "path": "/messages/-", "value": "b"}]},
    ]  # fmt: skip
    response = api.post("/checkpoints/batch", {"checkpoints": items})
    assert response.status_code == 201, response.content
    last = response.json()["checkpoints"][-1]["id"]
    assert state_of(api, last)["messages"] == ["hi", "a", "b"]
    moved = [{"session": "run-1", "state_patch": [], "base": {"id": first["id"]}}]
    assert api.post("/checkpoints/batch", {"checkpoints": moved}).status_code == 409
    named = [items[0] | {"idempotency_key": "n1"}, items[1] | {"base": {"id": first["id"]}}]
    assert api.post("/checkpoints/batch", {"checkpoints": named}).status_code == 409  # the first: head moved
    assert Checkpoint.objects.count() == 3


def test_the_schema_describes_state_patch_base_and_base_moved(client):
    schema = client.get("/api/v1/openapi.json").json()
    fields = schema["components"]["schemas"]["CheckpointIn"]["properties"]
    assert {"state", "state_patch", "base", "restore_generation"} <= fields.keys()
    assert "base_moved" in fields["state_patch"]["description"]
    operation = schema["paths"]["/api/v1/sessions/{external_id}/checkpoints"]["post"]
    assert "base_moved" in operation["description"] and "409" in operation["responses"]


def test_a_patch_repeated_against_the_checkpoint_its_key_made_returns_it(first, api):
    """An agent replaying its last step after a restart: its client diffs the state against what it wrote."""
    body = {"state_patch": [], "base": {"id": first["id"]}, "idempotency_key": "k-1"}
    made = post(api, body)
    again = post(api, {**body, "base": {"id": made.json()["id"]}})
    assert again.status_code == 200 and again.json()["id"] == made.json()["id"]


def test_a_copy_bomb_is_refused_at_the_copy_past_the_budget_and_stores_nothing(first, api, settings):
    """`copy` of "" doubles the document at each operation: a 1 kB body would ask for gigabytes."""
    settings.CHECKPOINT_MAX_BODY_BYTES = 200_000
    patch = [{"op": "add", "path": "/blob", "value": "x" * 10_000}]
    patch += [{"op": "copy", "from": "", "path": f"/c{n}"} for n in range(30)]
    response = post(api, {"state_patch": patch})
    assert response.status_code == 422, response.content
    detail = str(response.json()["detail"])
    assert "(copy '/c" in detail and "copies more than 200,000 bytes" in detail
    assert Checkpoint.objects.count() == 1


def test_a_patch_may_not_grow_the_state_past_what_a_body_may_hold(first, api, settings):
    settings.CHECKPOINT_MAX_BODY_BYTES = 20_000
    grow = {"state_patch": [{"op": "add", "path": "/messages/-", "value": "y" * 8_000}]}
    assert post(api, grow).status_code == 201
    assert post(api, grow).status_code == 201
    response = post(api, grow)  # each body is small; the state would pass the limit
    assert response.status_code == 422, response.content
    assert "over the 20,000 a checkpoint may hold" in str(response.json()["detail"])
    assert Checkpoint.objects.count() == 3


def test_insertions_at_the_front_of_a_long_list_are_refused_past_the_budget(first, api, settings):
    settings.CHECKPOINT_MAX_BODY_BYTES = 300_000
    assert post(api, {"state": {"items": list(range(40_000))}}).status_code == 201
    front = [{"op": "add", "path": "/items/0", "value": n} for n in range(10)]  # each moves 40,000 items
    response = post(api, {"state_patch": front})
    assert response.status_code == 422, response.content
    assert "operation 7 (add '/items/0')" in str(response.json()["detail"])
    assert "shifts more than 300,000 list items" in str(response.json()["detail"])
    removals = [{"op": "remove", "path": "/items/0"}] * 10 + [{"op": "move", "from": "/items/0", "path": "/x"}]
    assert post(api, {"state_patch": removals}).status_code == 422
    huge = {"state_patch": [{"op": "add", "path": "/items/99999999999999999999999", "value": 1}]}
    assert post(api, huge).status_code == 422
    assert Checkpoint.objects.count() == 2
    appended = [{"op": "add", "path": "/items/-", "value": n} for n in range(10)]  # appends move nothing
    assert post(api, {"state_patch": appended}).status_code == 201


def test_a_body_is_validated_once_and_still_refuses_unknown_fields_at_any_depth(first, api, monkeypatch):
    """django-ninja validated a model that forbids extra fields twice (once as given, once through its
    DjangoGetter), so each patch operation four times and each batch item four times: once now."""
    from checkpoints.store import jsoncodec

    checked: list[Any] = []
    real = jsoncodec.check_value
    monkeypatch.setattr(jsoncodec, "check_value", lambda value, **kw: (checked.append(value), real(value, **kw))[1])
    metadata = lambda: [value for value in checked if isinstance(value, dict) and "meta" in value]  # noqa: E731
    patch = [{"op": "add", "path": "/messages/-", "value": "x"}, {"op": "replace", "path": "/step", "value": 2}]
    assert post(api, {"state_patch": patch, "metadata": {"meta": 1}}).status_code == 201
    assert metadata() == [{"meta": 1}] * 2  # the schema's check, and the service's (for every caller)
    checked.clear()
    items = [{"session": "run-1", "state": {"n": n}, "metadata": {"meta": n}} for n in range(3)]
    assert api.post("/checkpoints/batch", {"checkpoints": items}).status_code == 201
    assert sorted(value["meta"] for value in metadata()) == [0, 0, 1, 1, 2, 2]
    for body in (
        {"state_patch": [{"op": "add", "path": "/a", "value": 1, "junk": 1}]},
        {"state_patch": [{"op": "add", "path": "/a", "value": 1}], "base": {"id": first["id"], "junk": 1}},
        {"state": {}, "junk": 1},
    ):
        response = post(api, body)
        assert response.status_code == 422 and "unknown field(s): 'junk'" in response.content.decode()
    batch = {"checkpoints": [{"session": "run-1", "state": {}, "junk": 1}]}
    response = api.post("/checkpoints/batch", batch)
    assert response.status_code == 422 and "unknown field(s): 'junk'" in response.content.decode()
