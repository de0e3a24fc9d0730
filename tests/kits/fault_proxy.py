"""A loopback HTTP proxy in front of the live server that fails the requests it is told to: the system edge where
a client meets lost answers and "try again later"."""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import orjson

from tests.helpers import QuietHandler, loopback_server

FORWARD = "forward"
LOSE_ANSWER = "lose answer"  # forwarded, carried out by the server, and then the connection closes unanswered
UNAVAILABLE = "503"  # answered 503 with Retry-After: `retry_after`, not forwarded


@dataclass
class Seen:
    method: str
    path: str
    body: Any
    action: str


@dataclass
class FaultProxy:
    url: str = ""
    plan: list[str] = field(default_factory=list)  # one action per request, in order; then FORWARD
    retry_after: str = "0"
    seen: list[Seen] = field(default_factory=list)


def serve(target: str) -> Iterator[FaultProxy]:
    upstream = urlsplit(target)
    state = FaultProxy()
    lock = threading.Lock()

    class Handler(QuietHandler):
        protocol_version = "HTTP/1.1"

        def handle_any(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            with lock:
                action = state.plan.pop(0) if state.plan else FORWARD
                state.seen.append(Seen(self.command, self.path, orjson.loads(body) if body else None, action))
            if action == UNAVAILABLE:
                answer = b'{"detail": "try again later"}'
                self.send_response(503)
                self.send_header("Retry-After", state.retry_after)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)
                return
            connection = http.client.HTTPConnection(upstream.hostname or "127.0.0.1", upstream.port, timeout=30)
            headers = {name: value for name, value in self.headers.items() if name.lower() != "connection"}
            connection.request(self.command, self.path, body or None, headers)
            response = connection.getresponse()
            answer = response.read()
            connection.close()
            if action == LOSE_ANSWER:
                self.close_connection = True
                return
            self.send_response(response.status)
            for name, value in response.getheaders():
                if name.lower() not in ("connection", "transfer-encoding", "content-length"):
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        do_GET = do_POST = do_PUT = do_DELETE = handle_any

    with loopback_server(Handler) as port:
        state.url = f"http://127.0.0.1:{port}"
        yield state
