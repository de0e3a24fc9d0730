"""Small display helpers shared by every console page."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django import template
from django.utils import timezone
from django.utils.safestring import SafeString

from checkpoints.humanize import plain_duration
from checkpoints.phases import render_markdown

if TYPE_CHECKING:
    from checkpoints.models import AuditEvent, Checkpoint

from ..presenters import checkpoint as checkpoint_presenter
from ..undo import UndoOffer, take_undo_offers

register = template.Library()


@register.filter
def markdown(text: str) -> SafeString:
    """An agent's markdown output as sanitised HTML (see `render_markdown`)."""
    return render_markdown(text)


@register.filter
def short_target(event: AuditEvent) -> str:
    """The event's target without its session's name, which rows show on their own."""
    return event.target.removeprefix(f"{event.session} ") if event.session_id else event.target


@register.filter
def ago(value: datetime | None) -> str:
    """'3 min ago' — compact, for tables."""
    if value is None:
        return "never"
    seconds = int((timezone.now() - value).total_seconds())
    if seconds < 0:
        return "just now"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit} ago"
    return f"{seconds} s ago"


@register.filter
def duration(value: float | timedelta | None) -> str:
    """'2 h 5 min', '3 min 7 s', 'under 1 s'."""
    if value is None:
        return "—"
    return plain_duration(value.total_seconds() if isinstance(value, timedelta) else value)


@register.filter
def until(value: datetime | None) -> str:
    """'in 23 min' — how soon a future moment comes; 'now' once it has passed."""
    if value is None:
        return "—"
    seconds = (value - timezone.now()).total_seconds()
    return f"in {plain_duration(seconds)}" if seconds >= 1 else "now"


@register.filter
def label(value: str) -> str:
    """`in_progress` → `in progress`."""
    return str(value).replace("_", " ")


@register.filter
def checkpoint_label(checkpoint: Checkpoint) -> str:
    """A checkpoint as a link names it: a LangGraph checkpoint by the nodes that wrote it, others by name or kind."""
    return checkpoint_presenter.label(checkpoint)


@register.filter
def hexdigest(value: Any) -> str:
    return bytes(value).hex() if value is not None else ""


@dataclass(frozen=True)
class _UserOn:
    user: Any
    obj: Any


@register.filter
def on(user: Any, obj: Any) -> _UserOn:
    """`user|on:checkpoint|can:"operate"`: asks `can` about the project `checkpoint` belongs to."""
    return _UserOn(user, obj)


@register.filter
def can(user_on: _UserOn, action: str) -> bool:
    """`{% if user|on:obj|can:"operate" %}`: may the user operate, triage or approve in `obj`'s project?

    Project-aware, which Django's `perms` is not: a role is held per project, so an operator elsewhere who only
    views this project gets no buttons here. A check in at least one project (the menu, a column heading) uses
    `perms.checkpoints.operate_session` instead.
    """
    codename = {"operate": "operate_session", "triage": "triage_alert", "approve": "approve_phase"}[action]
    return bool(user_on.user.has_perm(f"checkpoints.{codename}", user_on.obj))


@register.simple_tag(takes_context=True)
def undo_offers(context: template.Context) -> list[UndoOffer]:
    """`{% undo_offers as offers %}`: the restores this visitor may undo, each shown once (dashboard/undo.py)."""
    request = context.get("request")
    return take_undo_offers(request) if request is not None else []
