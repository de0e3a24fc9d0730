"""Statuses and answers of LangGraph threads, as writes and puts arrive in any order: what makes a thread wait,
fail and go on, when an answer counts as taken, and who is told."""

from __future__ import annotations

import pytest
from django.core import mail

from checkpoints.models import (
    AgentSession,
    AlertKind,
    AlertState,
    Checkpoint,
    Delivery,
    DriftAlert,
    EventType,
    InterruptAnswer,
    SessionStatus,
)
from checkpoints.outbox.deliveries import attempt
from checkpoints.services import Actor
from checkpoints.services import langgraph as lg
from checkpoints.services.lginterrupts import (
    AlreadyAnswered,
    NoSuchInterrupt,
    answer_interrupt,
    pending_interrupts,
    pending_resume,
)
from checkpoints.services.recovery import restore_checkpoint
from tests.kits.interrupts import CHECKPOINT_ID, NEXT_ID, interrupt_record, put, waiting_thread

pytestmark = pytest.mark.django_db

ACTOR = Actor.system("test")


def write(project, channel, value, *, task="task-0", node="ask", checkpoint_id=CHECKPOINT_ID, ns=""):
    lg.put_writes(
        project,
        thread_id="chat-1",
        checkpoint_ns=ns,
        checkpoint_id=checkpoint_id,
        task_id=task,
        task_path=f"~__pregel_pull, {node}",
        writes=[(channel, value)],
    )


def status() -> str:
    return AgentSession.objects.get(external_id="chat-1").status


def test_an_interrupt_written_before_its_checkpoint_arrives_still_makes_the_thread_wait(project):
    """LangGraph's durability="async": the task's writes can reach the server before the put they go against."""
    put(project, "chat-1", "1f0c0000-0000-6000-8000-000000000000")
    write(project, "__interrupt__", [interrupt_record("Go on?", "i-1")])
    assert status() == SessionStatus.ACTIVE  # against a checkpoint the thread does not hold yet
    put(project, "chat-1", CHECKPOINT_ID, parent="1f0c0000-0000-6000-8000-000000000000")
    assert status() == SessionStatus.WAITING
    assert [item.id for item in pending_interrupts(AgentSession.objects.get())] == ["i-1"]


def test_a_node_error_fails_the_thread_and_a_later_checkpoint_resolves_its_alert(project):
    put(project, "chat-1", CHECKPOINT_ID)
    write(project, "__error__", "ValueError('tool exploded')", node="tools")
    assert status() == SessionStatus.FAILED
    alert = DriftAlert.objects.get(kind=AlertKind.NODE_ERROR)
    assert alert.message == "Node 'tools' raised ValueError('tool exploded')"
    assert alert.last_good.metadata["checkpoint_id"] == CHECKPOINT_ID  # restoring it runs the node again
    put(project, "chat-1", NEXT_ID, parent=CHECKPOINT_ID)
    assert status() == SessionStatus.ACTIVE
    alert.refresh_from_db()
    assert alert.state == AlertState.RESOLVED


def test_a_subgraphs_own_writes_do_not_decide_the_threads_status(project):
    put(project, "chat-1", CHECKPOINT_ID)
    write(project, "__error__", "KeyError('x')", ns="sub:task-0")
    assert status() == SessionStatus.ACTIVE
    assert not DriftAlert.objects.exists()


def test_a_restore_of_a_waiting_or_failed_thread_makes_it_active(project):
    session = waiting_thread(project)
    write(project, "__error__", "ValueError('x')", task="task-9", node="other")
    assert status() == SessionStatus.FAILED
    restore_checkpoint(Checkpoint.objects.get(session=session), actor=ACTOR, reason="try again")
    assert status() == SessionStatus.ACTIVE
    assert DriftAlert.objects.get(kind=AlertKind.NODE_ERROR).state == AlertState.RESOLVED
    assert pending_interrupts(AgentSession.objects.get()) == []  # the new head holds no writes


def test_a_node_asking_twice_is_answered_twice_under_one_id(project):
    """LangGraph names an interrupt after its task: a second interrupt() in the node asks under the same id."""
    session = waiting_thread(project, asks={"i-1": "First?"})
    answer_interrupt(session, "i-1", actor=ACTOR, value="one")
    write(project, "__resume__", ["one"])  # the runner resumed with it
    assert pending_resume(session) == {} and status() == SessionStatus.ACTIVE
    write(project, "__interrupt__", [interrupt_record("Second?", "i-1")])
    session.refresh_from_db()
    assert status() == SessionStatus.WAITING
    [item] = pending_interrupts(session)
    assert (item.value, item.state) == ("Second?", "open")
    answer_interrupt(session, "i-1", actor=ACTOR, value="two")
    assert pending_resume(session) == {"i-1": "two"}
    with pytest.raises(AlreadyAnswered):
        answer_interrupt(session, "i-1", actor=ACTOR, value="three")


def test_an_answer_is_taken_once_the_thread_moves_past_its_checkpoint(project):
    session = waiting_thread(project)
    answer_interrupt(session, "i-1", actor=ACTOR, value=True)
    put(project, "chat-1", NEXT_ID, parent=CHECKPOINT_ID)  # a runner that went on without reading it
    assert pending_resume(session) == {}
    assert InterruptAnswer.objects.get().consumed_at is not None
    with pytest.raises(NoSuchInterrupt):
        answer_interrupt(session, "i-1", actor=ACTOR, value=False)  # no longer asked


def test_approvers_are_emailed_the_answer_forms_link_once_a_thread_waits(project, carol, settings):
    carol.email = "carol@example.com"
    carol.save()
    session = waiting_thread(project)
    [delivery] = Delivery.objects.filter(event__type=EventType.INTERRUPT_WAITING)
    attempt(delivery.pk)
    [message] = mail.outbox
    assert "waits for your answer" in message.subject and "ask" in message.subject
    assert message.body.split()[-1] == f"{settings.CONSOLE_BASE_URL}/sessions/{session.pk}/interrupts/"
