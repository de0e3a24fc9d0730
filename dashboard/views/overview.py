"""The overview: counts, the sessions that need an operator first, and the latest operator actions."""

from __future__ import annotations

from datetime import timedelta

from django.db.models import Count, Q
from django.http import HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET

from checkpoints.models import AgentSession, AuditEvent, DriftAlert, Phase, SessionStatus
from checkpoints.phases import waiting_for_approval

from ..presenters.secrets import mask_events
from .common import HtmxHttpRequest, console, render_page

STALE_AFTER = timedelta(minutes=30)  # the routine checkpoint interval: a quiet active session has stopped
ATTENTION_ROWS = 10
GROUP_AT = 5  # sessions with an open alert of one kind that the overview shows as one line
RECENT_ACTIONS = 8
APPROVAL_ROWS = 8
REFRESH_SECONDS = 30


@console()
@require_GET
def overview(request: HtmxHttpRequest) -> HttpResponse:
    now = timezone.now()
    sessions = AgentSession.objects.visible_to(request.user)
    counts = sessions.aggregate(total=Count("pk"), active=Count("pk", filter=Q(status=SessionStatus.ACTIVE)))
    totals = sessions.totals(since=timezone.localtime(now).replace(hour=0, minute=0, second=0, microsecond=0))
    bursts = DriftAlert.objects.filter(session__in=sessions).open_kinds_at_least(GROUP_AT)
    attention = sessions.needing_attention(stale_before=now - STALE_AFTER, limit=ATTENTION_ROWS + 1, grouped=bursts)
    waiting = waiting_for_approval(Phase.objects.filter(session__in=sessions)).select_related("session__project")
    approvals = list(waiting.order_by("completed_at", "pk")[: APPROVAL_ROWS + 1])
    asking = sessions.filter(status=SessionStatus.WAITING).select_related("project").order_by("updated_at", "pk")
    inputs = list(asking[: APPROVAL_ROWS + 1])
    context = {
        "now": now,
        "refresh_seconds": REFRESH_SECONDS,
        "counts": counts,
        "open_alerts": DriftAlert.objects.filter(session__in=sessions).open().count(),
        "totals": totals,
        "ratio": totals["raw_bytes"] / totals["stored_bytes"] if totals["stored_bytes"] else None,
        "bursts": bursts,
        "attention": attention[:ATTENTION_ROWS],
        # most severe first, a burst before the single sessions of its severity (sorted() keeps that order)
        "attention_rows": sorted([*bursts.values(), *attention[:ATTENTION_ROWS]], key=lambda row: -row.severity_rank),
        "more_attention": len(attention) > ATTENTION_ROWS,
        "approvals": approvals[:APPROVAL_ROWS],
        "more_approvals": len(approvals) > APPROVAL_ROWS,
        "inputs": inputs[:APPROVAL_ROWS],  # LangGraph threads stopped at interrupt(), longest waiting first
        "more_inputs": len(inputs) > APPROVAL_ROWS,
        "actions": mask_events(
            list(
                AuditEvent.objects.visible_to(request.user)
                .select_related("session__project", "project")
                .order_by("-created_at", "-pk")[:RECENT_ACTIONS]
            )
        ),
        "stale_minutes": int(STALE_AFTER.total_seconds() // 60),
    }
    return render_page(request, "dashboard/overview.html", context, "overview-live")
