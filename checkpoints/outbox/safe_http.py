"""The one way out: every request the console makes for a webhook or a notification rule (signed webhooks, Slack,
Apprise) goes through `send`, behind an SSRF guard.

A URL is refused (UnsafeTarget) when it is not http(s) or its host resolves to a loopback, private, link-local,
shared or reserved address, unless WEBHOOK_ALLOW_PRIVATE: checked when an endpoint or rule is saved and again
at every send. A send resolves the host once and connects only to the addresses it vetted (a name that
re-resolves elsewhere meanwhile, DNS rebinding, cannot reach inside). IPv6 forms that carry an IPv4 address
(mapped, compatible, NAT64, 6to4) are judged by that address. No proxies; no redirects: a 3xx is a failed
attempt whose error names where it pointed.
"""

from __future__ import annotations

import base64
import http.client
import ipaddress
import socket
from dataclasses import dataclass, field
from functools import partial
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

from ..audit import InvalidInput
from .outcome import Outcome

RESPONSE_KEPT = 1024  # bytes of a receiver's answer read (and dropped): enough to end the exchange cleanly
USER_AGENT = "CheckpointConsole-Webhooks/1"
ERROR_MAX = 1000
LOCATION_SHOWN = 300

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
# IPv6 prefixes whose last 32 bits are an IPv4 address a gateway forwards to (mapped ::ffff:0:0/96 and 6to4
# 2002::/16 have their own accessors in ipaddress).
EMBEDDING_LOW_32 = (ipaddress.IPv6Network("64:ff9b::/96"), ipaddress.IPv6Network("::/96"))  # NAT64, compatible
# Special-purpose blocks Python 3.11's is_global lets through: IETF protocol assignments (192.0.0.8 and the
# anycast .9/.10 included: nothing a rule needs to reach), the deprecated 6to4 relay anycast, site-local
# fec0::/10, and local-use NAT64 (RFC 8215), where the network chooses where the IPv4 address sits.
NOT_PUBLIC = (
    ipaddress.IPv4Network("192.0.0.0/24"),
    ipaddress.IPv4Network("192.88.99.0/24"),
    ipaddress.IPv6Network("64:ff9b:1::/48"),
    ipaddress.IPv6Network("fec0::/10"),
)


class UnsafeTarget(InvalidInput):
    """A receiver URL the console refuses to call: not http(s), or an address inside the network."""

    def __init__(self, message: str) -> None:
        super().__init__("url", message)


@dataclass(frozen=True)
class Outgoing:
    """One HTTP request a sender wants made; `auth` is (user, password) for HTTP Basic."""

    url: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    method: str = "POST"
    auth: tuple[str, str] | None = None


def judged_address(ip: IPAddress) -> IPAddress:
    """The address a connection to `ip` really reaches, for the guard: the IPv4 address an IPv6 form embeds."""
    if isinstance(ip, ipaddress.IPv4Address):
        return ip
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if int(ip) > 1 and any(ip in network for network in EMBEDDING_LOW_32):  # :: and ::1 are themselves
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip


def is_public(ip: IPAddress) -> bool:
    judged = judged_address(ip)
    if not judged.is_global or judged.is_multicast or judged.is_reserved:
        return False
    return not any(judged.version == net.version and judged in net for net in NOT_PUBLIC)


def _parts(url: str) -> tuple[str, int, bool]:
    """Host, port and https of an http(s) URL, else UnsafeTarget."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UnsafeTarget("The URL must start with http:// or https:// and name a host.")
    https = parts.scheme == "https"
    try:
        port = parts.port or (443 if https else 80)
    except ValueError as exc:
        raise UnsafeTarget(f"The URL's port is not valid: {exc}.") from exc
    return parts.hostname, port, https


def check_target(url: str) -> None:
    """Refuse (UnsafeTarget) a URL that is not http(s), or whose host resolves to a loopback, private, link-local
    or reserved address unless WEBHOOK_ALLOW_PRIVATE: run when an endpoint or rule is saved and again at send."""
    vetted_addresses(*_parts(url)[:2])


def vetted_addresses(host: str, port: int) -> list[tuple[Any, ...]]:
    """The getaddrinfo entries of `host`, all of them public (or WEBHOOK_ALLOW_PRIVATE), else UnsafeTarget."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError, ValueError) as exc:
        raise UnsafeTarget(f"The host {host} could not be resolved ({exc}).") from exc
    if not settings.WEBHOOK_ALLOW_PRIVATE:
        for info in infos:
            ip = ipaddress.ip_address(str(info[4][0]).split("%")[0])
            if not is_public(ip):
                reaches = f"{ip}" if judged_address(ip) == ip else f"{ip} (that is {judged_address(ip)})"
                raise UnsafeTarget(
                    f"{host} resolves to {reaches}, a loopback, private, link-local or reserved address: the "
                    "console does not call into its own network (WEBHOOK_ALLOW_PRIVATE=1 allows it)."
                )
    return infos


def _connect_to(
    infos: list[tuple[Any, ...]], address: tuple[str, int], timeout: float | None = None, *args: Any
) -> socket.socket:
    """`socket.create_connection` for http.client: to the addresses vetted before, without resolving again."""
    error: OSError | None = None
    for family, kind, proto, _, sockaddr in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(timeout)
            sock.connect(sockaddr)
            return sock
        except OSError as exc:
            sock.close()
            error = exc
    raise error or OSError(f"no address for {address[0]}")


def _header_value(value: str) -> str:
    """The Location a receiver sent, safe to show in the delivery log."""
    printable = "".join(char if char.isprintable() else "?" for char in value)
    return printable if len(printable) <= LOCATION_SHOWN else printable[: LOCATION_SHOWN - 1] + "…"


def _request(outgoing: Outgoing) -> tuple[int, str]:
    """Make the request through the guard; the response's status and Location header."""
    host, port, https = _parts(outgoing.url)
    infos = vetted_addresses(host, port)  # the one resolution: the connection goes to these addresses
    parts = urlsplit(outgoing.url)
    connection_class = http.client.HTTPSConnection if https else http.client.HTTPConnection
    connection = connection_class(host, port, timeout=settings.WEBHOOK_TIMEOUT_SECONDS)
    connection._create_connection = partial(_connect_to, infos)  # type: ignore[attr-defined]
    headers = {"User-Agent": USER_AGENT, **outgoing.headers}
    if outgoing.auth is not None:
        pair = ":".join(outgoing.auth).encode()
        headers["Authorization"] = f"Basic {base64.b64encode(pair).decode()}"
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        connection.request(outgoing.method, path, body=outgoing.body, headers=headers)
        response = connection.getresponse()
        response.read(RESPONSE_KEPT)
        return response.status, response.getheader("Location") or ""
    finally:
        connection.close()


def describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return f"No answer within {settings.WEBHOOK_TIMEOUT_SECONDS} s (timed out)."
    return f"{type(exc).__name__}: {exc}"[:ERROR_MAX]


def send(outgoing: Outgoing) -> Outcome:
    """One attempt: a 2xx succeeds; a refused target, a network error, a redirect or any other status fails."""
    try:
        code, location = _request(outgoing)
    except UnsafeTarget as exc:
        return Outcome(ok=False, error=str(exc).removeprefix("url: "))
    except (OSError, http.client.HTTPException, ValueError) as exc:  # ValueError: a header http.client refuses
        return Outcome(ok=False, error=describe(exc))
    if 200 <= code < 300:
        return Outcome(ok=True, response_code=code)
    if 300 <= code < 400:
        where = _header_value(location) if location else "nowhere (no Location header)"
        error = f"The receiver answered HTTP {code}, redirecting to {where}: redirects are not followed."
        return Outcome(ok=False, response_code=code, error=error)
    return Outcome(ok=False, response_code=code, error=f"The receiver answered HTTP {code}.")
