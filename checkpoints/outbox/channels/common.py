"""What the channels share: the message every channel says, and the check of a URL target.

Every channel but the signed webhook (which sends the event's JSON) says the same thing (`message_of`): a one-line
title, a few lines of detail, and a link back to the console (absolute, from CONSOLE_BASE_URL, as the event's data
carries it). Titles and details hold agent text (session titles, alert messages, reviewers' comments): each sender
escapes them for where they go.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator

from ...models import Event, EventType
from ..escaping import one_line
from ..safe_http import UnsafeTarget
from ..safe_http import check_target as check_address
from .registry import InvalidTarget


@dataclass(frozen=True)
class Message:
    title: str
    text: str
    url: str

    @property
    def subject(self) -> str:
        """The title on one line, capped: an email's Subject header, the bold line of a chat message."""
        return one_line(self.title)

    @property
    def body(self) -> str:
        """The text, then the link: for channels with a subject line (email) or a title (Apprise)."""
        return "\n\n".join(part for part in (self.text, self.url) if part)


def _session_name(data: dict[str, Any]) -> str:
    session = data.get("session") or {}
    return str(session.get("title") or session.get("id") or "a session")


def message_of(event: Event) -> Message:
    """What a person is told about `event`, whatever the channel."""
    data = event.data or {}
    where = _session_name(data)
    if event.type in (EventType.ALERT_OPENED, EventType.ALERT_ESCALATED, EventType.ALERT_RESOLVED):
        alert = data.get("alert") or {}
        what = f"{alert.get('kind', 'drift')} alert ({alert.get('severity', '?')})"
        verb = {"alert.opened": "opened", "alert.escalated": "escalated", "alert.resolved": "resolved"}[event.type]
        if event.type == EventType.ALERT_ESCALATED and data.get("previous_severity"):
            verb = f"escalated from {data['previous_severity']}"
        return Message(f"{what} {verb} in {where}", str(alert.get("message", "")), str(alert.get("url", "")))
    if event.type in (EventType.PHASE_WAITING, EventType.PHASE_FEEDBACK):
        phase = data.get("phase") or {}
        named = f"Phase {phase.get('number', '?')} {phase.get('name', '')}".rstrip()
        if event.type == EventType.PHASE_WAITING:
            return Message(f"{named} of {where} waits for your approval", "Review it:", str(phase.get("url", "")))
        feedback = data.get("feedback") or {}
        by = f" by {feedback['reviewer']}" if feedback.get("reviewer") else ""
        title = f"{named} of {where}: {feedback.get('action', 'reviewed')}{by}"
        return Message(title, str(feedback.get("comments", "")), str(phase.get("url", "")))
    if event.type in (EventType.INTERRUPT_WAITING, EventType.INTERRUPT_ANSWERED):
        return _interrupt_message(event.type, data, where)
    if event.type == EventType.JOB_FAILED:
        job = data.get("job") or {}
        return Message(f"Job {job.get('name', '?')} failed", str(job.get("error", "")), str(job.get("url", "")))
    if event.type == EventType.IMPORT_FAILED:
        imported = data.get("import") or {}
        title = f"Import {imported.get('id', '')} failed".replace("  ", " ")
        return Message(title, str(imported.get("error", "")), str(imported.get("url", "")))
    if event.type == EventType.RECOVERY_FINISHED:
        return _recovery_message(data)
    if event.type == EventType.PING:
        return Message("Test notification from Checkpoint Console", str(data.get("message", "")), _home())
    return Message(f"{event.type} in {where}", "", str((data.get("session") or {}).get("url") or _home()))


def _interrupt_message(type: str, data: dict[str, Any], where: str) -> Message:
    if type == EventType.INTERRUPT_WAITING:
        interrupts = data.get("interrupts") or {}
        nodes = ", ".join(str(node) for node in interrupts.get("nodes") or []) or "a node"
        return Message(f"{where} waits for your answer ({nodes})", "Answer it:", str(interrupts.get("url", "")))
    interrupt = data.get("interrupt") or {}
    by = f" by {interrupt['answered_by']}" if interrupt.get("answered_by") else ""
    title = f"Interrupt of {interrupt.get('node') or 'a node'} in {where} answered{by}"
    return Message(title, str(interrupt.get("comment", "")), str(interrupt.get("url", "")))


def _recovery_message(data: dict[str, Any]) -> Message:
    recovery = data.get("recovery") or {}
    counts = recovery.get("counts") or {}
    done = counts.get("restored", 0) + counts.get("forked", 0)
    verb = "forked" if recovery.get("action") == "fork" else "restored"
    title = f"Recovery {recovery.get('id', '')} finished: {done} {verb}, {counts.get('skipped', 0)} skipped, {counts.get('failed', 0)} failed"
    text = f"{recovery.get('actor', 'someone')}: {recovery.get('reason', '')}"
    return Message(title, text, str(recovery.get("url", "")))


def _home() -> str:
    return f"{settings.CONSOLE_BASE_URL}/"


def check_url(target: str) -> None:
    """An http(s) URL whose host the outbound guard accepts (a private address only when WEBHOOK_ALLOW_PRIVATE)."""
    try:
        URLValidator(schemes=["http", "https"])(target)
        check_address(target)
    except ValidationError as exc:
        raise InvalidTarget("Enter an http:// or https:// URL.") from exc
    except UnsafeTarget as exc:
        raise InvalidTarget(str(exc).removeprefix("url: ")) from exc
