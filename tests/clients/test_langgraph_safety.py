"""ConsoleSaver reads what others wrote: it rebuilds only LangGraph's safe types and the types its user allows,
and imports or calls nothing else, whatever a holder of the project's write token stored."""

from __future__ import annotations

import copy
import importlib
import logging
import sys
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypedDict

import httpx
import ormsgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage
from langgraph._internal import _serde
from langgraph.checkpoint.serde._msgpack import SAFE_MSGPACK_TYPES
from langgraph.graph import START, StateGraph
from langgraph.types import Interrupt, Send
from pydantic import BaseModel

from checkpoint_console import typedjson
from checkpoint_console.langgraph import ConsoleSaver
from checkpoints.models import Project, default_type_allowlist
from tests.clients.test_langgraph import latest, put, run_async
from tests.kits.langgraph_kit import ext_record, lg_id, open_for_writing, put_body, shell_command

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

JSONPLUS = "langgraph.checkpoint.serde.jsonplus"
CALLS: list[Any] = []


def record_call(*args: Any, **kwargs: Any) -> str:
    """A callable the hostile values may name: each call is recorded, so a test sees whether one was made."""
    CALLS.append((args, kwargs))
    return "called"


@dataclass
class Note:
    text: str
    pinned: bool


class Order(BaseModel):
    sku: str
    quantity: int


class Desk(TypedDict):
    note: Note
    order: Order
    turns: int


def allow(project: Project, *names: str) -> None:
    """The project lets these names in (an operator's choice, or values stored before the allow-list)."""
    Project.objects.filter(pk=project.pk).update(type_allowlist=[*default_type_allowlist(), *names])


def stored_by_attacker(live_server: Any, token: str, thread_id: str, value: Any) -> dict[str, Any]:
    """`value` put through the real API in a channel, the header and the metadata, and as a pending write."""
    body = put_body(thread_id, 0, values={"payload": value}, metadata={"source": "loop", "step": 0, "evil": value})
    body["checkpoint"]["evil"] = value
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=f"{live_server.url}/api/v1/langgraph", headers=headers) as http:
        assert http.post("/checkpoints", json=body).status_code == 201
        writes = {"thread_id": thread_id, "checkpoint_id": lg_id(0), "task_id": "t", "writes": [["payload", value]]}
        assert http.post("/writes", json=writes).status_code == 200
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}


@pytest.mark.parametrize(
    ("payload", "names", "raw"),
    [
        (shell_command, ["subprocess.getoutput"], lambda marker: {"cmd": f"touch {marker}"}),
        (open_for_writing, ["builtins.open"], lambda marker: {"file": marker, "mode": "w"}),
    ],
    ids=["subprocess.getoutput", "builtins.open"],
)
def test_reading_a_value_that_names_a_dangerous_callable_runs_nothing_and_returns_its_raw_payload(
    live_server, project, token_secret, tmp_path, payload, names, raw
):
    marker = str(tmp_path / "pwned")
    allow(project, *names)
    config = stored_by_attacker(live_server, token_secret, "victim", payload(marker))

    with ConsoleSaver(live_server.url, token_secret) as saver:
        found = saver.get_tuple(config)
        listed = list(saver.list(config))

    assert not Path(marker).exists()
    assert found.checkpoint["channel_values"]["payload"] == raw(marker)
    assert found.checkpoint["evil"] == raw(marker)
    assert found.metadata["evil"] == raw(marker)
    assert found.pending_writes == [("t", "payload", raw(marker))]
    assert listed[0].checkpoint == found.checkpoint


def test_the_async_methods_read_a_dangerous_value_as_its_raw_payload(live_server, project, token_secret, tmp_path):
    marker = str(tmp_path / "pwned")
    allow(project, "subprocess.getoutput")
    config = stored_by_attacker(live_server, token_secret, "victim", shell_command(marker))

    async def read() -> Any:
        async with ConsoleSaver(live_server.url, token_secret) as saver:
            return await saver.aget_tuple(config), [t async for t in saver.alist(config)]

    found, listed = run_async(read())

    assert not Path(marker).exists()
    assert found.checkpoint["channel_values"]["payload"] == {"cmd": f"touch {marker}"}
    assert listed[0].pending_writes == [("t", "payload", {"cmd": f"touch {marker}"})]


def test_a_blocked_type_is_named_in_one_warning_that_says_how_to_allow_it(live_server, project, token_secret, caplog):
    module = f"agent_{uuid.uuid4().hex}"  # LangGraph warns once per type per process: a name no test used
    value = typedjson.from_msgpack(ormsgpack.packb([ext_record(2, module, "Plan", {"step": 1})] * 3))
    allow(project, f"{module}.Plan")
    config = stored_by_attacker(live_server, token_secret, "warned", value)

    with caplog.at_level(logging.WARNING, logger=JSONPLUS), ConsoleSaver(live_server.url, token_secret) as saver:
        found = saver.get_tuple(config)
        saver.get_tuple(config)

    warnings = [record.getMessage() for record in caplog.records if f"{module}.Plan" in record.getMessage()]
    assert len(warnings) == 1
    assert "allowed_msgpack_modules" in warnings[0] and repr(module) in warnings[0]
    assert found.checkpoint["channel_values"]["payload"] == [{"step": 1}] * 3
    assert module not in sys.modules


def test_a_type_passed_in_allowed_modules_is_rebuilt(live_server, project, token_secret):
    allow(project, f"{__name__}.Note", f"{__name__}.Order")
    value = {"note": Note("call back", pinned=True), "order": Order(sku="A-1", quantity=2)}

    with ConsoleSaver(live_server.url, token_secret, allowed_modules=[Note, (__name__, "Order")]) as saver:
        graph = desk_graph(saver)
        graph.invoke({**value, "turns": 0}, {"configurable": {"thread_id": "desk"}})
        state = graph.get_state({"configurable": {"thread_id": "desk"}}).values
    with ConsoleSaver(live_server.url, token_secret) as strict:
        blocked = desk_graph(strict).get_state({"configurable": {"thread_id": "desk"}}).values

    assert (state["note"], state["order"], state["turns"]) == (value["note"], value["order"], 1)
    assert blocked["note"] == {"text": "call back", "pinned": True}
    assert blocked["order"] == {"sku": "A-1", "quantity": 2}


def desk_graph(saver: ConsoleSaver) -> Any:
    def work(state: Desk) -> dict[str, Any]:
        return {"turns": state["turns"] + 1}

    builder = StateGraph(Desk)
    builder.add_node("work", work)
    builder.add_edge(START, "work")
    return builder.compile(checkpointer=saver)


def test_a_graph_compiled_under_langgraph_strict_msgpack_rebuilds_its_state_schema_types(
    live_server, project, token_secret, monkeypatch
):
    # LangGraph reads LANGGRAPH_STRICT_MSGPACK once, at import: the flag it read is what compile consults.
    monkeypatch.setenv("LANGGRAPH_STRICT_MSGPACK", "true")
    monkeypatch.setattr(_serde, "STRICT_MSGPACK_ENABLED", True)
    allow(project, f"{__name__}.Note", f"{__name__}.Order")
    config = {"configurable": {"thread_id": "strict-desk"}}

    with ConsoleSaver(live_server.url, token_secret) as saver:
        graph = desk_graph(saver)
        graph.invoke({"note": Note("n", pinned=False), "order": Order(sku="B", quantity=1), "turns": 0}, config)
        state = graph.get_state(config).values
        still_strict = saver.get_tuple(config)

    assert state["note"] == Note("n", pinned=False) and state["order"] == Order(sku="B", quantity=1)
    assert still_strict.checkpoint["channel_values"]["note"] == {"text": "n", "pinned": False}


def test_messages_and_langgraph_types_are_rebuilt_by_the_strict_default(live_server, token_secret):
    values = {
        "messages": [AIMessage("hi", id="a1")],
        "when": datetime(2026, 11, 27, tzinfo=UTC),
        "send": Send("node", {"x": 1}),
        "interrupt": Interrupt(value="approve?", id="i1"),
    }
    with ConsoleSaver(live_server.url, token_secret) as saver:
        put(saver, "safe-types", values)
        found = latest(saver, "safe-types")

    assert found.checkpoint["channel_values"] == values


# ---- generated hostile values ----------------------------------------------------------------------------

SAFE = sorted(key for key in SAFE_MSGPACK_TYPES if len(key) == 2)
ALLOWED = [(__name__, "record_call")]
names = st.one_of(
    st.sampled_from(
        [
            ("subprocess", "getoutput"),
            ("builtins", "open"),
            ("builtins", "eval"),
            ("os", "system"),
            (__name__, "record_call"),
            (f"{__name__}_missing", "record_call"),
            ("tests.clients.hostile_never_imported", "Thing"),
            *SAFE[:5],
        ]
    ),
    st.tuples(
        st.from_regex(r"[a-z_][a-z0-9_]{0,12}(\.[a-z_][a-z0-9_]{0,8}){0,2}", fullmatch=True), st.text(max_size=8)
    ),
)
leaves = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=5))


def ext_of(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.builds(
        lambda code, name, arg, method: ext_record(code, *name, arg, method if code == 3 else None),
        st.integers(0, 5),
        names,
        st.one_of(children, st.dictionaries(st.text(max_size=4), children, max_size=3)),
        st.sampled_from(["fromisoformat", "system", "__call__"]),
    )


hostile_values = st.recursive(
    leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(st.text(max_size=4), children, max_size=3), ext_of(children)
    ),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=hostile_values)
def test_generated_typed_values_import_and_call_only_what_the_allow_list_names(value, monkeypatch):
    imported: list[str] = []
    real_import = importlib.import_module

    def recording_import(name: str, package: str | None = None) -> Any:
        imported.append(name)
        return real_import(name, package)

    strict = ConsoleSaver("http://127.0.0.1:9", "cpk_unused")
    allowing = ConsoleSaver("http://127.0.0.1:9", "cpk_unused", allowed_modules=[(__name__, "record_call")])
    encoded = typedjson.from_msgpack(ormsgpack.packb(value, option=ormsgpack.OPT_NON_STR_KEYS))
    safe_modules = {module for module, _ in SAFE}
    monkeypatch.setattr(importlib, "import_module", recording_import)
    before = set(sys.modules)
    CALLS.clear()

    strict._decode(copy.deepcopy(encoded))  # decoding uses its input up
    strict_imports, strict_calls = set(imported), list(CALLS)
    allowing._decode(encoded)
    strict.close()
    allowing.close()

    assert strict_imports <= safe_modules and strict_calls == []
    assert set(imported) <= safe_modules | {__name__}
    new_modules = {name for name in set(sys.modules) - before if not name.startswith(("encodings.", "zoneinfo"))}
    assert new_modules <= safe_modules, new_modules
