from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from checkpoints.jobs import run_job
from checkpoints.models import JobRunStatus
from checkpoints.services.drift import detect_all
from checkpoints.task_names import DETECT_DRIFT


class Command(BaseCommand):
    help = (
        "Run every drift detector over the active sessions now, and print what changed. "
        "Exits with status 1 when some sessions could not be checked (the others were)."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        run = run_job(DETECT_DRIFT.job, detect_all, triggered_by="command")
        if run.status == JobRunStatus.SKIPPED:
            self.stdout.write(self.style.WARNING(f"Skipped: {run.result.get('reason', 'another run is active')}"))
            return
        result = run.result
        self.stdout.write(
            self.style.SUCCESS(
                f"Checked {result['sessions_done']} active sessions: "
                f"{result['opened']} alerts opened, {result['resolved']} resolved."
            )
        )
        for error in result["errors"]:
            self.stderr.write(f"session {error['session']} failed: {error['error']}")
        if result["error_count"]:
            raise CommandError(f"{result['error_count']} session(s) could not be checked; their alerts are unchanged.")
