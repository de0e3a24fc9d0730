"""Apprise URLs of the services apprise_urls can carry (JSON, XML and form posts, ntfy, Discord, Telegram): the
console builds each request itself and sends it through safe_http.send; every other scheme is refused, when a
rule is saved and again before each attempt."""

from __future__ import annotations

from ...models import Channel, Delivery
from .. import safe_http
from ..apprise_urls import ALLOWED_SCHEMES, UnusableUrl, refusal, requests_for, scheme_refusal
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


def schemes_text() -> str:
    """The schemes apprise_urls sends, as the form's help names them ("json(s)://" for json:// and jsons://):
    the help can never offer a scheme the check refuses."""
    plain = [scheme for scheme in ALLOWED_SCHEMES if not (scheme.endswith("s") and scheme[:-1] in ALLOWED_SCHEMES)]
    shown = [f"{scheme}(s)://" if f"{scheme}s" in ALLOWED_SCHEMES else f"{scheme}://" for scheme in plain]
    return f"{', '.join(shown[:-1])} or {shown[-1]} URL"


CHANNEL = ChannelKind(
    Channel.APPRISE,
    "Apprise",
    schemes_text(),
    send=send_apprise,
    check_target=check_apprise_url,
    refusal_at_send=scheme_refusal,  # a rule saved before its scheme was refused: no retry will help
)
