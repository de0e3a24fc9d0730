"""Restore and fork done in the console, obeyed by real LangGraph graphs running through ConsoleSaver against a
live server on PostgreSQL: the graph's next `invoke` continues from what the operator chose."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, TypedDict
from unittest.mock import ANY

import lxml.html
import pytest
from django.test import Client
from django.urls import reverse
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, interrupt

from checkpoint_console import typedjson
from checkpoint_console.langgraph import ConsoleSaver
from checkpoints.jobs.retention import apply_retention
from checkpoints.models import AgentSession, AuditEvent, Checkpoint, RetentionPolicy
from checkpoints.services.langgraph import iter_tuples, thread_external_id
from tests.conftest import ApiClient
from tests.helpers import import_folder

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def saver(live_server, token_secret):
    with ConsoleSaver(live_server.url, token_secret, timeout=30) as saver:
        yield saver


# ---- the graphs ------------------------------------------------------------------------------------------


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    approval: str


class FakeModel:
    """A chat model that asks for `calls` additions, one tool call per turn, then answers. Its message ids carry
    the model's own turn count, so a run that continues after a restore is told from the run before it."""

    def __init__(self, calls: int = 2) -> None:
        self.calls = calls
        self.turns = 0

    def __call__(self, state: Chat) -> dict[str, Any]:
        self.turns += 1
        answered = [m for m in state["messages"] if isinstance(m, ToolMessage)]
        if len(answered) < self.calls:
            n = len(answered) + 1
            call = {"name": "add", "args": {"a": n, "b": 10}, "id": f"call-{n}-{self.turns}"}
            return {"messages": [AIMessage("", tool_calls=[call], id=f"ai-{self.turns}")]}
        return {"messages": [AIMessage(f"done after {len(answered)} calls", id=f"ai-{self.turns}")]}


def tools(state: Chat) -> dict[str, Any]:
    """A ToolNode-like node: runs each call of the last AI message."""
    replies = []
    for call in state["messages"][-1].tool_calls:
        total = call["args"]["a"] + call["args"]["b"]
        replies.append(ToolMessage(str(total), tool_call_id=call["id"], id=f"tool-{call['id']}"))
    return {"messages": replies}


def route(state: Chat) -> str:
    return "tools" if state["messages"][-1].tool_calls else END


def tool_loop(model: FakeModel) -> StateGraph:
    builder = StateGraph(Chat)
    builder.add_node("agent", model)
    builder.add_node("tools", tools)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder


def tool_graph(saver: BaseCheckpointSaver[Any], model: FakeModel | None = None) -> Any:
    return tool_loop(model or FakeModel()).compile(checkpointer=saver)


def approval_graph(saver: BaseCheckpointSaver[Any]) -> Any:
    """A tool loop, then a person's approval asked with interrupt()."""

    def ask(state: Chat) -> dict[str, Any]:
        return {"approval": interrupt("approve?")}

    builder = tool_loop(FakeModel(calls=1))
    builder.add_node("ask", ask)
    builder.add_conditional_edges("agent", lambda s: "tools" if s["messages"][-1].tool_calls else "ask")
    builder.add_edge("ask", END)
    return builder.compile(checkpointer=saver)


def nested_graph(saver: BaseCheckpointSaver[Any]) -> Any:
    """A parent graph that answers once, then hands its conversation to a tool-loop subgraph."""

    def greet(state: Chat) -> dict[str, Any]:
        return {"messages": [AIMessage("let me work", id=f"greet-{len(state['messages'])}")]}

    builder = StateGraph(Chat)
    builder.add_node("greet", greet)
    builder.add_node("work", tool_loop(FakeModel(calls=2)).compile())  # namespace "work:<task id>"
    builder.add_edge(START, "greet")
    builder.add_edge("greet", "work")
    builder.add_edge("work", END)
    return builder.compile(checkpointer=saver)


def failed_then_nested_graph(saver: BaseCheckpointSaver[Any]) -> Any:
    """A parent graph whose one tool call fails, then a tool-loop subgraph that inherits that conversation."""

    def attempt(state: Chat) -> dict[str, Any]:
        call = {"name": "add", "args": {"a": -20, "b": 10}, "id": "call-0"}
        return {
            "messages": [
                AIMessage("", tool_calls=[call], id="ai-0"),
                ToolMessage("negative", tool_call_id="call-0", id="tool-call-0", status="error"),
            ]
        }

    builder = StateGraph(Chat)
    builder.add_node("attempt", attempt)
    builder.add_node("work", tool_loop(FakeModel(calls=3)).compile())
    builder.add_edge(START, "attempt")
    builder.add_edge("attempt", "work")
    builder.add_edge("work", END)
    return builder.compile(checkpointer=saver)


def config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}, "recursion_limit": 50}


QUESTION = {"messages": [HumanMessage("add things", id="h1")], "approval": ""}


def ids(state: Any) -> list[str]:
    return [m.id for m in state.values["messages"]]


def console_row(thread_id: str, snapshot: Any) -> Checkpoint:
    """The console's checkpoint for a LangGraph state snapshot."""
    configurable = snapshot.config["configurable"]
    return Checkpoint.objects.get(
        session__external_id=thread_external_id(thread_id),
        metadata__checkpoint_id=configurable["checkpoint_id"],
        metadata__checkpoint_ns=configurable["checkpoint_ns"],
    )


def snapshot_where(graph: Any, thread_id: str, wanted: Any) -> Any:
    return next(s for s in graph.get_state_history(config(thread_id)) if wanted(s))


# ---- the operator's actions, as the console and the API take them -----------------------------------------


def submit_form(client: Client, url: str, *, action: str | None = None, **fields: str) -> Any:
    """Open the console page at `url` and submit the form posting to `action` (back to the page by default) as a
    browser would: every field it renders (the CSRF token included), with `fields` typed in."""
    page = lxml.html.fromstring(client.get(url).content)
    form = next(f for f in page.forms if f.get("method") == "post" and f.action == (action or url))
    data = {name: value or "" for name, value in form.form_values()}
    data.update({name: node.text or "" for node in form.cssselect("textarea") if (name := node.get("name"))})
    return client.post(form.action, {**data, **fields})


@pytest.fixture
def operator(alice) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    return client


@pytest.fixture
def restore_in(operator, token_secret):
    """Restore a checkpoint the way the parameter names: the console's form, or the API."""

    def restore(way: str, checkpoint: Checkpoint) -> None:
        if way == "console":
            url = reverse("dashboard:checkpoint_restore", args=[checkpoint.pk])
            assert submit_form(operator, url, reason="retry from here").status_code == 302
        else:
            response = ApiClient(token_secret).post(f"/checkpoints/{checkpoint.pk}/restore", {"reason": "retry"})
            assert response.status_code == 201, response.content
        assert AuditEvent.objects.filter(action="restore", checkpoint__parent=checkpoint).exists()

    return restore


# ---- restore ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("way", ["console", "api"])
def test_a_tool_loop_restored_to_an_earlier_step_continues_from_it(saver, restore_in, way):
    model = FakeModel(calls=2)
    graph = tool_graph(saver, model)
    graph.invoke(QUESTION, config("loop"))
    before = list(graph.get_state_history(config("loop")))
    first_result = snapshot_where(graph, "loop", lambda s: ids(s) == ["h1", "ai-1", "tool-call-1-1"])
    assert first_result.next == ("agent",)

    restore_in(way, console_row("loop", first_result))
    graph.invoke(None, config("loop"))

    state = graph.get_state(config("loop"))
    assert ids(state) == ["h1", "ai-1", "tool-call-1-1", "ai-4", "tool-call-2-4", "ai-5"]
    assert state.values["messages"][-1].content == "done after 2 calls"
    history = list(graph.get_state_history(config("loop")))
    restored = history[3]  # newest first: the answer, the tool result, the second call, then the restore
    assert restored.metadata["source"] == "fork"
    assert restored.metadata["restored_from"] == first_result.config["configurable"]["checkpoint_id"]
    assert restored.metadata["restore_reason"] == ("retry from here" if way == "console" else "retry")
    assert restored.values == first_result.values and restored.next == ("agent",)
    # the console named the nodes as the graph does: tools wrote the first result, agent runs next
    assert console_row("loop", first_result).metadata["langgraph_nodes"] == {"ran": ["tools"], "next": ["agent"]}
    restored_id = restored.config["configurable"]["checkpoint_id"]
    assert all(restored_id > s.config["configurable"]["checkpoint_id"] for s in before)
    assert history[2].parent_config["configurable"]["checkpoint_id"] == restored_id
    assert history[4:] == before  # nothing of the earlier run was lost


def test_undoing_a_console_restore_gives_the_graph_its_state_from_before_the_restore(saver, restore_in, operator):
    graph = tool_graph(saver)
    graph.invoke(QUESTION, config("undone"))
    finished = graph.get_state(config("undone"))
    first_call = snapshot_where(graph, "undone", lambda s: ids(s) == ["h1", "ai-1"])
    restore_in("console", console_row("undone", first_call))
    session = AgentSession.objects.get(external_id="undone")

    detail = reverse("dashboard:session_detail", args=[session.pk])
    undo = reverse("dashboard:session_undo", args=[session.pk])
    assert submit_form(operator, detail, action=undo).status_code == 302
    state = graph.get_state(config("undone"))
    graph.invoke(None, config("undone"))

    assert state.values == finished.values and state.next == ()
    assert state.metadata["restored_from"] == finished.config["configurable"]["checkpoint_id"]
    assert graph.get_state(config("undone")).config == state.config  # nothing left to run


def test_a_graph_restored_to_the_checkpoint_waiting_on_an_interrupt_asks_again_and_resumes(saver, restore_in):
    graph = approval_graph(saver)
    graph.invoke(QUESTION, config("approve"))
    waiting = graph.get_state(config("approve"))
    assert waiting.interrupts[0].value == "approve?"
    graph.invoke(Command(resume="no"), config("approve"))

    restore_in("console", console_row("approve", waiting))
    asked = graph.invoke(None, config("approve"))  # the earlier answer is not taken again
    done = graph.invoke(Command(resume="yes"), config("approve"))
    restore_in("console", console_row("approve", waiting))
    answered_at_once = graph.invoke(Command(resume="maybe"), config("approve"))

    assert asked["__interrupt__"][0].value == "approve?" and asked["approval"] == ""
    assert done["approval"] == "yes"
    assert answered_at_once["approval"] == "maybe"
    assert graph.get_state(config("approve")).values["approval"] == "maybe"


def test_a_fork_of_an_answered_interrupt_waits_for_a_new_answer(saver, operator):
    graph = approval_graph(saver)
    graph.invoke(QUESTION, config("asked"))
    waiting = graph.get_state(config("asked"))
    graph.invoke(Command(resume="no"), config("asked"))

    url = reverse("dashboard:checkpoint_fork", args=[console_row("asked", waiting).pk])
    assert submit_form(operator, url, title="ask again").status_code == 302
    new = AgentSession.objects.get(title="ask again").metadata["thread_id"]
    forked = graph.get_state(config(new))
    done = graph.invoke(Command(resume="yes"), config(new))

    assert forked.next == ("ask",) and forked.interrupts[0].value == "approve?"
    assert done["approval"] == "yes"
    assert graph.get_state(config("asked")).values["approval"] == "no"


def test_a_graph_with_a_subgraph_restored_to_a_root_checkpoint_runs_the_subgraph_again(saver, restore_in):
    graph = nested_graph(saver)
    graph.invoke(QUESTION, config("nested"))
    finished = graph.get_state(config("nested"))
    before_work = snapshot_where(graph, "nested", lambda s: s.next == ("work",))

    restore_in("console", console_row("nested", before_work))
    graph.invoke(None, config("nested"))

    state = graph.get_state(config("nested"))
    assert ids(state)[:2] == ["h1", "greet-1"]
    assert state.values["messages"][-1].content == "done after 2 calls"
    assert len(ids(state)) == len(ids(finished)) == 7
    assert ids(state)[2:] != ids(finished)[2:]  # the subgraph's model ran again (new turn ids)
    namespaces = {t.config["configurable"]["checkpoint_ns"] for t in saver.list(config("nested"))}
    assert len([ns for ns in namespaces if ns.startswith("work:")]) == 2  # one subgraph run before, one after


def test_a_subgraph_checkpoint_is_not_restored_or_forked_and_the_parent_graphs_is_named(
    saver, operator, client, alice, token_secret
):
    graph = nested_graph(saver)
    graph.invoke(QUESTION, config("deep"))
    rows = Checkpoint.objects.filter(session__external_id="deep")
    inside = rows.exclude(metadata__checkpoint_ns="").get(step=2)
    ran_from = rows.get(metadata__checkpoint_id=inside.metadata["parents"][""])
    before = (rows.count(), AuditEvent.objects.count())
    restore_url = reverse("dashboard:checkpoint_restore", args=[inside.pk])
    fork_url = reverse("dashboard:checkpoint_fork", args=[inside.pk])
    for url in (restore_url, fork_url):  # the pages offer no form, only the root checkpoint it ran under
        offered = lxml.html.fromstring(operator.get(url).content)
        assert not [form for form in offered.forms if form.action == url]
        [link] = offered.cssselect(".lg-no-restore a")
        assert link.get("href") == reverse("dashboard:checkpoint_detail", args=[ran_from.pk])

    client.force_login(alice)  # a post made anyway (an old tab, a script) is refused as before
    page = client.post(restore_url, {"reason": "retry"})
    refused = ApiClient(token_secret).post(f"/checkpoints/{inside.pk}/fork", {})
    forked = client.post(fork_url, {"title": "deeper"})

    expected = f"LangGraph resumes a thread from its parent graph, so restore or fork #{ran_from.seq}"
    assert page.status_code == 200 and expected in page.content.decode()
    assert refused.status_code == 409 and expected in refused.json()["detail"]
    assert forked.status_code == 200 and expected in forked.content.decode()
    assert (rows.count(), AuditEvent.objects.count()) == before
    assert not AgentSession.objects.filter(title="deeper").exists()


def test_a_subgraph_counts_only_the_calls_it_made_not_the_conversation_it_inherited(saver):
    failed_then_nested_graph(saver).invoke(QUESTION, config("inherits"))

    session = AgentSession.objects.get(external_id="inherits")
    rows = Checkpoint.objects.filter(session=session)
    subgraph = rows.exclude(metadata__checkpoint_ns="").order_by("step")  # puts arrive in any order
    assert [(row.metadata["checkpoint_ns"], row.step) for row in rows.filter(tool_failed=True)] == [("", 1)]
    assert session.tool_failed_count == 1
    assert [row.calls_made for row in subgraph] == [0, 0, 1, 1, 2, 2, 2]  # its own calls, not the inherited one
    assert session.head.calls_made == 3


# ---- fork ------------------------------------------------------------------------------------------------


def test_a_console_fork_is_a_thread_the_graph_continues_leaving_the_original_unchanged(saver, operator):
    graph = tool_graph(saver)
    graph.invoke(QUESTION, config("original"))
    original = list(graph.get_state_history(config("original")))
    first_call = snapshot_where(graph, "original", lambda s: ids(s) == ["h1", "ai-1"])

    url = reverse("dashboard:checkpoint_fork", args=[console_row("original", first_call).pk])
    assert submit_form(operator, url, title="try again").status_code == 302
    fork = AgentSession.objects.get(title="try again")
    new = fork.metadata["thread_id"]
    forked = graph.get_state(config(new))
    graph.invoke(None, config(new))

    assert saver.get_tuple(forked.config).checkpoint == saver.get_tuple(first_call.config).checkpoint | {"ts": ANY}
    assert forked.next == ("tools",)
    assert ids(graph.get_state(config(new))) == ["h1", "ai-1", "tool-call-1-1", "ai-4", "tool-call-2-4", "ai-5"]
    assert list(graph.get_state_history(config("original"))) == original


# ---- import ----------------------------------------------------------------------------------------------


def by_namespace(found: Any) -> dict[str, list[Any]]:
    """(ns, checkpoint id, values) as each namespace's states in id order; a subgraph's namespace by its node
    name (its task id differs from run to run)."""
    grouped: dict[str, list[tuple[str, Any]]] = {}
    for ns, checkpoint_id, values in found:
        grouped.setdefault(ns.split(":")[0], []).append((checkpoint_id, values))
    return {node: [values for _, values in sorted(items)] for node, items in grouped.items()}


def stored(project: Any, thread_id: str) -> dict[str, list[Any]]:
    return by_namespace(
        (t["checkpoint_ns"], t["checkpoint_id"], t["checkpoint"]["channel_values"])
        for t in iter_tuples(project, thread_id=thread_id)
    )


def tallied(thread_id: str) -> dict[str, list[tuple[int | None, int | None, bool]]]:
    """Each namespace's (step, calls made, tool failed) in id order, as the console counted them."""
    rows = Checkpoint.objects.filter(session__external_id=thread_id)
    return by_namespace(
        (row.metadata["checkpoint_ns"], row.metadata["checkpoint_id"], (row.step, row.calls_made, row.tool_failed))
        for row in rows
    )


def test_an_imported_sqlite_saver_file_holds_the_states_console_saver_stored_for_the_same_graph(
    saver, project, tmp_path: Path
):
    failed_then_nested_graph(saver).invoke(QUESTION, config("live"))
    path = tmp_path / "run.sqlite"
    with SqliteSaver.from_conn_string(str(path)) as sqlite:
        failed_then_nested_graph(sqlite).invoke(QUESTION, config("from-file"))
        in_file = by_namespace(
            (
                t.config["configurable"]["checkpoint_ns"],
                t.config["configurable"]["checkpoint_id"],
                {
                    k: typedjson.from_typed(*sqlite.serde.dumps_typed(v))
                    for k, v in t.checkpoint["channel_values"].items()
                },
            )
            for t in sqlite.list(config("from-file"))
        )

    report = import_folder(path, project)

    assert report.errors == []
    assert stored(project, "from-file") == in_file
    assert stored(project, "live") == in_file
    assert {node: len(states) for node, states in in_file.items()} == {"": 4, "work": 7}
    assert tallied("from-file") == tallied("live")  # puts in any order, an import in id order: counted alike


# ---- retention -------------------------------------------------------------------------------------------


def test_retention_keeps_what_a_pending_interrupt_needs_and_the_graph_resumes_after_it(saver):
    RetentionPolicy.objects.update_or_create(
        project=None,
        kind="step",
        defaults={
            "keep_last": 0,
            "max_age": None,
            "keep_first": False,
            "keep_latest_per_name": False,
            "enabled": True,
            "applies_to_langgraph": True,
        },
    )
    graph = approval_graph(saver)
    graph.invoke(QUESTION, config("kept"))
    history = len(list(graph.get_state_history(config("kept"))))

    apply_retention()
    left = len(list(graph.get_state_history(config("kept"))))
    done = graph.invoke(Command(resume="yes"), config("kept"))

    assert left < history
    assert done["approval"] == "yes" and done["messages"][-1].content == "done after 1 calls"
