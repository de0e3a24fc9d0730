"""Background jobs: each beat schedule, its last recorded run, its next run, and "Run now"."""

from __future__ import annotations

import inspect
from datetime import UTC, datetime, timedelta
from typing import Any

from celery import current_app
from django.conf import settings
from django.contrib import messages
from django.db import transaction
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST
from django_celery_beat.models import PeriodicTask
from django_htmx.http import HttpResponseStopPolling

from checkpoints.models import JobRunStatus
from checkpoints.roles import in_every_project
from checkpoints.services import Actor, request_job_run
from checkpoints.task_names import COLLECT_GARBAGE

from ..presenters.jobs import GC_TASK, PLAIN_NAMES, RETENTION_TASK, job_rows, latest_runs
from .common import OPERATE, VIEW, HtmxHttpRequest, console, parse_int, render_page, retention_confirmation

WATCH_FOR = timedelta(minutes=10)  # after "Run now", how long the page waits for a worker to record the run


def _watched(request: HtmxHttpRequest, now: datetime) -> tuple[int, datetime] | None:
    """The task an operator just queued (`?queued=<pk>&at=<epoch>` from Run now) and when, while it is worth
    waiting for."""
    pk, at = parse_int(request.GET.get("queued")), parse_int(request.GET.get("at"), below=2**40)
    if pk is None or at is None:
        return None
    since = datetime.fromtimestamp(at, tz=UTC)
    return (pk, since) if now - WATCH_FOR < since <= now + timedelta(seconds=5) else None


@console(VIEW)
@require_GET
def job_list(request: HtmxHttpRequest) -> HttpResponse:
    system_figures = in_every_project(request.user, VIEW)  # a run's counts span every project
    now = timezone.now()
    rows = job_rows(request.user, system_figures=system_figures, watched=_watched(request, now), now=now)
    busy = any(row.waiting or (row.run and row.run.status == JobRunStatus.RUNNING) for row in rows)
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
    last = latest_runs({COLLECT_GARBAGE.job}).get(COLLECT_GARBAGE.job)
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
