"""A state edit made in the console, obeyed by a real LangGraph graph running through ConsoleSaver against a live
server: `invoke(None, config)` continues from the edited checkpoint, and the node that runs next sees the value the
operator typed."""

from __future__ import annotations

import json
from typing import Annotated, Any, TypedDict

import lxml.html
import pytest
from django.test import Client
from django.urls import reverse
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from checkpoint_console.langgraph import ConsoleSaver
from checkpoints.models import AuditEvent, Checkpoint
from tests.clients.test_langgraph_recovery import config, console_row, submit_form
from tests.kits.langgraph_kit import typed

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def saver(live_server, token_secret):
    with ConsoleSaver(live_server.url, token_secret, timeout=30) as console_saver:
        yield console_saver


@pytest.fixture
def operator(alice) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    return client


class Plan(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    plan: str
    done: list[str]


def plan_graph(saver: Any) -> Any:
    """Plan, then (after a stop for review) act on the plan: `act` reports the plan it was given."""

    def make_plan(state: Plan) -> dict[str, Any]:
        return {"plan": "delete every file", "messages": [AIMessage("planned", id="ai-plan")]}

    def act(state: Plan) -> dict[str, Any]:
        return {"done": [*state["done"], f"acted on: {state['plan']}"], "messages": [AIMessage("acted", id="ai-act")]}

    builder = StateGraph(Plan)
    builder.add_node("make_plan", make_plan)
    builder.add_node("act", act)
    builder.add_edge(START, "make_plan")
    builder.add_edge("make_plan", "act")
    builder.add_edge("act", END)
    return builder.compile(checkpointer=saver, interrupt_before=["act"])


def edit_in_console(operator: Any, checkpoint: Checkpoint, path: str, value: Any) -> Any:
    """The editor's form as a browser submits it, with the Save button (its field is named `action`, which
    submit_form takes as the form's address)."""
    url = reverse("dashboard:checkpoint_edit", args=[checkpoint.pk])
    page = lxml.html.fromstring(operator.get(f"{url}?path={path}").content)
    form = next(f for f in page.forms if f.get("method") == "post" and f.action == url)
    data = {name: value or "" for name, value in form.form_values()}
    data |= {"path": path, "value": json.dumps(value), "reason": "a safer plan", "action": "save"}
    response = operator.post(url, data)
    assert response.status_code == 302, response.content.decode()[:2000]
    return response


def test_invoke_none_continues_from_a_console_edit_and_the_next_node_sees_the_edited_value(saver, operator):
    graph = plan_graph(saver)
    thread = config("edit-1")
    graph.invoke({"messages": [HumanMessage("tidy up", id="h1")], "plan": "", "done": []}, thread)
    paused = graph.get_state(thread)
    assert paused.next == ("act",) and paused.values["plan"] == "delete every file"
    edit_in_console(operator, console_row("edit-1", paused), "/plan", typed("archive old files"))

    edited = graph.get_state(thread)
    assert edited.values["plan"] == "archive old files"
    assert edited.next == ("act",)  # the task that was to run next still runs
    assert edited.metadata["source"] == "update" and edited.metadata["step"] == paused.metadata["step"] + 1
    assert edited.metadata["edit_reason"] == "a safer plan"
    assert edited.parent_config["configurable"]["checkpoint_id"] == paused.config["configurable"]["checkpoint_id"]
    assert [m.id for m in edited.values["messages"]] == ["h1", "ai-plan"]

    final = graph.invoke(None, thread)
    assert final["done"] == ["acted on: archive old files"]
    assert [m.id for m in final["messages"]] == ["h1", "ai-plan", "ai-act"]
    history = [s.metadata["source"] for s in graph.get_state_history(thread)]
    assert history[:2] == ["loop", "update"]
    assert AuditEvent.objects.filter(action="edit_state").count() == 1


def test_undo_of_a_console_edit_gives_the_graph_the_value_before_it(saver, operator):
    graph = plan_graph(saver)
    thread = config("edit-2")
    graph.invoke({"messages": [HumanMessage("tidy up", id="h1")], "plan": "", "done": []}, thread)
    paused = graph.get_state(thread)
    response = edit_in_console(operator, console_row("edit-2", paused), "/plan", typed("archive old files"))
    edited = Checkpoint.objects.get(pk=int(response["Location"].rstrip("/").split("/")[-1]))
    page = reverse("dashboard:checkpoint_detail", args=[edited.pk])  # where the Undo button is offered, once
    undone = submit_form(operator, page, action=reverse("dashboard:session_undo", args=[edited.session_id]))
    assert undone.status_code == 302
    assert graph.get_state(thread).values["plan"] == "delete every file"
    assert graph.invoke(None, thread)["done"] == ["acted on: delete every file"]
