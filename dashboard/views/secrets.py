"""A project's Secrets page: what the ingest scan found (docs/secrets.md), for every member; its operators edit the
project's own patterns on it and dismiss a found value with a reason; people holding `reveal_secrets` reveal one
value at a time, with a reason."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from checkpoints.models import SecretFinding
from checkpoints.roles import PURGE_SECRETS
from checkpoints.services import Actor, InvalidInput
from checkpoints.services.purges import dismiss_finding
from checkpoints.services.reveals import ValueGone, reveal_secret
from checkpoints.services.secrets import detector_label, set_secret_patterns

from ..forms import DismissFindingForm, RevealForm, SecretPatternsForm
from ..presenters.secrets import secrets_page
from .common import (
    OPERATE,
    REVEAL_SECRETS,
    VIEW,
    HtmxHttpRequest,
    console,
    get_project_for_user,
    navigate,
    render_page,
)


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
        "can_reveal": request.user.has_perm(REVEAL_SECRETS, project),
        "can_dismiss": can_operate,
        "can_purge": request.user.has_perm(PURGE_SECRETS, project),
    }
    return render_page(request, "dashboard/secrets.html", context)


@console(REVEAL_SECRETS)
@never_cache  # the answer holds the value: no browser or proxy keeps it
@require_http_methods(["GET", "POST"])
def secret_reveal(request: HtmxHttpRequest, slug: str, pk: int) -> HttpResponse:
    """Asks why, then shows the value once; each reveal is one audit row naming the finding."""
    project = get_project_for_user(request, slug)
    finding = get_object_or_404(SecretFinding.objects.select_related("session", "checkpoint"), project=project, pk=pk)
    finding.project = project
    form = RevealForm(request.POST if request.method == "POST" else None)
    value = None
    if request.method == "POST" and form.is_valid():
        try:
            value = reveal_secret(finding, actor=Actor.for_user(request.user), reason=form.cleaned_data["reason"])
        except (InvalidInput, ValueGone) as exc:
            form.add_error("reason" if isinstance(exc, InvalidInput) else None, str(exc))
    context = {
        "project": project,
        "finding": finding,
        "label": detector_label(finding.detector),
        "form": form,
        "value": value,
    }
    return render_page(request, "dashboard/secret_reveal.html", context)


@console(OPERATE)
@require_http_methods(["GET", "POST"])
def secret_dismiss(request: HtmxHttpRequest, slug: str, pk: int) -> HttpResponse:
    """Asks why, then closes the value's open findings in the project (`dismiss_finding`, audited): it leaves the
    Secrets page and stays masked. A closed finding, or another project's, is a 404."""
    project = get_project_for_user(request, slug)
    found = SecretFinding.objects.select_related("session", "checkpoint").open()
    finding = get_object_or_404(found, project=project, pk=pk)
    form = DismissFindingForm(request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        try:
            dismiss_finding(finding, actor=Actor.for_user(request.user), reason=form.cleaned_data["reason"])
        except InvalidInput as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, f"{detector_label(finding.detector)} {finding.fingerprint[:12]} dismissed.")
            return navigate(request, reverse("dashboard:secrets", kwargs={"slug": slug}))
    context = {"project": project, "finding": finding, "label": detector_label(finding.detector), "form": form}
    return render_page(request, "dashboard/secret_dismiss.html", context)
