"""A real HTTP receiver on 127.0.0.1 for webhook tests: records what it gets, answers as told."""

from __future__ import annotations

import hashlib
import hmac
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from tests.helpers import QuietHandler, loopback_server


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return orjson.loads(self.body)


@dataclass
class Receiver:
    url: str
    received: list[Received] = field(default_factory=list)
    status: int = 200  # what it answers
    delay: float = 0.0  # seconds it waits before answering
    location: str = ""  # a Location header it answers with (a redirect, with a 3xx status)


def verify(secret: str, header: str, body: bytes) -> bool:
    """What a receiver does with X-Checkpoint-Signature (docs/webhooks.md, "Headers")."""
    parts = dict(item.split("=", 1) for item in header.split(","))
    expected = hmac.new(secret.encode(), f"{parts['t']}.".encode() + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, parts["v1"])


def serve(settings: Any) -> Iterator[Receiver]:
    """A receiver the console may call: private addresses allowed (WEBHOOK_ALLOW_PRIVATE) for this test, and
    a 1 s send timeout (the `receiver` fixture)."""
    settings.WEBHOOK_ALLOW_PRIVATE = True
    settings.WEBHOOK_TIMEOUT_SECONDS = 1
    state = Receiver(url="")

    class Handler(QuietHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            state.received.append(Received(self.path, dict(self.headers.items()), body))
            if state.delay:
                time.sleep(state.delay)
            self.send_response(state.status)
            if state.location:
                self.send_header("Location", state.location)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

    with loopback_server(Handler) as port:
        state.url = f"http://127.0.0.1:{port}/hook"
        yield state


@dataclass
class Listener:
    """A TCP port on 127.0.0.1 that records every connection made to it (and answers nothing)."""

    port: int
    connections: list[tuple[str, int]] = field(default_factory=list)


def listen() -> Iterator[Listener]:
    """A loopback port that must see no connection: whatever connects is recorded and hung up on."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.05)
    state = Listener(port=server.getsockname()[1])
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                connection, peer = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            state.connections.append(peer)
            connection.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield state
    stop.set()
    thread.join()
    server.close()
