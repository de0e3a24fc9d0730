"""Fleet recovery in the console: the preview of a selection (GET, nothing written), the run (POST, with a
reason), its progress page (htmx polls it until it finishes) and Undo batch."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from checkpoints.models import Recovery, RecoveryState
from checkpoints.roles import in_every_project
from checkpoints.services import Actor, CheckpointError, InvalidInput
from checkpoints.services.fleet import (
    FleetFilter,
    Reach,
    Selection,
    preview_recovery,
    recovery_rows,
    start_recovery,
    undo_recovery,
)
from checkpoints.services.targets import TargetRule
from checkpoints.tasks import run_recovery

from ..forms import UNRESOLVED, RecoveryForm, UndoForm
from .common import OPERATE, VIEW, HtmxHttpRequest, console, navigate, render_page

SHOWN = 200  # preview rows on the page; the totals count every session


def _selection(form: RecoveryForm) -> Selection:
    data = form.cleaned_data
    state = data.get("state") or ""
    if data.get("alert") and not state:
        state = "open"  # the Sessions page's "Has open alert"
    chosen = FleetFilter(
        project=data.get("project") or "",
        agent=data.get("agent") or "",
        alert_kind=data.get("kind") or "",
        severity=data.get("severity") or "",
        alert_state=state,
        status=data.get("status") or "",
        opened_since=data.get("opened_since_time"),
        opened_until=data.get("opened_until_time"),
        search=data.get("q") or "",
    )
    rule = TargetRule(
        data.get("rule") or "last_good",
        at=data.get("at_time"),
        name=data.get("name") or "",
        since=chosen.opened_since,
        until=chosen.opened_until,
        alert_kind=chosen.alert_kind,
    )
    ticked = None if data.get("all") else tuple(dict.fromkeys(data.get("session") or []))
    return Selection(data.get("action") or "restore", rule, chosen, session_ids=ticked)


@console(OPERATE)
@require_http_methods(["GET", "POST"])
def recovery_new(request: HtmxHttpRequest) -> HttpResponse:
    """GET: the preview of what the batch would do (a dry run of the job). POST: the same plan, queued."""
    data = request.POST if request.method == "POST" else request.GET
    form = RecoveryForm(data)
    context: dict[str, Any] = {"form": form, "preview": None, "shown": SHOWN, "unresolved": UNRESOLVED}
    status = 200
    if form.is_valid():
        selection = _selection(form)
        reach = Reach.for_user(request.user)
        try:
            if request.method == "POST":
                recovery = start_recovery(
                    selection,
                    reach,
                    actor=Actor.for_user(request.user),
                    reason=form.cleaned_data.get("reason") or "",
                    start=run_recovery.delay,
                )
                messages.success(request, f"Recovery {recovery.pk} queued: {recovery.total} sessions.")
                return navigate(request, reverse("dashboard:recovery_detail", args=[recovery.pk]))
            context["preview"] = preview_recovery(selection, reach, shown=SHOWN)
        except InvalidInput as exc:
            form.add_error("reason" if exc.field == "reason" else None, str(exc).split(": ", 1)[-1])
            if exc.field != "reason":
                status = 400
            else:
                context["preview"] = preview_recovery(selection, reach, shown=SHOWN)
    else:
        status = 400 if data else 200
    response = render_page(request, "dashboard/recovery_new.html", context, partial="recovery-preview")
    response.status_code = status
    return response


def _get_recovery(request: HtmxHttpRequest, pk: int) -> Recovery:
    """The recoveries a user started, or those of a project where they may restore; 404 for any other."""
    recovery: Recovery = get_object_or_404(Recovery.objects.select_related("project", "created_by"), pk=pk)
    mine = recovery.created_by_id == request.user.pk
    allowed = in_every_project(request.user, OPERATE) or (
        recovery.project is not None and request.user.has_perm(OPERATE, recovery.project)
    )
    if mine or allowed:
        return recovery
    if recovery.project is not None and request.user.has_perm(VIEW, recovery.project):
        raise PermissionDenied("Your role in this project does not allow this (operate_session).")
    raise Http404("No such recovery.")


@console(OPERATE)
@require_http_methods(["GET"])
def recovery_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    recovery = _get_recovery(request, pk)
    rows = recovery_rows(recovery, Reach.for_user(request.user).visible)
    context = {
        "recovery": recovery,
        "items": list(rows[:SHOWN]),
        "hidden": max(rows.count() - SHOWN, 0),
        "undo_form": UndoForm(),
        "can_undo": recovery.state == RecoveryState.FINISHED and recovery.undone_at is None and recovery.done > 0,
    }
    return render_page(request, "dashboard/recovery_detail.html", context, partial="recovery-progress")


@console(OPERATE)
@require_POST
def recovery_undo(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    recovery = _get_recovery(request, pk)
    form = UndoForm(request.POST)
    reason = form.cleaned_data["reason"] if form.is_valid() else ""
    try:
        report = undo_recovery(recovery, actor=Actor.for_user(request.user), reason=reason)
    except CheckpointError as exc:
        messages.error(request, f"Not undone: {exc}")
    else:
        kept = f" Left as they are (the agent wrote since): {', '.join(report.kept)}." if report.kept else ""
        messages.success(
            request,
            f"Batch undone: {report.undone} sessions back to their heads before it, {report.archived} forks archived.{kept}",
        )
    return redirect("dashboard:recovery_detail", recovery.pk)
