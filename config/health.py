"""Readiness checks behind /health/: each answers (ok, what it found) quickly, and names no secret.

Only the database and the disk are needed to store a checkpoint (writes never wait on the cache or the broker):
their failure fails readiness; a broken cache, broker, worker or beat only degrades it."""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from celery import current_app
from django.conf import settings
from django.core.cache import cache
from django.db import connection
from django.db.models import Max
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

Check = Callable[[], tuple[bool, str]]
_CREDENTIALS = re.compile(r"//[^/@\s]*@")  # user:password@ in a URL an error message quotes


def database() -> tuple[bool, str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return True, connection.vendor


def shared_cache() -> tuple[bool, str]:
    """A value written to the shared cache reads back (rate limits and the events' wanted types use it)."""
    key = "health:probe"
    value = str(time.time_ns())
    cache.set(key, value, 30)
    if cache.get(key) != value:
        return False, "a value written to the cache did not read back"
    return True, type(cache).__name__


def broker() -> tuple[bool, str]:
    with current_app.connection_for_write(connect_timeout=2) as conn:
        conn.ensure_connection(max_retries=0, timeout=2)  # one attempt: a probe must answer quickly
        return True, conn.transport_cls


def routed_queues() -> set[str]:
    """The default queue and every queue CELERY_TASK_ROUTES sends a task to."""
    routes = current_app.conf.task_routes or {}
    return {current_app.conf.task_default_queue, *(route["queue"] for route in routes.values() if "queue" in route)}


def worker() -> tuple[bool, str]:
    """Celery workers answer, and among them they consume every queue a task is routed to (a worker started with
    `-Q celery` alone would leave the deliveries waiting forever). Unlike a ping, which ends at the first answer,
    this waits the whole timeout to hear every worker."""
    timeout = settings.HEALTH_WORKER_TIMEOUT_SECONDS
    with current_app.connection_for_write(connect_timeout=2) as conn:
        replies = current_app.control.inspect(timeout=timeout, connection=conn).active_queues() or {}
    if not replies:
        return False, f"no worker answered a ping within {timeout:g} s"
    consumed = {queue["name"] for queues in replies.values() for queue in queues or ()}
    workers = ", ".join(sorted(replies))
    missing = sorted(routed_queues() - consumed)
    if missing:
        return False, f"{workers} answered; no worker consumes the queue {', '.join(missing)}"
    return True, f"{workers} answered"


def beat() -> tuple[bool, str]:
    """Beat's last tick, as the newest run of a periodic task it recorded (it records each as it sends it)."""
    last = PeriodicTask.objects.filter(enabled=True).aggregate(last=Max("last_run_at"))["last"]
    if last is None:
        return False, "beat has not run a periodic task yet"
    age = timezone.now() - last
    limit = timedelta(minutes=settings.HEALTH_BEAT_MAX_AGE_MINUTES)
    seconds = max(0, round(age.total_seconds()))
    if age > limit:
        return False, f"beat's newest run of a task was {seconds} s ago (more than {limit.total_seconds():g} s)"
    return True, f"newest run of a task {seconds} s ago"


def disk() -> tuple[bool, str]:
    usage = shutil.disk_usage(settings.VAR_DIR)
    free_mb = usage.free // 2**20
    text = f"{free_mb:,} MB free of {usage.total // 2**20:,} MB under var/"
    return free_mb >= settings.HEALTH_DISK_MIN_FREE_MB, text + f" (at least {settings.HEALTH_DISK_MIN_FREE_MB:,} MB)"


CHECKS: dict[str, Check] = {
    "database": database,
    "cache": shared_cache,
    "broker": broker,
    "worker": worker,
    "beat": beat,
    "disk": disk,
}
NEEDS = {"worker": "broker", "beat": "database"}  # not asked when what they rely on failed
ESSENTIAL = {"database", "disk"}  # without either nothing can be stored: the others only degrade the service


def status_of(checks: dict[str, dict[str, Any]]) -> str:
    """ "ok"; "degraded" when only a check outside ESSENTIAL failed; "fail" when an essential one did."""
    failed = {name for name, check in checks.items() if not check["ok"]}
    return "fail" if failed & ESSENTIAL else "degraded" if failed else "ok"


def run_checks() -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    for name, check in CHECKS.items():
        started = time.perf_counter()
        needed = NEEDS.get(name)
        if needed and not results[needed]["ok"]:
            ok, detail = False, f"not checked: the {needed} check failed"
        else:
            try:
                ok, detail = check()
            except Exception as exc:  # any failure of a dependency is an answer, not an error page
                ok, detail = False, _CREDENTIALS.sub("//***@", f"{type(exc).__name__}: {exc}")
        results[name] = {"ok": ok, "detail": detail, "ms": round((time.perf_counter() - started) * 1000, 1)}
    return results
