"""Senders of the notification channels besides the signed webhook: Slack-compatible incoming webhooks, email and
any Apprise URL. Each takes a delivery and returns its Outcome; `deliveries.attempt` records it and retries.

Every channel says the same thing (`message_of`): a one-line title, a few lines of detail, and a link back to
the console (absolute, from CONSOLE_BASE_URL, as the event's data carries it).
"""

from __future__ import annotations

import http.client
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import apprise
import orjson
from django.conf import settings
from django.core.mail import send_mail

from ..models import Channel, Delivery, Event, EventType
from .outcome import Outcome
from .safe_http import UnsafeTarget, post, vetted_addresses

ERROR_MAX = 1000
# Apprise schemas that post to a host the URL names (plain HTTP notifications): that host passes the same
# private-address guard as a webhook's. Service schemas (slack://, discord://, tgram://…) reach their service.
APPRISE_HOSTED = frozenset({"json", "jsons", "xml", "xmls", "form", "forms"})


@dataclass(frozen=True)
class Message:
    title: str
    text: str
    url: str

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


def _home() -> str:
    return f"{settings.CONSOLE_BASE_URL}/"


def send_slack(delivery: Delivery) -> Outcome:
    """POST {"text": …} as Slack's incoming webhooks (and Mattermost's, Rocket.Chat's) take it; `<url|label>` is
    their link markup. Through the webhooks' SSRF guard, like a signed webhook."""
    message = message_of(delivery.event)
    lines = [f"*{message.title}*", message.text, f"<{message.url}|Open in Checkpoint Console>"]
    body = orjson.dumps({"text": "\n".join(line for line in lines if line)})
    try:
        code = post(delivery.target, body, {"Content-Type": "application/json"})
    except UnsafeTarget as exc:
        return Outcome(ok=False, error=str(exc).removeprefix("url: "))
    except (OSError, http.client.HTTPException) as exc:
        return Outcome(ok=False, error=f"{type(exc).__name__}: {exc}"[:ERROR_MAX])
    if 200 <= code < 300:
        return Outcome(ok=True, response_code=code)
    return Outcome(ok=False, response_code=code, error=f"The receiver answered HTTP {code}.")


def send_email(delivery: Delivery) -> Outcome:
    """One email to the addresses of the delivery's target (comma-separated), through Django's mail settings."""
    message = message_of(delivery.event)
    try:
        send_mail(message.title, message.body, settings.DEFAULT_FROM_EMAIL, addresses(delivery.target))
    except (OSError, ValueError) as exc:  # smtplib's errors are OSErrors
        return Outcome(ok=False, error=str(exc)[:ERROR_MAX])
    return Outcome(ok=True)


def addresses(target: str) -> list[str]:
    return [address.strip() for address in target.split(",") if address.strip()]


def send_apprise(delivery: Delivery) -> Outcome:
    """Any service Apprise reaches by URL (Teams, Discord, ntfy, Telegram, mailto://…)."""
    refused = refusal(delivery.target)
    if refused:
        return Outcome(ok=False, error=refused)
    notifier = apprise.Apprise()
    if not notifier.add(delivery.target):
        return Outcome(ok=False, error="Apprise does not understand this URL.")
    message = message_of(delivery.event)
    with apprise.LogCapture(level=logging.WARNING) as log:
        sent = notifier.notify(title=message.title, body=message.body)
        said = log.getvalue().strip()
    return Outcome(ok=bool(sent), error="" if sent else (said or "Apprise could not send it.")[-ERROR_MAX:])


def refusal(apprise_url: str) -> str:
    """Why the SSRF guard refuses an Apprise URL's host, or "" (also for the schemas of a service's own host)."""
    parts = urlsplit(apprise_url)
    if parts.scheme.lower() not in APPRISE_HOSTED or not parts.hostname:
        return ""
    try:
        vetted_addresses(parts.hostname, parts.port or (443 if parts.scheme.endswith("s") else 80))
    except (UnsafeTarget, ValueError) as exc:  # ValueError: a port out of range
        return str(exc).removeprefix("url: ")
    return ""


SENDERS: dict[str, Callable[[Delivery], Outcome]] = {
    Channel.SLACK: send_slack,
    Channel.EMAIL: send_email,
    Channel.APPRISE: send_apprise,
}
