"""The chunk table is vacuumed at 1 % dead rows (PostgreSQL's default waits for 20 %).

A keyframe compresses the patches since the one before again, with its new leaves as dictionary (`store._rebase`):
~47 row versions a keyframe interval become dead, ~810 bytes each on the benchmark's agent. Vacuumed, their space
holds the next rows; waiting for a fifth of a large table to be dead would keep that much more on disk.
"""

from django.db import migrations


def _autovacuum(scale: str | None):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            table = schema_editor.quote_name(apps.get_model("checkpoints", "Chunk")._meta.db_table)
            if scale is None:
                schema_editor.execute(f"ALTER TABLE {table} RESET (autovacuum_vacuum_scale_factor)")
            else:
                schema_editor.execute(f"ALTER TABLE {table} SET (autovacuum_vacuum_scale_factor = {scale})")

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("checkpoints", "0042_secrets3_purge_heartbeat"),
    ]

    operations = [
        migrations.RunPython(_autovacuum("0.01"), _autovacuum(None)),
    ]
