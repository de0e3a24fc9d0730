"""Prometheus metrics of the domain, named checkpoint_console_*.

Two sources. What only the process that did it can know (how many checkpoints it ingested, how long that took)
is counted in-process by prometheus-client; gunicorn's workers add theirs up through PROMETHEUS_MULTIPROC_DIR.
Everything the database holds the truth of is read from it at scrape time by `DatabaseCollector`, the same for
every process that answers the scrape: sessions and their tallies, open alerts, job runs, retention deletions,
and the Celery queues' depth. Each of its queries reads tallies, one row a session or a job run, or an index
range: none counts a session's checkpoints.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter as Tally
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from celery import current_app
from django.db.models import BigIntegerField, Count, Min, QuerySet, Sum
from django.db.models.fields.json import KeyTextTransform, KeyTransform
from django.db.models.functions import Cast
from prometheus_client import Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from .models import AgentSession, CheckpointKind, DriftAlert, JobRun, JobRunStatus
from .task_names import APPLY_RETENTION

logger = logging.getLogger(__name__)
PREFIX = "checkpoint_console"

CHECKPOINTS_INGESTED = Counter(
    f"{PREFIX}_checkpoints_ingested",
    "Checkpoints the processes answering this scrape stored (API, LangGraph saver, imports), counted once committed.",
    ["project", "kind", "status"],
)
INGEST_SECONDS = Histogram(
    f"{PREFIX}_ingest_duration_seconds",
    "Time to store one ingest call (one checkpoint, or a batch): states, rows and tallies.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)

SECRET_SCANS = Counter(
    f"{PREFIX}_secret_scans",
    "Scans of what checkpoints (and LangGraph writes) added, by outcome: scanned, truncated (stopped at "
    "SECRETS_SCAN_MAX_BYTES or SECRETS_SCAN_MAX_MS), failed (the scanner raised; the checkpoint was stored).",
    ["outcome"],
)
SECRETS_FOUND = Counter(
    f"{PREFIX}_secrets_found",
    "New secret findings (a value one detector found in one session for the first time), by project and detector.",
    ["project", "detector"],
)

_FINISHED = [status for status in JobRunStatus.values if status != JobRunStatus.RUNNING]
RETENTION_JOB = APPLY_RETENTION.job


def record_ingest(created: Iterable[tuple[str, str, str]], seconds: float) -> None:
    """Count committed checkpoints, by (project slug, kind, status), and the time their ingest call took."""
    INGEST_SECONDS.observe(seconds)
    for (project, kind, status), n in Tally(created).items():
        CHECKPOINTS_INGESTED.labels(project=project, kind=kind, status=status).inc(n)


def record_secret_scan(outcome: str, n: int = 1) -> None:
    SECRET_SCANS.labels(outcome=outcome).inc(n)


def record_secrets_found(project: str, detectors: Iterable[str]) -> None:
    for detector, n in Tally(detectors).items():
        SECRETS_FOUND.labels(project=project, detector=detector).inc(n)


class DatabaseCollector:
    """Reads the database's figures at each scrape (prometheus-client calls `collect`)."""

    def collect(self) -> Iterator[Metric]:
        started = time.perf_counter()
        yield from self._sessions()
        yield self._open_alerts()
        yield from self._job_runs()
        yield from self._queue_lengths()
        took = GaugeMetricFamily(
            f"{PREFIX}_metrics_collect_seconds", "Time this scrape spent reading the database and broker."
        )
        took.add_metric([], time.perf_counter() - started)
        yield took

    def _sessions(self) -> Iterator[Metric]:
        """One pass over the sessions: how many by status, and their tallies summed per project."""
        sessions = GaugeMetricFamily(
            f"{PREFIX}_sessions", "Agent sessions, by project and status.", labels=["project", "status"]
        )
        per_project = {
            name: GaugeMetricFamily(f"{PREFIX}_{name}", help, labels=["project"])
            for name, help in (
                ("checkpoints", "Checkpoints kept now (retention removes some), from the sessions' tallies."),
                ("state_raw_bytes", "Size of the kept checkpoints' states as canonical JSON, summed."),
                ("state_stored_bytes", "What the kept checkpoints added to the store, compressed."),
            )
        }
        totals: dict[str, list[int]] = {}
        rows = (
            AgentSession.objects.order_by()
            .values_list("project__slug", "status")
            .annotate(Count("pk"), Sum("checkpoint_count"), Sum("raw_bytes"), Sum("stored_bytes"))
        )
        for project, status, count, *tallied in rows:
            sessions.add_metric([project, status], count)
            summed = totals.setdefault(project, [0, 0, 0])
            for i, value in enumerate(tallied):
                summed[i] += value or 0
        for project, values in totals.items():
            for family, value in zip(per_project.values(), values, strict=True):
                family.add_metric([project], value)
        yield sessions
        yield from per_project.values()

    def _open_alerts(self) -> Metric:
        family = GaugeMetricFamily(
            f"{PREFIX}_open_alerts",
            "Open drift alerts, by project, kind and severity.",
            labels=["project", "kind", "severity"],
        )
        rows = (
            DriftAlert.objects.open()
            .order_by()
            .values_list("session__project__slug", "kind", "severity")
            .annotate(Count("pk"))
        )
        for project, kind, severity, count in rows:
            family.add_metric([project, kind, severity], count)
        return family

    def _job_runs(self) -> Iterator[Metric]:
        runs, deleted = HISTORY.read()
        family = CounterMetricFamily(
            f"{PREFIX}_job_runs", "Finished runs of the background jobs, by job and result.", labels=["job", "result"]
        )
        for (job, status), count in sorted(runs.items()):
            family.add_metric([job, status], count)
        yield family
        retention = CounterMetricFamily(
            f"{PREFIX}_retention_deleted_checkpoints", "Checkpoints retention deleted, by kind.", labels=["kind"]
        )
        for kind in CheckpointKind.values:
            retention.add_metric([kind], deleted[kind])
        yield retention
        last = GaugeMetricFamily(
            f"{PREFIX}_job_last_success_timestamp_seconds",
            "When each job's newest run that did its work finished (Unix time).",
            labels=["job"],
        )
        for job in sorted({job for job, _ in runs}):
            # the (job, -started_at) index, read newest first until a completed run
            newest = JobRun.objects.for_job(job).completed().order_by("-started_at").values_list("finished_at")
            finished = newest.first()
            if finished and finished[0]:
                last.add_metric([job], finished[0].timestamp())
        yield last

    def _queue_lengths(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            f"{PREFIX}_celery_queue_length", "Tasks waiting in each Celery queue of the broker.", labels=["queue"]
        )
        up = GaugeMetricFamily(f"{PREFIX}_broker_up", "1 when this scrape could read the broker's queues, else 0.")
        try:
            lengths = queue_lengths()
        except Exception:  # a broker that is down must not take the other metrics with it
            logger.warning("metrics: could not read the Celery queues", exc_info=True)
            up.add_metric([], 0)
        else:
            up.add_metric([], 1)
            for queue, length in lengths.items():
                family.add_metric([queue], length)
            yield family
        yield up


class JobHistory:
    """Job runs counted by job and result, and what retention deleted by kind, however long the history.

    A finished run never changes again, so each process sums the finished runs once, up to a watermark: the
    newest run with no run still running before it. A scrape then reads only the runs after the watermark (the
    last few). The watermark row is looked up at each scrape: when it is gone or another (a rolled-back test,
    a restored database), the sums start over.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.upto: tuple[int, datetime] | None = None
        self.runs: Tally[tuple[str, str]] = Tally()
        self.deleted: Tally[str] = Tally()

    def read(self) -> tuple[Tally[tuple[str, str]], Tally[str]]:
        with self.lock:
            if self.upto and not JobRun.objects.filter(pk=self.upto[0], started_at=self.upto[1]).exists():
                self.reset()
            done = self.upto[0] if self.upto else 0
            # the running runs are few: the partial index jobrun_running_heartbeat holds them
            running = JobRun.objects.filter(status=JobRunStatus.RUNNING).aggregate(first=Min("pk"))["first"]
            before = JobRun.objects.filter(pk__lt=running) if running else JobRun.objects.all()
            upto = before.filter(pk__gt=done).order_by("-pk").values_list("pk", "started_at").first()
            if upto:
                runs, deleted = _history(JobRun.objects.filter(pk__gt=done, pk__lte=upto[0]))
                self.runs, self.deleted, self.upto = self.runs + runs, self.deleted + deleted, upto
            runs, deleted = _history(JobRun.objects.filter(pk__gt=self.upto[0]) if self.upto else JobRun.objects.all())
            return self.runs + runs, self.deleted + deleted


def _history(runs: QuerySet[JobRun]) -> tuple[Tally[tuple[str, str]], Tally[str]]:
    """Finished runs by (job, result), and the checkpoints retention deleted by kind (from the results of its
    completed runs; dry runs delete nothing)."""
    counts: Tally[tuple[str, str]] = Tally()
    for job, status, count in (
        runs.filter(status__in=_FINISHED).order_by().values_list("job", "status").annotate(Count("pk"))
    ):
        counts[job, status] = count
    by_kind = KeyTransform("by_kind", "result")
    sums = (
        runs.filter(job=RETENTION_JOB, dry_run=False)
        .filter(status__in=[JobRunStatus.SUCCEEDED, JobRunStatus.SUCCEEDED_WITH_ERRORS])
        .aggregate(
            **{kind: Sum(Cast(KeyTextTransform(kind, by_kind), BigIntegerField())) for kind in CheckpointKind.values}
        )
    )
    return counts, Tally({kind: total for kind, total in sums.items() if total})


HISTORY = JobHistory()


def celery_queues() -> list[str]:
    """The default queue and every queue a route or the queue list names."""
    conf = current_app.conf
    names = {conf.task_default_queue}
    names.update(queue.name for queue in conf.task_queues or ())
    routes = conf.task_routes or {}
    if isinstance(routes, dict):
        names.update(route["queue"] for route in routes.values() if isinstance(route, dict) and "queue" in route)
    return sorted(names)


def queue_lengths() -> dict[str, int]:
    """LLEN of each queue's lists on a Redis broker (Celery keeps one list per priority step); on the filesystem
    broker of `make run`, the message files waiting in its folder. Other brokers: none."""
    queues = celery_queues()
    options = {**current_app.conf.broker_transport_options, "max_retries": 0, "socket_timeout": 2}  # one attempt
    with current_app.connection_for_read(connect_timeout=2, transport_options=options) as connection:
        transport = connection.transport_cls
        if transport in ("redis", "rediss"):
            channel: Any = connection.default_channel
            client = channel.client
            lengths = {}
            for queue in queues:
                keys = [channel._q_for_pri(queue, pri) for pri in channel.priority_steps]
                pipe = client.pipeline()
                for key in dict.fromkeys(keys):
                    pipe.llen(key)
                lengths[queue] = sum(pipe.execute())
            return lengths
        if transport == "filesystem":
            folder = Path(current_app.conf.broker_transport_options["data_folder_in"])
            return {queue: sum(1 for _ in folder.glob(f"*.{queue}.msg")) for queue in queues}
    return {}
