"""Session search (console and admin) finds a substring of the session id, title or agent through trigram
indexes instead of reading every session.

* `icontains` compares UPPER(column::text) LIKE UPPER('%text%'): the indexes are on that expression, with
  pg_trgm's GIN operator class.
* pg_trgm is created when the database role may (CREATE on the database; trust auth as postgres can). Where
  it cannot, or on SQLite, no index is made and search scans the sessions as before.
* Built CONCURRENTLY on PostgreSQL (sessions are updated by every ingest), hence a non-atomic migration.
"""

from django.contrib.postgres.indexes import GinIndex, OpClass
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import DatabaseError, migrations, models, transaction
from django.db.models.functions import Cast, Upper


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


class AddTrigramIndex(AddIndexConcurrently):
    """CREATE INDEX CONCURRENTLY where PostgreSQL has pg_trgm; nothing elsewhere."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql" and has_pg_trgm(schema_editor.connection):
            super().database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{self.index.name}"')


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("checkpoints", "0017_checkpoint_preview"),
    ]

    operations = [
        migrations.RunPython(create_pg_trgm, migrations.RunPython.noop),
        *(
            AddTrigramIndex(
                model_name="agentsession",
                index=GinIndex(
                    OpClass(Upper(Cast(column, models.TextField())), name="gin_trgm_ops"),
                    name=f"session_{column}_trigram",
                ),
            )
            for column in ("external_id", "title", "agent")
        ),
    ]
