"""The LangGraph story end to end, in Chromium, with a real StateGraph running through ConsoleSaver against the live
console: the graph stops at interrupt() and the thread waits for input; an approver answers in the form and the
runner resumes with `pending_resume`; a node raises, and the thread fails with an alert naming the node and the
error; the operator edits the value the plan got wrong on the failed head, and the graph continues from the edit.

The node error's last good checkpoint is the head itself (the one the node ran from): the alert offers no restore,
which would discard nothing. The remedy here is the edit; restoring an earlier checkpoint is tested elsewhere."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from playwright.sync_api import expect

from checkpoint_console.langgraph import ConsoleSaver
from checkpoints.models import AgentSession, AlertKind, AlertState, DriftAlert, SessionStatus

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

THREAD = "deploy-42"


class Deploy(TypedDict):
    target: str
    log: Annotated[list[str], operator.add]


def plan(state: Deploy) -> dict[str, Any]:
    return {"target": "prod-eu", "log": ["planned prod-eu"]}  # the wrong cluster: the operator fixes it later


def approve(state: Deploy) -> dict[str, Any]:
    answer = interrupt({"question": f"Should I deploy to {state['target']}?"})
    return {"log": [f"approved: {answer}"]}


def deploy(state: Deploy) -> dict[str, Any]:
    if state["target"] != "staging":
        raise RuntimeError(f"no such cluster: {state['target']}")
    return {"log": [f"deployed to {state['target']}"]}


def build(saver: ConsoleSaver) -> Any:
    builder = StateGraph(Deploy)
    builder.add_node("plan", plan)
    builder.add_node("approve", approve)
    builder.add_node("deploy", deploy)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "approve")
    builder.add_edge("approve", "deploy")
    builder.add_edge("deploy", END)
    return builder.compile(checkpointer=saver)


def thread() -> AgentSession:
    return AgentSession.objects.get(external_id=THREAD)


def test_interrupt_answer_failure_alert_edit_and_the_graph_goes_on(
    page, live_server, sign_in, alice, carol, token_secret
):
    config = {"configurable": {"thread_id": THREAD}}
    with ConsoleSaver(live_server.url, token_secret, timeout=30) as saver:
        app = build(saver)

        # 1. the graph asks a person
        app.invoke({"log": []}, config)
        assert thread().status == SessionStatus.WAITING
        assert saver.pending_resume(THREAD) is None

        # 2. an approver finds it on the overview and approves in the form
        sign_in(carol)
        queue = page.locator(".input-queue")
        expect(queue).to_contain_text(THREAD)
        queue.get_by_role("link", name=THREAD).click()
        expect(page.locator(".interrupt").first).to_contain_text("Should I deploy to prod-eu?")
        page.locator(".interrupt").first.get_by_label("Comment").fill("Checked the change log.")
        page.locator(".interrupt").first.get_by_role("button", name="Approve").click()
        expect(page.locator(".interrupt").first).to_contain_text("answered")

        # 3. the runner resumes with the answer; the deploy node raises
        command = saver.pending_resume(THREAD)
        assert command is not None
        with pytest.raises(RuntimeError, match="no such cluster: prod-eu"):
            app.invoke(command, config)
        assert thread().status == SessionStatus.FAILED
        alert = DriftAlert.objects.get(session=thread(), kind=AlertKind.NODE_ERROR)
        assert alert.state == AlertState.OPEN

        # 4. the operator sees the alert naming the node and the error
        sign_in(alice)
        page.goto(f"{live_server.url}/alerts/")
        row = page.locator("tr", has_text=THREAD)
        expect(row).to_contain_text("deploy")
        expect(row).to_contain_text("no such cluster: prod-eu")
        expect(row.get_by_role("link", name="Restore last good")).to_have_count(0)  # it is the head: nothing to undo

        # 5. ... and edits the target on the failed head, saying why
        head = thread().head
        page.goto(f"{live_server.url}/checkpoints/{head.pk}/edit/?path=/target")
        page.get_by_label("New value (JSON)").fill('"staging"')
        page.get_by_role("button", name="Preview the change").click()
        expect(page.get_by_role("heading", name="What the edit changes")).to_be_visible()
        page.get_by_label("Reason").fill("prod-eu is not a cluster; deploy to staging first")
        page.get_by_role("button", name="Save as new head").click()
        expect(page.get_by_role("button", name="Undo")).to_be_visible()

        # 6. the graph continues from the edit: the deploy node runs again and sees the edited value
        result = app.invoke(None, config)
        assert result["target"] == "staging"
        assert result["log"] == ["planned prod-eu", "approved: True", "deployed to staging"]
        assert thread().status == SessionStatus.ACTIVE
        alert.refresh_from_db()
        assert alert.state == AlertState.RESOLVED
        history = [snapshot.metadata.get("source") for snapshot in app.get_state_history(config)]
        assert "update" in history  # the console's edit, as LangGraph's own update_state records one
