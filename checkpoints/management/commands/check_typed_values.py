from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from checkpoints.models import Project
from checkpoints.services.typeguard import stored_refusals


class Command(BaseCommand):
    help = (
        "List the LangGraph values stored before a project's type allow-list said so that it would refuse today "
        "(session, namespace, checkpoint, path, type): a ConsoleSaver reads them back as raw payloads and an "
        "export of their thread is refused. Exits 1 when it lists any. Reads only."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", help="only this project (its slug)")

    def handle(self, *args: Any, **options: Any) -> None:
        projects = Project.objects.order_by("slug")
        if options["project"]:
            projects = projects.filter(slug=options["project"])
            if not projects.exists():
                raise CommandError(f"no project {options['project']!r}")
        found = 0
        for project in projects:
            for refusal in stored_refusals(project):
                found += 1
                self.stdout.write(
                    f"{project.slug}\t{refusal.session.external_id}\t{refusal.checkpoint_ns or '-'}\t"
                    f"{refusal.checkpoint_id}\t{refusal.path}\t{refusal.type_name}"
                )
        if found:
            raise CommandError(
                f"{found} stored value{'s' * (found != 1)} name a type the project does not allow: an operator "
                "allows it under Project settings, or the thread is deleted"
            )
        self.stdout.write(self.style.SUCCESS("No stored value names a type its project does not allow."))
