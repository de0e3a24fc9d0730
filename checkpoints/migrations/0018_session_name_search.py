"""Session search (console and admin) finds a substring of the session id, title or agent through trigram
indexes instead of reading every session.

* `icontains` compares UPPER(column::text) LIKE UPPER('%text%'): the indexes are on that expression, with
  pg_trgm's GIN operator class.
* pg_trgm is created when the database role may (CREATE on the database; trust auth as postgres can). Where
  it cannot, or on SQLite, no index is made and search scans the sessions as before.
* Built CONCURRENTLY on PostgreSQL (sessions are updated by every ingest), hence a non-atomic migration.
"""

from django.db import DatabaseError, migrations, transaction

COLUMNS = ("external_id", "title", "agent")


def create_pg_trgm(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    try:
        with transaction.atomic(using=schema_editor.connection.alias):
            schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    except DatabaseError:
        pass  # no privilege: the search works without the indexes


def has_pg_trgm(connection) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm'")
        return cursor.fetchone() is not None


def add_trigram_indexes(apps, schema_editor):
    """Not in the model state: SQLite, remaking the table for a later migration, would try to build them."""
    if schema_editor.connection.vendor != "postgresql" or not has_pg_trgm(schema_editor.connection):
        return
    for column in COLUMNS:
        schema_editor.execute(
            f'CREATE INDEX CONCURRENTLY IF NOT EXISTS "session_{column}_trigram" ON "checkpoints_agentsession" '
            f'USING gin ((UPPER("{column}"::text)) gin_trgm_ops)'
        )


def drop_trigram_indexes(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for column in COLUMNS:
            schema_editor.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "session_{column}_trigram"')


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("checkpoints", "0017_checkpoint_preview"),
    ]

    operations = [
        migrations.RunPython(create_pg_trgm, migrations.RunPython.noop),
        migrations.RunPython(add_trigram_indexes, drop_trigram_indexes),
    ]
