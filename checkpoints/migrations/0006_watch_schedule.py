from __future__ import annotations

from django.db import migrations

TASK = "checkpoints.tasks.scan_watched_sources"


def schedule(apps, schema_editor):
    """Watched folders are scanned every 5 minutes; the schedule is editable in the admin."""
    interval_model = apps.get_model("django_celery_beat", "IntervalSchedule")
    task_model = apps.get_model("django_celery_beat", "PeriodicTask")
    every, _ = interval_model.objects.get_or_create(every=5, period="minutes")
    task_model.objects.get_or_create(
        name="Import from watched folders", defaults={"task": TASK, "interval": every, "enabled": True}
    )


def unschedule(apps, schema_editor):
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(task=TASK).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("checkpoints", "0005_import_sources_and_jobs"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(schedule, unschedule)]
