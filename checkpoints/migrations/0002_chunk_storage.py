from __future__ import annotations

from django.db import migrations


def store_chunks_uncompressed(apps, schema_editor):
    """Chunk data is zstd already: PostgreSQL's own TOAST compression would only burn CPU."""
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE checkpoints_chunk ALTER COLUMN data SET STORAGE EXTERNAL")


class Migration(migrations.Migration):
    dependencies = [("checkpoints", "0001_initial")]

    operations = [migrations.RunPython(store_chunks_uncompressed, migrations.RunPython.noop)]
