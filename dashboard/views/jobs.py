"""Background jobs: each beat schedule, its last recorded run, its next run, and "Run now"."""

from __future__ import annotations

import inspect
from datetime import datetime
from typing import Any

from celery import current_app
from django.conf import settings
from django.contrib import messages
from django.db import transaction
from django.db.models import OuterRef, Subquery
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST
from django_celery_beat.models import PeriodicTask

from checkpoints.jobs import stale_after
from checkpoints.models import JobRun, JobRunStatus
from checkpoints.roles import ALL_PROJECTS, in_every_project
from checkpoints.services import Actor, request_job_run

from .alerts import evidence_summary
from .common import OPERATE, VIEW, HtmxHttpRequest, console, job_failures, render_page
from .retention import retention_confirmation

# task → the JobRun.job name run_job records it under (checkpoints/tasks.py)
JOB_FOR_TASK = {
    "checkpoints.tasks.apply_retention": "retention",
    "checkpoints.tasks.take_routine_checkpoints": "routine_checkpoints",
    "checkpoints.tasks.detect_drift": "drift_detection",
    "checkpoints.tasks.collect_garbage": "gc",
    "checkpoints.tasks.scan_watched_sources": "watched_sources",
}
RETENTION_TASK, GC_TASK = "checkpoints.tasks.apply_retention", "checkpoints.tasks.collect_garbage"
ASKS_FIRST = {RETENTION_TASK, GC_TASK}  # they delete: Run now first says what they remove
# not among a run's counts: failures are listed apart; retention's preview ids mean nothing here
NOT_SUMMED_UP = {"errors", "error_count", "checkpoints"}


def _latest_runs(jobs: set[str]) -> dict[str, JobRun]:
    """The newest run of each job, in one query."""
    newest = JobRun.objects.filter(job=OuterRef("job")).order_by("-started_at", "-pk").values("pk")[:1]
    runs = JobRun.objects.filter(job__in=jobs, pk=Subquery(newest))
    return {run.job: run for run in runs}


def _next_run(task: PeriodicTask, now: datetime) -> datetime | None:
    """When beat runs the task next (interval schedules), or None for due / not computable."""
    if task.interval is None or task.last_run_at is None:
        return None
    due = task.last_run_at + task.interval.schedule.run_every
    return due if due > now else None


def _schedule_text(task: PeriodicTask) -> str:
    for schedule in (task.interval, task.crontab, task.solar, task.clocked):
        if schedule is not None:
            return str(schedule)
    return "—"


def _summary(run: JobRun) -> str:
    """The run's counts (its failures are listed apart), or its error."""
    if run.error:
        return evidence_summary(run.error)
    return evidence_summary({key: value for key, value in run.result.items() if key not in NOT_SUMMED_UP})


@console(VIEW)
@require_GET
def job_list(request: HtmxHttpRequest) -> HttpResponse:
    now = timezone.now()
    tasks = list(PeriodicTask.objects.select_related("interval", "crontab", "solar", "clocked").order_by("name"))
    runs = _latest_runs({JOB_FOR_TASK[t.task] for t in tasks if t.task in JOB_FOR_TASK})
    silent_since = now - stale_after()
    system_figures = in_every_project(request.user, VIEW)  # a run's counts span every project
    rows = []
    for task in tasks:
        run = runs.get(JOB_FOR_TASK.get(task.task, ""))
        rows.append(
            {
                "task": task,
                "schedule": _schedule_text(task),
                "run": run,
                "summary": _summary(run) if run and system_figures else "",
                "failed": job_failures(run.result, request.user) if run else None,  # of the sessions they see
                "silent": bool(run and run.status == JobRunStatus.RUNNING and run.last_sign_of_life < silent_since),
                "next_run": _next_run(task, now),
                "computable": task.interval is not None,
                "asks_first": task.task in ASKS_FIRST,
            }
        )
    context = {"rows": rows, "system_figures": system_figures, "can_run": request.user.has_perm(OPERATE, ALL_PROJECTS)}
    return render_page(request, "dashboard/jobs.html", context)


def _takes_triggered_by(name: str) -> bool:
    task = current_app.tasks.get(name)
    return task is not None and "triggered_by" in inspect.signature(task.run).parameters


def _queue(name: str, kwargs: dict[str, Any]) -> None:
    task = current_app.tasks.get(name)
    if task is not None:  # the same message send_task would send; also honours eager mode (tests)
        task.apply_async(kwargs=kwargs)
    else:
        current_app.send_task(name, kwargs=kwargs)


def _gc_confirmation(request: HtmxHttpRequest, task: PeriodicTask, action: str) -> HttpResponse:
    last = _latest_runs({"gc"}).get("gc")
    figures = last.result if last and in_every_project(request.user, VIEW) else {}
    context = {
        "title": f"{task.name} now?",
        "removes": (
            "stored chunks that no checkpoint and no live state references, older than "
            f"{settings.GC_GRACE_MINUTES} minutes: no checkpoint loses its state"
        ),
        "last": f"The last run deleted {figures['deleted']} chunks." if "deleted" in figures else "",
        "button": "Collect now",
        "action": action,
        "back": reverse("dashboard:jobs"),
        "back_label": "Jobs",
    }
    return render(request, "dashboard/job_confirm.html", context)


@console(OPERATE, everywhere=True)  # a job runs for every project at once
@require_POST
def job_run(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Queue a job now; the jobs that delete (retention, GC) first say what they remove and ask."""
    task = get_object_or_404(PeriodicTask, pk=pk)
    here = reverse("dashboard:job_run", args=[pk])
    if request.POST.get("confirm") != "yes":
        if task.task == RETENTION_TASK:
            return retention_confirmation(request, action=here, back=reverse("dashboard:jobs"), back_label="Jobs")
        if task.task == GC_TASK:
            return _gc_confirmation(request, task, here)
    kwargs = {"triggered_by": f"console:{request.user.get_username()}"} if _takes_triggered_by(task.task) else {}
    name = task.task
    request_job_run(task.name, actor=Actor.for_user(request.user), details={"task": name})
    transaction.on_commit(lambda: _queue(name, kwargs))
    messages.success(request, f"Queued “{task.name}”. Its run appears below when a worker picks it up.")
    return redirect(reverse("dashboard:jobs"))
