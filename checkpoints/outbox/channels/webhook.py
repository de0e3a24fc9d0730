"""The signed webhook: the event's JSON body (the one event webhooks get), POSTed through safe_http.send with
`X-Checkpoint-Signature`, an HMAC of the body under the endpoint's or the rule's secret."""

from __future__ import annotations

import hashlib
import hmac
import time
from datetime import UTC, datetime

import orjson

from ...models import Channel, Delivery, Event
from .. import safe_http
from ..outcome import Outcome
from .common import check_url
from .registry import ChannelKind


def iso_time(moment: datetime) -> str:
    """A time as receivers read it: ISO 8601 in UTC, with a Z."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def body_of(event: Event) -> bytes:
    """The JSON every delivery of `event` sends, byte for byte the same on each attempt (the signature covers it)."""
    body = {"id": str(event.id), "type": event.type, "created_at": iso_time(event.created_at), "data": event.data}
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)  # PostgreSQL's jsonb keeps no key order


def signature_header(secret: str, body: bytes, timestamp: int) -> str:
    """`t=<unix time>,v1=<hex HMAC-SHA256 of "<t>." + body>`: the timestamp is signed so a replay can be refused."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


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
    return safe_http.send(safe_http.Outgoing(delivery.target, body, headers))


CHANNEL = ChannelKind(
    Channel.WEBHOOK, "Signed webhook", "the https:// URL", send=send_signed, check_target=check_url, signed=True
)
