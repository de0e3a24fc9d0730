from __future__ import annotations

from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.templatetags.static import static
from django.views.decorators.http import require_GET
from django.views.defaults import page_not_found


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """API clients get JSON for an unknown URL too, not an HTML page."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": f"no such endpoint: {request.method} {request.path}"}, status=404)
    return page_not_found(request, exception)


@require_GET
def favicon(request: HttpRequest) -> HttpResponse:
    """Pages without an icon link (the admin's) make browsers ask for /favicon.ico: answer with the console's."""
    return HttpResponseRedirect(static("console/favicon.svg"))
