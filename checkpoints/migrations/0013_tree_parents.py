"""Checkpoints form a true tree: mark where history forks, without locking writers on a large table.

* The column comes with a constant database default: PostgreSQL 11+ adds it without rewriting the
  table, and processes still running the previous release go on inserting without it.
* Until now only a restore could point back (its parent is the restore target): those are marked in
  one statement over the kind index, touching the restores alone. A parent that is not the previous
  seq because retention deleted the checkpoints between is not a branch, so nothing else is marked.
* On PostgreSQL the partial index is built CONCURRENTLY (writers go on meanwhile), hence a
  non-atomic migration.
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models
from django.db.models import F, Q


class AddIndexConcurrentlyOnPostgres(AddIndexConcurrently):
    """CREATE INDEX CONCURRENTLY on PostgreSQL; a plain index elsewhere (SQLite has no concurrent build)."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            return super().database_forwards(app_label, schema_editor, from_state, to_state)
        return migrations.AddIndex.database_forwards(self, app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            return super().database_backwards(app_label, schema_editor, from_state, to_state)
        return migrations.AddIndex.database_backwards(self, app_label, schema_editor, from_state, to_state)


def mark_restores(apps, schema_editor):
    Checkpoint = apps.get_model("checkpoints", "Checkpoint")
    Checkpoint.objects.filter(kind="restore", parent__isnull=False).exclude(parent__seq=F("seq") - 1).update(
        starts_branch=True
    )


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("checkpoints", "0012_project_memberships"),
    ]

    operations = [
        migrations.AddField(
            model_name="checkpoint",
            name="starts_branch",
            field=models.BooleanField(
                default=False,
                db_default=False,
                help_text="Its parent is not the checkpoint that arrived just before it: history forks here.",
            ),
        ),
        migrations.RunPython(mark_restores, migrations.RunPython.noop),
        AddIndexConcurrentlyOnPostgres(
            model_name="checkpoint",
            index=models.Index(
                condition=Q(starts_branch=True), fields=["session", "seq"], name="checkpoint_branch_start"
            ),
        ),
    ]
