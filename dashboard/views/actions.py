"""Operator actions on checkpoints: restore (with a preview), undo, fork, pin."""

from __future__ import annotations

import dataclasses
from typing import Any

from django.contrib import messages
from django.http import HttpResponse, HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST
from django_htmx.http import trigger_client_event

from checkpoints.models import AgentSession, Checkpoint
from checkpoints.services import (
    Actor,
    CheckpointError,
    NothingToUndo,
    fork_session,
    pin_checkpoint,
    restore_checkpoint,
    restore_preview,
)
from checkpoints.services import (
    undo_restore as undo_restore_service,
)

from ..forms import ForkForm, PinForm, RestoreForm, UndoForm
from ..presenters.checkpoint import langgraph_view
from ..presenters.restore import forgotten_calls, preview_diff
from ..presenters.secrets import masker
from ..undo import offer_undo
from .common import (
    OPERATE,
    HtmxHttpRequest,
    console,
    get_checkpoint_for_user,
    get_session_for_user,
    navigate,
    notify,
    render_page,
    safe_next,
)

FORGOTTEN_LIMIT = 100


def _restore_context(request: HtmxHttpRequest, checkpoint: Checkpoint, form: RestoreForm) -> dict[str, Any]:
    preview = restore_preview(checkpoint)
    mask = masker(checkpoint.session.project)  # the calls' arguments and the diff quote the states
    preview = dataclasses.replace(preview, diff=mask.diff(preview.diff))
    forgotten = forgotten_calls(mask.json(preview.forgotten_tool_calls))
    return {
        "checkpoint": checkpoint,
        "session": checkpoint.session,
        "preview": preview,
        "diff": preview_diff(preview, internal=request.GET.get("internal") == "1"),
        "forgotten": forgotten[:FORGOTTEN_LIMIT],
        "forgotten_total": len(forgotten),
        "form": form,
        "langgraph": langgraph_view(checkpoint),
        "as_modal": bool(request.htmx) and not (request.htmx.boosted or request.htmx.history_restore_request),
        "old_label": f"Now (head #{preview.head.seq})" if preview.head else "Now",
        "new_label": f"After restore (#{checkpoint.seq})",
    }


@console(OPERATE)
@require_http_methods(["GET", "POST"])
def restore(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    checkpoint = get_checkpoint_for_user(request, pk)
    form = RestoreForm(request.POST if request.method == "POST" else None)
    session = checkpoint.session
    if request.method == "POST" and checkpoint.pk == session.head_id:
        # restoring the head discards nothing: the page offers no such restore (it says why), and a post made
        # anyway changes nothing
        context = _restore_context(request, checkpoint, form)
        response = render_page(request, "dashboard/restore.html", context, partial="restore-dialog")
        response.status_code = 409
        return response
    if request.method == "POST" and form.is_valid():
        try:
            restored = restore_checkpoint(
                checkpoint, actor=Actor.for_user(request.user), reason=form.cleaned_data["reason"]
            )
        except CheckpointError as exc:
            form.add_error(None, str(exc))
        else:
            offer_undo(
                request,
                session,
                f"Restored {session.title or session.external_id} to #{checkpoint.seq}: the agent resumes from "
                f"new checkpoint #{restored.seq}. Later checkpoints stay in the history.",
            )
            return navigate(request, reverse("dashboard:session_detail", args=[session.pk]))
    context = _restore_context(request, checkpoint, form)
    return render_page(request, "dashboard/restore.html", context, partial="restore-dialog")


@console(OPERATE)
@require_POST
def undo_restore(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    session: AgentSession = get_session_for_user(request, pk)
    form = UndoForm(request.POST)
    reason = form.cleaned_data["reason"] if form.is_valid() else ""
    try:
        restored = undo_restore_service(session, actor=Actor.for_user(request.user), reason=reason)
    except NothingToUndo:
        messages.error(request, "Nothing to undo: the session's head is not a restore.")
    else:
        undone, before = restored.metadata["undo_of_seq"], restored.metadata["restored_from_seq"]
        what = "Edit" if restored.name.startswith("undo of edit") else "Restore"
        messages.success(
            request,
            f"{what} #{undone} undone: the agent resumes from new checkpoint #{restored.seq} with the state of "
            f"#{before}, as before the {what.lower()}.",
        )
    return navigate(request, safe_next(request, reverse("dashboard:session_detail", args=[session.pk])))


@console(OPERATE)
@require_http_methods(["GET", "POST"])
def fork(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    checkpoint = get_checkpoint_for_user(request, pk)
    source = checkpoint.session
    suggestion = f"Fork of {source.title or source.external_id} at #{checkpoint.seq}"
    form = ForkForm(request.POST if request.method == "POST" else None, initial={"title": suggestion})
    if request.method == "POST" and form.is_valid():
        try:
            new = fork_session(checkpoint, actor=Actor.for_user(request.user), title=form.cleaned_data["title"])
        except CheckpointError as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, f"Forked {source.external_id} at #{checkpoint.seq} into {new.external_id}.")
            return navigate(request, reverse("dashboard:session_detail", args=[new.pk]))
    context = {"checkpoint": checkpoint, "session": source, "form": form, "langgraph": langgraph_view(checkpoint)}
    return render_page(request, "dashboard/fork.html", context, partial="fork-form")


@console(OPERATE)
@require_POST
def pin(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    checkpoint = get_checkpoint_for_user(request, pk)
    form = PinForm(request.POST)
    if not form.is_valid():
        return HttpResponseBadRequest("pinned must be 1 or 0")
    pinned = form.cleaned_data["pinned"]
    pin_checkpoint(checkpoint, actor=Actor.for_user(request.user), pinned=pinned)
    done = (
        f"#{checkpoint.seq} {'pinned: retention keeps it' if pinned else 'unpinned: its retention rules apply again'}."
    )
    if request.htmx:
        back = safe_next(request, request.htmx.current_url_abs_path or "")
        context = {"checkpoint": checkpoint, "next": back, "updated": True}
        response = render(request, "dashboard/partials/pin_control.html#pin-control", context)
        trigger_client_event(response, "checkpoint-pinned", {"id": checkpoint.pk, "pinned": pinned})
        return notify(response, done)
    messages.success(request, done)
    return redirect(safe_next(request, reverse("dashboard:checkpoint_detail", args=[checkpoint.pk])))
