"""Sending deliveries: signed webhook POSTs (through safe_http's SSRF guard), each attempt claimed once, retries
scheduled in the database.

A delivery's first attempt is queued when its event commits (`queue`); a failed attempt sets `next_attempt_at`
by `RETRY_DELAYS` and the `send_due_deliveries` beat sweep picks it up then, with the same delivery id, until it
succeeds or `WEBHOOK_MAX_ATTEMPTS` are spent. Receivers may see an attempt twice (a worker killed mid-send is
retried after its lease): the X-Checkpoint-Delivery header is the id to drop duplicates by.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterable
from contextlib import suppress
from datetime import datetime, timedelta
from typing import Any

from celery import shared_task
from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from ..audit import Actor, record_audit
from ..models import Delivery, DeliveryStatus, Event
from ..store import masking
from ..task_names import SEND_DELIVERY
from . import channels
from .outcome import Outcome
from .safe_http import describe

logger = logging.getLogger(__name__)

# After the 1st, 2nd, … failed attempt; the last one repeats. Six attempts span about 8.5 hours.
RETRY_DELAYS = (
    timedelta(minutes=1),
    timedelta(minutes=5),
    timedelta(minutes=30),
    timedelta(hours=2),
    timedelta(hours=6),
)
LEASE_MARGIN = timedelta(seconds=60)  # a claimed attempt is retried this long after its timeout if its worker died


def new_secret() -> str:
    """A signing secret for a webhook endpoint or a webhook notification rule."""
    return f"whsec_{secrets.token_urlsafe(32)}"


def _not_sendable(delivery: Delivery) -> str:
    """Why `delivery` must not go out any more, or "" when it may."""
    if delivery.endpoint is not None and delivery.endpoint.deleted_at is not None:
        return "Its webhook endpoint was deleted; not sent."
    kind = channels.kind_of(delivery.channel)
    if kind is None:
        return f"No sender for the {delivery.channel} channel."
    if kind.signed and delivery.endpoint is None and delivery.rule is None:  # its secret went with them
        return "Its webhook endpoint or rule was deleted; not sent."
    return kind.refusal_at_send(delivery.target)


def _send(delivery: Delivery) -> Outcome:
    reason = _not_sendable(delivery)
    if reason:
        return Outcome(ok=False, error=reason)
    try:
        return channels.REGISTRY[delivery.channel].send(delivery)
    except Exception as exc:  # a sender's bug is this attempt's failure, recorded, not a lost delivery
        logger.exception("sending delivery %s failed", delivery.pk)
        return Outcome(ok=False, error=describe(exc))


def _mask_again(event: Event) -> None:
    """The body masked once more as it leaves (in memory; the stored event is left as it is): it was masked when
    published, but a value found since — in a checkpoint stored after the event, a retry hours later — is masked
    too. One query (two when the project has findings) an attempt."""
    if event.project_id is not None:
        event.data = masking.for_projects({event.project_id})[event.project_id].json(event.data)


def next_attempt_after(attempts: int, now: datetime) -> datetime | None:
    """When to try again after `attempts` failed attempts, or None when they are spent."""
    if attempts >= settings.WEBHOOK_MAX_ATTEMPTS:
        return None
    return now + RETRY_DELAYS[min(attempts, len(RETRY_DELAYS)) - 1]


def attempt(delivery_id: Any, *, retry: bool = True, now: datetime | None = None) -> Delivery:
    """One attempt of a due pending delivery, recorded; a delivery not due (sent, or claimed by another worker)
    is returned unchanged.

    1. Claim: a conditional UPDATE counts the attempt and leases the delivery until the send's timeout (plus a
       margin) has passed, so a second worker or the sweep finds it not due and leaves it.
    2. Send through the channel's sender, outside any transaction (it may take WEBHOOK_TIMEOUT_SECONDS).
    3. Record the outcome: succeeded; or pending again at the next time of `RETRY_DELAYS`; or failed when the
       attempts are spent (or `retry` is off: a test send tries once).
    """
    now = now or timezone.now()
    lease = now + timedelta(seconds=settings.WEBHOOK_TIMEOUT_SECONDS) + LEASE_MARGIN
    claimed = (
        Delivery.objects.due(now)
        .filter(pk=delivery_id)
        .update(attempts=F("attempts") + 1, last_attempt_at=now, next_attempt_at=lease)
    )
    delivery: Delivery = Delivery.objects.select_related("event", "endpoint", "rule").get(pk=delivery_id)
    if not claimed:
        return delivery
    _mask_again(delivery.event)
    outcome = _send(delivery)
    spent = outcome.ok or not retry or bool(_not_sendable(delivery))
    retry_at = None if spent else next_attempt_after(delivery.attempts, now)
    status = DeliveryStatus.SUCCEEDED if outcome.ok else DeliveryStatus.PENDING if retry_at else DeliveryStatus.FAILED
    changes = {
        "status": status,
        "response_code": outcome.response_code,
        "last_error": outcome.error,
        "next_attempt_at": retry_at,
    }
    Delivery.objects.filter(pk=delivery.pk, attempts=delivery.attempts).update(**changes)
    for name, value in changes.items():
        setattr(delivery, name, value)
    return delivery


def send_now(delivery: Delivery, *, now: datetime | None = None) -> Delivery:
    """ "Send test": one attempt while the operator waits, recorded like any other; no retries."""
    now = now or timezone.now()
    Delivery.objects.filter(pk=delivery.pk, status=DeliveryStatus.PENDING).update(next_attempt_at=now)
    return attempt(delivery.pk, retry=False, now=now)


@transaction.atomic
def retry_now(deliveries: Iterable[Delivery], *, actor: Actor, now: datetime | None = None) -> int:
    """Make failed or waiting deliveries due now (the admin's "retry now"): one more attempt each, further
    retries only for those with attempts left; how many. One a worker may be sending right now is left alone."""
    now = now or timezone.now()
    in_flight = now - timedelta(seconds=settings.WEBHOOK_TIMEOUT_SECONDS) - LEASE_MARGIN  # a worker may be sending
    ids = [
        d.pk
        for d in deliveries
        if d.status == DeliveryStatus.FAILED
        or (d.status == DeliveryStatus.PENDING and (d.last_attempt_at is None or d.last_attempt_at < in_flight))
    ]
    count = Delivery.objects.filter(pk__in=ids).update(status=DeliveryStatus.PENDING, next_attempt_at=now)
    if count:
        details = {"deliveries": [str(pk) for pk in ids]}
        record_audit(actor, "retry_delivery", target=f"{count} deliveries", details=details, now=now)
        queue(Delivery.objects.filter(pk__in=ids).only("pk", "status"))
    return count


def queue(deliveries: Iterable[Delivery]) -> None:
    """Once the caller's transaction commits, each pending delivery's attempt goes to the "deliveries" queue.

    A broker that cannot be reached is logged, not raised (`robust`): the change the caller committed stands and
    its answer is a success; the deliveries stay pending and due in the database, and the `send_due` sweep
    queues them once the broker is back."""
    ids = [str(d.pk) for d in deliveries if d.status == DeliveryStatus.PENDING]
    if not ids:
        return

    def send() -> None:
        for delivery_id in ids:
            send_delivery.delay(delivery_id)

    transaction.on_commit(send, robust=True)


# The task lives beside `queue`, which sends it, so queueing imports nothing above the outbox. Its name is the one
# it had in checkpoints/tasks.py (task_names): CELERY_TASK_ROUTES and messages already queued use it.
@shared_task(name=SEND_DELIVERY.name, acks_late=True)
def send_delivery(delivery_id: str) -> None:
    """One attempt of a delivery (queue "deliveries"); a retry is scheduled in the database, not here."""
    with suppress(Delivery.DoesNotExist):  # deleted with its old event: nothing to send
        attempt(delivery_id)


def send_due(*, now: datetime | None = None) -> int:
    """The sweep: queue every pending delivery whose time has come (retries, and first attempts a lost queue
    message never started); how many."""
    now = now or timezone.now()
    due = list(Delivery.objects.due(now).order_by("next_attempt_at").only("pk", "status")[:1000])
    queue(due)
    return len(due)


def delete_old(*, now: datetime | None = None) -> dict[str, int]:
    """Forget events (and their deliveries) older than DELIVERY_KEEP_DAYS; the counts deleted."""
    cutoff = (now or timezone.now()) - timedelta(days=settings.DELIVERY_KEEP_DAYS)
    with transaction.atomic():
        _, deliveries = Delivery.objects.filter(created_at__lt=cutoff).exclude(status=DeliveryStatus.PENDING).delete()
        _, events = (
            Event.objects.filter(created_at__lt=cutoff).exclude(deliveries__status=DeliveryStatus.PENDING).delete()
        )
    return {"deliveries": deliveries.get(Delivery._meta.label, 0), "events": events.get(Event._meta.label, 0)}
