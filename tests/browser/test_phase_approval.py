"""An approver finds a phase in the overview's queue, reads its outputs, and approves it, in Chromium."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.utils import timezone
from playwright.sync_api import expect

from checkpoints.models import AgentOutput, AgentSession, Phase, PhaseFeedback, PhaseStatus

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def validation_done(db):
    """The demo's mvp session, with phase 6 (Validation) just completed and waiting for a reviewer."""
    call_command("seed_demo", "--small", verbosity=0)
    session = AgentSession.objects.get(external_id="idea-validation-456")
    phase = session.phases.get(number=6)
    AgentOutput.objects.filter(phase=phase, content="").update(
        status="completed",
        content="## Validation\n\n| Risk | Level |\n|---|---|\n| Churn | medium |\n\n<script>document.title='owned'</script>",
    )
    Phase.objects.filter(pk=phase.pk).update(status=PhaseStatus.COMPLETED, completed_at=timezone.now(), duration=840)
    return phase


def test_approver_approves_a_phase(page, live_server, sign_in, carol, validation_done, screenshot):
    phase = validation_done
    sign_in(carol)
    queue = page.locator(".approval-queue")
    expect(queue).to_contain_text("Phase 6: Validation")
    queue.get_by_role("link", name="Phase 6: Validation").click()
    expect(page.get_by_role("heading", name="Phase 6: Validation")).to_be_visible()
    expect(page.locator(".markdown table", has_text="Risk")).to_contain_text("medium")
    expect(page.locator(".agent-output").last).to_contain_text("<script>")  # shown as text, never run
    assert page.title() != "owned"

    screenshot("phase-approval", guide=True)

    page.get_by_label("Request changes").check()
    page.get_by_role("button", name="Submit decision").click()
    expect(page.locator("#phase-review")).to_contain_text("List at least one change")

    page.get_by_label("Approve").check()
    page.get_by_label("Comments").fill("Risks are understood; go on to the synthesis.")
    page.get_by_role("button", name="Submit decision").click()
    history = page.locator(".feedback-history li").first
    expect(history).to_contain_text("carol")
    expect(history).to_contain_text("Approved")
    expect(history).to_contain_text("Risks are understood")
    screenshot("phase")

    feedback = PhaseFeedback.objects.filter(phase=phase).first()
    assert (feedback.action, feedback.approved, feedback.reviewer_name) == ("approved", True, "carol")
    page.goto(f"{live_server.url}/")
    expect(page.locator("#approvals-heading")).to_be_visible()
    expect(page.locator(".approval-queue")).to_have_count(0)
