from __future__ import annotations

from django.db import migrations, models


def keep_writes_inline(apps, schema_editor):
    """A task's writes arrive whole (kilobytes) and shrink to references once the next checkpoint holds their
    values. Out of line, each first version would leave dead TOAST chunks that only VACUUM frees; in the heap
    (STORAGE MAIN: zstd'd already, kept in the row unless it cannot fit a page) the update is HOT and page
    pruning reclaims the old version."""
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE checkpoints_langgraphwrites ALTER COLUMN writes SET STORAGE MAIN")


def back_to_extended(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE checkpoints_langgraphwrites ALTER COLUMN writes SET STORAGE EXTENDED")


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
        migrations.RunPython(keep_writes_inline, back_to_extended),
    ]
