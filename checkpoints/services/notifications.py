"""Notification rules (a stub until the notify branch lands)."""

from __future__ import annotations

from ..models import Delivery, Event


def deliveries_for(event: Event) -> list[Delivery]:
    """The deliveries the project's rules want for `event` (unsaved; `events.publish` saves them)."""
    return []
