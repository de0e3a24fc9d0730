from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from checkpoints.models import AgentSession


@require_GET
@login_required
def home(request: HttpRequest) -> HttpResponse:
    sessions = AgentSession.objects.select_related("project", "head").order_by("-updated_at")[:50]
    return render(request, "dashboard/home.html", {"sessions": sessions})
