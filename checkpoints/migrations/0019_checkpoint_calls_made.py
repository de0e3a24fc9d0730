"""A restore offer counts the tool calls made on the path it discards, not the difference between what two
states record: an agent that keeps only its last messages records no more calls in its state as it goes on.

* `calls_made` (the calls made on the path to a checkpoint: its parent's and the ones it added) is a new
  nullable column without a default: added without rewriting or scanning the table. Rows stored before it are
  counted by `manage.py fill_previews` (batched, resumable); until then an offer over them names the
  checkpoints it discards without a count of calls.
* `tool_calls` (what a state records) leaves the model only: processes still running the previous release
  go on inserting it until they stop, so the column is dropped by a later release.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("checkpoints", "0018_session_name_search"),
    ]

    operations = [
        migrations.AddField(
            model_name="checkpoint",
            name="calls_made",
            field=models.IntegerField(
                blank=True,
                help_text="Tool calls made on the path to it: its parent's and the ones it added, counted when "
                "stored (empty: stored before the count existed; manage.py fill_previews counts them).",
                null=True,
            ),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.RemoveField(model_name="checkpoint", name="tool_calls")],
        ),
    ]
