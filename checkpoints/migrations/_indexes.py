"""Changing an index of a big table in a migration: dropping it, adding it, or replacing it under the same name."""

from __future__ import annotations

from typing import Any

from django.db import migrations, models
from django.db.migrations.operations.base import Operation


def index_change(model_name: str, old: models.Index | None, new: models.Index | None) -> Operation:
    """Drop `old`, add `new`, or replace one by the other. On PostgreSQL indexes are built and dropped CONCURRENTLY
    (writers go on: the migration must be non-atomic), a replacement under a temporary name beside the old index,
    so its queries keep an index throughout; elsewhere the schema editor does it."""
    state = []
    if old is not None:
        state.append(migrations.RemoveIndex(model_name=model_name.lower(), name=old.name))
    if new is not None:
        state.append(migrations.AddIndex(model_name=model_name.lower(), index=new))
    return migrations.SeparateDatabaseAndState(
        state_operations=state,
        database_operations=[migrations.RunPython(_replace(model_name, old, new), _replace(model_name, new, old))],
    )


def _replace(model_name: str, old: models.Index | None, new: models.Index | None) -> Any:
    def run(apps: Any, schema_editor: Any) -> None:
        model = apps.get_model("checkpoints", model_name)
        if schema_editor.connection.vendor != "postgresql":
            if old is not None:
                schema_editor.remove_index(model, old)
            if new is not None:
                schema_editor.add_index(model, new)
            return
        if new is not None:
            building = f"{new.name}_new"
            sql = str(new.create_sql(model, schema_editor, concurrently=True)).replace(f'"{new.name}"', f'"{building}"')
            schema_editor.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{building}"')
            schema_editor.execute(sql)
        if old is not None:
            schema_editor.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{old.name}"')
        if new is not None:
            schema_editor.execute(f'ALTER INDEX "{new.name}_new" RENAME TO "{new.name}"')

    return run
