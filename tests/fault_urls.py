"""The console's URLs plus one API path whose view loses its database connection outside the API's own
exception handlers: what reaches Django's handler500 from under /api/ (a middleware's error, say)."""

from __future__ import annotations

from django.db import connection
from django.http import HttpRequest, HttpResponse
from django.urls import path

from config.urls import handler404, handler500
from config.urls import urlpatterns as console_urls


def dropped_connection(request: HttpRequest) -> HttpResponse:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")
        cursor.execute("SELECT 1")
    return HttpResponse("unreachable")


urlpatterns = [path("api/v1/test-only/dropped-connection", dropped_connection), *console_urls]
__all__ = ["handler404", "handler500", "urlpatterns"]
