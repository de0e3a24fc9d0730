"""Webhook endpoints of a project: created, deleted (softly: their deliveries stay) and their secret rotated."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from ..audit import Actor, InvalidInput, record_audit
from ..models import EventType, Project, WebhookEndpoint
from .deliveries import new_secret
from .safe_http import check_target
from .wanted import forget_wanted

SUBSCRIBABLE = list(EventType.values)  # "ping" included: a receiver may answer the console's test sends


def check_events(events: Sequence[str]) -> list[str]:
    """The event types, each known and once, in the order given; InvalidInput names the unknown ones."""
    unknown = [event for event in events if event not in SUBSCRIBABLE]
    if unknown:
        raise InvalidInput("events", f"unknown event types {unknown}; known: {', '.join(SUBSCRIBABLE)}")
    if not events:
        raise InvalidInput("events", f"name at least one event type: {', '.join(SUBSCRIBABLE)}")
    return list(dict.fromkeys(events))


@transaction.atomic
def create_webhook(
    project: Project, *, url: str, events: Sequence[str], description: str = "", actor: Actor
) -> WebhookEndpoint:
    """A new endpoint with a new secret (the caller shows it once). Refuses unknown event types and URLs the
    SSRF guard refuses (UnsafeTarget)."""
    types = check_events(events)
    check_target(url)
    endpoint = WebhookEndpoint.objects.create(
        project=project,
        url=url,
        events=types,
        secret=new_secret(),
        description=description,
        created_by=actor.label,
    )
    details = {"endpoint": endpoint.pk, "url": url, "events": types}
    record_audit(actor, "create_webhook", project=project, target=url, details=details)
    forget_wanted(project.pk)
    return endpoint


@transaction.atomic
def delete_webhook(endpoint: WebhookEndpoint, *, actor: Actor, now: datetime | None = None) -> WebhookEndpoint:
    """It receives nothing more (pending deliveries to it are not sent); its deliveries stay listed."""
    now = now or timezone.now()
    if WebhookEndpoint.objects.filter(pk=endpoint.pk, deleted_at__isnull=True).update(deleted_at=now):
        endpoint.deleted_at = now
        details = {"endpoint": endpoint.pk}
        record_audit(actor, "delete_webhook", project=endpoint.project, target=endpoint.url, details=details, now=now)
        forget_wanted(endpoint.project_id)
    return endpoint


@transaction.atomic
def rotate_webhook_secret(endpoint: WebhookEndpoint, *, actor: Actor, now: datetime | None = None) -> WebhookEndpoint:
    """A new secret signs every attempt from now on, retries of older deliveries included."""
    now = now or timezone.now()
    endpoint.secret, endpoint.secret_rotated_at = new_secret(), now
    endpoint.save(update_fields=["secret", "secret_rotated_at"])
    details = {"endpoint": endpoint.pk}
    record_audit(
        actor, "rotate_webhook_secret", project=endpoint.project, target=endpoint.url, details=details, now=now
    )
    return endpoint
