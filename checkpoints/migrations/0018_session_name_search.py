"""Session search (console and admin) finds a substring of the session id, title or agent through pg_trgm
indexes instead of reading every session (see _trigram.py)."""

from django.db import migrations

from ._trigram import trigram_indexes


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("checkpoints", "0017_checkpoint_preview"),
    ]

    operations = [
        trigram_indexes(
            "checkpoints_agentsession",
            {column: f"session_{column}_trigram" for column in ("external_id", "title", "agent")},
        ),
    ]
