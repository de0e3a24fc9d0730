"""ConsoleSaver against a real running server on PostgreSQL: LangGraph's conformance suite, real graphs, the
wire economy of puts and the typed round trip of values."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, TypedDict
from uuid import UUID

import httpx
import pytest
from django.db import connection
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.report import ProgressCallbacks
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, interrupt
from pydantic import BaseModel

from checkpoint_console.client import CheckpointAPIError
from checkpoint_console.langgraph import ConsoleSaver
from checkpoints.models import AgentSession, Project, default_type_allowlist
from checkpoints.services import create_api_token, get_or_create_project
from tests.kits.servers import free_port, wait_until_answers

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def run_async(coroutine: Any) -> Any:
    """asyncio.run in a thread of its own: Playwright's sync API (tests/browser) leaves an event loop running in
    the main thread for the rest of the session, and asyncio.run refuses to start inside one."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


class Order(BaseModel):
    sku: str
    quantity: int
    placed_at: datetime


@pytest.fixture
def saver(live_server, project, token_secret):
    allow_order(project)
    with ConsoleSaver(live_server.url, token_secret, timeout=30, allowed_modules=[Order]) as saver:
        yield saver


def allow_order(project: Project) -> None:
    """Order is this module's own type: the project stores it and the saver rebuilds it once both allow it."""
    Project.objects.filter(pk=project.pk).update(type_allowlist=[*default_type_allowlist(), f"{__name__}.Order"])


class Wire:
    """The bodies of the saver's requests, by path, as its httpx client sends them."""

    def __init__(self, saver: ConsoleSaver) -> None:
        self.requests: list[tuple[str, str, int]] = []
        saver.client.event_hooks["request"].append(self._seen)

    def _seen(self, request: httpx.Request) -> None:
        self.requests.append((request.method, request.url.path.removeprefix("/api/v1/langgraph"), len(request.content)))

    def sizes(self, path: str) -> list[int]:
        return [size for method, seen, size in self.requests if method == "POST" and seen == path]

    def count(self, method: str, path: str) -> int:
        return sum(1 for seen_method, seen, _ in self.requests if (seen_method, seen) == (method, path))


def put(
    saver: ConsoleSaver,
    thread_id: str,
    values: dict[str, Any],
    *,
    parent: str | None = None,
    checkpoint_id: str | None = None,
    **versions: Any,
) -> str:
    """A checkpoint of `values` whose channels in `versions` changed (every channel when none is named)."""
    checkpoint = empty_checkpoint()
    checkpoint["id"] = checkpoint_id or checkpoint["id"]
    checkpoint["channel_values"] = values
    changed = versions or dict.fromkeys(values, "1")
    checkpoint["channel_versions"] = {**dict.fromkeys(values, "1"), **changed}
    config: dict[str, Any] = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    if parent:
        config["configurable"]["checkpoint_id"] = parent
    stored = saver.put(config, checkpoint, {"source": "loop", "step": 0, "parents": {}}, changed)
    return stored["configurable"]["checkpoint_id"]


def latest(saver: ConsoleSaver, thread_id: str):
    return saver.get_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})


# ---- conformance -----------------------------------------------------------------------------------------


def test_console_saver_passes_langgraph_conformance_base_and_extended(live_server):
    # A project per capability suite, so each starts as empty as a fresh InMemorySaver. Made here, not in the
    # factory: ORM calls inside the event loop would open a connection no one closes.
    secrets = iter([create_api_token(get_or_create_project(f"conformance-{n}"), name="lg")[1] for n in range(8)])

    @checkpointer_test(name="ConsoleSaver")
    async def console_saver():
        async with ConsoleSaver(live_server.url, next(secrets), timeout=30) as saver:
            yield saver

    report = run_async(validate(console_saver, progress=ProgressCallbacks.quiet()))

    failures = {name: result.failures for name, result in report.results.items() if result.passed is not True}
    assert report.passed_all_base(), failures
    for capability in ("copy_thread", "delete_for_runs", "prune"):
        assert report.results[capability].passed is True, failures
    assert report.conformance_level() == "FULL"


# ---- real graphs -----------------------------------------------------------------------------------------


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    turns: int


def chat_graph(saver: ConsoleSaver, *, replies: int, size: int = 2600):
    def agent(state: Chat) -> dict[str, Any]:
        turn = state["turns"] + 1
        return {"messages": [AIMessage(f"reply {turn} " + "x" * size, id=f"ai-{turn}")], "turns": turn}

    builder = StateGraph(Chat)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", lambda state: "agent" if state["turns"] < replies else END)
    return builder.compile(checkpointer=saver)


def test_a_graph_run_through_the_saver_resumes_with_its_whole_message_history(saver):
    graph = chat_graph(saver, replies=5, size=10)
    config = {"configurable": {"thread_id": "chat/1"}, "recursion_limit": 100}

    graph.invoke({"messages": [HumanMessage("hi", id="h1")], "turns": 0}, config)
    state = graph.get_state(config)

    assert [m.id for m in state.values["messages"]] == ["h1", *(f"ai-{n}" for n in range(1, 6))]
    assert len(list(graph.get_state_history(config))) == 7  # input, then one per agent step
    assert AgentSession.objects.get(external_id="chat%2F1").metadata["thread_id"] == "chat/1"


def test_each_put_of_a_growing_chat_sends_the_new_message_not_the_history(saver):
    wire = Wire(saver)
    graph = chat_graph(saver, replies=40)
    config = {"configurable": {"thread_id": "long-chat"}, "recursion_limit": 200}

    graph.invoke({"messages": [HumanMessage("hi", id="h1")], "turns": 0}, config)

    puts = wire.sizes("/checkpoints")
    state = graph.get_state(config).values
    history = len(json.dumps([m.model_dump() for m in state["messages"]]))
    assert history > 100_000
    assert len(puts) == 42
    assert max(puts[2:]) < 6_000, puts  # one 2.6 KB message and the header, at step 40 as at step 2
    assert [m.id for m in state["messages"]][-1] == "ai-40" and state["turns"] == 40


def test_a_graph_continues_from_its_latest_checkpoint_with_a_fresh_saver(live_server, token_secret, saver):
    config = {"configurable": {"thread_id": "resumed"}, "recursion_limit": 100}
    chat_graph(saver, replies=2, size=10).invoke({"messages": [HumanMessage("hi", id="h1")], "turns": 0}, config)

    with ConsoleSaver(live_server.url, token_secret) as fresh:
        chat_graph(fresh, replies=4, size=10).invoke({"messages": [HumanMessage("more", id="h2")]}, config)
        state = chat_graph(fresh, replies=4, size=10).get_state(config).values

    assert [m.id for m in state["messages"]] == ["h1", "ai-1", "ai-2", "h2", "ai-3", "ai-4"]


class Booking(TypedDict):
    request: str
    approval: str


def booking_graph(saver: ConsoleSaver):
    """A parent graph whose subgraph waits on a person's approval with interrupt()."""

    def ask(state: Booking) -> dict[str, Any]:
        return {"approval": interrupt(f"approve {state['request']}?")}

    approval = StateGraph(Booking)
    approval.add_node("ask", ask)
    approval.add_edge(START, "ask")
    builder = StateGraph(Booking)
    builder.add_node("approval", approval.compile())
    builder.add_edge(START, "approval")
    builder.add_edge("approval", END)
    return builder.compile(checkpointer=saver)


def test_a_subgraph_waiting_on_an_interrupt_resumes_with_command(saver):
    graph = booking_graph(saver)
    config = {"configurable": {"thread_id": "booking"}}

    first = graph.invoke({"request": "room 12", "approval": ""}, config)
    waiting = graph.get_state(config, subgraphs=True)
    done = graph.invoke(Command(resume="yes"), config)

    assert first["__interrupt__"][0].value == "approve room 12?"
    assert waiting.tasks[0].state.tasks[0].interrupts[0].value == "approve room 12?"
    assert done == {"request": "room 12", "approval": "yes"}
    namespaces = {
        t.config["configurable"]["checkpoint_ns"] for t in saver.list({"configurable": {"thread_id": "booking"}})
    }
    assert "" in namespaces and any(ns.startswith("approval:") for ns in namespaces)


# ---- the wire: resends, tombstones, pages ------------------------------------------------------------------


def test_a_put_whose_base_the_server_cannot_use_is_resent_whole(live_server, token_secret, saver):
    notes = "a long note " * 100
    first = put(saver, "t", {"notes": notes, "n": 1})
    with ConsoleSaver(live_server.url, token_secret) as other:
        put(other, "t", {"n": 1}, checkpoint_id=first)  # replaces the checkpoint this saver remembers
    wire = Wire(saver)

    put(saver, "t", {"notes": notes, "n": 2}, parent=first, n="2")

    relative, whole = wire.sizes("/checkpoints")  # "notes" left to a base that no longer has it: 409, then whole
    assert relative < whole
    assert latest(saver, "t").checkpoint["channel_values"] == {"notes": notes, "n": 2}


def test_a_put_with_a_parent_from_a_deleted_thread_is_refused_with_410(live_server, token_secret, saver):
    first = put(saver, "t", {"n": 1})
    with ConsoleSaver(live_server.url, token_secret) as other:
        other.delete_thread("t")

    with pytest.raises(CheckpointAPIError) as refused:
        put(saver, "t", {"n": 2}, parent=first, n="2")
    assert refused.value.status == 410

    put(saver, "t", {"n": 3})  # no parent: the thread starts afresh, though the saver's memory had a base
    assert latest(saver, "t").checkpoint["channel_values"] == {"n": 3}


def rerun_after_delete(checkpointer: Any) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run a chat graph on a thread, delete the thread, run it again under the same id, both times under
    LangGraph's default durability ("async": a step's writes may reach the saver before its checkpoint does).
    Returns the ids of the messages and the (source, step) of each checkpoint the thread then holds."""
    config = {"configurable": {"thread_id": "again"}, "recursion_limit": 100}
    graph = chat_graph(checkpointer, replies=3, size=10)
    graph.invoke({"messages": [HumanMessage("first", id="h1")], "turns": 0}, config, durability="async")
    checkpointer.delete_thread("again")
    graph.invoke({"messages": [HumanMessage("second", id="h2")], "turns": 0}, config, durability="async")
    state = graph.get_state(config)
    history = [(t.metadata["source"], t.metadata["step"]) for t in graph.get_state_history(config)]
    return [m.id for m in state.values["messages"]], history


def test_a_deleted_thread_run_again_under_its_id_with_async_durability_works_as_with_in_memory_saver(saver):
    expected = rerun_after_delete(InMemorySaver())

    assert rerun_after_delete(saver) == expected
    assert expected[0] == ["h2", "ai-1", "ai-2", "ai-3"]  # the deleted run left nothing behind
    session = AgentSession.objects.get(external_id="again")
    assert session.checkpoint_count == len(expected[1])  # not half written


def test_list_fetches_pages_lazily_and_stops_at_the_limit(saver):
    parent = None
    for step in range(45):
        parent = put(saver, "paged", {"step": step}, parent=parent)
    wire = Wire(saver)

    everything = [t.checkpoint["channel_values"]["step"] for t in saver.list({"configurable": {"thread_id": "paged"}})]
    requests_for_all = wire.count("POST", "/checkpoints/list")
    first_two = list(saver.list({"configurable": {"thread_id": "paged"}}, limit=25))

    assert everything == list(reversed(range(45)))
    assert requests_for_all == 3
    assert [t.checkpoint["channel_values"]["step"] for t in first_two] == list(reversed(range(20, 45)))
    assert wire.count("POST", "/checkpoints/list") == 3 + 2


def test_list_filters_metadata_at_the_server(saver):
    config = {"configurable": {"thread_id": "filtered", "checkpoint_ns": ""}}
    for step, source in enumerate(["input", "loop", "loop", "update"]):
        checkpoint = empty_checkpoint()
        saver.put(config, checkpoint, {"source": source, "step": step, "parents": {}, "score": Decimal(step)}, {})

    found = list(saver.list(config, filter={"source": "loop", "score": Decimal(2)}))

    assert [(t.metadata["source"], t.metadata["step"]) for t in found] == [("loop", 2)]


def test_errors_carry_the_servers_detail_and_a_missing_checkpoint_is_none(live_server, project, saver):
    read_only = create_api_token(project, name="viewer", read_only=True)[1]

    with ConsoleSaver(live_server.url, read_only) as viewer, pytest.raises(CheckpointAPIError) as refused:
        put(viewer, "t", {"n": 1})
    assert (refused.value.status, refused.value.detail) == (403, "this token lacks the 'write' scope")
    assert latest(saver, "no such thread") is None
    with ConsoleSaver("http://127.0.0.1:9", "cpk_x", timeout=2) as nowhere, pytest.raises(CheckpointAPIError) as down:
        latest(nowhere, "t")
    assert down.value.status == 0


# ---- typed round trip --------------------------------------------------------------------------------------


def test_get_tuple_returns_the_values_put_was_given(saver):
    when = datetime(2026, 11, 26, 16, 30, tzinfo=UTC)
    values = {
        "messages": [
            HumanMessage("book it", id="h1"),
            AIMessage("", id="a1", tool_calls=[{"name": "book", "args": {"sku": "A-1", "n": 2}, "id": "call-1"}]),
            ToolMessage("booked", tool_call_id="call-1", id="t1"),
        ],
        "order": Order(sku="A-1", quantity=2, placed_at=when),
        "when": when,
        "delay": timedelta(minutes=5),
        "raw": b"\x00\xff binary",
        "tags": {"urgent", "vip"},
        "by_id": {1: "one", (2, 3): "pair"},
        "ids": [UUID(int=7)],
        "nothing": None,
        "inf": float("inf"),
    }
    checkpoint_id = put(saver, "typed/thread " + "x" * 300, values)
    config = {"configurable": {"thread_id": "typed/thread " + "x" * 300, "checkpoint_id": checkpoint_id}}
    saver.put_writes(config, [("messages", values["messages"][:1]), ("__interrupt__", {"when": when})], "task-1")

    found = saver.get_tuple(config)

    assert found.checkpoint["channel_values"] == values
    assert found.pending_writes == [
        ("task-1", "__interrupt__", {"when": when}),
        ("task-1", "messages", values["messages"][:1]),
    ]


def test_the_async_methods_round_trip_and_list_like_the_sync_ones(live_server, project, token_secret):
    config = {"configurable": {"thread_id": "async", "checkpoint_ns": "child:1"}}
    allow_order(project)

    async def run() -> tuple[Any, list[Any]]:
        async with ConsoleSaver(live_server.url, token_secret, allowed_modules=[Order]) as saver:
            checkpoint = empty_checkpoint()
            order = Order(sku="B", quantity=1, placed_at=datetime(2026, 1, 1, tzinfo=UTC))
            checkpoint["channel_values"] = {"order": order}
            checkpoint["channel_versions"] = {"order": "1"}
            stored = await saver.aput(config, checkpoint, {"source": "input", "step": -1}, {"order": "1"})
            await saver.aput_writes(stored, [("order", None)], "task")
            listed = [t async for t in saver.alist({"configurable": {"thread_id": "async"}})]
            return await saver.aget_tuple(stored), listed

    found, listed = run_async(run())

    assert found.checkpoint["channel_values"]["order"].sku == "B"
    assert found.pending_writes == [("task", "order", None)]
    assert [t.config for t in listed] == [found.config]


def test_an_async_graph_run_appends_its_messages_through_the_async_saver(live_server, token_secret):
    config = {"configurable": {"thread_id": "async-chat"}, "recursion_limit": 100}

    async def run() -> dict[str, Any]:
        async with ConsoleSaver(live_server.url, token_secret) as saver:
            graph = chat_graph(saver, replies=3, size=10)
            await graph.ainvoke({"messages": [HumanMessage("hi", id="h1")], "turns": 0}, config)
            return (await graph.aget_state(config)).values

    state = run_async(run())

    assert [m.id for m in state["messages"]] == ["h1", "ai-1", "ai-2", "ai-3"]


# ---- thread ids as long as documented, through the shipped gunicorn ------------------------------------------

REPO = Path(__file__).resolve().parents[2]


def shipped_gunicorn_command() -> list[str]:
    """The Dockerfile's CMD; compose.yaml's web service runs the same one."""
    (line,) = [line for line in (REPO / "Dockerfile").read_text().splitlines() if line.startswith("CMD ")]
    command = json.loads(line.removeprefix("CMD "))
    assert " ".join(command) in (REPO / "compose.yaml").read_text()
    return command


@pytest.fixture(scope="module")
def gunicorn_url(django_db_setup, tmp_path_factory) -> Iterator[str]:
    """The shipped gunicorn command, bound to a free loopback port, on the test database: one server for the
    module's tests (each still flushes what it wrote; the server's start is ~10 s of the suite a test)."""
    port = free_port()
    command = shipped_gunicorn_command()
    command[command.index("--bind") + 1] = f"127.0.0.1:{port}"
    database = connection.settings_dict
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{database['USER']}@{database['HOST']}:{database['PORT'] or 5432}/{database['NAME']}",
        "SECRET_KEY": "gunicorn-test-key-" + "x" * 40,
        "DEBUG": "0",
    }
    log = tmp_path_factory.mktemp("gunicorn") / "gunicorn.log"
    with log.open("wb") as output:  # a file, not a pipe no one reads while the server runs
        server = subprocess.Popen([sys.executable, "-m", *command], cwd=REPO, env=env, stdout=output, stderr=output)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_answers(server, f"{url}/api/v1/openapi.json", log, seconds=180)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


LONG_IDS = {"é": "é" * 1000, "emoji": "😀" * 1000}


def test_a_long_thread_id_in_a_url_is_refused_by_gunicorn_which_is_why_the_saver_never_sends_one(
    gunicorn_url, token_secret
):
    answer = httpx.get(
        f"{gunicorn_url}/api/v1/langgraph/checkpoint",
        params={"thread_id": LONG_IDS["emoji"]},
        headers={"Authorization": f"Bearer {token_secret}"},
        timeout=30,
    )
    assert answer.status_code == 414  # gunicorn's request line: 4,094 bytes


@pytest.mark.parametrize("name", LONG_IDS)
def test_every_saver_call_takes_a_thread_id_of_a_thousand_characters_of_any_script_through_gunicorn(
    gunicorn_url, token_secret, name
):
    thread_id, copy_id = LONG_IDS[name], LONG_IDS[name][:-1] + "!"
    with ConsoleSaver(gunicorn_url, token_secret, timeout=30) as saver:
        first = put(saver, thread_id, {"n": 1})
        second = put(saver, thread_id, {"n": 2}, parent=first)
        config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": second}}
        saver.put_writes(config, [("n", 3)], task_id="task-1")

        found = latest(saver, thread_id)
        assert found is not None and found.config["configurable"]["thread_id"] == thread_id
        assert found.checkpoint["channel_values"] == {"n": 2} and found.pending_writes == [("task-1", "n", 3)]
        named = saver.get_tuple({"configurable": {**config["configurable"], "checkpoint_id": first}})
        assert named is not None and named.checkpoint["channel_values"] == {"n": 1}
        listed = list(saver.list({"configurable": {"thread_id": thread_id}}, filter={"source": "loop"}))
        assert [t.config["configurable"]["checkpoint_id"] for t in listed] == [second, first]

        saver.copy_thread(thread_id, copy_id)
        copied = latest(saver, copy_id)
        assert copied is not None and copied.checkpoint["channel_values"] == {"n": 2}

        saver.delete_thread(thread_id)
        assert latest(saver, thread_id) is None
        assert list(saver.list({"configurable": {"thread_id": thread_id}})) == []
    assert AgentSession.objects.filter(metadata__thread_id=copy_id).exists()
