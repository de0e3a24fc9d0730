"""What every console view shares: the role checks and the lookups that hide what a user may not see."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils.cache import patch_vary_headers
from django_htmx.middleware import HtmxDetails

from checkpoints.jobs import ERRORS_KEPT
from checkpoints.models import AgentSession, Checkpoint, DriftAlert

VIEW = "checkpoints.view_agentsession"
OPERATE = "checkpoints.operate_session"
TRIAGE = "checkpoints.triage_alert"
APPROVE = "checkpoints.approve_phase"


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


def console(permission: str = VIEW) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    """Sign-in required (redirect), then the role's permission (403 for anyone without it)."""

    def decorate(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @wraps(view)
        def checked(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.has_perm(permission):
                raise PermissionDenied(f"Your role does not allow this ({permission.split('.')[1]}).")
            return view(request, *args, **kwargs)

        return login_required(checked)

    return decorate


def get_session_for_user(request: HttpRequest, pk: int) -> AgentSession:
    queryset = AgentSession.objects.visible_to(request.user).select_related("project", "head", "forked_from__session")
    return get_object_or_404(queryset, pk=pk)


def get_checkpoint_for_user(request: HttpRequest, pk: int) -> Checkpoint:
    sessions = AgentSession.objects.visible_to(request.user)
    queryset = Checkpoint.objects.select_related("session__project", "session__head", "parent")
    return get_object_or_404(queryset, pk=pk, session__in=sessions)


def get_alert_for_user(request: HttpRequest, pk: int) -> DriftAlert:
    sessions = AgentSession.objects.visible_to(request.user)
    queryset = DriftAlert.objects.select_related("session__project", "last_good", "checkpoint")
    return get_object_or_404(queryset, pk=pk, session__in=sessions)


def render_page(
    request: HtmxHttpRequest, template: str, context: dict[str, Any], partial: str | None = None
) -> HttpResponse:
    """The whole page, or only its named partial when htmx asks for it.

    htmx marks a history restore after a cache miss as an htmx request too: that needs the whole page.
    """
    wants_partial = partial and request.htmx and not request.htmx.history_restore_request
    response = render(request, f"{template}#{partial}" if wants_partial else template, context)
    if partial:
        patch_vary_headers(response, ["HX-Request"])  # the page and its fragment share one URL
    return response


def job_failures(result: dict[str, Any], user: Any) -> dict[str, Any] | None:
    """A job result's failed sessions (or folders) as the console lists them, or None when none failed.

    Only the sessions of projects the user may see are named; the others count among the unlisted.
    """
    count = result.get("error_count")
    if not count:
        return None
    errors = result.get("errors", [])
    named = [error["id"] for error in errors if "session" in error]
    visible = set(AgentSession.objects.visible_to(user).filter(pk__in=named).values_list("pk", flat=True))
    shown = [error for error in errors if "session" not in error or error["id"] in visible]
    unit = "folder" if "sources_done" in result else "session"
    return {"count": count, "unit": unit, "shown": shown, "hidden": count - len(shown), "kept": ERRORS_KEPT}
