"""A project's settings, for its operators: the types its LangGraph values may name (Project.type_allowlist)."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponse
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from checkpoints.models import default_type_allowlist
from checkpoints.services import Actor
from checkpoints.services.typeguard import set_type_allowlist

from ..forms import ProjectSettingsForm
from .common import OPERATE, HtmxHttpRequest, console, get_project_for_user, navigate, render_page


@console(OPERATE)
@require_http_methods(["GET", "POST"])
def project_settings(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    project = get_project_for_user(request, slug)
    initial = {"type_allowlist": "\n".join(project.type_allowlist)}
    form = ProjectSettingsForm(request.POST if request.method == "POST" else None, initial=initial)
    if request.method == "POST" and form.is_valid():
        set_type_allowlist(project, actor=Actor.for_user(request.user), entries=form.cleaned_data["type_allowlist"])
        messages.success(request, f"Settings of {project.slug} saved.")
        return navigate(request, reverse("dashboard:project_settings", kwargs={"slug": slug}))
    defaults = set(default_type_allowlist())
    context = {"project": project, "form": form, "added": [e for e in project.type_allowlist if e not in defaults]}
    return render_page(request, "dashboard/project_settings.html", context)
