"""The answer form of a LangGraph thread waiting for input: who sees it, what it sends, what it refuses, and
that an interrupt's value (the agent's text) is shown as text, never as markup."""

from __future__ import annotations

import pytest
from django.urls import reverse

from checkpoints.models import AuditEvent, InterruptAnswer, SessionStatus
from tests.kits.interrupts import waiting_thread

pytestmark = pytest.mark.django_db


def _page(client, session):
    return client.get(reverse("dashboard:session_interrupts", args=[session.pk]))


def _answer(client, session, **data):
    return client.post(reverse("dashboard:interrupt_answer", args=[session.pk]), {"interrupt_id": "i-1", **data})


def test_a_yes_no_question_gets_approve_and_reject_and_approve_sends_true(client, project, carol):
    session = waiting_thread(project, asks={"i-1": {"question": "Send the email to the CEO?"}})
    client.force_login(carol)
    page = _page(client, session).content.decode()
    assert "Send the email to the CEO?" in page
    assert 'value="approve"' in page and 'value="reject"' in page
    response = _answer(client, session, decision="approve", comment="checked the draft")
    assert response.status_code == 302
    answer = InterruptAnswer.objects.get()
    assert (answer.value, answer.comment, answer.answered_by) == (True, "checked the draft", carol)
    assert AuditEvent.objects.filter(action="interrupt_answered", actor="carol").exists()
    assert "taken by the graph" not in _page(client, session).content.decode()


def test_a_structured_question_takes_json_or_text(client, project, carol):
    session = waiting_thread(project, asks={"i-1": {"draft": "Hello", "choices": ["a", "b"]}})
    client.force_login(carol)
    assert 'name="answer"' in _page(client, session).content.decode()
    assert _answer(client, session, decision="answer", answer='{"choice": "a"}').status_code == 302
    assert InterruptAnswer.objects.get().value == {"choice": "a"}


def test_plain_text_is_sent_as_a_string(client, project, carol):
    session = waiting_thread(project, asks={"i-1": "What should the subject line be"})
    client.force_login(carol)
    assert _answer(client, session, answer="Quarterly numbers").status_code == 302
    assert InterruptAnswer.objects.get().value == "Quarterly numbers"


def test_a_second_answer_is_a_form_error_and_changes_nothing(client, project, carol):
    session = waiting_thread(project)
    client.force_login(carol)
    _answer(client, session, decision="approve")
    response = _answer(client, session, decision="reject")
    assert response.status_code == 409
    assert InterruptAnswer.objects.get().value is True


def test_an_empty_answer_and_a_refused_type_are_form_errors(client, project, carol):
    session = waiting_thread(project, asks={"i-1": {"draft": "x"}})
    client.force_login(carol)
    assert _answer(client, session, answer="  ").status_code == 400
    hostile = '{"__lg__": ["ext", 0], "v": ["os", "system", ["id"]]}'
    response = _answer(client, session, answer=hostile)
    assert response.status_code == 400
    assert "os.system" in response.content.decode()
    assert not InterruptAnswer.objects.exists()


def test_an_operator_sees_the_question_but_no_form_and_cannot_post(client, project, alice):
    session = waiting_thread(project)
    client.force_login(alice)
    page = _page(client, session).content.decode()
    assert "Send the email?" in page and "needs the approver role" in page
    assert _answer(client, session, decision="approve").status_code == 403
    assert not InterruptAnswer.objects.exists()


@pytest.mark.parametrize(
    "value",
    [
        "<script>alert(1)</script>?",
        {"question": "<img src=x onerror=alert(1)>"},
        {"</pre><script>x()</script>": "<b>"},
    ],
)
def test_interrupt_values_are_shown_as_text(client, project, carol, value):
    session = waiting_thread(project, asks={"i-1": value})
    client.force_login(carol)
    page = _page(client, session).content.decode()
    assert "<script>" not in page and "<img src=x" not in page and "</pre><script>" not in page
    assert "&lt;script&gt;" in page or "&lt;img" in page


def test_waiting_threads_have_their_badge_filter_and_overview_section(client, project, carol):
    session = waiting_thread(project)
    client.force_login(carol)
    listing = client.get(reverse("dashboard:session_list"), {"status": SessionStatus.WAITING}).content.decode()
    assert "waiting for input" in listing and session.external_id in listing
    overview = client.get(reverse("dashboard:overview")).content.decode()
    assert "Waiting for input" in overview
    assert reverse("dashboard:session_interrupts", args=[session.pk]) in overview
    detail = client.get(reverse("dashboard:session_detail", args=[session.pk])).content.decode()
    assert "See the question and answer it" in detail


def test_once_every_question_is_answered_the_session_page_says_it_waits_for_the_runner(client, project, carol):
    session = waiting_thread(project, asks={"i-1": "Send the email?", "i-2": "To whom?"})
    client.force_login(carol)
    detail = reverse("dashboard:session_detail", args=[session.pk])
    _answer(client, session, decision="approve")
    page = client.get(detail).content.decode()
    assert "See the question and answer it" in page  # i-2 still asks
    client.post(reverse("dashboard:interrupt_answer", args=[session.pk]), {"interrupt_id": "i-2", "answer": "Ann"})
    page = client.get(detail).content.decode()
    assert "See the question and answer it" not in page and "asks a person" not in page
    assert "Answered; waiting for the runner." in page and "See the answers" in page
