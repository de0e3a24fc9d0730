"""Outgoing HTTP to receivers the console does not control (webhooks, Slack, Apprise URLs), through an SSRF guard.

A URL is refused (UnsafeTarget) when it is not http(s) or its host resolves to a loopback, private, link-local,
shared or reserved address, unless WEBHOOK_ALLOW_PRIVATE: checked when an endpoint or rule is saved and again
at every send, which then connects only to the addresses it checked. No proxies, no redirects.
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

from .audit import InvalidInput

RESPONSE_KEPT = 1024  # bytes of a receiver's answer read (and dropped): enough to end the exchange cleanly
USER_AGENT = "CheckpointConsole-Webhooks/1"


class UnsafeTarget(InvalidInput):
    """A receiver URL the console refuses to call: not http(s), or an address inside the network."""

    def __init__(self, message: str) -> None:
        super().__init__("url", message)


def check_target(url: str) -> None:
    """Refuse (UnsafeTarget) a URL that is not http(s), or whose host resolves to a loopback, private, link-local
    or reserved address unless WEBHOOK_ALLOW_PRIVATE: run when an endpoint or rule is saved and again at send."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UnsafeTarget("The URL must start with http:// or https:// and name a host.")
    try:
        port = parts.port
    except ValueError as exc:
        raise UnsafeTarget(f"The URL's port is not valid: {exc}.") from exc
    vetted_addresses(parts.hostname, port or (443 if parts.scheme == "https" else 80))


def vetted_addresses(host: str, port: int) -> list[tuple[Any, ...]]:
    """The addresses `host` resolves to, all of them public (or WEBHOOK_ALLOW_PRIVATE), else UnsafeTarget.

    Sending connects to these very addresses, so a name that resolves elsewhere between the check and the
    connection (DNS rebinding) cannot reach inside the network."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError, ValueError) as exc:
        raise UnsafeTarget(f"The host {host} could not be resolved ({exc}).") from exc
    addresses = [info[4] for info in infos]
    if not settings.WEBHOOK_ALLOW_PRIVATE:
        for address in addresses:
            ip = ipaddress.ip_address(str(address[0]).split("%")[0])
            if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
                ip = ip.ipv4_mapped
            if not ip.is_global or ip.is_multicast:
                raise UnsafeTarget(
                    f"{host} resolves to {ip}, a loopback, private, link-local or reserved address: the console "
                    "does not call into its own network (WEBHOOK_ALLOW_PRIVATE=1 allows it)."
                )
    return addresses


def _connect_vetted(address: tuple[str, int], timeout: float | None = None, *args: Any) -> socket.socket:
    """`socket.create_connection` for http.client, to the vetted addresses of the host only."""
    host, port = address
    error: OSError | None = None
    for sockaddr in vetted_addresses(host, port):
        try:
            return socket.create_connection((sockaddr[0], port), timeout)
        except OSError as exc:
            error = exc
    raise error or OSError(f"no address for {host}")


def post(url: str, body: bytes, headers: dict[str, str]) -> int:
    """POST `body` to `url` through the SSRF guard, without proxies or redirects; the response's status."""
    check_target(url)
    parts = urlsplit(url)
    https = parts.scheme == "https"
    port = parts.port or (443 if https else 80)
    timeout = settings.WEBHOOK_TIMEOUT_SECONDS
    connection_class = http.client.HTTPSConnection if https else http.client.HTTPConnection
    connection = connection_class(parts.hostname or "", port, timeout=timeout)
    connection._create_connection = _connect_vetted  # type: ignore[attr-defined]
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        connection.request("POST", path, body=body, headers={"User-Agent": USER_AGENT, **headers})
        response = connection.getresponse()
        response.read(RESPONSE_KEPT)
        return response.status
    finally:
        connection.close()
