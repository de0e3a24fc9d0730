"""Drift alerts: the list (filters, keyset pages) and the triage actions on one alert."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib import messages
from django.db.models import Prefetch, prefetch_related_objects
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import trigger_client_event

from checkpoints.models import SEVERITY_RANKS, AlertSeverity, AlertState, Checkpoint, DriftAlert, Project
from checkpoints.services import Actor, acknowledge_alert, resolve_alert
from checkpoints.services.targets import alert_targets, alerts_within
from checkpoints.store.history import Discards

from ..forms import UNRESOLVED, AlertFilterForm, ResolveForm
from ..presenters.evidence import Triggered, evidence_checkpoints, evidence_summary
from ..presenters.secrets import mask_alerts
from .common import (
    TRIAGE,
    VIEW,
    HtmxHttpRequest,
    console,
    fleet_filters,
    get_alert_for_user,
    notify,
    render_page,
    safe_next,
)

PAGE_SIZE = 30  # alerts a page: at ~2 kB a row with its actions, a first view stays under 100 kB
# the filters a reader narrows the list by (the session last: a row's link, not passed to a fleet recovery)
FILTERS = ("severity", "kind", "project", "opened_since", "opened_until", "session")
ROW = "dashboard/alert_list.html#alert-row"
LAST_GOOD_FIELDS = ["id", "session_id", "seq", "name"]  # what a row shows of it and what its discards need


def _alerts(filters: dict[str, Any], request: HtmxHttpRequest) -> Any:
    """The list's rows in its order; each row's last good checkpoint is read later, for the page's rows only.

    Paged by its own three-key cursor, not `keyset_page`: pagination.py says why."""
    alerts = (
        DriftAlert.objects.visible_to(request.user)
        .select_related("session__project", "acknowledged_by")
        .defer("session__metadata", "session__live_root")
    )
    # kind and the opened window as a fleet recovery's selection reads them (FleetFilter, the same function)
    alerts = alerts_within(
        alerts, kind=filters.get("kind") or "", since=filters.get("opened_since"), until=filters.get("opened_until")
    )
    if filters.get("severity"):
        alerts = alerts.filter(severity=filters["severity"])
    state = filters.get("state", UNRESOLVED)
    if state == UNRESOLVED:
        alerts = alerts.unresolved()
    elif state:
        alerts = alerts.filter(state=state)
    if filters.get("project"):
        alerts = alerts.filter(session__project__slug=filters["project"])
    if filters.get("session"):
        alerts = alerts.filter(session_id=filters["session"])
    after = filters.get("after")
    if after:
        severity, opened_at, pk = after
        after = (SEVERITY_RANKS[AlertSeverity(severity)], opened_at, pk)  # the cursor names its row's severity
    return alerts.most_severe_first(after=after)


@console(VIEW)
@require_GET
def alert_list(request: HtmxHttpRequest) -> HttpResponse:
    projects = list(Project.objects.allowing(request.user).order_by("slug").values_list("slug", "slug"))
    form = AlertFilterForm(request.GET, projects=projects)
    form.is_valid()  # an invalid filter is shown as an error and ignored; the valid ones still apply
    page = list(_alerts(form.cleaned_data, request)[: PAGE_SIZE + 1])
    alerts, more = page[:PAGE_SIZE], len(page) > PAGE_SIZE
    query = request.GET.copy()
    query.pop("after", None)
    first_query = query.urlencode()
    if more:
        last = alerts[-1]
        query["after"] = f"{last.severity}_{last.opened_at.isoformat()}_{last.pk}"
    context = {
        "form": form,
        "rows": _rows(alerts),
        "next_query": query.urlencode() if more else "",
        "first_query": first_query,
        "paged": bool(form.cleaned_data.get("after")),
        "filtered": any(form.cleaned_data.get(name) for name in FILTERS),
        "state": form.cleaned_data.get("state", UNRESOLVED),
        "fleet_filters": fleet_filters(form.cleaned_data, ("state", *FILTERS[:-1])),
        "fleet_all_allowed": not form.cleaned_data.get("session"),
        "fleet_total": None,
    }
    return render_page(request, "dashboard/alert_list.html", context, partial="alert-results")


@dataclass(frozen=True)
class AlertRow:
    """What a row shows beyond the alert's fields: its evidence in words, what restoring its last good
    checkpoint discards (for the alerts that still offer it), and the checkpoints that showed the drift."""

    alert: DriftAlert
    evidence: str
    discards: Discards | None
    triggered: list[Triggered]


def _rows(alerts: list[DriftAlert]) -> list[AlertRow]:
    """The rows; "Restore last good" offers what the target rule decides for the alert (`alert_targets`, the
    rule a fleet recovery asks too)."""
    prefetch_related_objects(alerts, Prefetch("last_good", queryset=Checkpoint.objects.only(*LAST_GOOD_FIELDS)))
    offers = [alert for alert in alerts if alert.last_good and alert.state != AlertState.RESOLVED]
    decided = alert_targets(offers)
    mask_alerts(alerts)
    return [
        AlertRow(
            alert,
            evidence_summary(alert.evidence),
            decided[alert.pk].discards if alert.pk in decided else None,
            evidence_checkpoints(alert.evidence),
        )
        for alert in alerts
    ]


def _row_response(
    request: HtmxHttpRequest, alert: DriftAlert, done: str, form: ResolveForm | None = None
) -> HttpResponse:
    """The alert's row again, focus on what changed (its state, or the reason that was refused), `done` announced."""
    [row] = _rows([alert])
    back = safe_next(request, request.htmx.current_url_abs_path or reverse("dashboard:alert_list"))
    context = {"alert": alert, "row": row, "resolve_form": form, "next": back, "updated": True}
    response = render(request, ROW, context)
    trigger_client_event(response, "alert-updated", {"id": alert.pk, "state": alert.state})
    return notify(response, done, level="error" if form else "success")


def _done(verb: str, alert: DriftAlert) -> str:
    return f"{verb} the {alert.get_kind_display()} alert on {alert.session.external_id}."


@console(TRIAGE)
@require_POST
def acknowledge(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    alert = get_alert_for_user(request, pk)
    acknowledge_alert(alert, actor=Actor.for_user(request.user))
    if request.htmx:
        return _row_response(request, alert, _done("Acknowledged", alert))
    messages.success(request, _done("Acknowledged", alert))
    return redirect(safe_next(request, reverse("dashboard:alert_list")))


@console(TRIAGE)
@require_POST
def resolve(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    alert = get_alert_for_user(request, pk)
    # the list's rows share one form, so each reason field is named for its alert; `reason` alone also works
    form = ResolveForm({"reason": request.POST.get(f"reason-{pk}", request.POST.get("reason", ""))})
    if not form.is_valid():
        if request.htmx:
            return _row_response(request, alert, f"Not resolved: {form.errors.as_text()}", form)
        messages.error(request, f"Not resolved: {form.errors.as_text()}")
        return redirect(safe_next(request, reverse("dashboard:alert_list")))
    resolve_alert(alert, actor=Actor.for_user(request.user), reason=form.cleaned_data["reason"])
    if request.htmx:
        return _row_response(request, alert, _done("Resolved", alert))
    messages.success(request, _done("Resolved", alert))
    return redirect(safe_next(request, reverse("dashboard:alert_list")))
