"""A LangGraph thread read as a graph: which nodes wrote each checkpoint and which run next, worked out from the
checkpoint's header as LangGraph decides (`next` in its StateSnapshot), for real graphs run on LangGraph's own
saver and stored through the services as ConsoleSaver sends them; and what a restore tells the graph."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Send, interrupt

from checkpoints.models import Checkpoint
from checkpoints.services import Actor, restore_checkpoint, restore_preview
from checkpoints.store import lgnodes
from tests.lg_states import put_thread, run_thread

pytestmark = pytest.mark.django_db
ACTOR = Actor.system("test")
CONFIG = {"configurable": {"thread_id": "thread-1"}}


class Chat(TypedDict):
    messages: Annotated[list, add_messages]


def tool_calling_graph(saver: InMemorySaver) -> Any:
    """agent asks for two searches at once, then one more, then answers: three ToolMessages in all."""
    turns = iter(
        [
            [
                {"name": "search", "args": {"q": "Oslo"}, "id": "call_1"},
                {"name": "weather", "args": {}, "id": "call_2"},
            ],
            [{"name": "book", "args": {"flight": "SK123"}, "id": "call_3"}],
            [],
        ]
    )

    def agent(state: Chat) -> Chat:
        calls = next(turns)
        return {"messages": [AIMessage("On it." if calls else "Booked.", tool_calls=calls)]}

    def tools(state: Chat) -> Chat:
        asked = state["messages"][-1].tool_calls
        failed = {"weather"}
        return {
            "messages": [
                ToolMessage(
                    "HTTP 503" if call["name"] in failed else f"{call['name']} ok",
                    tool_call_id=call["id"],
                    status="error" if call["name"] in failed else "success",
                )
                for call in asked
            ]
        }

    graph = StateGraph(Chat)
    graph.add_node("agent", agent)
    graph.add_node("tools", tools)
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", lambda s: "tools" if s["messages"][-1].tool_calls else END, ["tools", END])
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=saver)


def nodes(checkpoint: Checkpoint) -> tuple[Any, list[str]]:
    kept = Checkpoint.objects.get(pk=checkpoint.pk).metadata[lgnodes.KEY]
    return kept["ran"], kept["next"]


def test_each_checkpoint_names_the_nodes_that_wrote_it_and_those_langgraph_runs_next(project):
    saver = InMemorySaver()
    graph = tool_calling_graph(saver)
    graph.invoke({"messages": [HumanMessage("Book me a flight to Oslo")]}, CONFIG)
    stored = put_thread(project, saver)
    history = sorted(graph.get_state_history(CONFIG), key=lambda s: s.config["configurable"]["checkpoint_id"])
    assert [nodes(c)[1] for c in stored] == [list(snapshot.next) for snapshot in history]
    assert [nodes(c)[0] for c in stored] == [[], ["__start__"], ["agent"], ["tools"], ["agent"], ["tools"], ["agent"]]


def test_sends_and_an_interrupt_are_named_as_langgraph_names_them(project):
    class Fan(TypedDict, total=False):
        items: list
        out: Annotated[list, operator.add]

    def ask(state: Fan) -> Fan:
        return {"out": [interrupt("ship it?")]}

    graph = StateGraph(Fan)
    graph.add_node("plan", lambda state: {})
    graph.add_node("work", lambda state: {"out": [state["items"][0] * 2]})
    graph.add_node("ask", ask)
    graph.add_edge(START, "plan")
    graph.add_conditional_edges("plan", lambda s: [Send("work", {"items": [x]}) for x in s["items"]], ["work"])
    graph.add_edge("work", "ask")
    graph.add_edge("ask", END)
    saver = InMemorySaver()
    compiled = graph.compile(checkpointer=saver)
    compiled.invoke({"items": [1, 2]}, CONFIG)
    stored = put_thread(project, saver)
    history = sorted(compiled.get_state_history(CONFIG), key=lambda s: s.config["configurable"]["checkpoint_id"])
    assert [nodes(c)[1] for c in stored] == [list(snapshot.next) for snapshot in history]
    assert nodes(stored[2]) == (["plan"], ["work", "work"])
    assert nodes(stored[3]) == (["work", "work"], ["ask"])  # the head: `ask` waits on its interrupt


def test_a_subgraphs_checkpoints_name_its_own_nodes(project):
    stored = put_thread(project, run_thread(with_subgraph=True))
    inner = [c for c in stored if c.metadata["checkpoint_ns"]]
    assert [nodes(c) for c in inner] == [([], ["__start__"]), (["__start__"], ["summarise"]), (["summarise"], [])]


def test_a_restore_tells_the_graph_why_in_the_new_checkpoints_metadata(project):
    saver = InMemorySaver()
    tool_calling_graph(saver).invoke({"messages": [HumanMessage("Book me a flight to Oslo")]}, CONFIG)
    stored = put_thread(project, saver)
    restored = restore_checkpoint(stored[2], actor=ACTOR, reason="the weather tool was down")
    kept = Checkpoint.objects.get(pk=restored.pk).metadata
    assert kept[lgnodes.KEY] == {"ran": [], "next": ["tools"]}  # no node wrote it; tools runs again
    latest = restored.langgraph.metadata
    assert latest["restored_from"] == stored[2].metadata["checkpoint_id"]
    assert latest["restore_reason"] == "the weather tool was down"

    again = restore_checkpoint(restored, actor=ACTOR)  # a restore without a reason does not repeat the last one's
    assert "restore_reason" not in again.langgraph.metadata


def test_the_restore_preview_counts_every_tool_result_the_messages_lose_with_its_step_node_and_outcome(project):
    saver = InMemorySaver()
    tool_calling_graph(saver).invoke({"messages": [HumanMessage("Book me a flight to Oslo")]}, CONFIG)
    stored = put_thread(project, saver)
    preview = restore_preview(Checkpoint.objects.get(pk=stored[2].pk))  # agent asked for two calls; none has run
    forgotten = sorted(preview.forgotten_tool_calls, key=lambda call: call["id"])
    assert [(c["name"], c["step"], c["node"], c["success"]) for c in forgotten] == [
        ("search", 2, "tools", True),
        ("weather", 2, "tools", False),
        ("book", 4, "tools", True),
    ]
    assert forgotten[1]["error"] == "HTTP 503" and forgotten[2]["arguments"] == {"flight": "SK123"}
    [book] = restore_preview(Checkpoint.objects.get(pk=stored[4].pk)).forgotten_tool_calls
    assert book["name"] == "book"


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=3),
    max_leaves=6,
)
CHANNEL = st.sampled_from(["__start__", "branch:to:a", "branch:to:", "messages", "__pregel_tasks"]) | st.text(
    max_size=12
)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])  # nested data on a busy 2-core machine
@given(
    st.fixed_dictionaries(
        {},
        optional={
            "channel_versions": st.dictionaries(CHANNEL, JSONISH, max_size=5) | JSONISH,
            "versions_seen": st.dictionaries(
                st.text(max_size=12), st.dictionaries(CHANNEL, JSONISH, max_size=3) | JSONISH, max_size=3
            )
            | JSONISH,
        },
    ),
    st.dictionaries(CHANNEL, JSONISH, max_size=5),
    st.fixed_dictionaries({}, optional={"source": JSONISH, "writes": JSONISH}),
    JSONISH,
)
def test_the_nodes_of_any_header_an_agent_sends_are_lists_of_names_or_unknown(header, channels, metadata, parent):
    kept = lgnodes.nodes_of(header, channels, metadata, parent_header=header, parent_nodes=parent)
    assert kept["ran"] is None or all(isinstance(node, str) for node in kept["ran"])
    assert all(isinstance(node, str) for node in kept["next"])
