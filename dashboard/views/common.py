"""What every console view shares: the role checks and the lookups that hide what a user may not see."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from functools import wraps
from typing import Any

from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseBase, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.template.defaultfilters import pluralize
from django.utils.cache import patch_vary_headers
from django.utils.http import url_has_allowed_host_and_scheme
from django_htmx.http import HttpResponseClientRedirect, trigger_client_event
from django_htmx.middleware import HtmxDetails

from checkpoints.jobs.retention import plan_retention
from checkpoints.models import AgentSession, Checkpoint, DriftAlert, ImportJob, Phase, Project
from checkpoints.roles import APPROVE as APPROVE  # the views' permissions, re-exported
from checkpoints.roles import NOTIFY as NOTIFY
from checkpoints.roles import OPERATE as OPERATE
from checkpoints.roles import REVEAL_SECRETS as REVEAL_SECRETS
from checkpoints.roles import TRIAGE as TRIAGE
from checkpoints.roles import VIEW_SESSIONS as VIEW
from checkpoints.roles import in_every_project

from ..forms import window_value
from ..presenters.jobs import job_failures


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails
    user: User  # console views are for signed-in users only (`console`): never AnonymousUser
    console_permission: str


def console(
    permission: str = VIEW, *, everywhere: bool = False
) -> Callable[[Callable[..., HttpResponseBase]], Callable[..., HttpResponseBase]]:
    """Sign-in required (redirect), then the permission in at least one project (403 for anyone without it);
    with `everywhere`, in every project at once (system-wide actions, for staff). The `get_…_for_user` lookups
    check the same permission again in the project of the object the view acts on.

    The project-aware `login_required` + `permission_required(raise_exception=True)`. Every console view puts it
    first, above `require_GET`/`require_POST`: a signed-out visitor is sent to sign in whatever the method.
    """

    def decorate(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
        @wraps(view)
        def checked(request: HtmxHttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            allowed = in_every_project(request.user, permission) if everywhere else request.user.has_perm(permission)
            if not allowed:
                if not request.user.has_perm(VIEW):
                    raise PermissionDenied("You are not a member of any project yet: an admin can add you to one.")
                where = " in every project" if everywhere else ""
                raise PermissionDenied(f"Your role does not allow this{where} ({permission.split('.')[1]}).")
            request.console_permission = permission
            return view(request, *args, **kwargs)

        return login_required(checked)

    return decorate


def _get_for_user(request: HtmxHttpRequest, queryset: Any, **lookup: Any) -> Any:
    """404 for anything outside the user's projects; 403 when their role in its project does not allow the
    view's permission (an operator elsewhere who only views this project)."""
    return _permitted(request, get_object_or_404(queryset.visible_to(request.user), **lookup))


def _permitted(request: HtmxHttpRequest, found: Any) -> Any:
    permission = getattr(request, "console_permission", VIEW)
    if not request.user.has_perm(permission, found):
        raise PermissionDenied(f"Your role in this project does not allow this ({permission.split('.')[1]}).")
    return found


def get_session_for_user(request: HtmxHttpRequest, pk: int) -> AgentSession:
    queryset = AgentSession.objects.select_related("project", "head", "forked_from__session")
    return _get_for_user(request, queryset, pk=pk)


def get_checkpoint_for_user(request: HtmxHttpRequest, pk: int) -> Checkpoint:
    queryset = Checkpoint.objects.select_related("session__project", "session__head", "parent")
    return _get_for_user(request, queryset, pk=pk)


def get_alert_for_user(request: HtmxHttpRequest, pk: int) -> DriftAlert:
    queryset = DriftAlert.objects.select_related("session__project", "last_good", "checkpoint")
    return _get_for_user(request, queryset, pk=pk)


def get_phase_for_user(request: HtmxHttpRequest, session_pk: int, number: int) -> Phase:
    queryset = Phase.objects.select_related("session__project", "session__head", "session__forked_from__session")
    return _get_for_user(request, queryset, session_id=session_pk, number=number)


def get_import_job_for_user(request: HtmxHttpRequest, pk: int) -> ImportJob:
    return _get_for_user(request, ImportJob.objects.select_related("project", "created_by"), pk=pk)


def get_project_for_user(request: HtmxHttpRequest, slug: str) -> Project:
    """404 for a project the user does not see; 403 when their role there lacks the view's permission."""
    return _permitted(request, get_object_or_404(Project.objects.allowing(request.user), slug=slug))


def fleet_filters(cleaned: dict[str, Any], names: tuple[str, ...]) -> list[tuple[str, str]]:
    """A list page's filters as the fleet recovery form takes them (hidden fields of its "Recover…" bar)."""
    found = []
    for name in names:
        value = cleaned.get(name)
        if value is True:
            found.append((name, "on"))
        elif isinstance(value, datetime):  # as the recovery form's datetime-local inputs show it
            found.append((name, window_value(value)))
        elif value:
            found.append((name, str(value)))
    return found


def parse_int(value: str | None, *, below: int = 2**31) -> int | None:
    """A query parameter as a whole number 0 ≤ n < `below`, or None for anything else (also for digits that
    are not ASCII, like '²', which `str.isdigit` accepts and `int` refuses)."""
    if not value or len(value) > 20 or not (value.isascii() and value.isdigit()):
        return None
    number = int(value)
    return number if number < below else None


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


def navigate(request: HtmxHttpRequest, url: str) -> HttpResponse:
    """A full-page navigation, also from an htmx request (which would otherwise swap the redirect target in)."""
    return HttpResponseClientRedirect(url) if request.htmx else HttpResponseRedirect(url)


def safe_next(request: HtmxHttpRequest, fallback: str) -> str:
    target = request.POST.get("next") or request.GET.get("next") or ""
    allowed = url_has_allowed_host_and_scheme(target, {request.get_host()}, require_https=request.is_secure())
    return target if allowed else fallback


def notify(response: HttpResponse, text: str, *, level: str = "success") -> HttpResponse:
    """Show and announce `text` in the page's live notice once htmx has swapped the response in (a11y.js):
    visible wherever the operator has scrolled to, and read out by screen readers."""
    return trigger_client_event(response, "notice", {"text": text, "level": level}, after="settle")


def retention_confirmation(request: HtmxHttpRequest, *, action: str, back: str, back_label: str) -> HttpResponse:
    """What a retention run would delete now in every project, by kind, with the button that runs it."""
    plan = plan_retention()
    context = {
        "title": "Run retention now?",
        "plan": plan,
        "by_kind": sorted(plan.by_kind.items()),
        "failed": job_failures(plan.failures.as_dict(), request.user),
        "button": f"Delete {plan.deleted} checkpoint{pluralize(plan.deleted)} now",
        "action": action,
        "back": back,
        "back_label": back_label,
    }
    return render_page(request, "dashboard/job_confirm.html", context)
