"""GET /sessions/{id}/interrupts and POST …/interrupts/{id}/answer: what an approver's token may answer, and what
it may not (the agent's own write token, another project's thread, a second answer, a refused type)."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkpoints.models import AuditEvent, InterruptAnswer, SessionStatus
from checkpoints.services import create_api_token
from tests.kits.interrupts import waiting_thread

pytestmark = pytest.mark.django_db

ANSWER = "/sessions/chat-1/interrupts/i-1/answer"


@pytest.fixture
def approver_api(project, api_as):
    return api_as(create_api_token(project, name="approver", scopes=["read", "answer"])[1])


def test_a_thread_at_an_interrupt_is_waiting_and_lists_it(project, api):
    waiting_thread(project, asks={"i-1": {"question": "Send the email?", "to": "ceo@example.com"}})
    assert api.get("/sessions/chat-1").json()["status"] == SessionStatus.WAITING
    assert api.get("/sessions/chat-1/interrupts").json() == [
        {
            "id": "i-1",
            "node": "ask",
            "value": {"question": "Send the email?", "to": "ceo@example.com"},
            "state": "open",
            "answer": None,
        }
    ]


def test_an_approver_token_answers_once_and_it_is_audited(project, approver_api):
    waiting_thread(project)
    response = approver_api.post(ANSWER, {"value": True, "comment": "fine"})
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["state"] == "answered"
    assert body["answer"]["value"] is True
    assert body["answer"]["answered_by"] == "token:approver"
    assert AuditEvent.objects.filter(action="interrupt_answered", reason="fine").count() == 1
    again = approver_api.post(ANSWER, {"value": False})
    assert again.status_code == 409
    assert "answered already" in again.json()["detail"]
    assert InterruptAnswer.objects.get().value is True


def test_the_agents_write_token_cannot_answer_its_own_interrupt(project, api):
    waiting_thread(project)
    response = api.post(ANSWER, {"value": True})
    assert response.status_code == 403
    assert "answer" in response.json()["detail"]
    assert not InterruptAnswer.objects.exists()


def test_another_projects_thread_and_an_unknown_interrupt_are_404(project, other_project, api_as, approver_api):
    waiting_thread(other_project)
    assert approver_api.post(ANSWER, {"value": True}).status_code == 404
    waiting_thread(project)
    assert approver_api.post("/sessions/chat-1/interrupts/nope/answer", {"value": True}).status_code == 404
    assert not InterruptAnswer.objects.exists()


def test_an_answer_naming_a_type_off_the_allow_list_is_refused(project, approver_api):
    waiting_thread(project)
    hostile = {"__lg__": ["ext", 0], "v": ["os", "system", ["id"]]}
    response = approver_api.post(ANSWER, {"value": hostile})
    assert response.status_code == 422, response.content
    assert "os.system" in response.content.decode()
    assert not InterruptAnswer.objects.exists()


def test_pending_resume_hands_out_answers_until_the_graph_takes_them(project, api, approver_api):
    waiting_thread(project, asks={"i-1": "Send?", "i-2": "Pay?"})
    assert api.post("/langgraph/resume", {"thread_id": "chat-1"}).json() == {"resume": None}
    approver_api.post(ANSWER, {"value": True})
    assert api.post("/langgraph/resume", {"thread_id": "chat-1"}).json() == {"resume": {"i-1": True}}
    # the runner resumes: LangGraph writes the task's __resume__ before running it again
    api.post(
        "/langgraph/writes",
        {
            "thread_id": "chat-1",
            "checkpoint_id": "1f0c0000-0000-6000-8000-000000000001",
            "task_id": "task-0",
            "task_path": "~__pregel_pull, ask",
            "writes": [["__resume__", [True]]],
        },
    )
    assert api.post("/langgraph/resume", {"thread_id": "chat-1"}).json() == {"resume": None}
    assert InterruptAnswer.objects.get().consumed_at is not None


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=json_values)
def test_any_json_answer_is_kept_exactly_or_refused_with_a_4xx(project, approver_api, value):
    InterruptAnswer.objects.all().delete()
    waiting_thread(project)
    response = approver_api.post(ANSWER, {"value": value})
    assert response.status_code in (201, 422), response.content
    if response.status_code == 201:
        assert orjson.loads(orjson.dumps(InterruptAnswer.objects.get().value)) == orjson.loads(orjson.dumps(value))
    else:
        assert not InterruptAnswer.objects.exists()
