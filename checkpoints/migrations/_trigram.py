"""pg_trgm GIN indexes for case-insensitive substring search (`icontains`), shared by the migrations that add them.

`icontains` compares UPPER(column::text) LIKE UPPER('%text%'): the indexes are on that expression. They are made
on PostgreSQL when the role may create pg_trgm (trust auth as postgres can) and are kept out of the model state:
SQLite, remaking a table for a later migration, would try to build them. Elsewhere search scans as before.
Built CONCURRENTLY (writers go on), so the migrations that use this are non-atomic.
"""

from __future__ import annotations

from typing import Any

from django.db import DatabaseError, migrations, transaction


def _create_pg_trgm(schema_editor: Any) -> bool:
    try:
        with transaction.atomic(using=schema_editor.connection.alias):
            schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    except DatabaseError:
        pass  # no privilege: the search works without the indexes
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm'")
        return cursor.fetchone() is not None


def trigram_indexes(table: str, columns: dict[str, str], *, where: str = "") -> migrations.RunPython:
    """An operation that indexes `columns` (column → index name) of `table` for substring search (of the rows
    matching the SQL condition `where`, when given)."""

    def forwards(apps: Any, schema_editor: Any) -> None:
        if schema_editor.connection.vendor != "postgresql" or not _create_pg_trgm(schema_editor):
            return
        for column, name in columns.items():
            schema_editor.execute(
                f'CREATE INDEX CONCURRENTLY IF NOT EXISTS "{name}" ON "{table}" '
                f'USING gin ((UPPER("{column}"::text)) gin_trgm_ops)' + (f" WHERE {where}" if where else "")
            )

    def backwards(apps: Any, schema_editor: Any) -> None:
        if schema_editor.connection.vendor == "postgresql":
            for name in columns.values():
                schema_editor.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{name}"')

    return migrations.RunPython(forwards, backwards)


def without_trigram_indexes(table: str, columns: dict[str, str]) -> migrations.RunPython:
    """The reverse of `trigram_indexes`: drops them (and makes them again when unapplied)."""
    made = trigram_indexes(table, columns)
    return migrations.RunPython(made.reverse_code, made.code)
