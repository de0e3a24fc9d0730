"""Fill an empty database with demo data (see checkpoints/demo/)."""

from __future__ import annotations

import random
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from checkpoints.demo.seed import Seeder
from checkpoints.models import (
    AgentSession,
    Checkpoint,
    Chunk,
    DriftAlert,
)


class Command(BaseCommand):
    help = "Fill an empty database with demo projects, sessions, forks, restores, phases and drift alerts."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--small", action="store_true", help="a few sessions of ~20 checkpoints (for tests)")
        parser.add_argument("--force", action="store_true", help="seed even though sessions exist (adds beside them)")
        parser.add_argument("--seed", type=int, default=42, help="random seed (default 42)")

    def handle(self, *args: Any, **options: Any) -> None:
        existing = AgentSession.objects.count()
        if existing and not options["force"]:
            self.stdout.write(
                f"The database already has {existing} session(s); seed_demo only fills an empty database. "
                "Nothing was changed. Use --force to add the demo data anyway."
            )
            return
        started = time.monotonic()
        seeder = Seeder(random.Random(options["seed"]), timezone.now().replace(microsecond=0), options["small"])  # noqa: S311 - demo data, seeded to be reproducible
        chunks_before = Chunk.objects.count()
        with transaction.atomic():
            seeder.research()
            seeder.coding()
            seeder.phased()
            seeder.support()
            seeder.dreamos()
            seeder.pipeline()
            seeder.settle()
        ids = [session.pk for session in seeder.sessions]
        checkpoints = Checkpoint.objects.filter(session__in=ids)
        stored = checkpoints.aggregate(raw=Sum("raw_bytes"), stored=Sum("stored_bytes"))
        projects = sorted({session.project.slug for session in seeder.sessions})
        self.stdout.write(
            self.style.SUCCESS(
                f"Seeded {len(projects)} projects ({', '.join(projects)}), {len(ids)} sessions, "
                f"{checkpoints.count()} checkpoints, {Chunk.objects.count() - chunks_before} chunks "
                f"({(stored['stored'] or 0) / 1e6:.1f} MB stored for {(stored['raw'] or 0) / 1e6:.1f} MB of states), "
                f"{DriftAlert.objects.filter(session__in=ids).count()} drift alerts "
                f"in {time.monotonic() - started:.1f} s."
            )
        )
