"""The types a project's LangGraph values may name: puts, writes and imports naming a callable outside the
project's allow-list are refused (422 naming the type and where to allow it) and store nothing."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from io import StringIO

import ormsgpack
import pytest
from django.core.management import CommandError, call_command
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.documents import Document
from langgraph.checkpoint.serde._msgpack import SAFE_MSGPACK_TYPES
from langgraph.types import Command, Interrupt, Send

from checkpoints.models import (
    DEFAULT_TYPE_ALLOWLIST,
    Checkpoint,
    LangGraphWrites,
    Project,
    default_type_allowlist,
    type_allowed,
)
from tests.helpers import command
from tests.kits.langgraph_kit import (
    ext_record,
    hostile,
    lg_id,
    messages,
    open_for_writing,
    put_body,
    shell_command,
    typed,
)

PUT = "/langgraph/checkpoints"
WRITES = "/langgraph/writes"


def refusal(response) -> str:
    assert response.status_code == 422, response.content
    [error] = response.json()["detail"]
    assert error["msg"].startswith(f"{error['loc'][1]}: ")
    return error["msg"]


def test_a_put_whose_channel_value_names_subprocess_getoutput_is_refused_and_stores_nothing(api, tmp_path):
    body = put_body("victim", 0, values={"messages": messages(1), "plan": shell_command(str(tmp_path / "x"))})

    said = refusal(api.post(PUT, body))

    assert said.startswith("values.plan: names the type subprocess.getoutput, which project acme does not")
    assert "Project settings" in said
    assert not Checkpoint.objects.exists()


def test_a_write_naming_builtins_open_is_refused_and_stores_nothing(api, tmp_path):
    assert api.post(PUT, put_body("victim", 0)).status_code == 201
    writes = [["messages", typed("fine")], ["plan", [{"nested": open_for_writing(str(tmp_path / "x"))}]]]
    body = {"thread_id": "victim", "checkpoint_id": lg_id(0), "task_id": "t", "writes": writes}

    said = refusal(api.post(WRITES, body))

    assert said.startswith("writes.1.0.nested: names the type builtins.open")
    assert not LangGraphWrites.objects.exists()


@pytest.mark.parametrize("where", ["checkpoint", "metadata", "appends"])
def test_the_header_the_metadata_and_appended_items_are_guarded_too(api, where):
    evil = shell_command("/tmp/never")  # noqa: S108 - a path the refused payload names, never created
    body = put_body("victim", 0)
    if where == "checkpoint":
        body["checkpoint"]["pending_sends"] = [evil]
    elif where == "metadata":
        body["metadata"]["writes"] = {"agent": evil}
    else:
        assert api.post(PUT, put_body("victim", 0)).status_code == 201
        body = put_body("victim", 1, parent=0, values={}, base_checkpoint_id=lg_id(0), channels=["messages"])
        body["appends"] = {"messages": {"base_len": 1, "items": [evil]}}

    said = refusal(api.post(PUT, body))

    assert said.startswith(f"{where}.") and "subprocess.getoutput" in said


def test_what_langgraph_writes_for_messages_and_its_own_types_is_allowed_by_default(api):
    values = {
        "messages": messages(3),
        "when": typed(datetime(2026, 11, 27, tzinfo=UTC)),
        "extra": typed(
            {
                "delay": timedelta(seconds=3),
                "ids": {uuid.UUID(int=1)},
                "price": Decimal("1.10"),
                "send": Send("node", {"x": 1}),
                "interrupt": Interrupt(value="ok?", id="i"),
                "command": Command(goto="node", update={"a": 1}),
                "doc": Document(page_content="text"),
            }
        ),
    }

    assert api.post(PUT, put_body("safe", 0, values=values)).status_code == 201


def test_an_operator_allowing_a_type_or_a_prefix_lets_it_in(api, project):
    value = hostile(ext_record(5, "myapp.state", "Plan", {"steps": []}))
    assert refusal(api.post(PUT, put_body("mine", 0, values={"plan": value})))
    Project.objects.filter(pk=project.pk).update(type_allowlist=[*default_type_allowlist(), "myapp."])

    assert api.post(PUT, put_body("mine", 0, values={"plan": value})).status_code == 201


@pytest.mark.parametrize(
    ("value", "named"),
    [
        (
            hostile(ext_record(3, "datetime", "datetime", "2026-01-01", "fromtimestamp")),
            "datetime.datetime.fromtimestamp",
        ),
        (hostile(ext_record(0, "builtins", "setattr", [])), "builtins.setattr"),
        (hostile(ormsgpack.Ext(0, b"\xc1")), "<undecodable ext 0>"),
        (hostile(ormsgpack.Ext(7, b"\xc1")), "<undecodable ext 7>"),
        (hostile(ormsgpack.Ext(1, ormsgpack.packb(["os"]))), "<malformed ext 1>"),
        (
            {"__lg__": ["json"], "v": {"lc": 2, "type": "constructor", "id": ["os", "system"], "kwargs": {}}},
            "os.system",
        ),
        ({"__lg__": ["typed", "pickle"], "b64": "gAROLg=="}, "pickle"),
        ({"__lg__": ["map"], "items": [[1, hostile(ext_record(2, "os", "popen", {}))]]}, "os.popen"),
    ],
    ids=["unlisted-method", "near-miss-name", "rawext", "rawext-delta", "malformed", "lc-json", "pickle", "map-value"],
)
def test_records_that_name_callables_in_other_shapes_are_refused(api, value, named):
    said = refusal(api.post(PUT, put_body("shapes", 0, values={"v": value})))

    assert f"names the type {named}," in said


def test_the_default_allow_list_covers_langgraphs_safe_types():
    for key in SAFE_MSGPACK_TYPES:
        assert type_allowed(DEFAULT_TYPE_ALLOWLIST, ".".join(key)), key
    assert type_allowed(DEFAULT_TYPE_ALLOWLIST, "datetime.datetime.fromisoformat")
    assert not type_allowed(DEFAULT_TYPE_ALLOWLIST, "builtins.setattr")


# ---- generated values ------------------------------------------------------------------------------------

NAMES = ["subprocess.getoutput", "builtins.open", "os.system", "myapp.Plan", "uuid.UUID", "decimal.Decimal"]
ALLOWED = [*DEFAULT_TYPE_ALLOWLIST, "myapp."]
named = st.one_of(
    st.sampled_from(NAMES),
    st.from_regex(r"[a-z_][a-z0-9_]{0,8}(\.[a-z_][a-z0-9_]{0,8}){1,3}", fullmatch=True),
)


@st.composite
def typed_values(draw: st.DrawFn, depth: int = 0) -> tuple[object, set[str]]:
    """A msgpack-level value with ext records (codes 0-5) nested in lists and maps, and the names it holds."""
    kind = draw(st.sampled_from(["leaf", "list", "map", "ext"] if depth < 3 else ["leaf"]))
    if kind == "leaf":
        return draw(st.one_of(st.none(), st.integers(-3, 3), st.text(max_size=4))), set()
    children = [draw(typed_values(depth + 1)) for _ in range(draw(st.integers(0, 3)))]
    found = set().union(*(names for _, names in children))
    if kind == "list":
        return [value for value, _ in children], found
    if kind == "map":
        return {f"k{n}": value for n, (value, _) in enumerate(children)}, found
    code, name = draw(st.integers(0, 5)), draw(named)
    module, _, attribute = name.rpartition(".")
    method = draw(st.sampled_from(["fromisoformat", "system"])) if code == 3 else None
    arg = {f"k{n}": value for n, (value, _) in enumerate(children)}
    return ext_record(code, module, attribute, arg, method), found | {f"{name}.{method}" if method else name}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(generated=typed_values())
def test_the_server_refuses_a_put_exactly_when_a_value_names_a_type_the_project_does_not_allow(api, project, generated):
    Project.objects.filter(pk=project.pk).update(type_allowlist=ALLOWED)
    value, names = generated
    thread = f"gen-{uuid.uuid4().hex}"

    response = api.post(PUT, put_body(thread, 0, values={"v": hostile(value)}))

    refused = {name for name in names if not type_allowed(ALLOWED, name)}
    if refused:
        assert response.status_code == 422, (names, response.content)
        assert any(f"names the type {name}," in refusal(response) for name in refused)
    else:
        assert response.status_code == 201, (names, response.content)


# ---- values stored before ----------------------------------------------------------------------------------


def test_check_typed_values_lists_what_the_allow_list_would_refuse_today(api, project, other_project):
    Project.objects.filter(pk=project.pk).update(type_allowlist=[*DEFAULT_TYPE_ALLOWLIST, "myapp."])
    plan = hostile(ext_record(5, "myapp.state", "Plan", {"steps": []}))
    assert api.post(PUT, put_body("old", 0, values={"messages": messages(1), "plan": plan})).status_code == 201
    writes = {"thread_id": "old", "checkpoint_id": lg_id(0), "task_id": "t", "writes": [["plan", [plan]]]}
    assert api.post(WRITES, writes).status_code == 200
    assert api.post(PUT, put_body("clean", 0)).status_code == 201
    assert command("check_typed_values")[0].endswith("No stored value names a type its project does not allow.\n")
    Project.objects.filter(pk=project.pk).update(type_allowlist=list(DEFAULT_TYPE_ALLOWLIST))

    out = StringIO()
    with pytest.raises(CommandError, match="2 stored values name a type the project does not allow"):
        call_command("check_typed_values", "--project", "acme", stdout=out)
    printed, _ = command("check_typed_values", "--project", "globex")

    assert out.getvalue().splitlines() == [
        f"acme\told\t-\t{lg_id(0)}\tcheckpoint.channel_values.plan\tmyapp.state.Plan",
        f"acme\told\t-\t{lg_id(0)}\tpending_writes.0.2.0\tmyapp.state.Plan",
    ]
    assert "No stored value" in printed
    with pytest.raises(CommandError, match="no project 'nope'"):
        command("check_typed_values", "--project", "nope")
