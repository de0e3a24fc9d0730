from __future__ import annotations

import signal
import subprocess
import sys
import time
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    help = "Run the web console, a Celery worker and beat together; Ctrl-C stops all three."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--host", default="127.0.0.1")

    def handle(self, *args: Any, **options: Any) -> None:
        python = sys.executable
        manage = str(settings.BASE_DIR / "manage.py")
        commands = {
            "web": [python, manage, "runserver", f"{options['host']}:{options['port']}"],
            "worker": [python, "-m", "celery", "-A", "config", "worker", "-l", "info", "--concurrency", "2", "-Q", "celery,deliveries"],
            "beat": [
                python, "-m", "celery", "-A", "config", "beat", "-l", "info",
                "--scheduler", "django_celery_beat.schedulers:DatabaseScheduler",
            ],
        }  # fmt: skip
        processes = {name: subprocess.Popen(cmd, cwd=settings.BASE_DIR) for name, cmd in commands.items()}  # noqa: S603 - the commands spelled out above
        started = ", ".join(f"{name} (pid {process.pid})" for name, process in processes.items())
        self.stdout.write(
            f"Console at http://{options['host']}:{options['port']}/ — started {started}. Ctrl-C stops all."
        )
        try:
            while all(p.poll() is None for p in processes.values()):
                time.sleep(0.5)
            stopped = [name for name, p in processes.items() if p.poll() is not None]
            self.stderr.write(f"{', '.join(stopped)} exited; stopping the others.")
        except KeyboardInterrupt:
            pass
        finally:
            for process in processes.values():
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 10
            for process in processes.values():
                try:
                    process.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    process.kill()
