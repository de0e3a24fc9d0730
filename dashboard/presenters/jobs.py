"""The Jobs page's rows: each beat schedule with its newest run, when it runs next, and what its last run did."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import OuterRef, Subquery
from django_celery_beat.models import PeriodicTask

from checkpoints import task_names
from checkpoints.models import AgentSession, JobRun, JobRunStatus
from checkpoints.roles import VIEW_SESSIONS, in_every_project
from checkpoints.services.batches import ERRORS_KEPT
from checkpoints.services.heartbeats import stale_after

from .evidence import evidence_summary

# task → the JobRun.job name run_job records it under (checkpoints/tasks.py)
JOB_FOR_TASK = task_names.job_for_task()
RETENTION_TASK, GC_TASK = task_names.APPLY_RETENTION.name, task_names.COLLECT_GARBAGE.name
ASKS_FIRST = {RETENTION_TASK, GC_TASK}  # they delete: Run now first says what they remove
# not among a run's counts: failures are listed apart; retention's preview ids and per-project figures mean
# nothing here
NOT_SUMMED_UP = {"errors", "error_count", "checkpoints", "projects"}
# Celery's own housekeeping, which beat adds by itself: named for what it does
PLAIN_NAMES = {"celery.backend_cleanup": "Celery: clear expired task results"}


@dataclass(frozen=True)
class JobRow:
    """A schedule as the Jobs table shows it."""

    task: PeriodicTask
    name: str
    schedule: str
    run: JobRun | None  # its newest recorded run
    recorded: bool  # the task records its runs (run_job); else only when beat last sent it is known
    summary: str  # the run's counts, for those who see every project
    failed: dict[str, Any] | None  # the run's failed sessions they may see
    silent: bool  # running, but its worker stopped sending heartbeats
    next_run: datetime | None
    waiting: bool  # queued by Run now, and no run of it recorded since: no worker has picked it up yet
    asks_first: bool  # it deletes: Run now first says what


def job_rows(user: Any, *, system_figures: bool, watched: tuple[int, datetime] | None, now: datetime) -> list[JobRow]:
    """Each schedule with its newest run; `watched`: the task Run now queued, and when."""
    tasks = list(PeriodicTask.objects.select_related("interval", "crontab", "solar", "clocked").order_by("name"))
    runs = latest_runs({JOB_FOR_TASK[t.task] for t in tasks if t.task in JOB_FOR_TASK})
    silent_since = now - stale_after()
    rows = []
    for task in tasks:
        run = runs.get(JOB_FOR_TASK.get(task.task, ""))
        rows.append(
            JobRow(
                task=task,
                name=PLAIN_NAMES.get(task.name, task.name),
                schedule=_schedule_text(task),
                run=run,
                recorded=task.task in JOB_FOR_TASK,
                summary=_summary(run) if run and system_figures else "",
                failed=job_failures(run.result, user) if run else None,
                silent=bool(run and run.status == JobRunStatus.RUNNING and run.last_sign_of_life < silent_since),
                next_run=_next_run(task, now),
                waiting=watched is not None and task.pk == watched[0] and (run is None or run.started_at < watched[1]),
                asks_first=task.task in ASKS_FIRST,
            )
        )
    return rows


def latest_runs(jobs: set[str]) -> dict[str, JobRun]:
    """The newest run of each job, in one query."""
    newest = JobRun.objects.filter(job=OuterRef("job")).order_by("-started_at", "-pk").values("pk")[:1]
    runs = JobRun.objects.filter(job__in=jobs, pk=Subquery(newest))
    return {run.job: run for run in runs}


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


def _summary(run: JobRun) -> str:
    """The run's counts (its failures are listed apart), or its error."""
    if run.error:
        return evidence_summary(run.error)
    return evidence_summary({key: value for key, value in run.result.items() if key not in NOT_SUMMED_UP})


def job_failures(result: dict[str, Any], user: Any) -> dict[str, Any] | None:
    """A job result's failed sessions (or folders) as the console lists them, or None when none failed.

    Someone who sees every project gets them all (the first ERRORS_KEPT named, the rest counted); anyone else
    only the failures of sessions they may see: how many failed elsewhere, and which folders, is not theirs.
    """
    count = result.get("error_count")
    if not count:
        return None
    errors = result.get("errors", [])
    named = [error["id"] for error in errors if "session" in error]
    visible = set(AgentSession.objects.visible_to(user).filter(pk__in=named).values_list("pk", flat=True))
    if not in_every_project(user, VIEW_SESSIONS):
        shown = [error for error in errors if "session" in error and error["id"] in visible]
        return {"count": len(shown), "unit": "session", "shown": shown, "hidden": 0} if shown else None
    shown = [error for error in errors if "session" not in error or error["id"] in visible]
    unit = "folder" if "sources_done" in result else "session"
    return {"count": count, "unit": unit, "shown": shown, "hidden": count - len(shown), "kept": ERRORS_KEPT}
