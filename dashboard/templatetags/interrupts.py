"""What a waiting LangGraph thread asks, for the pages that show it beside other things (the session page)."""

from __future__ import annotations

from typing import Any

from django import template

from checkpoints.humanize import short_value
from checkpoints.models import AgentSession, SessionStatus
from checkpoints.services import lginterrupts

register = template.Library()


@register.simple_tag
def interrupt_questions(session: AgentSession) -> list[dict[str, Any]]:
    """(node, the question in one short line, answered?) of each interrupt a waiting thread's head waits on."""
    if session.status != SessionStatus.WAITING:
        return []
    return [
        {
            "node": item.node,
            "text": short_value(item.readable, 200),
            "answered": item.answer is not None,
        }
        for item in lginterrupts.pending_interrupts(session)
    ]
