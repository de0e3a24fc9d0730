"""Purging a value from a project's history (docs/purges.md): the form (from a finding on the Secrets page, or a
pasted value), its preview, the confirmation, and the purge's progress page. Only users holding `purge_secrets`,
which no role grants."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods

from checkpoints.models import Project, Purge, SecretFinding
from checkpoints.roles import PURGE_SECRETS, in_every_project
from checkpoints.services import Actor, InvalidInput
from checkpoints.services.purges import preview_purge, start_purge
from checkpoints.tasks import run_purge

from ..forms import PurgeForm
from .common import VIEW, HtmxHttpRequest, console, get_project_for_user, navigate, parse_int, render_page


def _finding(project: Project, raw: str | None) -> SecretFinding | None:
    pk = parse_int(raw)
    if raw and pk is None:
        raise Http404("no such finding")
    return get_object_or_404(SecretFinding, pk=pk, project=project) if pk is not None else None


def _purger(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """`purge_secrets` in the project of the URL, before the method is looked at: 404 for a project the user does
    not see, 403 where they lack it (the permission is in no role). The view gets the project."""

    @wraps(view)
    def checked(request: HtmxHttpRequest, slug: str, *args: Any, **kwargs: Any) -> HttpResponse:
        request.console_permission = PURGE_SECRETS
        return view(request, get_project_for_user(request, slug), *args, **kwargs)

    return checked


@console(VIEW)
@_purger
@require_http_methods(["GET", "POST"])
def purge_new(request: HtmxHttpRequest, project: Project) -> HttpResponse:
    slug = project.slug
    data = request.POST if request.method == "POST" else None
    finding = _finding(project, (data or request.GET).get("finding"))
    form = PurgeForm(data, initial={"finding": finding.pk if finding else None})
    preview = None
    if data is not None and form.is_valid():
        asked = {
            "value": None if finding else form.cleaned_data["value"],
            "finding": finding,
            "sessions": form.session_ids(),
            "reason": form.cleaned_data["reason"],
        }
        try:
            if "confirm" in data:
                purge = start_purge(project, actor=Actor.for_user(request.user), start=run_purge.delay, **asked)
                return navigate(request, reverse("dashboard:purge_detail", kwargs={"slug": slug, "pk": purge.pk}))
            preview = preview_purge(project, actor=Actor.for_user(request.user), **asked)
        except InvalidInput as exc:
            form.add_error(exc.field if exc.field in form.fields else None, str(exc).split(": ", 1)[-1])
    context = {"project": project, "form": form, "finding": finding, "preview": preview}
    return render_page(request, "dashboard/purge_new.html", context)


@console(VIEW)
@_purger
@require_GET
def purge_detail(request: HtmxHttpRequest, project: Project, pk: int) -> HttpResponse:
    purge = get_object_or_404(Purge.objects.select_related("project"), pk=pk, project=project)
    context = {"project": project, "purge": purge, "staff": in_every_project(request.user, PURGE_SECRETS)}
    return render_page(request, "dashboard/purge_detail.html", context, partial="purge-progress")
