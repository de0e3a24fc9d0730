"""Bytes per checkpoint (#23): name search leaves the checkpoint rows; unnamed checkpoints leave the name index.

* The admin's name search (`models.name_contains`) finds names among the sessions' name tallies (SessionCount,
  a few rows a session) through a pg_trgm index there, then the checkpoints through `checkpoint_session_name`:
  `checkpoint_name_trigram`, an entry per trigram of every checkpoint's name, goes.
* `checkpoint_session_name` keeps named checkpoints only (every query of it names a name).

Indexes are built and dropped CONCURRENTLY on PostgreSQL (writers go on), hence non-atomic; elsewhere the
schema editor does it.
"""

from django.db import migrations, models

from ._trigram import trigram_indexes, without_trigram_indexes

OLD_NAME_INDEX = models.Index(fields=["session", "name", "seq"], name="checkpoint_session_name")
NEW_NAME_INDEX = models.Index(
    fields=["session", "name", "seq"], condition=~models.Q(name=""), name="checkpoint_session_name"
)


def _swap(old, new):
    def run(apps, schema_editor):
        model = apps.get_model("checkpoints", "Checkpoint")
        if schema_editor.connection.vendor != "postgresql":
            schema_editor.remove_index(model, old)
            schema_editor.add_index(model, new)
            return
        # built under a temporary name beside the old one, so name queries keep an index throughout
        building = f"{new.name}_new"
        sql = str(new.create_sql(model, schema_editor, concurrently=True)).replace(f'"{new.name}"', f'"{building}"')
        schema_editor.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{building}"')
        schema_editor.execute(sql)
        schema_editor.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{old.name}"')
        schema_editor.execute(f'ALTER INDEX "{building}" RENAME TO "{new.name}"')

    return run


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("checkpoints", "0036_checkpoint_row_slimmer"),
    ]

    operations = [
        trigram_indexes("checkpoints_sessioncount", {"value": "count_name_trigram"}, where="field = 'name'"),
        without_trigram_indexes("checkpoints_checkpoint", {"name": "checkpoint_name_trigram"}),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveIndex(model_name="checkpoint", name="checkpoint_session_name"),
                migrations.AddIndex(model_name="checkpoint", index=NEW_NAME_INDEX),
            ],
            database_operations=[
                migrations.RunPython(_swap(OLD_NAME_INDEX, NEW_NAME_INDEX), _swap(NEW_NAME_INDEX, OLD_NAME_INDEX))
            ],
        ),
    ]
