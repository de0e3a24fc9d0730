"""Retention: the policies in force, the last dry run's preview of the next run, "Run now", and the recorded runs.

The preview is a recorded dry run, not a plan made for each page view (planning reads every checkpoint's row: seconds
at a million); the page says when it was computed and queues a new one on request.
"""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from checkpoints import tasks
from checkpoints.jobs.retention import describe, policies_in_force, recorded_plan
from checkpoints.models import Checkpoint, JobRun, JobRunStatus, Project
from checkpoints.roles import in_every_project
from checkpoints.services import Actor, request_job_run
from checkpoints.task_names import APPLY_RETENTION

from ..presenters.jobs import job_failures
from .common import OPERATE, VIEW, HtmxHttpRequest, console, render_page, retention_confirmation

PREVIEW_ROWS = 50
RUNS_SHOWN = 20
RETENTION_JOB = "Apply retention"  # the name of its schedule, as the Jobs page shows it
RETENTION_DRY_RUN = "Apply retention (dry run)"


@console(VIEW)
@require_http_methods(["GET", "POST"])
def retention(request: HtmxHttpRequest) -> HttpResponse:
    if request.method == "POST":
        return _run_now(request)
    projects = Project.objects.allowing(request.user)
    runs = list(JobRun.objects.for_job(APPLY_RETENTION.job)[:RUNS_SHOWN])
    dry_run = JobRun.objects.for_job(APPLY_RETENTION.job).filter(dry_run=True).completed().first()
    plan = recorded_plan(dry_run.result, projects=projects.values_list("pk", flat=True)) if dry_run else None
    context = {
        "policies": [(policy, describe(policy)) for policy in policies_in_force(projects=projects)],
        "dry_run": dry_run,
        "plan": plan,
        "failed": job_failures(dry_run.result, request.user) if dry_run else None,
        "by_kind": sorted(plan.by_kind.items()) if plan else [],
        "preview": _preview(plan.checkpoints[:PREVIEW_ROWS], projects) if plan else [],
        "more": plan.deleted - min(plan.deleted, PREVIEW_ROWS) if plan else 0,
        "ran_since": dry_run is not None and any(_ran_after(run, dry_run) for run in runs),
        "computing": any(run.dry_run and run.status == JobRunStatus.RUNNING for run in runs),
        "runs": runs,
        "system_figures": in_every_project(request.user, VIEW),  # a run's counts span every project
        "can_run": in_every_project(request.user, OPERATE),
        "can_recompute": request.user.has_perm(OPERATE),
    }
    return render_page(request, "dashboard/retention.html", context)


def _preview(ids: list[int], projects: QuerySet[Project]) -> QuerySet[Checkpoint]:
    """The first checkpoints the dry run would delete that still exist (a run since may have deleted some)."""
    return (
        Checkpoint.objects.filter(pk__in=ids, session__project__in=projects)
        .select_related("session__project")
        .defer("metadata", "root", "state_hash", "session__metadata", "session__live_root")
        .order_by("session__project__slug", "session__external_id", "seq")
    )


def _ran_after(run: JobRun, dry_run: JobRun) -> bool:
    """A real run that finished after the dry run started: the preview counts checkpoints it may have deleted."""
    return not run.dry_run and run.finished_at is not None and run.finished_at > dry_run.started_at


@console(OPERATE)
@require_POST
def retention_dry_run(request: HtmxHttpRequest) -> HttpResponse:
    """Queue a dry run (it deletes nothing) to refresh the preview; it plans every project, and each user sees
    their own projects' share of it."""
    request_job_run(RETENTION_DRY_RUN, actor=Actor.for_user(request.user), details={"task": "apply_retention"})
    by = f"console:{request.user.get_username()}"
    transaction.on_commit(lambda: tasks.apply_retention.delay(dry_run=True, triggered_by=by))
    messages.success(request, "Dry run queued: its figures show here when it finishes.")
    return redirect("dashboard:retention")


def _run_now(request: HtmxHttpRequest) -> HttpResponse:
    """ "Run now": it runs for every project, so only for those who operate every project (staff operators).
    It first shows what it deletes, by kind, and runs only when confirmed; the task is queued once the
    request's transaction (with its audit row) commits."""
    if not in_every_project(request.user, OPERATE):
        raise PermissionDenied("Your role does not allow this in every project (operate_session).")
    here = reverse("dashboard:retention")
    if request.POST.get("confirm") != "yes":
        return retention_confirmation(request, action=here, back=here, back_label="Retention")
    request_job_run(RETENTION_JOB, actor=Actor.for_user(request.user), details={"task": "apply_retention"})
    by = f"console:{request.user.get_username()}"
    transaction.on_commit(lambda: tasks.apply_retention.delay(triggered_by=by))
    messages.success(request, "Retention run queued: it shows under Recorded runs.")
    return redirect("dashboard:retention")
