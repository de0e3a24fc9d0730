"""Checkpoint.tool_calls: how many tool calls a checkpoint's state records, counted at ingest, so that a restore
offer can say how many calls it takes off the agent's path without reading states. A nullable column without a
default or CHECK is added without rewriting or scanning the table; older rows are counted when first needed."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("checkpoints", "0015_agent_output_attempts"),
    ]

    operations = [
        migrations.AddField(
            model_name="checkpoint",
            name="tool_calls",
            field=models.IntegerField(
                blank=True,
                help_text="Tool calls its state records, counted when stored (empty: stored before the count existed).",
                null=True,
            ),
        ),
    ]
