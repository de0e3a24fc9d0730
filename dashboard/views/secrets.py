"""A project's Secrets page: what the ingest scan found (docs/secrets.md), for every member; its operators edit the
project's own patterns on it."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponse
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from checkpoints.roles import PURGE_SECRETS
from checkpoints.services import Actor
from checkpoints.services.secrets import set_secret_patterns

from ..forms import SecretPatternsForm
from ..presenters.secrets import secrets_page
from .common import OPERATE, VIEW, HtmxHttpRequest, console, get_project_for_user, navigate, render_page


@console(VIEW)
@require_http_methods(["GET", "POST"])
def secrets(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    if request.method == "POST":
        request.console_permission = OPERATE  # editing the patterns needs the operator's role in this project
    project = get_project_for_user(request, slug)
    can_operate = request.user.has_perm(OPERATE, project)
    initial = {"patterns": "\n".join(f"{name}: {pattern}" for name, pattern in project.secret_patterns)}
    form = SecretPatternsForm(request.POST if request.method == "POST" else None, initial=initial)
    if request.method == "POST" and form.is_valid():
        set_secret_patterns(project, actor=Actor.for_user(request.user), text=form.cleaned_data["patterns"])
        messages.success(request, f"Secret patterns of {project.slug} saved.")
        return navigate(request, reverse("dashboard:secrets", kwargs={"slug": slug}))
    context = {
        "project": project,
        "page": secrets_page(project),
        "form": form if can_operate else None,
        "can_purge": request.user.has_perm(PURGE_SECRETS, project),
    }
    return render_page(request, "dashboard/secrets.html", context)
