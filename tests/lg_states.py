"""LangGraph threads as the console stores them, for tests: real graphs run on LangGraph's in-memory saver,
their checkpoints turned into typed JSON by LangGraph's own serializer and stored through the services the
way the contract maps them (a checkpoint per row, channel values as the state, parent in the same namespace).
"""

from __future__ import annotations

import datetime
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from checkpoint_console import typedjson
from checkpoints.models import AgentSession, Checkpoint
from checkpoints.services import CheckpointInput, create_checkpoint, ingest_checkpoints
from checkpoints.services import langgraph as lg

SERDE = JsonPlusSerializer()
WHEN = datetime.datetime(2026, 1, 2, 3, 4, 5)  # noqa: DTZ001 - an agent's own value in its state, naive as agents send them


def typed(value: Any) -> Any:
    """A value as the console stores it: LangGraph's `(type, bytes)` as typed JSON."""
    return typedjson.from_typed(*SERDE.dumps_typed(value))


class State(TypedDict, total=False):
    messages: Annotated[list, add_messages]
    when: datetime.datetime
    blob: Any


def _agent(state: State) -> State:
    call = {"name": "search", "args": {"q": "flights to Oslo"}, "id": "call_1"}
    return {"messages": [AIMessage("Let me look that up.", tool_calls=[call])], "when": WHEN}


def _tool(state: State) -> State:
    return {"messages": [ToolMessage("HTTP 503 from the search API", tool_call_id="call_1", status="error")]}


def _summarise(state: State) -> State:
    return {"messages": [AIMessage("The search failed; try again later.")]}


def tool_loop_graph(saver: InMemorySaver, *, with_subgraph: bool = False) -> Any:
    """agent (calls `search`) → tool (fails) → summarise, the last one a subgraph when `with_subgraph`."""
    graph = StateGraph(State)
    graph.add_node("agent", _agent)
    graph.add_node("tool", _tool)
    if with_subgraph:
        inner = StateGraph(State)
        inner.add_node("summarise", _summarise)
        inner.add_edge(START, "summarise")
        inner.add_edge("summarise", END)
        graph.add_node("child", inner.compile())
    else:
        graph.add_node("child", _summarise)
    graph.add_edge(START, "agent")
    graph.add_edge("agent", "tool")
    graph.add_edge("tool", "child")
    graph.add_edge("child", END)
    return graph.compile(checkpointer=saver)


def run_thread(
    thread_id: str = "thread-1", *, with_subgraph: bool = False, turns: int = 1, time_travel: bool = False
) -> InMemorySaver:
    """The graph run `turns` times on one thread; `time_travel` then replays it from its first `agent` step's
    checkpoint, as `graph.invoke(None, that checkpoint's config)` does: a branch off an old checkpoint."""
    saver = InMemorySaver()
    graph = tool_loop_graph(saver, with_subgraph=with_subgraph)
    config = {"configurable": {"thread_id": thread_id}}
    for turn in range(turns):
        graph.invoke({"messages": [HumanMessage(f"Find me a flight to Oslo ({turn + 1})")]}, config)
    if time_travel:
        history = list(graph.get_state_history(config))
        replay_from = next(snapshot for snapshot in reversed(history) if snapshot.next == ("tool",))
        graph.invoke(None, replay_from.config)
    return saver


def langgraph_session(make_session: Any, thread_id: str = "thread-1") -> AgentSession:
    session = make_session(thread_id, agent="langgraph")
    AgentSession.objects.filter(pk=session.pk).update(source_format="langgraph", metadata={"thread_id": thread_id})
    session.refresh_from_db()
    return session


def store_thread(session: AgentSession, saver: InMemorySaver, thread_id: str = "thread-1") -> list[Checkpoint]:
    """Every checkpoint of the thread (all namespaces) in the order LangGraph wrote them, as console rows."""
    tuples = sorted(saver.list({"configurable": {"thread_id": thread_id}}), key=lambda t: t.checkpoint["id"])
    stored: dict[tuple[str, str], Checkpoint] = {}
    for item in tuples:
        ns = item.config["configurable"]["checkpoint_ns"]
        parent_id = item.parent_config["configurable"]["checkpoint_id"] if item.parent_config else None
        stored[(ns, item.checkpoint["id"])] = put(
            session,
            item.checkpoint["channel_values"],
            item.metadata,
            checkpoint_id=item.checkpoint["id"],
            ns=ns,
            parent=stored[(ns, parent_id)] if parent_id else None,
        )
    return [stored[(t.config["configurable"]["checkpoint_ns"], t.checkpoint["id"])] for t in tuples]


def put(
    session: AgentSession,
    values: dict[str, Any],
    metadata: dict[str, Any],
    *,
    checkpoint_id: str,
    ns: str = "",
    parent: Checkpoint | None = None,
) -> Checkpoint:
    """One LangGraph checkpoint as the contract maps it: state = channel values, name = source, step."""
    checkpoint, _ = create_checkpoint(
        session,
        CheckpointInput(
            state={channel: typed(value) for channel, value in values.items()},
            name=str(metadata.get("source", "")),
            step=metadata.get("step"),
            metadata={**typed(metadata), "checkpoint_id": checkpoint_id, "checkpoint_ns": ns},
            parent=parent.pk if parent else None,
            new_root=parent is None,
        ),
    )
    return checkpoint


def put_thread(project: Any, saver: InMemorySaver, thread_id: str = "thread-1") -> list[Checkpoint]:
    """Every checkpoint of the thread and its pending writes sent through the LangGraph services as ConsoleSaver
    sends them (each checkpoint whole, with its header and parent), in the order LangGraph wrote them."""
    tuples = sorted(saver.list({"configurable": {"thread_id": thread_id}}), key=lambda t: t.checkpoint["id"])
    stored = []
    for item in tuples:
        configurable = item.config["configurable"]
        header = {key: value for key, value in item.checkpoint.items() if key != "channel_values"}
        checkpoint, _ = lg.put_checkpoint(
            project,
            lg.PutInput(
                thread_id=thread_id,
                checkpoint_ns=configurable["checkpoint_ns"],
                checkpoint=typed(header),
                metadata=typed(item.metadata),
                values={channel: typed(value) for channel, value in item.checkpoint["channel_values"].items()},
                parent_checkpoint_id=item.parent_config["configurable"]["checkpoint_id"]
                if item.parent_config
                else None,
            ),
        )
        for task_id, channel, value in item.pending_writes or []:
            lg.put_writes(
                project,
                thread_id=thread_id,
                checkpoint_ns=configurable["checkpoint_ns"],
                checkpoint_id=item.checkpoint["id"],
                task_id=task_id,
                task_path="",
                writes=[(channel, typed(value))],
            )
        stored.append(checkpoint)
    return stored


def many_subgraph_runs(session: AgentSession, runs: int, *, run_size: int = 3) -> list[tuple[int, int]]:
    """A thread whose root graph makes one step per turn and runs a subgraph of `run_size` checkpoints in each, as
    LangGraph stores it (the subgraph's first checkpoint a new root in its namespace, the root's next step's parent
    the root's last), in one batch. Returns each run's (first seq, last seq)."""
    items: list[CheckpointInput] = []
    spans = []
    base = session.last_seq
    for turn in range(runs + 1):
        root_meta = {"source": "loop", "step": turn, "checkpoint_id": f"root-{turn:06}", "checkpoint_ns": ""}
        items.append(
            CheckpointInput(
                state={"messages": [f"turn {turn}"], "turn": turn},
                name="loop",
                step=turn,
                idempotency_key=f"root-{turn}",
                parent_key=f"root-{turn - 1}" if turn else "",
                metadata=root_meta,
            )
        )
        if turn == runs:
            break
        ns = f"child:{turn:08}-run"
        first = base + len(items) + 1
        for step in range(run_size):
            items.append(
                CheckpointInput(
                    state={"summary": f"run {turn} step {step}"},
                    name="loop",
                    step=step,
                    new_root=step == 0,
                    metadata={"source": "loop", "step": step, "checkpoint_id": f"{turn}-{step}", "checkpoint_ns": ns},
                )
            )
        spans.append((first, first + run_size - 1))
    ingest_checkpoints([(session, items)])
    return spans
