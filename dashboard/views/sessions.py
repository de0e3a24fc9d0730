"""The sessions list: filters, search, sort, keyset pagination and a sparkline of state size per row."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django import forms
from django.db.models import QuerySet
from django.http import HttpResponse
from django.views.decorators.http import require_GET

from checkpoints.models import AgentSession, AgentSessionQuerySet, Checkpoint, Project, SessionStatus
from checkpoints.phases import sessions_waiting_for_approval

from ..forms import choice_field
from .common import HtmxHttpRequest, console, fleet_filters, render_page
from .pagination import keyset_page

PAGE_SIZE = 25
SPARK_POINTS = 30

# sort key → (label, keyset order: one column, then the primary key in the same direction)
SORTS = {
    "activity": ("Last activity", ("-updated_at", "-pk")),
    "created": ("Newest first", ("-created_at", "-pk")),
    "checkpoints": ("Most checkpoints", ("-checkpoint_count", "-pk")),
    "title": ("Title A–Z", ("title", "pk")),
}


# ---- the view -------------------------------------------------------------------------------------


class SessionFilterForm(forms.Form):
    q = forms.CharField(
        required=False,
        label="Search",
        widget=forms.TextInput(attrs={"type": "search", "placeholder": "Session id or title"}),
    )
    project = forms.ChoiceField(required=False)
    agent = forms.ChoiceField(required=False)
    status = forms.ChoiceField(required=False, choices=[("", "Any status"), *SessionStatus.choices])
    alert = forms.BooleanField(required=False, label="Has open alert")
    waiting = forms.BooleanField(required=False, label="Waiting for approval")
    sort = forms.ChoiceField(required=False, choices=[(key, label) for key, (label, _) in SORTS.items()])

    def __init__(self, *args: Any, sessions: AgentSessionQuerySet, projects: QuerySet[Project], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        slugs = projects.order_by("slug").values_list("slug", flat=True)
        agents = sessions.order_by("agent").values_list("agent", flat=True).distinct()
        choice_field(self, "project").choices = [("", "All projects"), *((slug, slug) for slug in slugs)]
        choice_field(self, "agent").choices = [("", "All agents"), *((agent, agent) for agent in agents)]

    def filter(self, sessions: AgentSessionQuerySet) -> AgentSessionQuerySet:
        """Apply the valid filters; an invalid one is shown as an error and ignored."""
        self.is_valid()
        data = self.cleaned_data
        if data.get("q"):
            sessions = sessions.matching(data["q"])
        if data.get("project"):
            sessions = sessions.filter(project__slug=data["project"])
        if data.get("agent"):
            sessions = sessions.filter(agent=data["agent"])
        if data.get("status"):
            sessions = sessions.filter(status=data["status"])
        if data.get("alert"):
            sessions = sessions.with_open_alert()
        if data.get("waiting"):
            sessions = sessions_waiting_for_approval(sessions)
        return sessions

    @property
    def order(self) -> tuple[str, str]:
        return SORTS[self.cleaned_data.get("sort") or "activity"][1]

    @property
    def narrowed(self) -> bool:
        return any(self.cleaned_data.get(name) for name in ("q", "project", "agent", "status", "alert", "waiting"))


@dataclass(frozen=True)
class SessionRow:
    """A session as the list shows it: the raw bytes of its newest checkpoints (oldest first, for the sparkline)
    and when the newest was made."""

    session: AgentSession
    sizes: list[int]
    last_checkpoint_at: datetime | None


def _rows(sessions: list[AgentSession]) -> list[SessionRow]:
    """The page's rows, from one query for the whole page."""
    sizes: dict[int, list[int]] = defaultdict(list)
    last_at: dict[int, datetime] = {}
    rows = Checkpoint.objects.newest_per_session(sessions, count=SPARK_POINTS)
    for session_id, raw_bytes, created_at in rows.values_list("session_id", "raw_bytes", "created_at"):
        sizes[session_id].append(raw_bytes)
        last_at[session_id] = created_at
    return [SessionRow(session, sizes[session.pk], last_at.get(session.pk)) for session in sessions]


@console()
@require_GET
def session_list(request: HtmxHttpRequest) -> HttpResponse:
    sessions = AgentSession.objects.visible_to(request.user)
    form = SessionFilterForm(request.GET, sessions=sessions, projects=Project.objects.allowing(request.user))
    matching = form.filter(sessions)
    page = keyset_page(
        matching.for_list(), form.order, after=request.GET.get("after", ""), before=request.GET.get("before", "")
    )
    total = matching.count()
    context = {
        "form": form,
        "page": page,
        "rows": _rows(page.rows),
        "total": total,
        "fleet_filters": fleet_filters(form.cleaned_data, ("q", "project", "agent", "status", "alert")),
        "fleet_all_allowed": not form.cleaned_data.get("waiting"),  # not a filter a recovery selects by
        "fleet_total": total,
        "fleet_total_known": True,
    }
    return render_page(request, "dashboard/session_list.html", context, "session-results")
