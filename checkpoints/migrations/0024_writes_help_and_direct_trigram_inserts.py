from __future__ import annotations

from django.db import migrations, models

# updated on every checkpoint (a session's head and tallies; never HOT: head and updated_at are indexed)
_TRIGRAMS = ("session_external_id_trigram", "session_title_trigram", "session_agent_trigram", "checkpoint_name_trigram")


def insert_into_trigram_indexes_directly(apps, schema_editor):
    """Every checkpoint updates its session's row, and not in place: each index gets an entry for the new row
    version. A GIN index's fast-update list holds each trigram of the text whole per entry (~600 B per update of a
    session), freed only by VACUUM; inserted directly, an entry is a few bytes in the trigram's posting list."""
    if schema_editor.connection.vendor == "postgresql":
        for name in _TRIGRAMS:
            schema_editor.execute(f'ALTER INDEX IF EXISTS "{name}" SET (fastupdate = off)')


def back_to_fast_update(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for name in _TRIGRAMS:
            schema_editor.execute(f'ALTER INDEX IF EXISTS "{name}" RESET (fastupdate)')


class Migration(migrations.Migration):
    dependencies = [("checkpoints", "0023_langgraph")]

    operations = [
        migrations.AlterField(
            model_name="langgraphwrites",
            name="writes",
            field=models.BinaryField(
                help_text="zstd'd JSON [[idx, channel, value] or [idx, channel, null, positions], …], by idx: a value "
                "the next checkpoint holds in its state is kept there once, named by its positions in the channel "
                "(null: the channel's whole value)."
            ),
        ),
        migrations.RunPython(insert_into_trigram_indexes_directly, back_to_fast_update),
    ]
