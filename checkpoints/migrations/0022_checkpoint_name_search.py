"""The admin's checkpoint search finds a substring of a checkpoint's name through a pg_trgm index instead of
reading a million rows (see _trigram.py)."""

from django.db import migrations

from ._trigram import trigram_indexes


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("checkpoints", "0021_session_tallies"),
    ]

    operations = [
        trigram_indexes("checkpoints_checkpoint", {"name": "checkpoint_name_trigram"}),
    ]
