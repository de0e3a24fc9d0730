"""Senders of the notification channels other than the signed webhook (a stub until the notify branch lands)."""

from __future__ import annotations

from collections.abc import Callable

from ..models import Delivery
from .outcome import Outcome

SENDERS: dict[str, Callable[[Delivery], Outcome]] = {}
