"""Plain helpers the test files share (fixtures live in conftest.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import StringIO
from pathlib import Path
from typing import Any

import lxml.html
from django.core.management import call_command
from django.db import connection

from checkpoints.services import Actor
from checkpoints.services.file_import import import_path


def command(*args: str, **options: Any) -> tuple[str, str]:
    """Run a management command; what it printed to stdout and to stderr."""
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err, **options)
    return out.getvalue(), err.getvalue()


def import_folder(path: Path, project: Any, **options: Any) -> Any:
    """Import checkpoint files as the `import_checkpoints` command does, as the system actor."""
    return import_path(path, project=project, actor=Actor.system("test"), **options)


def writable_copy(source: Path, target: Path) -> Path:
    """A writable copy of a fixture folder (the fixtures are read-only, and so are their folders)."""
    target.mkdir(parents=True, exist_ok=True)
    for path in sorted(source.rglob("*")):
        if path.is_file():
            copied = target / path.relative_to(source)
            copied.parent.mkdir(parents=True, exist_ok=True)
            copied.write_bytes(path.read_bytes())
    return target


def select(page: Any, css: str) -> list[lxml.html.HtmlElement]:
    """The elements of a response (or an HTML string) that a CSS selector matches, in document order."""
    html = page if isinstance(page, str) else page.content.decode()
    return lxml.html.fromstring(html).cssselect(css)


def text(element: lxml.html.HtmlElement | str) -> str:
    """The text a reader sees in an element (or a piece of HTML), runs of white space made one."""
    if isinstance(element, str):
        element = lxml.html.fromstring(element)
    return " ".join(element.text_content().split())


def in_thread(work: Callable[[], Any], errors: list[BaseException]) -> threading.Thread:
    """Start `work` in a thread with its own database connection (closed after); what it raises goes to `errors`."""

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # the test asserts `errors` is empty
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def within(seconds: float, work: Callable[[], Any]) -> Any:
    """What `work` returns, run in a daemon thread; a failed test if it runs past `seconds`. A hang a regression
    brings back then fails the test instead of stalling the run: a signal handler (signal.alarm) would wait for
    the C code it interrupts (SQLite's, libpq's) to return, which is what hangs."""
    result: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            result.append(work())
        except BaseException as exc:  # re-raised in the test's thread
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s"
    if errors:
        raise errors[0]
    return result[0]


class QuietHandler(BaseHTTPRequestHandler):
    """A test server's request handler that logs nothing."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def loopback_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[int]:
    """A threaded HTTP server on 127.0.0.1 for the block; its port."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    # shutdown() waits for the loop's next look (0.5 s by default): a quarter second more for each test using one
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
