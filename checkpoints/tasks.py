"""Celery tasks: thin, idempotent wrappers that take ids and call the operation of the same name. Each is
registered under its name in task_names (the name beat's rows, the routes and queued messages carry), and records
its runs under that entry's job name."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from celery import shared_task
from django.conf import settings
from django.db import OperationalError

from . import task_names as names
from .jobs import StopRequest, forget_runs, gc, purges, recoveries, retention, routine, run_job, watching
from .outbox import deliveries
from .outbox.deliveries import send_delivery  # defined beside the queue() that sends it; a worker registers it here
from .services import drift
from .services.uploads import resend_unsent, run_import_job


@shared_task(name=names.IMPORT_ARCHIVE.name, acks_late=True, time_limit=3600, soft_time_limit=3500)
def import_archive(job_id: int) -> dict[str, object]:
    return run_import_job(job_id)


@shared_task(name=names.SCAN_WATCHED_SOURCES.name, acks_late=True, time_limit=3600, soft_time_limit=3500)
def scan_watched_sources() -> dict[str, int]:
    return run_job(names.SCAN_WATCHED_SOURCES.job, watching.scan_all).result


@shared_task(name=names.RUN_RECOVERY.name, acks_late=True, time_limit=3600, soft_time_limit=3500)
def run_recovery(recovery_id: int) -> dict[str, Any]:
    """A fleet recovery; acks_late: a killed worker's message is redelivered, and the sweep requeues it anyway."""
    return recoveries.run(recovery_id)


@shared_task(name=names.RUN_PURGE.name, acks_late=True, time_limit=6 * 3600, soft_time_limit=6 * 3600 - 100)
def run_purge(purge_id: int) -> dict[str, Any]:
    """A purge (docs/purges.md): the id only; the value waits in the database, never in the broker. acks_late: a
    killed worker's message is redelivered, and the sweep requeues it anyway."""
    return purges.run(purge_id)


# Periodic jobs: idempotent, acks_late (a killed worker's job is redelivered), one run at a time
# (run_job's lock), time-limited, retried with backoff when the database hiccups.
PERIODIC: dict[str, Any] = {
    "acks_late": True,
    "time_limit": 3600,
    "soft_time_limit": 3500,
    "autoretry_for": (OperationalError,),
    "retry_backoff": True,
    "max_retries": 5,
}


@shared_task(name=names.APPLY_RETENTION.name, **PERIODIC)
def apply_retention(dry_run: bool = False, triggered_by: str = "beat") -> dict[str, Any]:
    stop = StopRequest()  # set by the heartbeat if another run takes the lock: this one ends between two batches
    result = run_job(
        names.APPLY_RETENTION.job,
        lambda: retention.apply_retention(dry_run=dry_run, stop=stop),
        triggered_by=triggered_by,
        dry_run=dry_run,
        stop=stop,
    ).result
    if not dry_run:  # the retention page previews the next run from the newest dry run: keep it current
        apply_retention.delay(dry_run=True, triggered_by="after retention")
    return result


@shared_task(name=names.TAKE_ROUTINE_CHECKPOINTS.name, **PERIODIC)
def take_routine_checkpoints(triggered_by: str = "beat") -> dict[str, Any]:
    return run_job(
        names.TAKE_ROUTINE_CHECKPOINTS.job, routine.take_routine_checkpoints, triggered_by=triggered_by
    ).result


@shared_task(name=names.DETECT_DRIFT.name, **PERIODIC)
def detect_drift(triggered_by: str = "beat") -> dict[str, Any]:
    return run_job(names.DETECT_DRIFT.job, drift.detect_all, triggered_by=triggered_by).result


@shared_task(name=names.COLLECT_GARBAGE.name, **PERIODIC)
def collect_garbage(triggered_by: str = "beat") -> dict[str, Any]:
    return run_job(names.COLLECT_GARBAGE.job, gc.collect_garbage, triggered_by=triggered_by).result


DELIVERY_SWEEP = names.SEND_DUE_DELIVERIES.job


@shared_task(name=names.SEND_DUE_DELIVERIES.name, acks_late=True)
def send_due_deliveries(triggered_by: str = "beat") -> dict[str, Any]:
    """Every minute: queue the deliveries whose next attempt is due, the uploads' imports that a broker
    outage left unsent, and the fleet recoveries and purges whose worker stopped beating; recorded as every job's
    runs are (the Jobs page reads them)."""

    def sweep() -> dict[str, Any]:
        imports = resend_unsent(import_archive.delay)
        stalled = recoveries.requeue_stalled(run_recovery.delay)
        purged = purges.requeue_stalled(run_purge.delay)
        return {"deliveries": deliveries.send_due(), "imports": imports, "recoveries": stalled, "purges": purged}

    return run_job(DELIVERY_SWEEP, sweep, triggered_by=triggered_by).result


@shared_task(name=names.DELETE_OLD_DELIVERIES.name, **PERIODIC)
def delete_old_deliveries(triggered_by: str = "beat") -> dict[str, Any]:
    def cleanup() -> dict[str, Any]:
        # the sweep records 1,440 runs a day: they go with the deliveries they sent
        kept = timedelta(days=settings.DELIVERY_KEEP_DAYS)
        return {**deliveries.delete_old(), "sweep_runs": forget_runs(DELIVERY_SWEEP, older_than=kept)}

    return run_job(names.DELETE_OLD_DELIVERIES.job, cleanup, triggered_by=triggered_by).result


__all__ = [
    "import_archive",
    "run_purge",
    "run_recovery",
    "scan_watched_sources",
    "send_delivery",
    "send_due_deliveries",
]
