"""Event webhooks of the token's project (`/api/v1/webhooks`): subscribe a URL, list, delete, rotate the secret,
read the delivery log. The secret is shown once, when created or rotated (docs/webhooks.md)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from django.http import HttpRequest, HttpResponse
from ninja import Field, Path, Router, Schema
from ninja.errors import HttpError

from .. import limits
from ..models import Delivery, EventType, WebhookEndpoint
from ..outbox import webhooks
from .common import ERRORS, WRITE, Strict, _actor, _json, _token

router = Router(tags=["webhooks"])
WebhookId = Annotated[int, Path(ge=1, le=limits.INT64_MAX)]
DELIVERIES_LISTED = 100


class WebhookIn(Strict):
    url: str = Field(min_length=1, max_length=2000, description="http(s) URL that receives the events.")
    events: list[EventType] = Field(min_length=1, max_length=len(EventType.values), description="Types it receives.")
    description: str = Field(default="", max_length=200)


class WebhookOut(Schema):
    id: int
    url: str
    events: list[str]
    description: str
    created_by: str
    created_at: datetime
    secret_rotated_at: datetime | None


class WebhookSecretOut(WebhookOut):
    secret: str = Field(description="Signs every delivery (X-Checkpoint-Signature); shown only in this answer.")


class DeliveryOut(Schema):
    id: str
    event: str
    type: str
    status: str
    attempts: int
    response_code: int | None
    last_error: str
    created_at: datetime
    last_attempt_at: datetime | None
    next_attempt_at: datetime | None


def webhook_dict(endpoint: WebhookEndpoint) -> dict[str, Any]:
    return {
        "id": endpoint.pk,
        "url": endpoint.url,
        "events": endpoint.events,
        "description": endpoint.description,
        "created_by": endpoint.created_by,
        "created_at": endpoint.created_at,
        "secret_rotated_at": endpoint.secret_rotated_at,
    }


def _webhook(request: HttpRequest, webhook_id: int, *, deleted_too: bool = False) -> WebhookEndpoint:
    endpoints = WebhookEndpoint.objects.select_related("project").filter(project=_token(request).project)
    if not deleted_too:
        endpoints = endpoints.filter(deleted_at__isnull=True)
    endpoint = endpoints.filter(pk=webhook_id).first()
    if endpoint is None:
        raise HttpError(404, f"no webhook {webhook_id} in project {_token(request).project.slug!r}")
    return endpoint


@router.post("", response={201: WebhookSecretOut, **ERRORS}, auth=WRITE)
def create_webhook(request: HttpRequest, payload: WebhookIn) -> Any:
    """Subscribe a URL to event types. Its secret is in this answer only; URLs on loopback, private or
    link-local addresses are refused unless the console allows them (WEBHOOK_ALLOW_PRIVATE)."""
    endpoint = webhooks.create_webhook(
        _token(request).project,
        url=payload.url,
        events=[str(event) for event in payload.events],
        description=payload.description,
        actor=_actor(request),
    )
    return _json({**webhook_dict(endpoint), "secret": endpoint.secret}, status=201)


@router.get("", response={200: list[WebhookOut], **ERRORS})
def list_webhooks(request: HttpRequest) -> Any:
    endpoints = WebhookEndpoint.objects.filter(project=_token(request).project, deleted_at__isnull=True)
    return [webhook_dict(endpoint) for endpoint in endpoints.order_by("pk")]


@router.delete("/{webhook_id}", response={204: None, **ERRORS}, auth=WRITE)
def delete_webhook(request: HttpRequest, webhook_id: WebhookId) -> Any:
    """It receives nothing more; its delivery log stays readable."""
    webhooks.delete_webhook(_webhook(request, webhook_id), actor=_actor(request))
    return HttpResponse(status=204)


@router.post("/{webhook_id}/rotate-secret", response={200: WebhookSecretOut, **ERRORS}, auth=WRITE)
def rotate_secret(request: HttpRequest, webhook_id: WebhookId) -> Any:
    """A new secret, in this answer only; every attempt from now on (retries included) is signed with it."""
    endpoint = webhooks.rotate_webhook_secret(_webhook(request, webhook_id), actor=_actor(request))
    return _json({**webhook_dict(endpoint), "secret": endpoint.secret})


@router.get("/{webhook_id}/deliveries", response={200: list[DeliveryOut], **ERRORS})
def list_deliveries(request: HttpRequest, webhook_id: WebhookId) -> Any:
    """The newest deliveries to it, with what each attempt came to."""
    endpoint = _webhook(request, webhook_id, deleted_too=True)
    recent = Delivery.objects.filter(endpoint=endpoint).select_related("event").order_by("-created_at")
    return [
        {
            "id": str(delivery.pk),
            "event": str(delivery.event_id),
            "type": delivery.event.type,
            "status": delivery.status,
            "attempts": delivery.attempts,
            "response_code": delivery.response_code,
            "last_error": delivery.last_error,
            "created_at": delivery.created_at,
            "last_attempt_at": delivery.last_attempt_at,
            "next_attempt_at": delivery.next_attempt_at,
        }
        for delivery in recent[:DELIVERIES_LISTED]
    ]
