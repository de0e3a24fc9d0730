"""The Apprise URLs a notification rule may use, and the HTTP requests they come to.

Apprise's plugins send with `requests` on their own (redirects followed, no address guard), so the console
uses Apprise only to read a URL and builds the request each allowed service expects itself, to go out through
`safe_http.send`. Other schemes are refused: their plugins open connections (SMTP, XMPP, MQTT, syslog, a
self-hosted server's API…) the guard cannot vet. Agent text is sent as plain text, escaped where the service
would read markup.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode, urlsplit
from xml.sax.saxutils import escape as xml_escape

import apprise
import orjson
from apprise.plugins.custom_form import NotifyForm
from apprise.plugins.custom_json import NotifyJSON
from apprise.plugins.custom_xml import NotifyXML
from apprise.plugins.discord import NotifyDiscord
from apprise.plugins.ntfy import NotifyNtfy, NtfyAuth, NtfyMode, NtfyPriority
from apprise.plugins.telegram import NotifyTelegram

from .escaping import discord_text, quiet_mentions
from .safe_http import Outgoing, UnsafeTarget, check_target

DISCORD_MAX = 2000  # characters of a Discord message's content
TELEGRAM_MAX = 4096
HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110's token
CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # a tab may fold inside a value; CR, LF, NUL may not


class UnusableUrl(Exception):
    """An Apprise URL the console cannot or will not send to; the message says why, for the form."""


def _base(plugin: Any) -> str:
    port = f":{plugin.port}" if isinstance(plugin.port, int) else ""
    return f"{'https' if plugin.secure else 'http'}://{plugin.host}{port}"


def _with_query(url: str, params: dict[str, Any]) -> str:
    return f"{url}{'&' if '?' in url else '?'}{urlencode(params)}" if params else url


def _auth(plugin: Any) -> tuple[str, str] | None:
    return (plugin.user, plugin.password or "") if plugin.user else None


def _json(plugin: Any, title: str, body: str) -> list[Outgoing]:
    """NotifyJSON's request: its payload (with the URL's `:key=value` extras and renames), headers, params."""
    payload: dict[str, Any] = {"version": "1.0", "title": title, "message": body, "attachments": [], "type": "info"}
    for key, value in plugin.payload_extras.items():
        if key in payload:
            moved = payload.pop(key)
            if value:
                payload[value] = moved
        else:
            payload[key] = value
    url = _with_query(_base(plugin) + plugin.fullpath, plugin.params)
    headers = {"Content-Type": "application/json", **plugin.headers}
    return [Outgoing(url, orjson.dumps(payload), headers, plugin.method, _auth(plugin))]


def _mapped(plugin: Any, fields: dict[str, str]) -> dict[str, str]:
    """The form's and XML's fields under the names the URL's payload map gives them (an empty name drops one)."""
    return {plugin.payload_map[key]: value for key, value in fields.items() if plugin.payload_map[key]}


def _form(plugin: Any, title: str, body: str) -> list[Outgoing]:
    payload = _mapped(plugin, {"version": "1.0", "title": title, "message": body, "type": "info"})
    payload.update(plugin.payload_extras)
    url = _base(plugin) + plugin.fullpath
    if plugin.method == "GET":  # as NotifyForm: the payload goes in the query
        query = _with_query(url, {**payload, **plugin.params})
        return [Outgoing(query, b"", dict(plugin.headers), "GET", _auth(plugin))]
    headers = {"Content-Type": "application/x-www-form-urlencoded", **plugin.headers}
    return [
        Outgoing(_with_query(url, plugin.params), urlencode(payload).encode(), headers, plugin.method, _auth(plugin))
    ]


def _xml(plugin: Any, title: str, body: str) -> list[Outgoing]:
    fields = {"Version": plugin.xsd_ver, "Subject": title, "Message": body, "MessageType": "info"}
    elements = {**_mapped(plugin, fields), **plugin.payload_extras}
    core = "".join(f"<{key}>{xml_escape(str(value))}</{key}>" for key, value in elements.items())  # keys: [\w-]
    schema = f' xmlns:xsi="{plugin.xsd_url}"' if plugin.xsd_url else ""
    document = plugin.payload.replace("{{XSD_URL}}", schema).replace("{{CORE}}", core).replace("{{ATTACHMENTS}}", "")
    url = _with_query(_base(plugin) + plugin.fullpath, plugin.params)
    headers = {"Content-Type": "application/xml", **plugin.headers}
    return [Outgoing(url, document.encode(), headers, plugin.method, _auth(plugin))]


def _ntfy(plugin: Any, title: str, body: str) -> list[Outgoing]:
    """One JSON publish per topic, plain text (no X-Markdown): ntfy.sh for ntfy://topic, else the URL's host."""
    if not plugin.topics:
        raise UnusableUrl("Name at least one ntfy topic.")
    headers = {"Content-Type": "application/json"}
    auth = None
    if plugin.mode == NtfyMode.CLOUD:
        base = NotifyNtfy.cloud_notify_url
    else:
        base = _base(plugin)
        if plugin.auth == NtfyAuth.TOKEN and plugin.token:
            headers["Authorization"] = f"Bearer {plugin.token}"
        else:
            auth = _auth(plugin)
    if plugin.priority != NtfyPriority.NORMAL:
        headers["X-Priority"] = plugin.priority
    return [
        Outgoing(base, orjson.dumps({"topic": topic, "title": title, "message": body}), headers, "POST", auth)
        for topic in plugin.topics
    ]


def _discord(plugin: Any, title: str, body: str) -> list[Outgoing]:
    """The webhook's plain message: escaped Markdown, and no mention may ping (allowed_mentions)."""
    content = f"**{discord_text(title)}**\n{discord_text(body)}"
    if len(content) > DISCORD_MAX:
        content = content[: DISCORD_MAX - 1].rstrip("\\") + "…"
    payload: dict[str, Any] = {"content": content, "allowed_mentions": {"parse": []}}
    if plugin.user:
        payload["username"] = plugin.user
    url = f"{NotifyDiscord.notify_url}/{plugin.webhook_id}/{plugin.webhook_token}"
    url = _with_query(url, {"thread_id": plugin.thread_id} if plugin.thread_id else {})
    return [Outgoing(url, orjson.dumps(payload), {"Content-Type": "application/json"})]


def _telegram(plugin: Any, title: str, body: str) -> list[Outgoing]:
    """sendMessage without parse_mode: Telegram shows the text as it is (mentions quietened)."""
    if not plugin.targets:
        raise UnusableUrl("Name the Telegram chat to send to (tgram://bot_token/chat_id).")
    text = quiet_mentions("\n".join(part for part in (title, body) if part))[:TELEGRAM_MAX]
    url = f"{NotifyTelegram.notify_url}{plugin.bot_token}/sendMessage"
    outgoing = []
    for chat_id, topic in plugin.targets:
        payload: dict[str, Any] = {"chat_id": chat_id, "text": text, "disable_web_page_preview": True}
        payload["disable_notification"] = bool(plugin.silent)
        if topic:
            payload["message_thread_id"] = topic
        outgoing.append(Outgoing(url, orjson.dumps(payload), {"Content-Type": "application/json"}))
    return outgoing


BUILDERS: dict[type, Callable[[Any, str, str], list[Outgoing]]] = {
    NotifyJSON: _json,
    NotifyForm: _form,
    NotifyXML: _xml,
    NotifyNtfy: _ntfy,
    NotifyDiscord: _discord,
    NotifyTelegram: _telegram,
}
ALLOWED_SCHEMES = ("json", "jsons", "xml", "xmls", "form", "forms", "ntfy", "ntfys", "discord", "tgram")
ALLOWED_TEXT = ", ".join(f"{scheme}://" for scheme in ALLOWED_SCHEMES)


def scheme_refusal(url: str) -> str:
    """Why the console never sends to `url`'s scheme, or "" when it may (the URL itself is not read)."""
    scheme = urlsplit(url).scheme.lower()
    if scheme in ALLOWED_SCHEMES:
        return ""
    named = f"{scheme}:// URLs are" if scheme else "This URL is"
    return (
        f"{named} not sent by this console: its Apprise rules take {ALLOWED_TEXT} (others connect where the "
        "console's address guard cannot check). Use the Email channel for mail."
    )


def requests_for(url: str, title: str, body: str) -> list[Outgoing]:
    """The requests that send `title` and `body` to the Apprise URL `url`; UnusableUrl when it cannot be sent."""
    refused = scheme_refusal(url)
    if refused:
        raise UnusableUrl(refused)
    plugin = apprise.Apprise.instantiate(url, suppress_exceptions=True)
    builder = BUILDERS.get(type(plugin)) if plugin else None
    if plugin is None or builder is None:
        raise UnusableUrl("Apprise does not understand this URL (see its list of services and their URLs).")
    outgoing = builder(plugin, title, body)
    for request in outgoing:
        for name, value in request.headers.items():
            if not HEADER_NAME.fullmatch(name) or CONTROL.search(value):
                raise UnusableUrl(f"The header {name!r} of this URL holds a line break or a character not allowed.")
    return outgoing


def refusal(url: str) -> str:
    """Why a rule may not use the Apprise URL `url` ("" when it may): an unusable URL, or a host the guard
    refuses. Run when the rule is saved; sending runs the same checks again."""
    try:
        for outgoing in requests_for(url, "", ""):
            check_target(outgoing.url)
    except UnusableUrl as exc:
        return str(exc)
    except UnsafeTarget as exc:
        return str(exc).removeprefix("url: ")
    return ""
