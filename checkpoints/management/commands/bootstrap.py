from __future__ import annotations

import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser

from checkpoints.models import AgentSession


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
            login = f"admin / {password}   (shown once; change it with: python manage.py changepassword admin)"
        else:
            login = "your existing account (reset with: python manage.py changepassword admin)"
        if not options["no_demo"] and not AgentSession.objects.exists():
            self.stdout.write("First run: seeding demo data…")
            call_command("seed_demo")
        self.stdout.write(
            self.style.SUCCESS(f"\nCheckpoint Console: http://127.0.0.1:{options['port']}/\nSign in: {login}\n")
        )
        self.stdout.write(
            "This login is a superuser: it sees every project. Others see only the projects they are members of:\n"
            "add them under Projects (or Users) in /admin/, with a role per project.\n"
        )
