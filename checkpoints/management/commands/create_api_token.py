from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from checkpoints import services
from checkpoints.models import Scope


class Command(BaseCommand):
    help = "Create a bearer token for the agent API, scoped to one project (created if missing). Prints it once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", required=True, help="project slug")
        parser.add_argument("--name", required=True, help="what the token is for, e.g. the agent's name")
        scopes = parser.add_mutually_exclusive_group()
        scopes.add_argument(
            "--scope",
            action="append",
            type=_scope,
            dest="scopes",
            metavar="NAME",
            help="a scope the token has; repeat for more (default: read and write). "
            + "; ".join(f"{scope.value}: {scope.label}" for scope in Scope),
        )
        scopes.add_argument("--read-only", action="store_true", help="the token can read but not write: --scope read")
        parser.add_argument(
            "--expires-in", type=_duration, help="e.g. 90d, 12h or 30m; after that the token gets 401 (default: never)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        project = services.get_or_create_project(options["project"])
        try:
            token, secret = services.create_api_token(
                project,
                name=options["name"],
                read_only=options["read_only"],
                scopes=options["scopes"],
                expires_in=options["expires_in"],
                actor=services.Actor.system("create_api_token"),
            )
        except services.InvalidInput as exc:
            raise CommandError(f"--expires-in must be longer than 0: {exc}") from None
        expiry = f", expires {token.expires_at:%Y-%m-%d %H:%M} UTC" if token.expires_at else ""
        self.stderr.write(
            f"Token {token.name!r} for project {project.slug!r} ({', '.join(token.scopes)}{expiry}). "
            "It is shown once; only its hash is stored."
        )
        self.stdout.write(secret)


def _scope(name: str) -> str:
    if name not in Scope.values:
        known = "; ".join(f"{scope.value} ({scope.label})" for scope in Scope)
        raise CommandError(f"--scope {name!r} is no scope; the scopes are: {known}")
    return name


_UNITS = {"d": "days", "h": "hours", "m": "minutes"}


def _duration(text: str) -> timedelta:
    match = re.fullmatch(r"(\d{1,6})([dhm])", text.strip())
    if not match:
        raise CommandError(f"--expires-in {text!r}: use a number and d, h or m, e.g. 90d")
    return timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})
