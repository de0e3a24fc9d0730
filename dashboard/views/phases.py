"""A phase of a phased workflow: its facts, agent outputs, validation checklist, and the reviewers' decisions."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import trigger_client_event

from checkpoints.models import Phase
from checkpoints.phases import is_valid, standing_approval, validate_phase
from checkpoints.services import Actor
from checkpoints.services.phases import FeedbackRefused, record_feedback

from ..forms import FeedbackForm
from ..presenters.secrets import mask_phase
from .common import APPROVE, HtmxHttpRequest, console, get_phase_for_user, notify, render_page


def _context(
    request: HtmxHttpRequest, phase: Phase, form: FeedbackForm | None = None, *, decided: str = ""
) -> dict[str, Any]:
    outputs = list(phase.outputs.all())
    checks = validate_phase(phase, outputs)
    history = list(phase.feedback.select_related("reviewer").order_by("-created_at", "-pk"))
    approval = standing_approval(phase, history)
    mask_phase(phase, outputs, history)  # after validation and the approval, which read the real texts
    return {
        "session": phase.session,
        "phase": phase,
        "outputs": outputs,
        "checks": checks,
        "valid": is_valid(checks),
        "history": history,
        "approval": approval,  # an approved run is not offered the form again
        "can_review": request.user.has_perm(APPROVE, phase),
        "form": form or FeedbackForm(),
        "decided": decided,  # after an htmx decision: said, and focused, above the review
    }


@console()
@require_GET
def phase_detail(request: HtmxHttpRequest, pk: int, number: int) -> HttpResponse:
    phase = get_phase_for_user(request, pk, number)
    return render_page(request, "dashboard/phase_detail.html", _context(request, phase), "phase-review")


@console(APPROVE)
@require_POST
def phase_feedback(request: HtmxHttpRequest, pk: int, number: int) -> HttpResponse:
    phase = get_phase_for_user(request, pk, number)
    form = FeedbackForm(request.POST)
    if form.is_valid():
        try:
            feedback = record_feedback(phase, actor=Actor.for_user(request.user), **form.cleaned_data)
        except FeedbackRefused as exc:
            form.add_error(None, str(exc))
        else:
            done = f"Phase {phase.number}: {feedback.get_action_display()} recorded."
            if not request.htmx:
                messages.success(request, done)
                return redirect("dashboard:phase_detail", pk=pk, number=number)
            phase.refresh_from_db()
            context = _context(request, phase, decided=done)
            response = render_page(request, "dashboard/phase_detail.html", context, "phase-review")
            trigger_client_event(response, "phase-reviewed", {"phase": phase.number, "action": feedback.action})
            return notify(response, done)
    response = render_page(request, "dashboard/phase_detail.html", _context(request, phase, form), "phase-review")
    return notify(response, "Not recorded: see the form.", level="error") if request.htmx else response
