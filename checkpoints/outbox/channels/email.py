"""Email to a list of addresses, through Django's mail settings (the relay the operator configured, trusted: a
rule only chooses the recipients)."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.mail import send_mail
from django.core.validators import validate_email

from ...models import Channel, Delivery
from ..outcome import Outcome
from .common import message_of
from .registry import ChannelKind, InvalidTarget

ERROR_MAX = 1000
MAX_ADDRESSES = 20


def send_email(delivery: Delivery) -> Outcome:
    """One email to the addresses of the delivery's target (comma-separated), through Django's mail settings."""
    message = message_of(delivery.event)
    try:
        send_mail(message.subject, message.body, settings.DEFAULT_FROM_EMAIL, addresses(delivery.target))
    except (OSError, ValueError) as exc:  # smtplib's errors are OSErrors
        return Outcome(ok=False, error=str(exc)[:ERROR_MAX])
    return Outcome(ok=True)


def addresses(target: str) -> list[str]:
    return [address.strip() for address in target.split(",") if address.strip()]


def check_addresses(target: str) -> None:
    """One to MAX_ADDRESSES valid addresses, separated by commas."""
    found = addresses(target)
    if not found:
        raise InvalidTarget("Give at least one email address.")
    if len(found) > MAX_ADDRESSES:
        raise InvalidTarget(f"At most {MAX_ADDRESSES} addresses.")
    for address in found:
        try:
            validate_email(address)
        except ValidationError as exc:
            raise InvalidTarget(f"{address!r} is not an email address.") from exc


CHANNEL = ChannelKind(
    Channel.EMAIL, "Email", "addresses separated by commas", send=send_email, check_target=check_addresses
)
