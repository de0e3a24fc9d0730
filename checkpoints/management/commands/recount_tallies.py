from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from checkpoints.models import AgentSession
from checkpoints.store.tallies import recount


class Command(BaseCommand):
    help = (
        "Recount the running tallies of sessions (totals, chart rollups, counts by name, kind and status) from "
        "their checkpoints: for repair, e.g. after processes of an older release wrote checkpoints during an "
        "upgrade. Safe to run at any time: each batch of sessions is recounted under their locks."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--session", help="only this session (its database id)", type=int)

    def handle(self, *args: Any, **options: Any) -> None:
        sessions = AgentSession.objects.order_by("pk")
        if options["session"] is not None:
            sessions = sessions.filter(pk=options["session"])
        count = recount(sessions.values_list("pk", flat=True))
        self.stdout.write(self.style.SUCCESS(f"Tallies of {count} session{'s' * (count != 1)} recounted."))
