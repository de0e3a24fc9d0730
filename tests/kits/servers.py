"""Real server processes started by tests (gunicorn, serve's web command): a free loopback port, and the wait
until one answers, which fails with the server's own log when it exits or stays silent."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until_answers(server: subprocess.Popen[bytes], url: str, log: Path, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while True:
        assert server.poll() is None, log.read_text()
        try:
            httpx.get(url, timeout=2)
            return
        except httpx.TransportError:
            assert time.monotonic() < deadline, f"{url} did not answer within {seconds:g} s"
            time.sleep(0.2)
