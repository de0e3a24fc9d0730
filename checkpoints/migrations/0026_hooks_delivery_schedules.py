from __future__ import annotations

from django.db import migrations

# name → (task, every, period); editable in the admin
SCHEDULES = {
    "Send due deliveries": ("checkpoints.tasks.send_due_deliveries", 1, "minutes"),
    "Delete old deliveries": ("checkpoints.tasks.delete_old_deliveries", 1, "days"),
}


def schedule(apps, schema_editor):
    """Retries of webhooks and notifications are picked up every minute; deliveries past DELIVERY_KEEP_DAYS go daily."""
    interval_model = apps.get_model("django_celery_beat", "IntervalSchedule")
    task_model = apps.get_model("django_celery_beat", "PeriodicTask")
    for name, (task, every, period) in SCHEDULES.items():
        interval, _ = interval_model.objects.get_or_create(every=every, period=period)
        task_model.objects.get_or_create(name=name, defaults={"task": task, "interval": interval, "enabled": True})


def unschedule(apps, schema_editor):
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(name__in=SCHEDULES).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("checkpoints", "0025_events_webhooks_notifications"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(schedule, unschedule)]
