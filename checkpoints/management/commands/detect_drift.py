from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from checkpoints.drift import detect_all
from checkpoints.jobs import run_job
from checkpoints.models import JobRunStatus


class Command(BaseCommand):
    help = "Run every drift detector over the active sessions now, and print what changed."

    def handle(self, *args: Any, **options: Any) -> None:
        run = run_job("drift_detection", detect_all, triggered_by="command")
        if run.status == JobRunStatus.SKIPPED:
            self.stdout.write(self.style.WARNING(f"Skipped: {run.result.get('reason', 'another run is active')}"))
            return
        result = run.result
        self.stdout.write(
            self.style.SUCCESS(
                f"Checked {result['sessions']} active sessions: "
                f"{result['opened']} alerts opened, {result['resolved']} resolved."
            )
        )
