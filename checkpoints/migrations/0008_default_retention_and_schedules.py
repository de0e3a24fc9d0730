from __future__ import annotations

from datetime import timedelta

from django.db import migrations

# Default retention (docs/jobs.md, "Retention"): defaults that reproduce the source systems.
POLICIES = [
    {"kind": "routine", "keep_last": 3, "keep_last_scope": "agent"},
    {"kind": "pre_operation", "until_operation_done": True},
    {"kind": "recovery", "max_age": timedelta(days=7)},
    *[
        {"kind": kind, "keep_last": 100, "keep_last_scope": "session", "keep_first": True, "keep_latest_per_name": True}
        for kind in ("step", "imported", "manual")
    ],
]

# name → (task, every, period)
SCHEDULES = {
    "Apply retention": ("checkpoints.tasks.apply_retention", 1, "hours"),
    "Take routine checkpoints": ("checkpoints.tasks.take_routine_checkpoints", 30, "minutes"),
    "Detect drift": ("checkpoints.tasks.detect_drift", 5, "minutes"),
    "Collect unreferenced chunks": ("checkpoints.tasks.collect_garbage", 1, "days"),
}


def install(apps, schema_editor):
    policy_model = apps.get_model("checkpoints", "RetentionPolicy")
    for policy in POLICIES:
        policy_model.objects.get_or_create(project=None, kind=policy["kind"], defaults=policy)
    interval_model = apps.get_model("django_celery_beat", "IntervalSchedule")
    task_model = apps.get_model("django_celery_beat", "PeriodicTask")
    for name, (task, every, period) in SCHEDULES.items():
        interval, _ = interval_model.objects.get_or_create(every=every, period=period)
        task_model.objects.get_or_create(name=name, defaults={"task": task, "interval": interval, "enabled": True})


def uninstall(apps, schema_editor):
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(name__in=SCHEDULES).delete()
    apps.get_model("checkpoints", "RetentionPolicy").objects.filter(project=None).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("checkpoints", "0007_job_runs"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(install, uninstall)]
