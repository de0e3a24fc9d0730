"""Senders of the notification channels besides the signed webhook: Slack-compatible incoming webhooks, email and
the Apprise URLs apprise_urls allows. Each takes a delivery and returns its Outcome; `deliveries.attempt` records
it and retries. Slack and Apprise go out through safe_http.send, as signed webhooks do; email through Django's
mail settings (the relay the operator configured, trusted).

Every channel says the same thing (`message_of`): a one-line title, a few lines of detail, and a link back to
the console (absolute, from CONSOLE_BASE_URL, as the event's data carries it). Titles and details hold agent
text (session titles, alert messages, reviewers' comments): each sender escapes them for where they go.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import orjson
from django.conf import settings
from django.core.mail import send_mail

from ..models import Channel, Delivery, Event, EventType
from . import safe_http
from .apprise_urls import UnusableUrl, requests_for
from .escaping import one_line, slack_text
from .outcome import Outcome

ERROR_MAX = 1000


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


def _home() -> str:
    return f"{settings.CONSOLE_BASE_URL}/"


def slack_lines(message: Message) -> list[str]:
    """The bold title, the detail and our link, in Slack's mrkdwn: agent text escaped, `<url|label>` ours alone."""
    link = quote(message.url, safe=":/?#[]@!$&'()*+,;=%~")  # no `|`, `<`, `>` or space can end the link early
    return [f"*{slack_text(message.subject)}*", slack_text(message.text), f"<{link}|Open in Checkpoint Console>"]


def send_slack(delivery: Delivery) -> Outcome:
    """POST {"text": …} as Slack's incoming webhooks (and Mattermost's, Rocket.Chat's) take it."""
    text = "\n".join(line for line in slack_lines(message_of(delivery.event)) if line)
    # No previews: Slack would fetch the pages agent text links to.
    body = orjson.dumps({"text": text, "unfurl_links": False, "unfurl_media": False})
    return safe_http.send(safe_http.Outgoing(delivery.target, body, {"Content-Type": "application/json"}))


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


SENDERS: dict[str, Callable[[Delivery], Outcome]] = {
    Channel.SLACK: send_slack,
    Channel.EMAIL: send_email,
    Channel.APPRISE: send_apprise,
}
