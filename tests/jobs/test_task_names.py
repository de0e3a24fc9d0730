"""Celery task names are data: beat's rows (written by migrations), CELERY_TASK_ROUTES and messages already in the
queue carry them. A task may move between modules; its name may not. checkpoints/task_names.py lists them once;
these tests prove that everything else that names a task agrees with it, the frozen migrations included."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
from django.conf import settings
from django_celery_beat.models import PeriodicTask

from checkpoints import task_names
from config.celery import app
from dashboard.presenters.jobs import JOB_FOR_TASK

MIGRATIONS = Path(__file__).resolve().parents[2] / "checkpoints" / "migrations"
# The names as they have always been: the registry may not rename one (a queued message would find no task).
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
    "checkpoints.tasks.run_recovery",
    "checkpoints.tasks.run_purge",
}
SCHEDULED = [task for task in task_names.TASKS if task.beat]


def registered_names() -> set[str]:
    app.loader.import_default_modules()  # what a worker imports at start (the apps' tasks modules)
    return {name for name in app.tasks if name.startswith("checkpoints.")}


def migration_literals() -> set[str]:
    return {
        name
        for migration in MIGRATIONS.glob("*.py")
        for name in re.findall(r"[\"'](checkpoints\.tasks\.\w+)[\"']", migration.read_text())
    }


def test_a_worker_registers_each_task_under_the_name_it_has_always_had():
    assert registered_names() == TASK_NAMES


def test_the_registry_holds_every_task_a_worker_registers_and_no_other():
    names = [task.name for task in task_names.TASKS]
    assert len(names) == len(set(names))
    assert set(names) == registered_names()


def test_each_task_is_registered_under_its_registry_name_not_its_module_path():
    app.loader.import_default_modules()
    for task in task_names.TASKS:
        assert app.tasks[task.name].name == task.name


def test_every_task_beat_schedules_or_the_routes_name_is_registered():
    scheduled = migration_literals()
    assert scheduled  # the beat migrations were read
    assert scheduled | set(settings.CELERY_TASK_ROUTES) <= registered_names()


def test_the_routes_are_the_registrys_queues():
    assert settings.CELERY_TASK_ROUTES == {
        "checkpoints.tasks.send_delivery": {"queue": "deliveries"},
        "checkpoints.tasks.send_due_deliveries": {"queue": "deliveries"},
    }
    assert task_names.routes() == settings.CELERY_TASK_ROUTES


def test_the_frozen_migrations_write_the_registrys_beat_rows_with_their_literal_names():
    """The migrations keep their own strings (they are frozen); the registry must say the same, row for row."""
    squashed = importlib.import_module("checkpoints.migrations.0001_squashed_0028_state_hash_by_part")
    assert {task.beat: (task.name, task.every, task.period) for task in SCHEDULED} == squashed.SCHEDULES
    # the original 0006, 0008 and 0026, which a database at 0028 ran, name the same tasks
    originals = set()
    for module in ("0006_watch_schedule", "0008_default_retention_and_schedules", "0026_hooks_delivery_schedules"):
        text = (MIGRATIONS / f"{module}.py").read_text()
        originals |= set(re.findall(r"[\"'](checkpoints\.tasks\.\w+)[\"']", text))
    assert originals == {task.name for task in SCHEDULED}
    assert migration_literals() == originals


@pytest.mark.django_db
def test_a_migrated_database_has_one_beat_row_per_scheduled_task_with_its_registry_name():
    rows = dict(PeriodicTask.objects.filter(task__startswith="checkpoints.").values_list("name", "task"))
    assert rows == {task.beat: task.name for task in SCHEDULED}
    every = {
        row.name: (row.interval.every, row.interval.period)
        for row in PeriodicTask.objects.filter(name__in=rows).select_related("interval")
    }
    assert every == {task.beat: (task.every, task.period) for task in SCHEDULED}


def test_the_jobs_page_pairs_each_scheduled_task_with_the_job_its_runs_are_recorded_under():
    assert JOB_FOR_TASK == {
        "checkpoints.tasks.apply_retention": "retention",
        "checkpoints.tasks.take_routine_checkpoints": "routine_checkpoints",
        "checkpoints.tasks.detect_drift": "drift_detection",
        "checkpoints.tasks.collect_garbage": "gc",
        "checkpoints.tasks.scan_watched_sources": "watched_sources",
        "checkpoints.tasks.delete_old_deliveries": "delivery_cleanup",
        "checkpoints.tasks.send_due_deliveries": "delivery_sweep",
    }


def test_task_names_imports_nothing_so_settings_can_import_it_before_django_is_set_up():
    text = Path(task_names.__file__).read_text()
    imports = re.findall(r"^(?:from|import) (\S+)", text, flags=re.MULTILINE)
    assert set(imports) <= {"__future__", "dataclasses"}
