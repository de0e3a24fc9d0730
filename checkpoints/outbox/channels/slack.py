"""Slack-compatible incoming webhooks (Slack's, Mattermost's, Rocket.Chat's): a POST of {"text": …} through
safe_http.send, as signed webhooks go."""

from __future__ import annotations

from urllib.parse import quote

import orjson

from ...models import Channel, Delivery
from .. import safe_http
from ..escaping import slack_text
from ..outcome import Outcome
from .common import Message, check_url, message_of
from .registry import ChannelKind


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


CHANNEL = ChannelKind(Channel.SLACK, "Slack", "the https:// URL", send=send_slack, check_target=check_url)
