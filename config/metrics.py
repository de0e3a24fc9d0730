"""What a Prometheus scrape reads, for the web's /metrics and for a Celery worker's own small server."""

from __future__ import annotations

import hmac
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from django.conf import settings
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.multiprocess import MultiProcessCollector

from checkpoints.metrics import DatabaseCollector

REFUSED = b"a bearer token is needed\n"
CHALLENGE = 'Bearer realm="metrics"'


def authorized(header: str) -> bool:
    """Only "Bearer <METRICS_TOKEN>", compared in constant time. No token set: open with DEBUG on (`make run`),
    refused otherwise, so that a production deployment that forgot the token lists no project's slug."""
    token = settings.METRICS_TOKEN
    if not token:
        return bool(settings.DEBUG)
    return hmac.compare_digest(header.encode(), f"Bearer {token}".encode())


class Scrape:
    """This process's metrics (with PROMETHEUS_MULTIPROC_DIR, those of every process writing to that folder),
    and, for the web, the database's figures read now."""

    def __init__(self, *, database: bool) -> None:
        self.database = database

    def collect(self) -> Iterator[Metric]:
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            processes = CollectorRegistry()
            MultiProcessCollector(processes)  # type: ignore[no-untyped-call]  # prometheus_client leaves it unannotated
            yield from processes.collect()
        else:
            yield from REGISTRY.collect()
        if self.database:
            yield from DatabaseCollector().collect()


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """A scrape every 15 s is not worth a log line."""


def _worker_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    if not authorized(environ.get("HTTP_AUTHORIZATION", "")):
        start_response("401 Unauthorized", [("Content-Type", "text/plain"), ("WWW-Authenticate", CHALLENGE)])
        return [REFUSED]
    start_response("200 OK", [("Content-Type", CONTENT_TYPE_LATEST)])
    return [generate_latest(Scrape(database=False))]


def serve_worker_metrics(port: int, *, host: str = "0.0.0.0") -> WSGIServer:  # noqa: S104 - Prometheus scrapes it from another container; METRICS_TOKEN guards it
    """A Celery worker's own counts (the checkpoints its imports and routine checkpoints stored, their ingest
    time) on `port`, in a thread: the web's /metrics has only what the web processes counted. The database's
    figures are left to the web's /metrics, so that they are not scraped twice."""
    server = make_server(host, port, _worker_app, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
