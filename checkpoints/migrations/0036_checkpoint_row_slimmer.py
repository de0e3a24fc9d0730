"""Bytes per checkpoint (#23): the column `tool_calls` goes.

It left the model in 0019 while processes of the release before still wrote it; no code has read or written it
since, and every release since stores NULL there. Dropping a column does not rewrite the table on PostgreSQL.
"""

from django.db import migrations, models


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
        migrations.RemoveField(model_name="checkpoint", name="tool_calls"),
    ]
