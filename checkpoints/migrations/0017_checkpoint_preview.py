"""Each checkpoint says what happened at it in one line, and whether a tool call it added failed.

* Both columns come with constant database defaults: PostgreSQL 11+ adds them without rewriting the table,
  and processes still running the previous release go on inserting without them. Older checkpoints keep an
  empty preview (the timeline shows their name alone).
* The partial index of checkpoints in trouble (the timeline's index of failures) is built CONCURRENTLY on
  PostgreSQL, hence a non-atomic migration.
"""

import importlib

from django.db import migrations, models

import checkpoints.fields

AddIndexConcurrentlyOnPostgres = importlib.import_module(
    "checkpoints.migrations.0013_tree_parents"
).AddIndexConcurrentlyOnPostgres


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("checkpoints", "0016_checkpoint_tool_calls"),
    ]

    operations = [
        migrations.AddField(
            model_name="checkpoint",
            name="preview",
            field=checkpoints.fields.SafeCharField(
                blank=True,
                db_default="",
                help_text="What happened here in one line (the tool call and its result, or the message it added).",
                max_length=200,
            ),
        ),
        migrations.AddField(
            model_name="checkpoint",
            name="tool_failed",
            field=models.BooleanField(
                db_default=False, default=False, help_text="A tool call this checkpoint added failed."
            ),
        ),
        AddIndexConcurrentlyOnPostgres(
            model_name="checkpoint",
            index=models.Index(
                condition=models.Q(("status__in", ["failed", "halted"]), ("tool_failed", True), _connector="OR"),
                fields=["session", "seq"],
                name="checkpoint_trouble",
            ),
        ),
    ]
