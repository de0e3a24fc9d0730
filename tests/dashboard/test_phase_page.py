"""The phase page, its feedback form, the approval queue on the overview and the sessions-list filter."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client
from django.urls import reverse

from checkpoints.models import AgentOutput, AuditEvent, Phase, PhaseFeedback, PhaseStatus
from tests.helpers import select, text

T0 = datetime(2026, 6, 1, 10, 0, tzinfo=UTC)


@pytest.fixture
def phase(make_session):
    session = make_session("idea-1")
    phase = Phase.objects.create(
        session=session,
        number=2,
        name="Market Research",
        status=PhaseStatus.COMPLETED,
        started_at=T0,
        completed_at=T0 + timedelta(minutes=3),
        duration=180,
        tokens_in=1200,
        tokens_out=340,
        cost="0.0421",
    )
    AgentOutput.objects.create(
        phase=phase,
        agent_name="market_intelligence",
        status="completed",
        content="## Market\n\n| Segment | Size |\n|---|---|\n| Families | 12M |\n\n<script>alert('owned')</script>",
    )
    return phase


def page_url(phase: Phase) -> str:
    return reverse("dashboard:phase_detail", args=[phase.session_id, phase.number])


def feedback_url(phase: Phase) -> str:
    return reverse("dashboard:phase_feedback", args=[phase.session_id, phase.number])


def as_user(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_sign_in_required(client, phase):
    assert client.get(page_url(phase)).url.startswith("/accounts/login/")
    assert client.post(feedback_url(phase), {"action": "approved"}).url.startswith("/accounts/login/")


def test_another_projects_phase_is_not_found(carol, make_session, other_project, phase):
    elsewhere = Phase.objects.create(session=make_session("x", in_project=other_project), number=2, name="Theirs")
    approver = as_user(carol)
    assert approver.get(page_url(elsewhere)).status_code == 404
    assert approver.post(feedback_url(elsewhere), {"action": "skip_phase"}).status_code == 404
    assert not PhaseFeedback.objects.exists()
    assert approver.get(reverse("dashboard:phase_detail", args=[phase.session_id, 99])).status_code == 404


def test_an_approver_elsewhere_only_views_phases_of_a_project_where_they_view(carol, grant, phase, other_project):
    grant(carol, other_project, "approver")
    grant(carol, phase.session.project, "viewer")
    carol.project_memberships.filter(project=phase.session.project, role="approver").delete()
    approver = as_user(carol)
    html = approver.get(page_url(phase)).content.decode()
    assert "Market Research" in html and not select(html, "[name=action]")  # no review form
    assert approver.post(feedback_url(phase), {"action": "skip_phase"}).status_code == 403
    assert not PhaseFeedback.objects.exists()


def test_the_page_shows_facts_checklist_and_sanitised_outputs(bob, phase, django_assert_max_num_queries):
    viewer = as_user(bob)
    with django_assert_max_num_queries(9):
        response = viewer.get(page_url(phase))
    html = response.content.decode()
    assert response.status_code == 200
    assert "Phase 2: Market Research" in html
    assert "1200 in · 340 out" in html and "$0.0421" in html
    assert "Families" in [text(cell) for cell in select(html, "td")]  # the outputs' markdown, rendered
    assert "Market" in [text(heading) for heading in select(html, "h2")]
    assert "<script>alert" not in html and "&lt;script&gt;alert" in html
    assert "Status is completed" in html and "the phase can be approved" in html


def test_a_viewer_never_sees_the_form(bob, phase):
    html = as_user(bob).get(page_url(phase)).content.decode()
    assert "Submit decision" not in html and "needs the approver role" in html


def test_approving_saves_the_decision_audits_and_redirects(carol, phase):
    response = as_user(carol).post(feedback_url(phase), {"action": "approved", "comments": "Solid"})
    assert response.status_code == 302 and response.url == page_url(phase)
    feedback = PhaseFeedback.objects.get()
    assert (feedback.action, feedback.approved, feedback.reviewer, feedback.comments) == (
        "approved",
        True,
        carol,
        "Solid",
    )
    assert AuditEvent.objects.filter(action="phase_feedback", actor="carol").exists()
    html = as_user(carol).get(page_url(phase)).content.decode()
    assert "Approved" in html and "“Solid”" in html


def test_requesting_changes_over_htmx_returns_the_fragment_with_a_trigger(carol, phase):
    response = as_user(carol).post(
        feedback_url(phase),
        {"action": "retry_with_changes", "comments": "Go deeper", "requested_changes": "Add TAM\n\n Cite sources \n"},
        headers={"HX-Request": "true"},
    )
    assert response.status_code == 200
    assert "phase-reviewed" in response["HX-Trigger"]
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="phase-review">') and not select(html, "html")
    phase.refresh_from_db()
    assert (phase.retry_count, phase.status) == (1, PhaseStatus.REQUIRES_RETRY)
    assert PhaseFeedback.objects.get().requested_changes == ["Add TAM", "Cite sources"]
    assert "Add TAM" in [text(item) for item in select(html, "#phase-review li")]


def test_an_approved_phase_offers_no_form_and_a_second_approval_is_refused(carol, phase):
    as_user(carol).post(feedback_url(phase), {"action": "approved"})
    html = as_user(carol).get(page_url(phase)).content.decode()
    assert not select(html, ".feedback-form, [name=action]")
    [approved] = select(html, ".phase-approved")
    assert "approved by carol" in text(approved)
    response = as_user(carol).post(feedback_url(phase), {"action": "approved"}, headers={"HX-Request": "true"})
    assert response.status_code == 200
    assert "already approved (by carol); it cannot be approved again" in response.content.decode()
    assert json.loads(response["HX-Trigger-After-Settle"])["notice"]["level"] == "error"
    assert PhaseFeedback.objects.count() == 1


def test_a_decision_over_htmx_is_said_and_focused_above_the_review(carol, phase):
    response = as_user(carol).post(feedback_url(phase), {"action": "approved"}, headers={"HX-Request": "true"})
    [decided] = select(response, "#phase-review .notice.notice-success.phase-decided[tabindex='-1'][autofocus]")
    assert text(decided) == "Phase 2: Approved recorded."
    notice = json.loads(response["HX-Trigger-After-Settle"])["notice"]
    assert notice == {"text": "Phase 2: Approved recorded.", "level": "success"}


def test_requesting_changes_without_changes_shows_an_inline_error(carol, phase):
    response = as_user(carol).post(feedback_url(phase), {"action": "retry_with_changes", "requested_changes": " \n"})
    assert response.status_code == 200
    assert "List at least one change" in response.content.decode()
    assert not PhaseFeedback.objects.exists()


def test_an_unknown_action_is_an_inline_error(carol, phase):
    response = as_user(carol).post(feedback_url(phase), {"action": "merge"})
    assert response.status_code == 200 and "Select a valid choice" in response.content.decode()
    assert not PhaseFeedback.objects.exists()


def test_approving_an_unfinished_phase_is_refused_inline(carol, phase):
    Phase.objects.filter(pk=phase.pk).update(status=PhaseStatus.IN_PROGRESS)
    response = as_user(carol).post(feedback_url(phase), {"action": "approved"})
    assert response.status_code == 200
    assert "has not completed" in response.content.decode()
    assert not PhaseFeedback.objects.exists()


def test_the_session_page_links_each_phase(bob, phase):
    page = as_user(bob).get(reverse("dashboard:session_detail", args=[phase.session_id]))
    assert select(page, f'a[href="{page_url(phase)}"]')


def test_the_overview_lists_phases_waiting_for_approval(carol, phase):
    html = as_user(carol).get(reverse("dashboard:overview")).content.decode()
    assert "Waiting for approval" in html and select(html, f'a[href="{page_url(phase)}"]')
    as_user(carol).post(feedback_url(phase), {"action": "approved"})
    html = as_user(carol).get(reverse("dashboard:overview")).content.decode()
    assert not select(html, f'a[href="{page_url(phase)}"]') and "Nothing to review" in html


def test_the_sessions_list_filters_sessions_waiting_for_approval(carol, phase, make_session):
    make_session("calm-run")
    url = reverse("dashboard:session_list")
    html = as_user(carol).get(url, {"waiting": "on"}).content.decode()
    assert "idea-1" in html and "calm-run" not in html
    assert "calm-run" in as_user(carol).get(url).content.decode()
