from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.defaults import page_not_found


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """API clients get JSON for an unknown URL too, not an HTML page."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": f"no such endpoint: {request.method} {request.path}"}, status=404)
    return page_not_found(request, exception)
