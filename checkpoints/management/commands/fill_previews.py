from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from checkpoints.models import Checkpoint
from checkpoints.store.previews import fill_previews


class Command(BaseCommand):
    help = (
        "Work out the one-line previews, failed tool calls and tool-call counts of checkpoints stored before the "
        "console kept them, so their timeline rows say what happened, the error chart counts their tool failures "
        "and restore offers count the calls they discard. Safe to run again: it reads only uncounted checkpoints."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--session", help="only this session (its database id)", type=int)

    def handle(self, *args: Any, **options: Any) -> None:
        checkpoints = Checkpoint.objects.all()
        if options["session"] is not None:
            checkpoints = checkpoints.filter(session_id=options["session"])
        changed = fill_previews(checkpoints)
        self.stdout.write(self.style.SUCCESS(f"{changed} checkpoint previews filled in."))
