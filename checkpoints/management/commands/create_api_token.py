from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from checkpoints import services


class Command(BaseCommand):
    help = "Create a bearer token for the agent API, scoped to one project (created if missing). Prints it once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", required=True, help="project slug")
        parser.add_argument("--name", required=True, help="what the token is for, e.g. the agent's name")
        parser.add_argument("--read-only", action="store_true", help="the token can read but not write")

    def handle(self, *args: Any, **options: Any) -> None:
        project = services.get_or_create_project(options["project"])
        token, secret = services.create_api_token(project, name=options["name"], read_only=options["read_only"])
        services.record_audit(
            services.Actor.system("create_api_token"),
            "token_created",
            project=project,
            target=str(token),
            details={"scopes": token.scopes},
        )
        self.stderr.write(
            f"Token {token.name!r} for project {project.slug!r} ({', '.join(token.scopes)}). "
            "It is shown once; only its hash is stored."
        )
        self.stdout.write(secret)
