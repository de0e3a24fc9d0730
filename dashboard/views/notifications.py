"""Notifications of a project, for its operators: the rules (add, edit, delete, "Send test"), the event webhooks
agents registered through the API with their last deliveries, and the delivery log.

A new signed-webhook rule's secret is shown once, on the page the form leads to: it travels there in the
server-side session, never in a URL or a cookie.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.db.models import Prefetch, Q, QuerySet
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import trigger_client_event

from checkpoints.models import Delivery, DeliveryStatus, NotificationRule, Project, WebhookEndpoint
from checkpoints.outbox.notifications import create_rule, delete_rule, send_test, update_rule
from checkpoints.services import Actor

from ..forms import RuleForm
from .common import NOTIFY, HtmxHttpRequest, console, get_project_for_user, navigate, notify, render_page

LOG_ROWS = 50
ENDPOINT_DELIVERIES = 5
PAGE = "dashboard/notifications.html"
NEW_SECRET = "notification_rule_secret"  # session key: {rule pk: secret}, popped when shown  # noqa: S105 - a session key's name


@console(NOTIFY)
@require_GET
def notification_projects(request: HtmxHttpRequest) -> HttpResponse:
    """The projects whose notifications the user manages; straight to the one when there is one."""
    projects = list(Project.objects.allowing(request.user, NOTIFY).order_by("slug"))
    if len(projects) == 1:
        return redirect("dashboard:notifications", slug=projects[0].slug)
    return render_page(request, "dashboard/notification_projects.html", {"projects": projects})


@console(NOTIFY)
@require_GET
def notifications(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    project = get_project_for_user(request, slug)
    status = request.GET.get("status", "")
    context = {
        **_rules_context(project),
        "new_secret": request.session.pop(NEW_SECRET, None),
        "endpoints": _endpoints(project),
        **_log_context(project, status),
    }
    return render_page(request, PAGE, context, "delivery-log")


def _rules_context(project: Project, **extra: Any) -> dict[str, Any]:
    rules = NotificationRule.objects.filter(project=project).order_by("name", "pk")
    return {"project": project, "rules": rules, **extra}


def _endpoints(project: Project) -> QuerySet[WebhookEndpoint]:
    recent = Delivery.objects.select_related("event").order_by("-created_at")[:ENDPOINT_DELIVERIES]
    return (
        WebhookEndpoint.objects.filter(project=project, deleted_at__isnull=True)
        .order_by("created_at")
        .prefetch_related(Prefetch("deliveries", queryset=recent, to_attr="recent"))
    )


def _log_context(project: Project, status: str) -> dict[str, Any]:
    """The newest deliveries of the project's events, rules and webhooks (job.failed has no project: its
    deliveries are the project's through its rules)."""
    log = Delivery.objects.filter(Q(event__project=project) | Q(rule__project=project)).select_related(
        "event", "rule", "endpoint"
    )
    if status in DeliveryStatus.values:
        log = log.filter(status=status)
    return {
        "log": log.order_by("-created_at")[:LOG_ROWS],
        "status": status if status in DeliveryStatus.values else "",
        "statuses": DeliveryStatus.choices,
    }


@console(NOTIFY)
@require_http_methods(["GET", "POST"])
def rule_create(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    project = get_project_for_user(request, slug)
    form = RuleForm(request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        rule, secret = create_rule(project, actor=Actor.for_user(request.user), **form.cleaned_data)
        return _saved(request, rule, secret, f"Rule {rule.name!r} added.")
    return _form_page(request, project, form, rule=None)


@console(NOTIFY)
@require_http_methods(["GET", "POST"])
def rule_edit(request: HtmxHttpRequest, slug: str, pk: int) -> HttpResponse:
    project = get_project_for_user(request, slug)
    rule = get_object_or_404(NotificationRule, project=project, pk=pk)
    initial = {name: getattr(rule, name) for name in RuleForm.base_fields}
    form = RuleForm(request.POST if request.method == "POST" else None, initial=initial)
    if request.method == "POST" and form.is_valid():
        rule, secret = update_rule(rule, actor=Actor.for_user(request.user), **form.cleaned_data)
        return _saved(request, rule, secret, f"Rule {rule.name!r} saved.")
    return _form_page(request, project, form, rule=rule)


def _form_page(request: HtmxHttpRequest, project: Project, form: RuleForm, *, rule: NotificationRule | None) -> Any:
    context = {"project": project, "form": form, "rule": rule}
    return render_page(request, "dashboard/notification_rule.html", context, "rule-form")


def _saved(request: HtmxHttpRequest, rule: NotificationRule, secret: str, done: str) -> HttpResponse:
    if secret:
        request.session[NEW_SECRET] = {"rule": rule.name, "secret": secret}
    messages.success(request, done)
    return navigate(request, reverse("dashboard:notifications", kwargs={"slug": rule.project.slug}))


@console(NOTIFY)
@require_http_methods(["GET", "POST"])
def rule_delete(request: HtmxHttpRequest, slug: str, pk: int) -> HttpResponse:
    """GET asks first and says what goes (the rule) and what stays (its deliveries in the log); POST deletes."""
    project = get_project_for_user(request, slug)
    rule = get_object_or_404(NotificationRule, project=project, pk=pk)
    if request.method == "POST":
        kept = delete_rule(rule, actor=Actor.for_user(request.user))
        messages.success(request, f"Rule {rule.name!r} deleted; its {kept} deliveries stay in the log.")
        return navigate(request, reverse("dashboard:notifications", kwargs={"slug": slug}))
    context = {"project": project, "rule": rule, "deliveries": rule.deliveries.count()}
    return render_page(request, "dashboard/notification_rule_delete.html", context)


@console(NOTIFY)
@require_POST
def rule_test(request: HtmxHttpRequest, slug: str, pk: int) -> HttpResponse:
    """Send a `ping` to this rule now and say how it went; the delivery log shows it too."""
    project = get_project_for_user(request, slug)
    rule = get_object_or_404(NotificationRule, project=project, pk=pk)
    delivery = send_test(rule, actor=Actor.for_user(request.user))
    ok = delivery.status == DeliveryStatus.SUCCEEDED
    code = f" (HTTP {delivery.response_code})" if delivery.response_code else ""
    said = f"Test to {rule.name!r}: {'sent' if ok else 'failed'}{code}{'' if ok else f': {delivery.last_error}'}"
    if not request.htmx:
        (messages.success if ok else messages.error)(request, said)
        return redirect("dashboard:notifications", slug=slug)
    response = render_page(request, PAGE, _rules_context(project, tested=delivery), "rules")
    trigger_client_event(response, "delivery-logged")
    return notify(response, said, level="success" if ok else "error")
