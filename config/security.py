"""The front door: request size limits, the client address the login throttle counts, and its lockout page."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from datetime import datetime
from typing import Any

from axes.handlers.proxy import AxesProxyHandler
from axes.helpers import get_client_username, get_cool_off, get_failure_limit
from django.conf import settings
from django.db.models import Max, Sum
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone

from checkpoints.services.logins import record_login_lockout

API_PREFIX = "/api/"


def _valid_ip(value: str | None) -> str | None:
    try:
        return str(ipaddress.ip_address((value or "").strip()))
    except ValueError:
        return None


def client_ip(request: HttpRequest) -> str | None:
    """The client's address: REMOTE_ADDR, or behind the proxy the address our nearest proxy saw.

    Each proxy appends the address it got the request from to X-Forwarded-For, so the entry PROXY_COUNT from
    the right is the client as our outermost proxy saw it. Entries further left are whatever the client sent:
    counting them would let one attacker lock out any address they name, or dodge the throttle.
    """
    if settings.BEHIND_PROXY:
        hops = request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")
        if 0 < settings.PROXY_COUNT <= len(hops) and (address := _valid_ip(hops[-settings.PROXY_COUNT])):
            return address
    return _valid_ip(request.META.get("REMOTE_ADDR"))


# ---- request size limits --------------------------------------------------------------------------------


def body_limit(request: HttpRequest) -> int | None:
    """The largest body this route takes; the import upload's large limit is only for a signed-in user."""
    if request.path_info.startswith(API_PREFIX):
        return settings.CHECKPOINT_MAX_BODY_BYTES
    form_limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    if request.path_info == reverse("dashboard:import_upload") and request.user.is_authenticated:
        return settings.IMPORT_UPLOAD_MAX_BYTES + (form_limit or 0)  # the archive plus the form's other fields
    return form_limit


class RequestBodyLimitMiddleware:
    """Answers 413 to a body declared larger than its route takes, before anything reads it.

    Django checks DATA_UPLOAD_MAX_MEMORY_SIZE only while it reads a form, and never counts multipart file
    parts, which it spools to disk: without this, a 200 MiB "file" posted to the login page is read whole.
    A body without a Content-Length is not read at all by Django under WSGI, so the header is what counts.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        try:
            declared = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            declared = 0  # Django reads nothing of a body whose length it cannot parse
        limit = body_limit(request)
        if limit is not None and declared > limit:
            return too_large(request, declared, limit)
        return self.get_response(request)


def too_large(request: HttpRequest, declared: int, limit: int) -> HttpResponse:
    if request.path_info.startswith(API_PREFIX):  # the API's own wording for the same refusal
        return JsonResponse({"detail": f"request body is larger than {limit} bytes"}, status=413)
    message = f"The request body ({declared:,} bytes) is larger than this address accepts ({limit:,} bytes)."
    return render(request, "413.html", {"message": message}, status=413)


# ---- login lockouts --------------------------------------------------------------------------------------


def _locked_until(request: HttpRequest, credentials: dict[str, Any] | None) -> tuple[list[str], datetime | None]:
    """Which of the username and the address are locked, and when the later of those locks ends."""
    limit = get_failure_limit(request, credentials)
    cool_off = get_cool_off(request)
    locked, last_failures = [], []
    attempts = AxesProxyHandler.get_implementation().get_user_attempts(request, credentials)
    for parameter, queryset in zip(settings.AXES_LOCKOUT_PARAMETERS, attempts, strict=True):
        totals = queryset.aggregate(failures=Sum("failures_since_start"), last=Max("attempt_time"))
        if (totals["failures"] or 0) >= limit:
            locked.append(parameter)
            last_failures.append(totals["last"])
    until = max(last_failures) + cool_off if last_failures and cool_off is not None else None
    return locked, until


def login_locked_out(
    request: HttpRequest, original_response: HttpResponse | None, credentials: dict[str, Any] | None
) -> HttpResponse:
    """Axes' lockout response: the sign-in page saying what is locked and until when, answered 429.

    The attempt that reaches the limit is the one that records a failure (axes sets the count on the request
    only then); it writes the audit event, so a locked-out client hammering on writes no more of them.
    """
    username = get_client_username(request, credentials) or ""
    # axes sets these on the request as it checks a sign-in: HttpRequest's stub cannot know them
    ip_address = request.axes_ip_address  # type: ignore[attr-defined]
    locked, until = _locked_until(request, credentials)
    if request.axes_failures_since_start is not None:  # type: ignore[attr-defined]
        record_login_lockout(username, ip_address=ip_address, path=request.path_info, locked=locked, until=until)
    minutes = max(1, round((until - timezone.now()).total_seconds() / 60)) if until else None
    context = {
        "username": username,
        "ip_address": ip_address,
        "by_username": "username" in locked,
        "by_address": "ip_address" in locked,
        "until": until,
        "minutes": minutes,
    }
    return render(request, "registration/locked_out.html", context, status=settings.AXES_HTTP_RESPONSE_CODE)
