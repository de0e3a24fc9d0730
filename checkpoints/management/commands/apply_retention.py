from __future__ import annotations

import json
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from checkpoints.jobs import StopRequest, run_job
from checkpoints.jobs.retention import apply_retention
from checkpoints.models import JobRunStatus
from checkpoints.task_names import APPLY_RETENTION

JSON_KEYS = ("deleted", "kept", "by_kind", "sessions_done", "error_count", "errors")


@contextmanager
def stop_on_signals(stop: StopRequest) -> Iterator[None]:
    """SIGTERM or a first Ctrl-C asks the run to stop between two batches (it records what it did); a second
    Ctrl-C interrupts at once (the batch under way rolls back)."""

    def ask(signum: int, frame: FrameType | None) -> None:
        if stop.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt
        stop.set(f"asked to stop ({signal.Signals(signum).name})")

    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield
        return
    before = {signum: signal.signal(signum, ask) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


class Command(BaseCommand):
    help = (
        "Delete the checkpoints the retention policies let go (docs/jobs.md); the run is recorded. "
        "Exits with status 1 when some sessions could not be processed (the others were)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="count what would be deleted, delete nothing")
        parser.add_argument(
            "--json",
            action="store_true",
            help='print {"deleted", "kept", "by_kind", "sessions_done", "error_count", "errors"} as JSON',
        )

    def handle(self, *args: Any, **options: Any) -> None:
        dry_run = options["dry_run"]
        stop = StopRequest()
        with stop_on_signals(stop):
            run = run_job(
                APPLY_RETENTION.job,
                lambda: apply_retention(dry_run=dry_run, stop=stop),
                triggered_by="command",
                dry_run=dry_run,
                stop=stop,
            )
        if run.status == JobRunStatus.SKIPPED:
            raise CommandError("Another retention run holds the lock; nothing was done.")
        result = run.result
        if options["json"]:
            shown = {key: result[key] for key in JSON_KEYS} | (
                {"stopped": result["stopped"]} if "stopped" in result else {}
            )
            self.stdout.write(json.dumps(shown, ensure_ascii=False))
        else:
            verb = "Would delete" if dry_run else "Deleted"
            kinds = ", ".join(f"{kind}: {count}" for kind, count in result["by_kind"].items()) or "nothing"
            self.stdout.write(f"{verb} {result['deleted']} checkpoints ({kinds}); kept {result['kept']}.")
            if result.get("stopped"):
                self.stdout.write(f"Stopped between two batches ({result['stopped']}); the next run does the rest.")
            for error in result["errors"]:
                self.stderr.write(f"session {error['session']} failed: {error['error']}")
        if result["error_count"]:
            raise CommandError(
                f"{result['error_count']} session(s) could not be processed; the other {result['sessions_done']} were."
            )
