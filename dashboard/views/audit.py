"""The audit log: who did what, when and why, newest first; filters by actor, action and session."""

from __future__ import annotations

from typing import Any

from django import forms
from django.db.models import Q, QuerySet
from django.http import HttpResponse
from django.views.decorators.http import require_GET

from checkpoints.models import AgentSession, AuditEvent

from ..forms import choice_field
from ..presenters.secrets import mask_events
from .common import HtmxHttpRequest, console, parse_int, render_page
from .pagination import keyset_page

ORDER = ("-created_at", "-pk")
# The session filter offers the sessions of this many newest events (and any session a link asks for): a list of
# every session ever audited grows with the store, thousands of options built and rendered on every page.
RECENT_EVENTS = 200
# "Who" choices that group actors: the system (jobs, detectors, commands) acts with neither a user nor a token.
SYSTEM = Q(actor_user__isnull=True, actor_token__isnull=True)
ACTOR_GROUPS = {"@people": ("People and API tokens", ~SYSTEM), "@system": ("The system (jobs, detectors)", SYSTEM)}


class AuditFilterForm(forms.Form):
    actor = forms.ChoiceField(required=False)
    action = forms.ChoiceField(required=False)
    session = forms.TypedChoiceField(required=False, coerce=int, empty_value=None)

    def __init__(self, *args: Any, events: QuerySet[AuditEvent], sessions: QuerySet[AgentSession], **kwargs: Any):
        super().__init__(*args, **kwargs)
        actors = events.order_by("actor").values_list("actor", flat=True).distinct()
        actions = events.order_by("action").values_list("action", flat=True).distinct()
        audited = Q(pk__in=events.filter(session__isnull=False).order_by(*ORDER).values("session")[:RECENT_EVENTS])
        wanted = parse_int(self.data.get("session"), below=2**63)
        if wanted is not None:  # a link from a session that has no events yet still selects it
            audited |= Q(pk=wanted)
        choices = sessions.filter(audited).select_related("project").order_by("project__slug", "external_id")
        groups = [(value, label) for value, (label, _) in ACTOR_GROUPS.items()]
        choice_field(self, "actor").choices = [("", "Anyone"), *groups, *((actor, actor) for actor in actors)]
        choice_field(self, "action").choices = [("", "Any action"), *((action, action) for action in actions)]
        choice_field(self, "session").choices = [("", "Any session"), *((s.pk, str(s)) for s in choices)]

    def filter(self, events: QuerySet[AuditEvent]) -> QuerySet[AuditEvent]:
        """Apply the valid filters; an invalid one is shown as an error and ignored."""
        self.is_valid()
        for name in ("actor", "action", "session"):
            value = self.cleaned_data.get(name)
            if value in ACTOR_GROUPS:
                events = events.filter(ACTOR_GROUPS[value][1])
            elif value not in (None, ""):
                events = events.filter(**{name: value})
        return events

    @property
    def narrowed(self) -> bool:
        return any(self.cleaned_data.get(name) not in (None, "") for name in ("actor", "action", "session"))


@console()
@require_GET
def audit_log(request: HtmxHttpRequest) -> HttpResponse:
    sessions = AgentSession.objects.visible_to(request.user)
    events = AuditEvent.objects.visible_to(request.user)
    form = AuditFilterForm(request.GET, events=events, sessions=sessions)
    page = keyset_page(
        form.filter(events).select_related("session__project", "project"),
        ORDER,
        after=request.GET.get("after", ""),
        before=request.GET.get("before", ""),
    )
    mask_events(page.rows)
    return render_page(request, "dashboard/audit_log.html", {"form": form, "page": page}, "audit-results")
