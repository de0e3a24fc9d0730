"""Real StateGraphs stopping at interrupt() through ConsoleSaver against a live server: the thread reads as
waiting for input, a person answers in the console, and `graph.invoke(saver.pending_resume(thread_id), config)`
goes on with the answer — one interrupt, two nodes interrupting in one superstep, an interrupt in a subgraph;
and a node that raises makes the thread failed with an alert that clears once the thread moves on."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.graph import START, StateGraph
from langgraph.types import interrupt

from checkpoint_console.langgraph import ConsoleSaver
from checkpoints.models import AgentSession, AlertKind, AlertState, DriftAlert, InterruptAnswer, SessionStatus
from checkpoints.services import create_api_token

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def saver(live_server, token_secret):
    with ConsoleSaver(live_server.url, token_secret, timeout=30) as saver:
        yield saver


@pytest.fixture
def approver(project, api_as):
    return api_as(create_api_token(project, name="approver", scopes=["read", "answer"])[1])


class Log(TypedDict):
    log: Annotated[list[Any], operator.add]


def asking(question: Any) -> Any:
    def node(state: Log) -> dict[str, Any]:
        return {"log": [interrupt(question)]}

    return node


def graph(saver: ConsoleSaver, *nodes: tuple[str, Any]) -> Any:
    builder = StateGraph(Log)
    for name, node in nodes:
        builder.add_node(name, node)
        builder.add_edge(START, name)
    return builder.compile(checkpointer=saver)


def status(thread_id: str) -> str:
    return AgentSession.objects.get(external_id=thread_id).status


def answer_all(approver: Any, thread_id: str, value: Any) -> list[dict[str, Any]]:
    interrupts = approver.get(f"/sessions/{thread_id}/interrupts").json()
    for item in interrupts:
        response = approver.post(f"/sessions/{thread_id}/interrupts/{item['id']}/answer", {"value": value})
        assert response.status_code == 201, response.content
    return interrupts


def test_one_interrupt_answered_in_the_console_resumes_the_graph(saver, approver):
    app = graph(saver, ("ask", asking({"question": "Send the email?"})))
    config = {"configurable": {"thread_id": "one"}}
    app.invoke({"log": []}, config)
    assert status("one") == SessionStatus.WAITING
    assert saver.pending_resume("one") is None  # asked, not answered yet
    [item] = answer_all(approver, "one", {"approved": True})
    assert item["node"] == "ask" and item["value"] == {"question": "Send the email?"}
    command = saver.pending_resume("one")
    assert command is not None and command.resume == {item["id"]: {"approved": True}}
    assert app.invoke(command, config) == {"log": [{"approved": True}]}
    assert status("one") == SessionStatus.ACTIVE
    assert saver.pending_resume("one") is None  # taken: a second run does not answer again
    assert InterruptAnswer.objects.get().consumed_at is not None


def test_two_nodes_interrupting_in_one_superstep_take_their_own_answers(saver, approver):
    app = graph(saver, ("ask", asking("Send?")), ("pay", asking("Pay?")))
    config = {"configurable": {"thread_id": "par"}}
    app.invoke({"log": []}, config)
    assert status("par") == SessionStatus.WAITING
    interrupts = approver.get("/sessions/par/interrupts").json()
    by_node = {item["node"]: item for item in interrupts}
    assert {node: item["value"] for node, item in by_node.items()} == {"ask": "Send?", "pay": "Pay?"}
    approver.post(f"/sessions/par/interrupts/{by_node['ask']['id']}/answer", {"value": "sent"})
    approver.post(f"/sessions/par/interrupts/{by_node['pay']['id']}/answer", {"value": "paid"})
    result = app.invoke(saver.pending_resume("par"), config)
    assert sorted(result["log"]) == ["paid", "sent"]
    assert status("par") == SessionStatus.ACTIVE


def test_an_interrupt_in_a_subgraph_is_listed_once_and_resumed(saver, approver):
    inner = StateGraph(Log)
    inner.add_node("inner", asking("Inner question?"))
    inner.add_edge(START, "inner")
    app = graph(saver, ("sub", inner.compile()))
    config = {"configurable": {"thread_id": "subgraph"}}
    app.invoke({"log": []}, config)
    assert status("subgraph") == SessionStatus.WAITING
    [item] = answer_all(approver, "subgraph", "yes")
    assert item["node"] == "sub" and item["value"] == "Inner question?"
    assert app.invoke(saver.pending_resume("subgraph"), config) == {"log": ["yes"]}
    assert status("subgraph") == SessionStatus.ACTIVE


def test_a_node_error_fails_the_thread_with_an_alert_that_clears_when_it_moves_on(saver):
    calls = {"n": 0}

    def flaky(state: Log) -> dict[str, Any]:
        calls["n"] += 1
        if calls["n"] == 1:
            raise ValueError("tool exploded")
        return {"log": ["ok"]}

    app = graph(saver, ("flaky", flaky))
    config = {"configurable": {"thread_id": "err"}}
    with pytest.raises(ValueError, match="tool exploded"):
        app.invoke({"log": []}, config)
    assert status("err") == SessionStatus.FAILED
    alert = DriftAlert.objects.get(kind=AlertKind.NODE_ERROR)
    assert alert.state == AlertState.OPEN
    assert "flaky" in alert.message and "tool exploded" in alert.message
    assert app.invoke(None, config) == {"log": ["ok"]}
    assert status("err") == SessionStatus.ACTIVE
    alert.refresh_from_db()
    assert alert.state == AlertState.RESOLVED
