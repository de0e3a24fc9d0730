"""Exports: a session's checkpoints downloaded as files of a format (the files come from `sources.formats`)."""

from __future__ import annotations

from django.db import transaction

from ..audit import Actor, record_audit
from ..models import AgentSession, AuditEvent


@transaction.atomic
def record_export(session: AgentSession, *, actor: Actor, format_name: str) -> AuditEvent:
    """A session downloaded in a format: the files leave the console, so who took them is kept."""
    return record_audit(actor, "export", session=session, details={"format": format_name})
