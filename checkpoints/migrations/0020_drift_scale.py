"""Drift detection and the alert lists at scale.

* `AgentSession.drift_checked_seq`: the seq the drift job last read up to, so that it reads only the sessions
  with new checkpoints. Nullable: PostgreSQL adds it without rewriting the table, and the first run after
  the upgrade reads every session once, as every run did before.
* The alerts list's index (unresolved alerts, most severe first, then newest) and the API's (every alert,
  newest first): a page is an index range, not a sort of every alert. Built CONCURRENTLY on PostgreSQL,
  hence a non-atomic migration.
"""

import importlib

from django.db import migrations, models

AddIndexConcurrentlyOnPostgres = importlib.import_module(
    "checkpoints.migrations.0013_tree_parents"
).AddIndexConcurrentlyOnPostgres


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("checkpoints", "0019_checkpoint_calls_made"),
    ]

    operations = [
        migrations.AddField(
            model_name="agentsession",
            name="drift_checked_seq",
            field=models.PositiveIntegerField(
                blank=True,
                help_text="last_seq when drift detection last read its checkpoints: the job skips sessions with none new.",
                null=True,
            ),
        ),
        AddIndexConcurrentlyOnPostgres(
            model_name="driftalert",
            index=models.Index(
                models.OrderBy(
                    models.Case(
                        models.When(severity="critical", then=models.Value(2)),
                        models.When(severity="warning", then=models.Value(1)),
                        default=models.Value(0),
                        output_field=models.SmallIntegerField(),
                    ),
                    descending=True,
                ),
                models.OrderBy(models.F("opened_at"), descending=True),
                models.OrderBy(models.F("id"), descending=True),
                condition=models.Q(("state", "resolved"), _negated=True),
                name="alert_unresolved_list",
            ),
        ),
        AddIndexConcurrentlyOnPostgres(
            model_name="driftalert",
            index=models.Index(fields=["-opened_at", "-id"], name="alert_opened"),
        ),
    ]
