from __future__ import annotations

from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.templatetags.static import static
from django.views.decorators.http import require_GET
from django.views.defaults import page_not_found
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from . import health
from .metrics import CHALLENGE, REFUSED, Scrape, authorized


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


@require_GET
def ready(request: HttpRequest) -> JsonResponse:
    """Readiness: database, broker, a worker, beat and disk space, each named; 503 when one fails."""
    checks = health.run_checks()
    ok = all(check["ok"] for check in checks.values())
    return JsonResponse({"status": "ok" if ok else "fail", "checks": checks}, status=200 if ok else 503)
