from __future__ import annotations

import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser

from checkpoints.models import AgentSession

RESET_COMMAND = 'make manage ARGS="changepassword admin"'


class Command(BaseCommand):
    help = "First-run set-up for `make run`: an admin account (password printed once) and demo data."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--no-demo", action="store_true", help="do not seed demo data into an empty database")

    def handle(self, *args: Any, **options: Any) -> None:
        users = get_user_model()
        if not users.objects.filter(is_superuser=True).exists():
            password = secrets.token_urlsafe(12)
            users.objects.create_superuser("admin", "admin@localhost", password)
            login = f"user admin, password {password}   (shown once; to change it: {RESET_COMMAND})"
        else:
            login = f"your existing account (to reset it: {RESET_COMMAND})"
        if not options["no_demo"] and not AgentSession.objects.exists():
            self.stderr.write("First run: seeding demo data…")  # stdout is the sign-in, which `serve` frames
            call_command("seed_demo", stdout=self.stderr)
        self.stdout.write(f"Checkpoint Console: http://127.0.0.1:{options['port']}/\nSign in: {login}")
        self.stdout.write(
            "This login is a superuser: it sees every project. Others see only the projects they are members of:\n"
            "add them under Projects (or Users) in /admin/, with a role per project."
        )
