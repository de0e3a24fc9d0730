from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage

from checkpoints.models import AgentSession, Checkpoint, LangGraphCheckpoint
from checkpoints.store import jsoncodec
from tests.kits.langgraph_kit import lg_id, messages, put_body, typed, untyped

PUT = "/langgraph/checkpoints"
WRITES = "/langgraph/writes"


def put(api, *args, **kwargs):
    response = api.post(PUT, put_body(*args, **kwargs))
    assert response.status_code == 201, response.content
    return response.json()


def latest(api, thread_id, **params):
    return api.get("/langgraph/checkpoint", {"thread_id": thread_id, **params})


def listed(api, **params):
    response = api.get("/langgraph/checkpoints", params)
    assert response.status_code == 200, response.content
    return response.json()


def ids(page):
    return [item["checkpoint_id"] for item in page["items"]]


# ---- put and get_tuple -----------------------------------------------------------------------------------


def test_a_put_stores_a_thread_as_a_langgraph_session_whose_checkpoint_state_is_the_channel_values(api):
    created = put(api, "thread-1", 0)
    tuple_ = latest(api, "thread-1").json()
    session = AgentSession.objects.get()
    checkpoint = Checkpoint.objects.get()
    assert (session.external_id, session.agent, session.source_format) == ("thread-1", "langgraph", "langgraph")
    assert session.metadata == {"thread_id": "thread-1"}
    assert created == {
        "checkpoint_id": lg_id(0),
        "checkpoint_ns": "",
        "thread_id": "thread-1",
        "id": checkpoint.pk,
        "seq": 1,
    }
    assert (checkpoint.name, checkpoint.kind, checkpoint.step) == ("loop", "step", 0)
    assert checkpoint.metadata == {
        "source": "loop",
        "step": 0,
        "parents": {},
        "checkpoint_id": lg_id(0),
        "checkpoint_ns": "",
        "langgraph_nodes": {"ran": None, "next": []},  # a loop step whose parent is not stored: who wrote it is unknown
    }
    assert tuple_["checkpoint"]["channel_values"] == {"messages": messages(1)}
    assert tuple_["checkpoint"]["channel_versions"] == {"messages": f"{0:032}.0.5"}
    assert tuple_["metadata"] == {"source": "loop", "step": 0, "parents": {}}
    assert tuple_["parent_checkpoint_id"] is None
    assert tuple_["console"] == {"id": checkpoint.pk, "seq": 1, "session": "thread-1"}


def test_messages_come_back_as_the_objects_langgraph_put(api):
    put(api, "thread-1", 1)
    stored = latest(api, "thread-1").json()["checkpoint"]["channel_values"]["messages"]
    message = untyped(stored[1])
    assert isinstance(message, AIMessage)
    assert message.tool_calls == [{"name": "search", "args": {"q": 1}, "id": "c1", "type": "tool_call"}]
    assert stored[1]["type"] == "ai" and stored[1]["content"] == "answer 1"  # readable in the console


def test_get_tuple_without_an_id_is_the_largest_id_and_with_one_that_checkpoint(api):
    put(api, "thread-1", 2)
    put(api, "thread-1", 1)  # arrives late
    assert latest(api, "thread-1").json()["checkpoint_id"] == lg_id(2)
    assert latest(api, "thread-1", checkpoint_id=lg_id(1)).json()["checkpoint_id"] == lg_id(1)
    assert latest(api, "thread-1", checkpoint_id=lg_id(9)).status_code == 404
    assert latest(api, "no-such-thread").status_code == 404


def test_the_head_is_the_root_namespace_checkpoint_with_the_largest_id(api):
    put(api, "thread-1", 7, ns="child:abc")  # a subgraph saves first
    assert AgentSession.objects.get().head is None
    put(api, "thread-1", 2)
    put(api, "thread-1", 1, parent=0)
    put(api, "thread-1", 5, ns="child:abc")
    head = AgentSession.objects.get().head
    assert head.metadata["checkpoint_id"] == lg_id(2)


def test_a_put_hangs_under_its_real_parent_so_a_branch_shows(api):
    first = put(api, "thread-1", 0)
    second = put(api, "thread-1", 1, parent=0)
    put(api, "thread-1", 2, parent=1)
    branch = put(api, "thread-1", 3, parent=0)  # time travel from the first
    rows = {c.pk: c for c in Checkpoint.objects.all()}
    assert rows[second["id"]].parent_id == first["id"]
    assert rows[branch["id"]].parent_id == first["id"]
    assert rows[branch["id"]].starts_branch
    assert latest(api, "thread-1").json()["parent_checkpoint_id"] == lg_id(0)


def test_thread_ids_with_a_slash_or_300_characters_are_sessions_with_the_original_id_kept(api):
    long_id = "x" * 300
    for thread_id in ("user/42", long_id, "50% off", "ünïcödé ☃"):
        put(api, thread_id, 0)
        assert latest(api, thread_id).json()["thread_id"] == thread_id
    external = set(AgentSession.objects.values_list("external_id", flat=True))
    assert {"user%2F42", "50%25 off", "ünïcödé ☃"} < external
    assert any(name.startswith("%sha256:") for name in external)


def test_a_put_repeating_an_id_replaces_it_for_langgraph_and_keeps_the_old_one_in_the_console(api):
    put(api, "thread-1", 0)
    put(api, "thread-1", 0, metadata={"source": "update", "step": 0, "parents": {}})
    assert latest(api, "thread-1").json()["metadata"]["source"] == "update"
    assert Checkpoint.objects.count() == 2
    assert LangGraphCheckpoint.objects.filter(current=True).count() == 1
    assert len(listed(api, thread_id="thread-1")["items"]) == 1


def test_an_identical_repeat_stores_nothing(api):
    first = put(api, "thread-1", 0)
    again = put(api, "thread-1", 0)
    assert again["id"] == first["id"]
    assert Checkpoint.objects.count() == 1


# ---- O(change): omitted channels and appends -------------------------------------------------------------


def test_omitted_channels_and_appends_resolve_against_the_base_checkpoint(api):
    put(api, "thread-1", 0, values={"messages": messages(1), "plan": typed({"todo": [1, 2]})})
    put(
        api,
        "thread-1",
        1,
        parent=0,
        values={},
        channels=["messages", "plan"],
        appends={"messages": {"base_len": 1, "items": messages(2)[1:]}},
        base_checkpoint_id=lg_id(0),
    )
    values = latest(api, "thread-1").json()["checkpoint"]["channel_values"]
    assert values == {"messages": messages(2), "plan": {"todo": [1, 2]}}


@pytest.mark.parametrize(
    "change",
    [
        {"base_checkpoint_id": lg_id(7), "channels": ["messages"], "values": {}},  # unknown base
        {"base_checkpoint_id": lg_id(0), "channels": ["messages", "gone"], "values": {"messages": []}},  # lacks one
        {"base_checkpoint_id": lg_id(0), "appends": {"messages": {"base_len": 3, "items": []}}, "values": {}},
        {"appends": {"messages": {"base_len": 1, "items": []}}, "values": {}},  # no base named
    ],
)
def test_a_put_the_base_cannot_serve_gets_409_resend_and_stores_nothing(api, change):
    put(api, "thread-1", 0)
    response = api.post(PUT, {**put_body("thread-1", 1, parent=0), **change})
    assert response.status_code == 409, response.content
    assert response.json()["resend"] is True
    assert Checkpoint.objects.count() == 1


# ---- writes ----------------------------------------------------------------------------------------------


def write(api, checkpoint_id, task_id, writes, thread_id="thread-1", **extra):
    body = {"thread_id": thread_id, "checkpoint_id": checkpoint_id, "task_id": task_id, "writes": writes, **extra}
    return api.post(WRITES, body)


def test_writes_come_back_with_their_checkpoint_sorted_by_task_path_task_and_index(api):
    put(api, "thread-1", 0)
    assert write(
        api, lg_id(0), "task-b", [["messages", typed("b0")], ["plan", typed("b1")]], task_path="~2"
    ).json() == {"stored": 2}
    write(api, lg_id(0), "task-a", [["messages", typed("a0")]], task_path="~1")
    pending = latest(api, "thread-1").json()["pending_writes"]
    assert pending == [["task-a", "messages", "a0"], ["task-b", "messages", "b0"], ["task-b", "plan", "b1"]]


def test_a_repeated_write_keeps_the_first_while_special_channels_replace(api):
    put(api, "thread-1", 0)
    write(api, lg_id(0), "task", [["messages", typed("first")], ["__error__", typed("boom")]])
    response = write(api, lg_id(0), "task", [["messages", typed("second")], ["__error__", typed("boom 2")]])
    assert response.json() == {"stored": 1}
    pending = latest(api, "thread-1").json()["pending_writes"]
    assert pending == [["task", "__error__", "boom 2"], ["task", "messages", "first"]]


def test_interrupt_and_resume_writes_round_trip(api):
    put(api, "thread-1", 0)
    interrupt = typed({"value": "approve?", "id": "i1"})
    write(api, lg_id(0), "task", [["__interrupt__", interrupt]])
    write(api, lg_id(0), "task", [["__resume__", typed("yes")]])
    pending = latest(api, "thread-1").json()["pending_writes"]
    assert pending == [["task", "__resume__", "yes"], ["task", "__interrupt__", interrupt]]


# ---- list ------------------------------------------------------------------------------------------------


def test_list_is_newest_first_filtered_by_thread_namespace_before_and_limit(api):
    for n in range(4):
        put(api, "thread-1", n)
    put(api, "thread-1", 9, ns="child:1")
    put(api, "thread-2", 5)
    assert ids(listed(api, thread_id="thread-1")) == [lg_id(9), lg_id(3), lg_id(2), lg_id(1), lg_id(0)]
    assert ids(listed(api, thread_id="thread-1", checkpoint_ns="")) == [lg_id(3), lg_id(2), lg_id(1), lg_id(0)]
    assert ids(listed(api, thread_id="thread-1", checkpoint_ns="", before=lg_id(2))) == [lg_id(1), lg_id(0)]
    assert ids(listed(api, thread_id="thread-1", checkpoint_ns="", limit=2)) == [lg_id(3), lg_id(2)]
    assert ids(listed(api)) == [lg_id(9), lg_id(5), lg_id(3), lg_id(2), lg_id(1), lg_id(0)]


def test_list_filters_metadata_at_the_database_by_exact_value(api):
    put(api, "thread-1", 0, metadata={"source": "input", "step": -1, "user": {"name": "ada"}})
    put(api, "thread-1", 1, metadata={"source": "loop", "step": 0, "user": {"name": "ada", "x": 1}})
    put(api, "thread-1", 2, metadata={"source": "loop", "step": 1, "tags": ["a", "b"]})
    assert ids(listed(api, filter=json.dumps({"source": "loop"}))) == [lg_id(2), lg_id(1)]
    assert ids(listed(api, filter=json.dumps({"step": -1}))) == [lg_id(0)]
    assert ids(listed(api, filter=json.dumps({"user": {"name": "ada"}}))) == [lg_id(0)]  # equal, not contained
    assert ids(listed(api, filter=json.dumps({"tags": ["a"]}))) == []
    assert listed(api, filter=json.dumps({"source": "loop", "step": 1}))["items"][0]["metadata"]["tags"] == ["a", "b"]


def test_list_filters_values_the_database_cannot_hold_as_they_are(api):
    put(api, "thread-1", 0, metadata={"source": "input", "note": "nul\x00 and \ue000", "big": 1e300})
    put(api, "thread-1", 1, metadata={"source": "input", "note": "plain", "big": 1})
    assert ids(listed(api, filter=json.dumps({"note": "nul\x00 and \ue000"}))) == [lg_id(0)]
    assert ids(listed(api, filter=json.dumps({"big": 1e300}))) == [lg_id(0)]


def test_list_pages_hold_20_and_the_cursor_continues_within_the_limit(api):
    for n in range(45):
        put(api, "thread-1", n, values={"n": n})
    first = listed(api, thread_id="thread-1")
    second = listed(api, thread_id="thread-1", cursor=first["next_cursor"])
    third = listed(api, thread_id="thread-1", cursor=second["next_cursor"])
    assert ids(first) + ids(second) + ids(third) == [lg_id(n) for n in reversed(range(45))]
    assert third["next_cursor"] is None
    capped = listed(api, thread_id="thread-1", limit=25)
    rest = listed(api, thread_id="thread-1", cursor=capped["next_cursor"])
    assert len(ids(capped)) == 20 and len(ids(rest)) == 5 and rest["next_cursor"] is None


GET_BY_BODY = "/langgraph/checkpoint/get"
LIST_BY_BODY = "/langgraph/checkpoints/list"


def test_get_tuple_and_list_take_their_arguments_in_a_body_and_answer_as_the_url_forms_do(api, read_only_api):
    for n in range(25):
        put(api, "thread-1", n, metadata={"source": "loop" if n % 2 else "input", "step": n, "parents": {}})
    put(api, "thread-2", 30)
    for params in ({"thread_id": "thread-1"}, {"thread_id": "thread-1", "checkpoint_id": lg_id(3)}):
        by_body = read_only_api.post(GET_BY_BODY, params)
        assert by_body.status_code == 200 and by_body.json() == latest(api, **params).json()
    assert read_only_api.post(GET_BY_BODY, {"thread_id": "none"}).status_code == 404
    for params in ({}, {"thread_id": "thread-1", "before": lg_id(10)}, {"limit": 22}, {"checkpoint_ns": ""}):
        by_body = read_only_api.post(LIST_BY_BODY, params).json()
        assert by_body == listed(api, **params)
        if by_body["next_cursor"]:
            rest = read_only_api.post(LIST_BY_BODY, {**params, "cursor": by_body["next_cursor"]}).json()
            assert rest == listed(api, **params, cursor=by_body["next_cursor"])
    filtered = read_only_api.post(LIST_BY_BODY, {"filter": {"source": "input"}, "limit": 3}).json()
    assert filtered == listed(api, filter=json.dumps({"source": "input"}), limit=3) and len(ids(filtered)) == 3


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        (GET_BY_BODY, {"thread_id": "é" * 1001}, "thread_id"),
        (GET_BY_BODY, {"thread_id": ""}, "thread_id"),
        (GET_BY_BODY, {}, "thread_id"),
        (LIST_BY_BODY, {"thread_id": "😀" * 1001}, "thread_id"),
        (LIST_BY_BODY, {"filter": [1]}, "filter"),
        (LIST_BY_BODY, {"limit": 0}, "limit"),
        (LIST_BY_BODY, {"thread": "t"}, "thread"),
        (GET_BY_BODY, {"thread_id": "t", "base": 0}, "base"),
        (LIST_BY_BODY, {"base": 2**63}, "base"),
        (LIST_BY_BODY, {"relative": "maybe"}, "relative"),
    ],
)
def test_the_body_forms_refuse_bad_arguments_with_422_naming_the_field(api, path, body, field):
    response = api.post(path, body)
    assert response.status_code == 422, response.content
    assert field in json.dumps(response.json()["detail"])


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(thread_id=st.text(min_size=1, max_size=1000))
def test_a_thread_id_of_up_to_1000_characters_of_any_script_is_put_got_and_listed(api, thread_id):
    put(api, thread_id, 0)
    got = api.post(GET_BY_BODY, {"thread_id": thread_id})
    assert got.status_code == 200 and got.json()["thread_id"] == thread_id
    assert ids(api.post(LIST_BY_BODY, {"thread_id": thread_id}).json()) == [lg_id(0)]


def test_a_read_against_a_base_sends_what_changed_and_list_each_tuple_against_the_one_before(api, read_only_api):
    for n in range(3):
        put(api, "thread-1", n, parent=n - 1 if n else None, values={"messages": messages(n + 1), "topic": "t"})
    first = read_only_api.post(GET_BY_BODY, {"thread_id": "thread-1", "checkpoint_id": lg_id(0)}).json()
    got = read_only_api.post(GET_BY_BODY, {"thread_id": "thread-1", "base": first["console"]["id"]}).json()
    whole = latest(api, "thread-1").json()

    assert "channel_values" not in got["checkpoint"] and got["checkpoint"]["id"] == lg_id(2)
    assert got["channel_patch"] == {
        "base": first["console"]["id"],
        "same": ["topic"],
        "lists": {"messages": {"keep": 1, "items": whole["checkpoint"]["channel_values"]["messages"][1:]}},
        "values": {},
    }
    page = read_only_api.post(LIST_BY_BODY, {"thread_id": "thread-1", "relative": True}).json()["items"]
    assert page[0]["checkpoint"]["channel_values"] == whole["checkpoint"]["channel_values"]
    assert [item["channel_patch"]["lists"]["messages"]["keep"] for item in page[1:]] == [2, 1]
    assert [item["channel_patch"]["base"] for item in page[1:]] == [item["console"]["id"] for item in page[:2]]


def test_values_equal_in_python_but_not_in_json_are_sent_as_changed(api):
    put(api, "thread-1", 0, values={"messages": [1, True], "count": 1})
    put(api, "thread-1", 1, parent=0, values={"messages": [1.0, 1], "count": 1.0})
    base = api.post(GET_BY_BODY, {"thread_id": "thread-1", "checkpoint_id": lg_id(0)}).json()["console"]["id"]

    patch = api.post(GET_BY_BODY, {"thread_id": "thread-1", "base": base}).json()["channel_patch"]

    assert patch["same"] == [] and patch["lists"] == {}
    assert patch["values"] == {"messages": [1.0, 1], "count": 1.0}


def test_a_base_of_another_project_or_none_at_all_gets_the_whole_state(api, api_as, other_project):
    from checkpoints.services import create_api_token

    put(api, "thread-1", 0)
    theirs = api.post(GET_BY_BODY, {"thread_id": "thread-1"}).json()
    other = api_as(create_api_token(other_project, name="other")[1])
    other.post(PUT, put_body("thread-1", 0))

    for base in (theirs["console"]["id"], 2**62):
        got = other.post(GET_BY_BODY, {"thread_id": "thread-1", "base": base}).json()
        page = other.post(LIST_BY_BODY, {"relative": True, "base": base}).json()["items"]
        assert "channel_patch" not in got and "channel_patch" not in page[0]
        assert got["checkpoint"]["channel_values"] == theirs["checkpoint"]["channel_values"]
        assert got["console"]["id"] != theirs["console"]["id"]


# ---- boundaries ------------------------------------------------------------------------------------------


def test_a_read_only_token_reads_but_cannot_put_or_write(api, read_only_api):
    put(api, "thread-1", 0)
    assert latest(read_only_api, "thread-1").status_code == 200
    assert read_only_api.post(PUT, put_body("thread-1", 1)).status_code == 403
    assert write(read_only_api, lg_id(0), "task", []).status_code == 403


def test_a_token_sees_no_thread_of_another_project(api, api_as, other_project):
    from checkpoints.services import create_api_token

    put(api, "thread-1", 0)
    other = api_as(create_api_token(other_project, name="other")[1])
    assert latest(other, "thread-1").status_code == 404
    assert listed(other)["items"] == []


@pytest.mark.parametrize(
    "change",
    [
        {"checkpoint": {"v": 4}},  # no id
        {"checkpoint": {"id": 7}},
        {"checkpoint": {"id": "x" * 201}},
        {
            "values": {
                "messages": {"__lg__": [5, "m", "C", "model_validate_json"], "b": {"__lg__": ["bin"], "b64": "!!"}}
            }
        },
        {"values": {"messages": {"__lg__": ["map"], "items": [1]}}},
        {"metadata": {"__lg__": ["float"], "v": "no"}},
        {"appends": {"messages": {"base_len": -1, "items": []}}},
        {"appends": {"messages": {"items": []}}},
        {"channels": ["other"]},
        {"thread_id": ""},
        {"checkpoint": {"id": "a", "channel_values": {}}},
        {"surprise": 1},
    ],
)
def test_malformed_puts_get_422_and_store_nothing(api, change):
    response = api.post(PUT, {**put_body("thread-1", 0), **change})
    assert response.status_code == 422, response.content
    assert Checkpoint.objects.count() == 0


def test_malformed_writes_and_queries_get_4xx(api):
    put(api, "thread-1", 0)
    assert write(api, lg_id(0), "task", [["messages"]]).status_code == 422
    assert write(api, lg_id(0), "task", [["messages", {"__lg__": ["bin"], "b64": 3}]]).status_code == 422
    assert listed_status(api, filter="{not json") == 422
    assert listed_status(api, filter="[1]") == 422
    assert listed_status(api, cursor="garbage") == 400
    assert listed_status(api, limit=0) == 422


def listed_status(api, **params):
    return api.get("/langgraph/checkpoints", params).status_code


def test_the_langgraph_endpoints_are_in_the_openapi_schema(client):
    paths = client.get("/api/v1/openapi.json").json()["paths"]
    for path in ("checkpoints", "checkpoint", "writes", "checkpoint/get", "checkpoints/list"):
        assert f"/api/v1/langgraph/{path}" in paths


# ---- deletions and copies the agent asks for -------------------------------------------------------------


def writes_for(api, thread_id, n, task="task"):
    response = write(
        api, lg_id(n), task, [["messages", typed(f"w{n}")], ["__interrupt__", typed("wait")]], thread_id=thread_id
    )
    assert response.status_code == 200, response.content


def thread_with_writes(api, thread_id, count, **kwargs):
    for n in range(count):
        put(api, thread_id, n, parent=n - 1 if n else None, **kwargs)
        writes_for(api, thread_id, n)


def audits(action):
    from checkpoints.models import AuditEvent

    return list(AuditEvent.objects.filter(action=action))


def test_delete_thread_removes_every_checkpoint_and_write_reports_them_and_is_audited(api):
    thread_with_writes(api, "user/1", 3)
    put(api, "user/1", 9, ns="child:1")
    put(api, "user/2", 0)
    response = api.post("/langgraph/threads/delete", {"thread_id": "user/1"})
    assert response.json() == {"deleted_checkpoints": 4, "deleted_writes": 6}
    assert latest(api, "user/1").status_code == 404
    assert ids(listed(api)) == [lg_id(0)]  # the other thread stays
    [event] = audits("langgraph_delete_thread")
    assert event.actor.startswith("token:")
    assert event.details["deleted_checkpoints"] == 4 and event.details["thread_id"] == "user/1"
    assert api.post("/langgraph/threads/delete", {"thread_id": "never"}).json() == {
        "deleted_checkpoints": 0,
        "deleted_writes": 0,
    }


def test_a_deleted_thread_refuses_late_puts_and_writes_from_its_history_with_410_but_starts_afresh(api):
    thread_with_writes(api, "thread-1", 2)
    api.post("/langgraph/threads/delete", {"thread_id": "thread-1"})
    late = api.post(PUT, put_body("thread-1", 2, parent=1))
    assert late.status_code == 410, late.content
    assert write(api, lg_id(1), "task", [["messages", typed("late")]]).status_code == 410
    assert latest(api, "thread-1").status_code == 404  # nothing came back
    put(api, "thread-1", 5)  # no parent: a fresh start
    put(api, "thread-1", 6, parent=5)
    assert write(api, lg_id(6), "task", [["messages", typed("new")]]).status_code == 200
    assert ids(listed(api, thread_id="thread-1")) == [lg_id(6), lg_id(5)]


def test_copy_thread_copies_every_checkpoint_namespace_and_write_sharing_states(api):
    thread_with_writes(api, "src/1", 3)
    put(api, "src/1", 7, ns="child:1")
    response = api.post("/langgraph/threads/copy", {"source_thread_id": "src/1", "target_thread_id": "dst/1"})
    assert response.json() == {"copied_checkpoints": 4, "copied_writes": 6}
    source, target = listed(api, thread_id="src/1")["items"], listed(api, thread_id="dst/1")["items"]
    strip = lambda item: {k: v for k, v in item.items() if k not in ("thread_id", "console")}  # noqa: E731
    assert [strip(item) for item in target] == [strip(item) for item in source]
    copies = Checkpoint.objects.filter(session__external_id="dst%2F1").order_by("seq")
    originals = Checkpoint.objects.filter(session__external_id="src%2F1").order_by("seq")
    assert [bytes(c.root) for c in copies] == [bytes(c.root) for c in originals]
    assert sum(c.stored_bytes for c in copies) == 0
    assert [c.parent.seq if c.parent else None for c in copies] == [None, 1, 2, None]
    assert AgentSession.objects.get(external_id="dst%2F1").head.metadata["checkpoint_id"] == lg_id(2)
    [event] = audits("langgraph_copy_thread")
    assert event.details["copied_checkpoints"] == 4


def test_delete_for_runs_deletes_the_runs_checkpoints_with_their_writes(api):
    for n in range(4):
        put(
            api,
            "thread-1",
            n,
            parent=n - 1 if n else None,
            metadata={"source": "loop", "step": n, "run_id": f"run-{n % 2}"},
        )
        writes_for(api, "thread-1", n)
    response = api.post("/langgraph/runs/delete", {"run_ids": ["run-1", "run-9"]})
    assert response.json() == {"deleted_checkpoints": 2, "deleted_writes": 4}
    assert ids(listed(api, thread_id="thread-1")) == [lg_id(2), lg_id(0)]
    assert latest(api, "thread-1").json()["pending_writes"] == [
        ["task", "__interrupt__", "wait"],
        ["task", "messages", "w2"],
    ]
    head = AgentSession.objects.get().head
    assert head.metadata["checkpoint_id"] == lg_id(2)
    assert Checkpoint.objects.get(pk=head.pk).parent.metadata["checkpoint_id"] == lg_id(0)  # re-pointed
    [event] = audits("langgraph_delete_for_runs")
    assert event.details["run_ids"] == ["run-1", "run-9"]


def test_prune_keep_latest_keeps_each_namespaces_latest_with_its_writes(api):
    thread_with_writes(api, "thread-1", 3)
    put(api, "thread-1", 7, ns="child:1")
    put(api, "thread-1", 8, ns="child:1")
    put(api, "thread-2", 0)
    response = api.post("/langgraph/threads/prune", {"thread_ids": ["thread-1", "unknown"], "strategy": "keep_latest"})
    assert response.json() == {"deleted_checkpoints": 3, "deleted_writes": 4}
    assert ids(listed(api, thread_id="thread-1")) == [lg_id(8), lg_id(2)]
    assert len(latest(api, "thread-1").json()["pending_writes"]) == 2
    assert ids(listed(api, thread_id="thread-2")) == [lg_id(0)]
    assert AgentSession.objects.get(external_id="thread-1").checkpoint_count == 2


def test_a_deleted_thread_id_run_again_takes_writes_before_their_checkpoint_as_langgraph_async_durability_sends(api):
    # durability="async": the new input checkpoint's writes may arrive before its put, and they name no parent
    thread_with_writes(api, "thread-1", 3)
    api.post("/langgraph/threads/delete", {"thread_id": "thread-1"})

    assert write(api, lg_id(5), "task", [["messages", typed("new")]]).json() == {"stored": 1}
    put(api, "thread-1", 5)
    put(api, "thread-1", 6, parent=5)

    found = latest(api, "thread-1", checkpoint_id=lg_id(5)).json()
    assert [w[0] for w in found["pending_writes"]] == ["task"]
    assert ids(listed(api, thread_id="thread-1")) == [lg_id(6), lg_id(5)]


@pytest.mark.parametrize("late", [0, 1, 2])
def test_after_a_delete_ids_at_or_below_the_newest_deleted_one_are_still_refused(api, late):
    thread_with_writes(api, "thread-1", 3)
    api.post("/langgraph/threads/delete", {"thread_id": "thread-1"})
    put(api, "thread-1", 5)  # the thread runs again

    assert write(api, lg_id(late), "task", [["messages", typed("late")]]).status_code == 410
    assert write(api, lg_id(late).upper(), "task", [["messages", typed("late")]]).status_code == 410
    assert api.post(PUT, put_body("thread-1", 9, parent=late)).status_code == 410
    assert write(api, lg_id(3), "task", [["messages", typed("newer")]]).status_code == 200  # above: a new id
    assert ids(listed(api, thread_id="thread-1")) == [lg_id(5)]


def test_prune_delete_deletes_the_threads_and_leaves_tombstones(api):
    thread_with_writes(api, "thread-1", 2)
    response = api.post("/langgraph/threads/prune", {"thread_ids": ["thread-1"], "strategy": "delete"})
    assert response.json() == {"deleted_checkpoints": 2, "deleted_writes": 4}
    assert api.post(PUT, put_body("thread-1", 2, parent=1)).status_code == 410
    assert len(audits("langgraph_prune")) == 1


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/langgraph/threads/delete", {"thread_id": "thread-1"}),
        ("/langgraph/threads/copy", {"source_thread_id": "thread-1", "target_thread_id": "t2"}),
        ("/langgraph/runs/delete", {"run_ids": ["r"]}),
        ("/langgraph/threads/prune", {"thread_ids": ["thread-1"]}),
    ],
)
def test_deletions_and_copies_need_a_write_token(api, read_only_api, path, body):
    put(api, "thread-1", 0)
    assert read_only_api.post(path, body).status_code == 403
    assert Checkpoint.objects.count() == 1


def test_prune_refuses_an_unknown_strategy(api):
    response = api.post("/langgraph/threads/prune", {"thread_ids": ["thread-1"], "strategy": "everything"})
    assert response.status_code == 422


# ---- any body: a 2xx or a 4xx, never a server error -------------------------------------------------------

_TAGS = st.sampled_from(
    [[5, "m", "C", "model_validate_json"], ["map"], ["bin"], ["float"], ["ext", 1], ["typed", "x"], [], ["json"]]
)
_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
_TYPED = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(max_size=5), inner, max_size=3)
        | st.builds(
            lambda tag, rest: {**rest, "__lg__": tag},
            _TAGS,
            st.dictionaries(st.sampled_from(["items", "b64", "v", "content"]), inner, max_size=2),
        )
    ),
    max_leaves=12,
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    values=st.dictionaries(st.text(min_size=1, max_size=6), _TYPED, max_size=3),
    metadata=st.dictionaries(st.text(max_size=6), _TYPED, max_size=3),
    appends=st.dictionaries(st.sampled_from(["messages", "x"]), _TYPED, max_size=2),
    channels=st.none() | st.lists(st.text(max_size=6), max_size=3),
    base=st.none() | st.sampled_from([lg_id(0), lg_id(5)]),
)
def test_any_put_body_gets_a_2xx_or_a_4xx_never_a_server_error(api, values, metadata, appends, channels, base):
    body = {**put_body("thread-h", 1, parent=0), "values": values, "metadata": metadata, "appends": appends}
    body.update(channels=channels, base_checkpoint_id=base)
    response = api.post(PUT, raw=jsoncodec.dumps(body))  # integers beyond 64 bits too
    assert response.status_code in (201, 409, 422), response.content
    if response.status_code == 201:
        assert latest(api, "thread-h", checkpoint_id=lg_id(1)).status_code == 200


def test_a_message_written_and_then_appended_is_stored_once_and_still_comes_back_as_the_write(api):
    from checkpoints.models import LangGraphWrites

    put(api, "thread-1", 0, values={"messages": messages(1)})
    new = messages(2)[1]
    write(api, lg_id(0), "task", [["messages", [new]], ["branch:to:tools", None]])
    write(api, lg_id(0), "other", [["messages", typed("not appended")]])
    before = latest(api, "thread-1", checkpoint_id=lg_id(0)).json()["pending_writes"]
    appended = {"messages": {"base_len": 1, "items": [new]}}
    put(api, "thread-1", 1, parent=0, values={}, channels=["messages"], appends=appended, base_checkpoint_id=lg_id(0))
    write(api, lg_id(1), "next", [["branch:to:agent", None]])  # the next step's writes name the message
    assert latest(api, "thread-1", checkpoint_id=lg_id(0)).json()["pending_writes"] == before
    shared = LangGraphWrites.objects.get(task_id="task")
    assert shared.values_root is not None
    assert len(shared.writes) < 100  # the message is no longer in the row
    assert LangGraphWrites.objects.get(task_id="other").values_root is None
    # a later write to the same task keeps what is named
    write(api, lg_id(0), "task", [["__error__", typed("boom")]])
    pending = latest(api, "thread-1", checkpoint_id=lg_id(0)).json()["pending_writes"]
    assert pending == [["other", "messages", "not appended"], ["task", "__error__", "boom"], *before[1:]]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    values=st.dictionaries(st.text(min_size=1, max_size=6), _TYPED, max_size=3),
    metadata=st.dictionaries(st.text(max_size=6), _TYPED, max_size=3),
)
def test_any_stored_put_sent_again_unchanged_adds_no_console_checkpoint_and_changed_adds_one(api, values, metadata):
    """A saver retrying a put whose answer it lost sends the same body again: the console keeps one checkpoint.
    A put of the same id with other content replaces it for LangGraph and keeps the old one in the console."""
    body = {**put_body("thread-r", 1), "values": values, "metadata": metadata}
    first = api.post(PUT, raw=jsoncodec.dumps(body))
    assume(first.status_code == 201)
    stored = Checkpoint.objects.count()
    again = api.post(PUT, raw=jsoncodec.dumps(body))
    assert again.status_code == 201 and again.json() == first.json()
    assert Checkpoint.objects.count() == stored
    changed = {**body, "metadata": {**metadata, "source": "update", "retried": True}}
    replaced = api.post(PUT, raw=jsoncodec.dumps(changed))
    assert replaced.status_code == 201 and replaced.json()["id"] != first.json()["id"]
    assert Checkpoint.objects.count() == stored + 1
    assert LangGraphCheckpoint.objects.filter(checkpoint_id=lg_id(1), current=True).count() == 1


def test_a_put_sent_again_as_a_change_against_its_parent_adds_no_console_checkpoint(api):
    """The same checkpoint, first with every channel, then as an append to its parent (as ConsoleSaver sends it)."""
    put(api, "thread-1", 0)
    first = put(api, "thread-1", 1, parent=0)
    again = put(
        api,
        "thread-1",
        1,
        parent=0,
        values={},
        channels=["messages"],
        appends={"messages": {"base_len": 1, "items": messages(2)[1:]}},
        base_checkpoint_id=lg_id(0),
    )
    assert again == first
    assert Checkpoint.objects.count() == 2


def test_ids_holding_nul_and_escape_characters_reach_their_rows_on_every_path(api):
    """Text columns store NUL and the escape character escaped; the statements a put and its writes run must
    compare the ids as stored (a NUL sent as a parameter is a PostgreSQL error: it was a 500)."""
    thread, task = "user\x00\ue000/1", "task\x00\ue000"
    put(api, thread, 0)
    assert write(api, lg_id(0), task, [["messages", typed("w0")]], thread_id=thread).status_code == 200
    put(api, thread, 1, parent=0)
    assert write(api, lg_id(1), task, [["messages", typed("w1")]], thread_id=thread).status_code == 200
    got = latest(api, thread).json()
    assert got["checkpoint"]["id"] == lg_id(1)
    assert [entry[0] for entry in got["pending_writes"]] == [task]
    stray = write(api, "1f0c\x00\ue000", task, [["messages", typed("x")]], thread_id=thread)
    assert stray.status_code < 500, stray.content
