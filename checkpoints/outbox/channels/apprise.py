"""Apprise URLs of the services apprise_urls can carry (JSON, XML and form posts, ntfy, Discord, Telegram): the
console builds each request itself and sends it through safe_http.send; every other scheme is refused, when a
rule is saved and again before each attempt."""

from __future__ import annotations

from ...models import Channel, Delivery
from .. import safe_http
from ..apprise_urls import UnusableUrl, refusal, requests_for, scheme_refusal
from ..outcome import Outcome
from .common import message_of
from .registry import ChannelKind, InvalidTarget


def send_apprise(delivery: Delivery) -> Outcome:
    """The requests apprise_urls builds for the rule's URL, each through the guard; the first failure ends it."""
    message = message_of(delivery.event)
    try:
        outgoing = requests_for(delivery.target, message.subject, message.body)
    except UnusableUrl as exc:
        return Outcome(ok=False, error=str(exc))
    outcome = Outcome(ok=False, error="Nothing to send.")
    for request in outgoing:
        outcome = safe_http.send(request)
        if not outcome.ok:
            break
    return outcome


def check_apprise_url(target: str) -> None:
    """A URL of an allowed scheme that Apprise reads, whose every request's host the outbound guard accepts."""
    refused = refusal(target)
    if refused:
        raise InvalidTarget(refused)


CHANNEL = ChannelKind(
    Channel.APPRISE,
    "Apprise",
    "json(s)://, xml(s)://, form(s)://, ntfy(s)://, discord:// or tgram:// URL",
    send=send_apprise,
    check_target=check_apprise_url,
    refusal_at_send=scheme_refusal,  # a rule saved before its scheme was refused: no retry will help
)
