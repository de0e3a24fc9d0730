"""Every Celery task by the name it is known under, and what else knows it by that name.

A task's name is data, not code: beat's rows (written by migrations), CELERY_TASK_ROUTES and messages already
in the broker carry it, so a task may move between modules but its name may not. Everything that names a task —
the `@shared_task(name=…)` decorators, the routes in config/settings.py, the Jobs page — takes it from here. The
migrations alone keep their literal strings (a migration is frozen: it must do tomorrow what it did the day it was
written); tests/jobs/test_task_names.py proves they, the routes, beat's rows and the registered tasks agree with
this list. docs/extending-channels.md ("Adding a periodic job") walks through adding one.

Plain Python on the lowest floor: config/settings.py imports it before Django is set up.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Task:
    """A Celery task of the console."""

    name: str  # what Celery, beat's rows, the routes and queued messages call it: never renamed
    job: str = ""  # the JobRun.job its runs are recorded under (run_job); "": not a recorded job
    queue: str = ""  # its own queue, so it never waits behind (or holds up) the others; "": the default queue
    beat: str = ""  # the name of the beat row a migration created for it; "": beat does not run it
    every: int = 0  # that row's default interval, as the migration wrote it (operators edit it in the admin)
    period: str = ""  # "minutes", "hours" or "days"


IMPORT_ARCHIVE = Task("checkpoints.tasks.import_archive")
SCAN_WATCHED_SOURCES = Task(
    "checkpoints.tasks.scan_watched_sources",
    job="watched_sources",
    beat="Import from watched folders",
    every=5,
    period="minutes",
)
APPLY_RETENTION = Task(
    "checkpoints.tasks.apply_retention", job="retention", beat="Apply retention", every=1, period="hours"
)
TAKE_ROUTINE_CHECKPOINTS = Task(
    "checkpoints.tasks.take_routine_checkpoints",
    job="routine_checkpoints",
    beat="Take routine checkpoints",
    every=30,
    period="minutes",
)
DETECT_DRIFT = Task(
    "checkpoints.tasks.detect_drift", job="drift_detection", beat="Detect drift", every=5, period="minutes"
)
COLLECT_GARBAGE = Task(
    "checkpoints.tasks.collect_garbage", job="gc", beat="Collect unreferenced chunks", every=1, period="days"
)
RUN_RECOVERY = Task("checkpoints.tasks.run_recovery")  # the default queue: any worker runs a fleet recovery
RUN_PURGE = Task("checkpoints.tasks.run_purge")  # the default queue: any worker runs a purge
SEND_DELIVERY = Task("checkpoints.tasks.send_delivery", queue="deliveries")
SEND_DUE_DELIVERIES = Task(
    "checkpoints.tasks.send_due_deliveries",
    job="delivery_sweep",
    queue="deliveries",
    beat="Send due deliveries",
    every=1,
    period="minutes",
)
DELETE_OLD_DELIVERIES = Task(
    "checkpoints.tasks.delete_old_deliveries",
    job="delivery_cleanup",
    beat="Delete old deliveries",
    every=1,
    period="days",
)

TASKS: tuple[Task, ...] = (
    IMPORT_ARCHIVE,
    SCAN_WATCHED_SOURCES,
    APPLY_RETENTION,
    TAKE_ROUTINE_CHECKPOINTS,
    DETECT_DRIFT,
    COLLECT_GARBAGE,
    RUN_RECOVERY,
    RUN_PURGE,
    SEND_DELIVERY,
    SEND_DUE_DELIVERIES,
    DELETE_OLD_DELIVERIES,
)


def routes() -> dict[str, dict[str, str]]:
    """CELERY_TASK_ROUTES: each task that has a queue of its own, to that queue."""
    return {task.name: {"queue": task.queue} for task in TASKS if task.queue}


def job_for_task() -> dict[str, str]:
    """Each scheduled task's name → the JobRun.job its runs are recorded under (the Jobs page pairs them)."""
    return {task.name: task.job for task in TASKS if task.job and task.beat}
