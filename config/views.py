from __future__ import annotations

import hmac
import os
from collections.abc import Iterator

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.templatetags.static import static
from django.views.decorators.http import require_GET
from django.views.defaults import page_not_found
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.multiprocess import MultiProcessCollector

from checkpoints.metrics import DatabaseCollector

from . import health


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """API clients get JSON for an unknown URL too, not an HTML page."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": f"no such endpoint: {request.method} {request.path}"}, status=404)
    return page_not_found(request, exception)


@require_GET
def favicon(request: HttpRequest) -> HttpResponse:
    """Pages without an icon link (the admin's) make browsers ask for /favicon.ico: answer with the console's."""
    return HttpResponseRedirect(static("console/favicon.svg"))


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus' scrape: the process's own metrics (all gunicorn workers' with PROMETHEUS_MULTIPROC_DIR) and
    the database's, read now. With METRICS_TOKEN set, only for "Authorization: Bearer <METRICS_TOKEN>"."""
    token = settings.METRICS_TOKEN
    sent = request.headers.get("Authorization", "")
    if token and not hmac.compare_digest(sent.encode(), f"Bearer {token}".encode()):
        response = HttpResponse("a bearer token is needed\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(generate_latest(_Scrape()), content_type=CONTENT_TYPE_LATEST)


class _Scrape:
    """What one scrape collects: the in-process registry (or every process's files) and the database."""

    def collect(self) -> Iterator[Metric]:
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            processes = CollectorRegistry()
            MultiProcessCollector(processes)
            yield from processes.collect()
        else:
            yield from REGISTRY.collect()
        yield from DatabaseCollector().collect()


@require_GET
def live(request: HttpRequest) -> JsonResponse:
    """Liveness: the process answers; nothing else is asked (no database)."""
    return JsonResponse({"status": "ok"})


@require_GET
def ready(request: HttpRequest) -> JsonResponse:
    """Readiness: database, broker, a worker, beat and disk space, each named; 503 when one fails."""
    checks = health.run_checks()
    ok = all(check["ok"] for check in checks.values())
    return JsonResponse({"status": "ok" if ok else "fail", "checks": checks}, status=200 if ok else 503)
