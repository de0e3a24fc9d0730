from __future__ import annotations

import sys

from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.templatetags.static import static
from django.views.decorators.http import require_GET
from django.views.defaults import bad_request, page_not_found, server_error
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from checkpoints.api.common import database_unavailable

from . import health
from .metrics import CHALLENGE, REFUSED, Scrape, authorized


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """API clients get JSON for an unknown URL too, not an HTML page."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": f"no such endpoint: {request.method} {request.path}"}, status=404)
    return page_not_found(request, exception)


def bad_request_error(request: HttpRequest, exception: Exception) -> HttpResponse:
    """A request Django refuses before any view (a Host header not in ALLOWED_HOSTS, another suspicious
    operation) is still JSON under /api/: clients parse every API answer as the schema says."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "bad request: the Host header or another part of it was refused"}, status=400)
    return bad_request(request, exception)


def api_server_error(request: HttpRequest) -> HttpResponse:
    """An error that escaped the API's own handlers (a middleware's, say) is still JSON under /api/: 503 with
    Retry-After when the database failed, so the client retries; 500 otherwise. Django calls this inside the
    `except` that caught the error, so sys.exc_info() names it."""
    if not request.path.startswith("/api/"):
        return server_error(request)
    if isinstance(sys.exc_info()[1], OperationalError | InterfaceError):
        return database_unavailable()
    return JsonResponse({"detail": "internal server error (it was logged)"}, status=500)


@require_GET
def favicon(request: HttpRequest) -> HttpResponse:
    """Pages without an icon link (the admin's) make browsers ask for /favicon.ico: answer with the console's."""
    return HttpResponseRedirect(static("console/favicon.svg"))


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus' scrape: the web processes' own metrics and the database's, read now (config.metrics)."""
    if not authorized(request.headers.get("Authorization", "")):
        response = HttpResponse(REFUSED, status=401, content_type="text/plain")
        response["WWW-Authenticate"] = CHALLENGE
        return response
    return HttpResponse(generate_latest(Scrape(database=True)), content_type=CONTENT_TYPE_LATEST)


@require_GET
def live(request: HttpRequest) -> JsonResponse:
    """Liveness: the process answers; nothing else is asked (no database)."""
    return JsonResponse({"status": "ok"})


def _may_see_details(request: HttpRequest) -> bool:
    """The metrics token's holder (a scraper, a probe) or a signed-in staff member."""
    if settings.METRICS_TOKEN and authorized(request.headers.get("Authorization", "")):
        return True
    try:
        return bool(request.user.is_authenticated and request.user.is_staff)
    except DatabaseError:  # the session's user is read from the database, which may be the failing check
        return False


@require_GET
def ready(request: HttpRequest) -> JsonResponse:
    """Readiness: database, cache, broker, a worker, beat and disk space, each named. 503 only when the database
    or the disk fails (nothing can be stored); 200 "degraded" when another check does. What each check found
    (hosts, versions, errors) only for the metrics token or staff; anyone else sees which checks pass."""
    checks = health.run_checks()
    status = health.status_of(checks)
    if not _may_see_details(request):
        checks = {name: {"ok": check["ok"]} for name, check in checks.items()}
    return JsonResponse({"status": status, "checks": checks}, status=503 if status == "fail" else 200)
