"""Celery task names are data: beat's rows (written by migrations), CELERY_TASK_ROUTES and messages already in the
queue carry them. A task may move between modules; its name may not."""

from __future__ import annotations

import re
from pathlib import Path

from django.conf import settings

from config.celery import app

MIGRATIONS = Path(__file__).resolve().parents[2] / "checkpoints" / "migrations"
TASK_NAMES = {
    "checkpoints.tasks.import_archive",
    "checkpoints.tasks.scan_watched_sources",
    "checkpoints.tasks.apply_retention",
    "checkpoints.tasks.take_routine_checkpoints",
    "checkpoints.tasks.detect_drift",
    "checkpoints.tasks.collect_garbage",
    "checkpoints.tasks.send_delivery",
    "checkpoints.tasks.send_due_deliveries",
    "checkpoints.tasks.delete_old_deliveries",
}


def registered_names() -> set[str]:
    app.loader.import_default_modules()  # what a worker imports at start (the apps' tasks modules)
    return {name for name in app.tasks if name.startswith("checkpoints.")}


def test_a_worker_registers_each_task_under_the_name_it_has_always_had():
    assert registered_names() == TASK_NAMES


def test_every_task_beat_schedules_or_the_routes_name_is_registered():
    scheduled = {
        name
        for migration in MIGRATIONS.glob("*.py")
        for name in re.findall(r"[\"'](checkpoints\.tasks\.\w+)[\"']", migration.read_text())
    }
    assert scheduled  # the beat migrations were read
    assert scheduled | set(settings.CELERY_TASK_ROUTES) <= registered_names()
