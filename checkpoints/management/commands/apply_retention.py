from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from checkpoints.jobs import run_job
from checkpoints.jobs.retention import apply_retention
from checkpoints.models import JobRunStatus
from checkpoints.task_names import APPLY_RETENTION

JSON_KEYS = ("deleted", "kept", "by_kind", "sessions_done", "error_count", "errors")


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
        run = run_job(
            APPLY_RETENTION.job, lambda: apply_retention(dry_run=dry_run), triggered_by="command", dry_run=dry_run
        )
        if run.status == JobRunStatus.SKIPPED:
            raise CommandError("Another retention run holds the lock; nothing was done.")
        result = run.result
        if options["json"]:
            self.stdout.write(json.dumps({key: result[key] for key in JSON_KEYS}, ensure_ascii=False))
        else:
            verb = "Would delete" if dry_run else "Deleted"
            kinds = ", ".join(f"{kind}: {count}" for kind, count in result["by_kind"].items()) or "nothing"
            self.stdout.write(f"{verb} {result['deleted']} checkpoints ({kinds}); kept {result['kept']}.")
            for error in result["errors"]:
                self.stderr.write(f"session {error['session']} failed: {error['error']}")
        if result["error_count"]:
            raise CommandError(
                f"{result['error_count']} session(s) could not be processed; the other {result['sessions_done']} were."
            )
