"""Sending deliveries: signed webhook POSTs, the SSRF guard, attempts claimed once, retries scheduled in the database.

A delivery's first attempt is queued when its event commits (`queue`); a failed attempt sets `next_attempt_at`
by `RETRY_DELAYS` and the `send_due_deliveries` beat sweep picks it up then, with the same delivery id, until it
succeeds or `WEBHOOK_MAX_ATTEMPTS` are spent. Receivers may see an attempt twice (a worker killed mid-send is
retried after its lease): the X-Checkpoint-Delivery header is the id to drop duplicates by.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import ipaddress
import logging
import socket
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import orjson
from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from ..models import Channel, Delivery, DeliveryStatus, Event
from . import channels
from .audit import Actor, InvalidInput, record_audit
from .outcome import Outcome

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
RESPONSE_KEPT = 1024  # bytes of a receiver's answer read (and dropped): enough to end the exchange cleanly
USER_AGENT = "CheckpointConsole-Webhooks/1"


class UnsafeTarget(InvalidInput):
    """A receiver URL the console refuses to call: not http(s), or an address inside the network."""

    def __init__(self, message: str) -> None:
        super().__init__("url", message)


def body_of(event: Event) -> bytes:
    """The JSON every delivery of `event` sends, byte for byte the same on each attempt (the signature covers it)."""
    created_at = event.created_at.isoformat().replace("+00:00", "Z")
    body = {"id": str(event.id), "type": event.type, "created_at": created_at, "data": event.data}
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)  # PostgreSQL's jsonb keeps no key order


def signature_header(secret: str, body: bytes, timestamp: int) -> str:
    """`t=<unix time>,v1=<hex HMAC-SHA256 of "<t>." + body>`: the timestamp is signed so a replay can be refused."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def check_target(url: str) -> None:
    """Refuse (UnsafeTarget) a URL that is not http(s), or whose host resolves to a loopback, private, link-local
    or reserved address unless WEBHOOK_ALLOW_PRIVATE: run when an endpoint or rule is saved and again at send."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UnsafeTarget("The URL must start with http:// or https:// and name a host.")
    try:
        port = parts.port
    except ValueError as exc:
        raise UnsafeTarget(f"The URL's port is not valid: {exc}.") from exc
    vetted_addresses(parts.hostname, port or (443 if parts.scheme == "https" else 80))


def vetted_addresses(host: str, port: int) -> list[tuple[Any, ...]]:
    """The addresses `host` resolves to, all of them public (or WEBHOOK_ALLOW_PRIVATE), else UnsafeTarget.

    Sending connects to these very addresses, so a name that resolves elsewhere between the check and the
    connection (DNS rebinding) cannot reach inside the network."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError, ValueError) as exc:
        raise UnsafeTarget(f"The host {host} could not be resolved ({exc}).") from exc
    addresses = [info[4] for info in infos]
    if not settings.WEBHOOK_ALLOW_PRIVATE:
        for address in addresses:
            ip = ipaddress.ip_address(str(address[0]).split("%")[0])
            if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
                ip = ip.ipv4_mapped
            if not ip.is_global or ip.is_multicast:
                raise UnsafeTarget(
                    f"{host} resolves to {ip}, a loopback, private, link-local or reserved address: the console "
                    "does not call into its own network (WEBHOOK_ALLOW_PRIVATE=1 allows it)."
                )
    return addresses


def _connect_vetted(address: tuple[str, int], timeout: float | None = None, *args: Any) -> socket.socket:
    """`socket.create_connection` for http.client, to the vetted addresses of the host only."""
    host, port = address
    error: OSError | None = None
    for sockaddr in vetted_addresses(host, port):
        try:
            return socket.create_connection((sockaddr[0], port), timeout)
        except OSError as exc:
            error = exc
    raise error or OSError(f"no address for {host}")


def post(url: str, body: bytes, headers: dict[str, str]) -> int:
    """POST `body` to `url` through the SSRF guard, without proxies or redirects; the response's status."""
    check_target(url)
    parts = urlsplit(url)
    https = parts.scheme == "https"
    port = parts.port or (443 if https else 80)
    timeout = settings.WEBHOOK_TIMEOUT_SECONDS
    connection_class = http.client.HTTPSConnection if https else http.client.HTTPConnection
    connection = connection_class(parts.hostname or "", port, timeout=timeout)
    connection._create_connection = _connect_vetted  # type: ignore[attr-defined]
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        connection.request("POST", path, body=body, headers={"User-Agent": USER_AGENT, **headers})
        response = connection.getresponse()
        response.read(RESPONSE_KEPT)
        return response.status
    finally:
        connection.close()


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return f"No answer within {settings.WEBHOOK_TIMEOUT_SECONDS} s (timed out)."
    return f"{type(exc).__name__}: {exc}"


def send_signed(delivery: Delivery) -> Outcome:
    """POST the event's body to the delivery's URL, signed with its endpoint's (or rule's) secret."""
    body = body_of(delivery.event)
    owner = delivery.endpoint or delivery.rule
    headers = {
        "Content-Type": "application/json",
        "X-Checkpoint-Delivery": str(delivery.pk),
        "X-Checkpoint-Event": delivery.event.type,
    }
    if owner is not None and owner.secret:
        headers["X-Checkpoint-Signature"] = signature_header(owner.secret, body, int(time.time()))
    try:
        code = post(delivery.target, body, headers)
    except UnsafeTarget as exc:
        return Outcome(ok=False, error=str(exc).removeprefix("url: "))
    except (OSError, http.client.HTTPException) as exc:
        return Outcome(ok=False, error=_describe(exc))
    if 200 <= code < 300:
        return Outcome(ok=True, response_code=code)
    return Outcome(ok=False, response_code=code, error=f"The receiver answered HTTP {code}.")


SENDERS: dict[str, Callable[[Delivery], Outcome]] = {Channel.WEBHOOK: send_signed, **channels.SENDERS}


def _not_sendable(delivery: Delivery) -> str:
    """Why `delivery` must not go out any more, or "" when it may."""
    if delivery.endpoint is not None and delivery.endpoint.deleted_at is not None:
        return "Its webhook endpoint was deleted; not sent."
    if delivery.channel == Channel.WEBHOOK and delivery.endpoint is None and delivery.rule is None:
        return "Its webhook endpoint or rule was deleted; not sent."
    if delivery.channel not in SENDERS:
        return f"No sender for the {delivery.channel} channel."
    return ""


def _send(delivery: Delivery) -> Outcome:
    reason = _not_sendable(delivery)
    if reason:
        return Outcome(ok=False, error=reason)
    try:
        return SENDERS[delivery.channel](delivery)
    except Exception as exc:  # a sender's bug is this attempt's failure, recorded, not a lost delivery
        logger.exception("sending delivery %s failed", delivery.pk)
        return Outcome(ok=False, error=_describe(exc))


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
    delivery = Delivery.objects.select_related("event", "endpoint", "rule").get(pk=delivery_id)
    if not claimed:
        return delivery
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
    """Make failed or pending deliveries due now (the admin's "retry now"): one more attempt each, further
    retries only for those with attempts left; how many."""
    now = now or timezone.now()
    ids = [d.pk for d in deliveries if d.status in (DeliveryStatus.PENDING, DeliveryStatus.FAILED)]
    count = Delivery.objects.filter(pk__in=ids).update(status=DeliveryStatus.PENDING, next_attempt_at=now)
    if count:
        details = {"deliveries": [str(pk) for pk in ids]}
        record_audit(actor, "retry_delivery", target=f"{count} deliveries", details=details, now=now)
        queue(Delivery.objects.filter(pk__in=ids).only("pk", "status"))
    return count


def queue(deliveries: Iterable[Delivery]) -> None:
    """Once the caller's transaction commits, each pending delivery's attempt goes to the "deliveries" queue."""
    ids = [str(d.pk) for d in deliveries if d.status == DeliveryStatus.PENDING]
    if not ids:
        return

    def send() -> None:
        from .. import tasks  # the tasks call these services: imported here to break that cycle

        for delivery_id in ids:
            tasks.send_delivery.delay(delivery_id)

    transaction.on_commit(send)


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
