"""Drift detection and the alert lists at scale.

* `AgentSession.drift_checked_seq`: the seq the drift job last read up to, so that it reads only the sessions
  with new checkpoints. Nullable: PostgreSQL adds it without rewriting the table, and the first run after
  the upgrade reads every session once, as every run did before.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("checkpoints", "0017_checkpoint_preview"),
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
    ]
