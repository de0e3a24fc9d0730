"""A LangGraph thread's interrupts: what the graph asks, and the form an approver answers it with."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_GET, require_POST

from checkpoints.models import AgentSession
from checkpoints.services import Actor, CheckpointError, InvalidInput, lginterrupts

from ..forms import InterruptAnswerForm
from .common import APPROVE, HtmxHttpRequest, console, get_session_for_user, render_page


def _context(
    request: HtmxHttpRequest, session: AgentSession, form: InterruptAnswerForm | None = None
) -> dict[str, Any]:
    pending = lginterrupts.pending_interrupts(session)
    return {
        "session": session,
        "interrupts": [
            {"item": item, "shown": json.dumps(item.readable, indent=2, ensure_ascii=False, default=str)}
            for item in pending
        ],
        "can_answer": request.user.has_perm(APPROVE, session),
        "form": form,
        "failed_for": form.data.get("interrupt_id") if form is not None else None,
    }


@console()
@require_GET
def session_interrupts(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    session = get_session_for_user(request, pk)
    return render_page(request, "dashboard/interrupts.html", _context(request, session))


@console(APPROVE)
@require_POST
def answer_interrupt(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    session = get_session_for_user(request, pk)
    form = InterruptAnswerForm(request.POST)
    if form.is_valid():
        try:
            lginterrupts.answer_interrupt(
                session,
                form.cleaned_data["interrupt_id"],
                actor=Actor.for_user(request.user),
                value=form.cleaned_data["value"],
                comment=form.cleaned_data["comment"],
            )
        except InvalidInput as exc:
            form.add_error("answer", str(exc))
        except CheckpointError as exc:  # answered meanwhile, or no longer asked
            form.add_error(None, str(exc))
        else:
            messages.success(request, "Answer recorded: the runner resumes with it (pending_resume).")
            return redirect("dashboard:session_interrupts", pk=pk)
    response = render_page(request, "dashboard/interrupts.html", _context(request, session, form))
    response.status_code = 409 if form.errors.get("__all__") else 400
    return response
