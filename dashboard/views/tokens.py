"""A project's API tokens: members see them; operators create one (its secret shown once, in the answer to the
POST that made it) and revoke one after a confirmation page."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib import messages
from django.db.models import F
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_GET, require_http_methods

from checkpoints.models import SCOPE_GRANTED_BY, ApiToken, Project, Scope
from checkpoints.services import Actor, InvalidInput, create_api_token, revoke_token

from ..forms import TokenForm
from .common import OPERATE, VIEW, HtmxHttpRequest, console, get_project_for_user, navigate, render_page


@dataclass(frozen=True)
class TokenRow:
    token: ApiToken
    state: str  # active, expired or revoked
    access: str  # read only, or read and write


def _rows(project: Project, now: datetime) -> list[TokenRow]:
    tokens = project.tokens.order_by(F("revoked_at").desc(nulls_first=True), "-created_at", "-pk")
    return [
        TokenRow(
            token,
            "revoked" if token.revoked_at else "expired" if token.expires_at and token.expires_at <= now else "active",
            _access(token),
        )
        for token in tokens
    ]


def _access(token: ApiToken) -> str:
    base = "read and write" if token.has_scope(Scope.WRITE) else "read only"
    extra = [scope for scope in token.scopes if scope not in (Scope.READ, Scope.WRITE)]
    return f"{base}; {', '.join(extra)}" if extra else base


def _form(request: HtmxHttpRequest, project: Project, data: Any = None) -> TokenForm:
    """The form, offering the scopes the person may grant in this project (SCOPE_GRANTED_BY)."""

    def may_grant(scope: str) -> bool:
        return scope in SCOPE_GRANTED_BY and request.user.has_perm(SCOPE_GRANTED_BY[scope], project)

    return TokenForm(data, may_grant=may_grant, role_in=project.slug)


@console(VIEW)
@require_GET
def token_projects(request: HtmxHttpRequest) -> HttpResponse:
    """The projects whose tokens the user sees; straight to the one when there is one."""
    projects = list(Project.objects.allowing(request.user).order_by("slug"))
    if len(projects) == 1:
        return redirect("dashboard:tokens", slug=projects[0].slug)
    return render_page(request, "dashboard/token_projects.html", {"projects": projects})


@console(VIEW)
@require_http_methods(["GET", "POST"])
def tokens(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    """Every member sees the list; a POST (operators) creates a token and answers with its secret, which is
    kept nowhere else: not in the session, a URL or a redirect. Reloading asks to send the form again."""
    if request.method == "POST":
        request.console_permission = OPERATE  # creating needs the operator's role in this project
    project = get_project_for_user(request, slug)
    can_operate = request.user.has_perm(OPERATE, project)
    form = _form(request, project, request.POST if request.method == "POST" else None)
    created = None
    if request.method == "POST" and form.is_valid():
        now = timezone.now()
        try:
            token, secret = create_api_token(
                project,
                name=form.cleaned_data["name"],
                scopes=form.scopes(),
                expires_at=form.expires_at(now),
                actor=Actor.for_user(request.user),
                now=now,
            )
        except InvalidInput as exc:
            form.add_error("also" if exc.field == "scopes" else "expires_on", str(exc).removeprefix(f"{exc.field}: "))
        else:
            created = {
                "token": token,
                "secret": secret,
                "access": _access(token),
                "url": request.build_absolute_uri("/").rstrip("/"),
            }
            form = _form(request, project)
    context = {
        "project": project,
        "rows": _rows(project, timezone.now()),
        "form": form if can_operate else None,
        "created": created,
    }
    response = render_page(request, "dashboard/tokens.html", context)
    if created:
        add_never_cache_headers(response)  # the secret stays out of the browser's cache and history
    return response


@console(OPERATE)
@require_http_methods(["GET", "POST"])
def token_revoke(request: HtmxHttpRequest, slug: str, pk: int) -> HttpResponse:
    """GET asks first and says what stops working; POST revokes (a token revoked already stays so, unaudited)."""
    project = get_project_for_user(request, slug)
    token = get_object_or_404(ApiToken, project=project, pk=pk)
    if request.method == "POST":
        if revoke_token(token, actor=Actor.for_user(request.user)):
            messages.success(request, f"Token {token} revoked: requests carrying it now get 401.")
        else:
            messages.info(request, f"Token {token} was revoked already.")
        return navigate(request, reverse("dashboard:tokens", kwargs={"slug": slug}))
    return render_page(request, "dashboard/token_revoke.html", {"project": project, "token": token})
