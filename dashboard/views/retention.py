"""Retention: the policies in force, a dry-run preview of the next run, "Run now", and the recorded runs."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.template.defaultfilters import pluralize
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from checkpoints import tasks
from checkpoints.models import AgentSession, Checkpoint, JobRun, Project
from checkpoints.retention import describe, plan_retention, policies_in_force
from checkpoints.roles import ALL_PROJECTS, in_every_project
from checkpoints.services import Actor, request_job_run

from .common import OPERATE, VIEW, HtmxHttpRequest, console, job_failures, render_page

PREVIEW_ROWS = 50
RUNS_SHOWN = 20
RETENTION_JOB = "Apply retention"  # the name of its schedule, as the Jobs page shows it


@console(VIEW)
@require_http_methods(["GET", "POST"])
def retention(request: HtmxHttpRequest) -> HttpResponse:
    if request.method == "POST":
        return _run_now(request)
    plan = plan_retention(sessions=AgentSession.objects.visible_to(request.user))
    preview = (
        Checkpoint.objects.filter(pk__in=plan.checkpoints[:PREVIEW_ROWS])
        .select_related("session__project")
        .defer("metadata", "root", "state_hash", "session__metadata", "session__live_root")
        .order_by("session__project__slug", "session__external_id", "seq")
    )
    context = {
        "policies": [
            (policy, describe(policy)) for policy in policies_in_force(projects=Project.objects.allowing(request.user))
        ],
        "plan": plan,
        "failed": job_failures(plan.failures.as_dict(), request.user),
        "by_kind": sorted(plan.by_kind.items()),
        "preview": preview,
        "more": plan.deleted - min(plan.deleted, PREVIEW_ROWS),
        "runs": JobRun.objects.for_job("retention")[:RUNS_SHOWN],
        "system_figures": in_every_project(request.user, VIEW),  # a run's counts span every project
        "can_run": request.user.has_perm(OPERATE, ALL_PROJECTS),
    }
    return render_page(request, "dashboard/retention.html", context)


def _run_now(request: HtmxHttpRequest) -> HttpResponse:
    """ "Run now": it runs for every project, so only for those who operate every project (staff operators).
    It first shows what it deletes, by kind, and runs only when confirmed; the task is queued once the
    request's transaction (with its audit row) commits."""
    if not request.user.has_perm(OPERATE, ALL_PROJECTS):
        raise PermissionDenied("Your role does not allow this in every project (operate_session).")
    here = reverse("dashboard:retention")
    if request.POST.get("confirm") != "yes":
        return retention_confirmation(request, action=here, back=here, back_label="Retention")
    request_job_run(RETENTION_JOB, actor=Actor.for_user(request.user), details={"task": "apply_retention"})
    by = f"console:{request.user.get_username()}"
    transaction.on_commit(lambda: tasks.apply_retention.delay(triggered_by=by))
    messages.success(request, "Retention run queued: it shows under Recorded runs.")
    return redirect("dashboard:retention")


def retention_confirmation(request: HtmxHttpRequest, *, action: str, back: str, back_label: str) -> HttpResponse:
    """What a retention run would delete now in every project, by kind, with the button that runs it."""
    plan = plan_retention()
    context = {
        "title": "Run retention now?",
        "plan": plan,
        "by_kind": sorted(plan.by_kind.items()),
        "failed": job_failures(plan.failures.as_dict(), request.user),
        "button": f"Delete {plan.deleted} checkpoint{pluralize(plan.deleted)} now",
        "action": action,
        "back": back,
        "back_label": back_label,
    }
    return render(request, "dashboard/job_confirm.html", context)
