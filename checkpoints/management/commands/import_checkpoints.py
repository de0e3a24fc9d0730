from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from checkpoints import services
from checkpoints.services.batches import ImportReport
from checkpoints.services.file_import import import_path
from checkpoints.sources import formats
from checkpoints.sources.formats import langgraph


class Command(BaseCommand):
    help = (
        "Import checkpoint files (a file or a folder tree) in any of the source formats, "
        "or LangGraph history from a PostgresSaver database URL (postgres://…)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", help="a file or folder, or a PostgresSaver database's postgres:// URL")
        parser.add_argument("--format", default="auto", choices=["auto", *formats.names()])
        parser.add_argument(
            "--project",
            default="imported",
            help="project slug for sessions (default: imported); Haytham trees name their own projects",
        )
        parser.add_argument("--dry-run", action="store_true", help="read and check everything, store nothing")
        parser.add_argument("--json", action="store_true", help="print one JSON report and nothing else")
        parser.add_argument(
            "--write-back", action="store_true", help="on restore, also write the restored state back into PATH"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        path: Path | str = options["path"]
        if langgraph.is_url(path) and options["format"] not in ("auto", langgraph.NAME):
            raise CommandError("a postgres:// URL holds LangGraph history: use --format langgraph (or auto)")
        if not langgraph.is_url(path):
            path = Path(path)
            if not path.exists():
                raise CommandError(f"{path} does not exist")
        show_progress = not options["json"] and self.stdout.isatty()
        report = import_path(
            path,
            fmt=options["format"],
            project=options["project"],  # created only when a session goes into it (never by a dry run)
            actor=services.Actor.system("import_checkpoints"),
            dry_run=options["dry_run"],
            write_back=options["write_back"],
            progress=self._progress if show_progress else None,
        )
        if show_progress:
            self.stdout.write("")
        if options["json"]:
            self.stdout.write(json.dumps(report.as_dict(), ensure_ascii=False))
            return
        for error in report.errors:
            self.stderr.write(f"skipped {error['path']}: {error['error']}")
        for note in report.notes:
            self.stdout.write(f"note: {note}")
        verb = "would import" if options["dry_run"] else "imported"
        self.stdout.write(
            f"{verb} {report.imported} checkpoint(s) into {len(report.sessions)} session(s); "
            f"{report.skipped} already present; {len(report.errors)} file(s) with errors."
        )

    def _progress(self, report: ImportReport) -> None:
        line = f"\r{report.imported} imported · {report.skipped} already present · {len(report.errors)} errors"
        sys.stdout.write(line)
        sys.stdout.flush()
