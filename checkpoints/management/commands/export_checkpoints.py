from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from checkpoints.models import AgentSession
from checkpoints.sources import formats
from checkpoints.sources.formats.langgraph import ExportRefused


class Command(BaseCommand):
    help = "Write a session back in one of the source formats (langgraph: a SqliteSaver file)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("session", help="the session's external id")
        parser.add_argument("--format", required=True, choices=formats.names())
        parser.add_argument(
            "--out",
            required=True,
            type=Path,
            help="folder to write into (langgraph: the .sqlite file to write, or a folder)",
        )
        parser.add_argument("--project", help="project slug, when the id exists in several projects")

    def handle(self, *args: Any, **options: Any) -> None:
        sessions = AgentSession.objects.filter(external_id=options["session"]).select_related("project")
        if options["project"]:
            sessions = sessions.filter(project__slug=options["project"])
        found = list(sessions[:2])
        if not found:
            raise CommandError(f"no session {options['session']!r}")
        if len(found) > 1:
            raise CommandError(f"{options['session']!r} exists in several projects: pass --project")
        try:
            written = formats.get(options["format"]).export(found[0], options["out"])
        except FileExistsError as exc:
            raise CommandError(f"{exc}: export into an empty folder") from exc
        except ExportRefused as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"wrote {len(written)} file(s) to {options['out']}")
