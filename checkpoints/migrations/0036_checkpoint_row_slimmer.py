"""Bytes per checkpoint (#23): the column `tool_calls` goes.

It left the model in 0019 while processes of the release before still wrote it; no code has read or written it
since, and every release since stores NULL there. Dropping a column does not rewrite the table on PostgreSQL.
"""

from django.db import migrations, models


def drop_if_present(apps, schema_editor):
    """An install upgraded from release 0.1 has the column; a database the squashed set made on SQLite does not."""
    checkpoint = apps.get_model("checkpoints", "Checkpoint")
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        columns = {column.name for column in connection.introspection.get_table_description(cursor, "checkpoints_checkpoint")}
    if "tool_calls" in columns:
        schema_editor.remove_field(checkpoint, checkpoint._meta.get_field("tool_calls"))


def add_back(apps, schema_editor):
    """Migrating back (to a release that still names the column in its migrations) needs the column again."""
    checkpoint = apps.get_model("checkpoints", "Checkpoint")
    field = models.IntegerField(blank=True, null=True)
    field.set_attributes_from_name("tool_calls")
    schema_editor.add_field(checkpoint, field)


class Migration(migrations.Migration):
    dependencies = [
        ("checkpoints", "0035_subgraphs_hops"),
    ]

    operations = [
        # the column is in the database but not in the model state (0019): put it back in the state to drop it
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddField(
                    model_name="checkpoint", name="tool_calls", field=models.IntegerField(blank=True, null=True)
                ),
            ],
        ),
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(drop_if_present, add_back)],
            state_operations=[migrations.RemoveField(model_name="checkpoint", name="tool_calls")],
        ),
    ]
