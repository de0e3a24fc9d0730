from __future__ import annotations

import io
import signal
import subprocess
import sys
import time
import urllib.request
from collections import deque
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from celery import current_app
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser

RESTARTS = 5  # a child that dies more often than this within WINDOW seconds is not coming back by itself
WINDOW = 60.0
READY_SECONDS = 90.0  # how long the sign-in box waits for the web to answer and a worker to ping back
# One gunicorn process whose threads live as long as it does, so each keeps its SQLite connection (CONN_MAX_AGE)
# from one request to the next; runserver starts a thread, and so a connection, per request. A few threads:
# LangGraph sends a step's put and put_writes at once, and a slow console page must not hold up an agent.
WEB_THREADS = 4
WEB_SERVERS = ("gunicorn", "runserver")
Say = Callable[[str], None]


class Stop(Exception):
    """Ctrl-C or SIGTERM reached the supervisor."""


def _stop(signum: int, frame: FrameType | None) -> None:
    raise Stop


def _terminate(processes: dict[str, subprocess.Popen[bytes]]) -> None:
    for process in processes.values():
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 10
    for process in processes.values():
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def start(command: list[str], cwd: Path) -> subprocess.Popen[bytes]:
    """In its own process group: Ctrl-C in the terminal reaches only the supervisor, which stops the children
    in order, instead of each child printing its own interrupted shutdown."""
    return subprocess.Popen(command, cwd=cwd, process_group=0)  # noqa: S603 - the project's own commands


def supervise(
    commands: dict[str, list[str]],
    *,
    cwd: Path,
    say: Say,
    warn: Say,
    restarts: int = RESTARTS,
    window: float = WINDOW,
    on_ready: Callable[[], bool] = lambda: True,
) -> int:
    """Run every command, restart one that exits (and say so), give up when one has exited more than `restarts`
    times within `window` seconds. 0 after Ctrl-C or SIGTERM, 1 after giving up. `on_ready` is asked until it
    answers True (it prints the sign-in box once everything answers)."""
    previous = signal.signal(signal.SIGINT, _stop), signal.signal(signal.SIGTERM, _stop)
    processes: dict[str, subprocess.Popen[bytes]] = {}
    exits: dict[str, deque[float]] = {name: deque() for name in commands}
    ready = False
    try:
        for name, command in commands.items():
            processes[name] = start(command, cwd)
        while True:
            for name, process in processes.items():
                code = process.poll()
                if code is None:
                    continue
                now = time.monotonic()
                times = exits[name]
                times.append(now)
                while times and times[0] < now - window:
                    times.popleft()
                if len(times) > restarts:
                    warn(
                        f"{name} exited with code {code}, {len(times)} times in {window:g} s: giving up. "
                        "Stopping the others; see its messages above."
                    )
                    return 1
                warn(f"{name} exited with code {code}; restarting it ({len(times)} of {restarts} in {window:g} s).")
                processes[name] = start(commands[name], cwd)
            if not ready:
                ready = on_ready()
            time.sleep(0.2)
    except Stop:
        pass
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C does not cut the children's shutdown short
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        _terminate(processes)
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])
    say("stopped")
    return 0


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:  # noqa: S310 - our own http:// URL
            return bool(response.status == 200)
    except OSError:
        return False


def frame(lines: list[str]) -> str:
    width = max(len(line) for line in lines) + 4
    rule = "=" * width
    return "\n".join(["", rule, *(f"  {line}" for line in lines), rule, ""])


class Command(BaseCommand):
    help = (
        "Run the web console, a Celery worker and beat together; a child that dies is restarted. "
        "Ctrl-C stops all three."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--bootstrap", action="store_true", help="first run: an admin account and demo data")
        parser.add_argument("--verbose", action="store_true", help="the worker's and beat's banners and info logs")
        parser.add_argument("--restarts", type=int, default=RESTARTS, help=f"in --window seconds (default {RESTARTS})")
        parser.add_argument("--window", type=float, default=WINDOW)
        parser.add_argument(
            "--web",
            choices=WEB_SERVERS,
            default="gunicorn",
            help="gunicorn (default: one process, kept threads and connections) or Django's runserver (reloads "
            "on code changes, opens a database connection per request)",
        )

    def commands(self, host: str, port: int, verbose: bool, web: str = "gunicorn") -> dict[str, list[str]]:
        python = sys.executable
        celery = [python, "-m", "celery", "-A", "config", *([] if verbose else ["--quiet"])]
        level = ["-l", "info" if verbose else "warning"]
        return {
            "web": self.web_command(web, host, port, verbose),
            "worker": [*celery, "worker", *level, "--concurrency", "2"],
            "beat": [*celery, "beat", *level, "--scheduler", "django_celery_beat.schedulers:DatabaseScheduler"],
        }

    def web_command(self, web: str, host: str, port: int, verbose: bool) -> list[str]:
        python = sys.executable
        if web == "runserver":
            return [python, str(settings.BASE_DIR / "manage.py"), "runserver", f"{host}:{port}"]
        bind = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        return [
            python, "-m", "gunicorn", "config.wsgi",
            "--bind", bind,
            "--workers", "1", "--worker-class", "gthread", "--threads", str(WEB_THREADS),
            # gthread's timeout watches the worker's loop, not a request: a long import or export is not cut off.
            "--graceful-timeout", "5",
            "--log-level", "info" if verbose else "warning",
            # no control socket in ~/.gunicorn/: serve is the only thing that manages this process
            "--no-control-socket",
            *(["--access-logfile", "-"] if settings.ACCESS_LOG else []),
        ]  # fmt: skip

    def handle(self, *args: Any, **options: Any) -> None:
        host, port = options["host"], options["port"]
        url = f"http://{host}:{port}/"
        sign_in = io.StringIO()
        if options["bootstrap"]:
            call_command("bootstrap", port=port, stdout=sign_in)
        lines = [*(sign_in.getvalue().strip() or f"Checkpoint Console: {url}").splitlines(), "Ctrl-C stops it."]
        started = time.monotonic()

        def on_ready() -> bool:
            waited = time.monotonic() - started
            if waited < READY_SECONDS and not (answers(f"{url}health/live") and self.worker_answers()):
                return False
            if waited >= READY_SECONDS:
                lines.append(f"(the web or the worker did not answer within {READY_SECONDS:g} s: see above)")
            self.stdout.write(self.style.SUCCESS(frame(lines)))
            return True

        code = supervise(
            self.commands(host, port, options["verbose"], options["web"]),
            cwd=settings.BASE_DIR,
            say=self.stdout.write,
            warn=self.stderr.write,
            restarts=options["restarts"],
            window=options["window"],
            on_ready=on_ready,
        )
        if code:
            sys.exit(code)

    def worker_answers(self) -> bool:
        try:
            return bool(current_app.control.ping(timeout=0.5, limit=1))
        except Exception:  # the broker not answering yet is "not ready", whatever kombu raised
            return False
