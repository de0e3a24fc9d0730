"""Running tallies of each session's checkpoints (checkpoints.store.tallies): totals on the session, rollups by seq block
and hour, counts by name, kind and status; the timeline, the summary API and the overview read them instead of
counting a session's rows on every request.

* The session's columns come with constant database defaults: PostgreSQL 11+ adds them without rewriting the
  table, and processes still running the previous release go on writing sessions without them.
* The two tables are new: their indexes are built while they are empty.
* The backfill recounts the sessions from their rows, a hundred sessions per transaction (under their row locks),
  hence a non-atomic migration. Checkpoints written meanwhile by a process of the previous release are not
  tallied: `manage.py recount_tallies` after the rollout puts that right.
* The recount is frozen in _tallies_0021.py: a later change to checkpoints.store.tallies never changes what this
  migration writes (docs/decisions/0010-frozen-migrations.md).
"""

import django.db.models.deletion

import checkpoints.fields
from django.db import migrations, models

from ._tallies_0021 import recount


def backfill(apps, schema_editor):
    using = schema_editor.connection.alias
    sessions = apps.get_model("checkpoints", "AgentSession").objects.using(using).order_by("pk")
    recount(apps, using, list(sessions.values_list("pk", flat=True)))


def _tally(help_text="", big=False):
    field = models.BigIntegerField if big else models.IntegerField
    return field(default=0, db_default=0, help_text=help_text)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("checkpoints", "0020_drift_scale"),
    ]

    operations = [
        migrations.AddField(model_name="agentsession", name="checkpoint_count", field=_tally()),
        migrations.AddField(
            model_name="agentsession",
            name="raw_bytes",
            field=_tally("Its checkpoints' state sizes, summed.", big=True),
        ),
        migrations.AddField(
            model_name="agentsession",
            name="stored_bytes",
            field=_tally("What its checkpoints added to the store.", big=True),
        ),
        migrations.AddField(
            model_name="agentsession", name="failed_count", field=_tally("Checkpoints that failed or halted.")
        ),
        migrations.AddField(
            model_name="agentsession",
            name="tool_failed_count",
            field=_tally("Checkpoints with a failed tool call."),
        ),
        migrations.CreateModel(
            name="SessionRollup",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("block", models.IntegerField(help_text="(seq - 1) // ROLLUP_BLOCK")),
                ("hour", models.DateTimeField()),
                ("count", models.IntegerField()),
                ("steps", models.IntegerField(help_text="Checkpoints of kind step.")),
                (
                    "trouble",
                    models.IntegerField(
                        help_text="Checkpoints in trouble: failed, halted or with a failed tool call."
                    ),
                ),
                ("raw_max", models.BigIntegerField(help_text="The largest state.")),
                ("stored_bytes", models.BigIntegerField()),
                ("first_seq", models.IntegerField()),
                ("last_seq", models.IntegerField()),
                (
                    "session",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="checkpoints.agentsession",
                    ),
                ),
            ],
            options={
                "indexes": [models.Index(fields=["hour"], name="rollup_hour")],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("session", "block", "hour"), name="rollup_per_session_block_hour"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="SessionCount",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "field",
                    models.CharField(
                        choices=[("name", "Name"), ("kind", "Kind"), ("status", "Status")], max_length=10
                    ),
                ),
                ("value", checkpoints.fields.SafeCharField(max_length=200)),
                ("count", models.IntegerField()),
                (
                    "session",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="checkpoints.agentsession",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("session", "field", "value"), name="count_per_session_field_value"
                    )
                ],
            },
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
