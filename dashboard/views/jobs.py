"""Background jobs: each beat schedule, its last recorded run, its next run, and "Run now"."""

from __future__ import annotations

import inspect
from datetime import UTC, datetime, timedelta
from typing import Any

from celery import current_app
from django.conf import settings
from django.contrib import messages
from django.db import transaction
from django.db.models import OuterRef, Subquery
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST
from django_celery_beat.models import PeriodicTask
from django_htmx.http import HttpResponseStopPolling

from checkpoints.jobs import stale_after
from checkpoints.models import JobRun, JobRunStatus
from checkpoints.roles import in_every_project
from checkpoints.services import Actor, request_job_run

from ..presenters.evidence import evidence_summary
from .common import (
    OPERATE,
    VIEW,
    HtmxHttpRequest,
    console,
    job_failures,
    parse_int,
    render_page,
    retention_confirmation,
)

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
# not among a run's counts: failures are listed apart; retention's preview ids and per-project figures mean
# nothing here
NOT_SUMMED_UP = {"errors", "error_count", "checkpoints", "projects"}


def _latest_runs(jobs: set[str]) -> dict[str, JobRun]:
    """The newest run of each job, in one query."""
    newest = JobRun.objects.filter(job=OuterRef("job")).order_by("-started_at", "-pk").values("pk")[:1]
    runs = JobRun.objects.filter(job__in=jobs, pk=Subquery(newest))
    return {run.job: run for run in runs}


# Celery's own housekeeping, which beat adds by itself: named for what it does
PLAIN_NAMES = {"celery.backend_cleanup": "Celery: clear expired task results"}
WATCH_FOR = timedelta(minutes=10)  # after "Run now", how long the page waits for a worker to record the run


def _next_run(task: PeriodicTask, now: datetime) -> datetime | None:
    """When beat sends the task next, by its own schedule (interval, crontab, solar or clocked), as beat reckons
    it: from the last run, or from when the task was last changed. None when it is due now or will not run."""
    if task.one_off and task.total_run_count:
        return None
    last = task.last_run_at or task.date_changed or now
    try:
        due = now + task.schedule.remaining_estimate(last)
    except (AttributeError, TypeError, ValueError):  # a schedule kind celery cannot estimate
        return None
    due = (due + timedelta(milliseconds=500)).replace(microsecond=0)  # celery's clock ran on a little: whole seconds
    if task.start_time and due < task.start_time:
        due = task.start_time
    return due if due > now else None


def _schedule_text(task: PeriodicTask) -> str:
    for schedule in (task.interval, task.crontab, task.solar, task.clocked):
        if schedule is not None:
            return str(schedule)
    return "—"


def _watched(request: HtmxHttpRequest, now: datetime) -> tuple[int, datetime] | None:
    """The task an operator just queued (`?queued=<pk>&at=<epoch>` from Run now) and when, while it is worth
    waiting for."""
    pk, at = parse_int(request.GET.get("queued")), parse_int(request.GET.get("at"), below=2**40)
    if pk is None or at is None:
        return None
    since = datetime.fromtimestamp(at, tz=UTC)
    return (pk, since) if now - WATCH_FOR < since <= now + timedelta(seconds=5) else None


def _summary(run: JobRun) -> str:
    """The run's counts (its failures are listed apart), or its error."""
    if run.error:
        return evidence_summary(run.error)
    return evidence_summary({key: value for key, value in run.result.items() if key not in NOT_SUMMED_UP})


@console(VIEW)
@require_GET
def job_list(request: HtmxHttpRequest) -> HttpResponse:
    system_figures = in_every_project(request.user, VIEW)  # a run's counts span every project
    rows = _rows(request, system_figures=system_figures)
    busy = any(row["waiting"] or (row["run"] and row["run"].status == JobRunStatus.RUNNING) for row in rows)
    context = {
        "rows": rows,
        "system_figures": system_figures,
        "can_run": in_every_project(request.user, OPERATE),
        "refresh": busy,  # the table refreshes itself until what was queued or running has finished
    }
    response = render_page(request, "dashboard/jobs.html", context, "job-table")
    if request.htmx and request.htmx.trigger == "job-table" and not busy:
        response.status_code = HttpResponseStopPolling.status_code  # 286: the poll's last swap; polling stops
    return response


def _rows(request: HtmxHttpRequest, *, system_figures: bool) -> list[dict[str, Any]]:
    """Each schedule with its newest run, ready to show."""
    now = timezone.now()
    tasks = list(PeriodicTask.objects.select_related("interval", "crontab", "solar", "clocked").order_by("name"))
    runs = _latest_runs({JOB_FOR_TASK[t.task] for t in tasks if t.task in JOB_FOR_TASK})
    silent_since = now - stale_after()
    watched = _watched(request, now)
    rows = []
    for task in tasks:
        run = runs.get(JOB_FOR_TASK.get(task.task, ""))
        rows.append(
            {
                "task": task,
                "name": PLAIN_NAMES.get(task.name, task.name),
                "schedule": _schedule_text(task),
                "run": run,
                "summary": _summary(run) if run and system_figures else "",
                "failed": job_failures(run.result, request.user) if run else None,  # of the sessions they see
                "silent": bool(run and run.status == JobRunStatus.RUNNING and run.last_sign_of_life < silent_since),
                "next_run": _next_run(task, now),
                # queued by Run now, and no run of it recorded since: no worker has picked it up yet
                "waiting": watched is not None
                and task.pk == watched[0]
                and (run is None or run.started_at < watched[1]),
                "asks_first": task.task in ASKS_FIRST,
            }
        )
    return rows


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
    return render_page(request, "dashboard/job_confirm.html", context)


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
    dotted = task.task
    request_job_run(task.name, actor=Actor.for_user(request.user), details={"task": dotted})
    transaction.on_commit(lambda: _queue(dotted, kwargs))
    name = PLAIN_NAMES.get(task.name, task.name)
    messages.success(request, f"Queued “{name}”. Its run appears below when a worker picks it up.")
    at = int(timezone.now().timestamp())
    return redirect(f"{reverse('dashboard:jobs')}?queued={task.pk}&at={at}")
