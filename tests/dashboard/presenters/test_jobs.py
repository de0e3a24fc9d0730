"""The Jobs table's rows: what each schedule's newest run did, and whether a queued run is still waiting."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from checkpoints.models import JobRun
from checkpoints.services.heartbeats import stale_after
from dashboard.presenters.jobs import JobRow, job_rows


def gc_row(user, **kwargs) -> JobRow:
    return next(row for row in job_rows(user, **kwargs) if row.task.task == "checkpoints.tasks.collect_garbage")


def test_a_runs_counts_are_summed_up_only_for_who_sees_every_project(bob):
    JobRun.objects.create(job="gc", status="succeeded", finished_at=timezone.now(), result={"deleted": 4})
    now = timezone.now()
    assert gc_row(bob, system_figures=True, watched=None, now=now).summary == "deleted: 4"
    assert gc_row(bob, system_figures=False, watched=None, now=now).summary == ""


def test_a_queued_run_waits_until_a_worker_records_one(bob):
    now = timezone.now()
    task = PeriodicTask.objects.get(task="checkpoints.tasks.collect_garbage")
    assert gc_row(bob, system_figures=True, watched=(task.pk, now), now=now).waiting
    JobRun.objects.create(job="gc", started_at=now + timedelta(seconds=1))
    row = gc_row(bob, system_figures=True, watched=(task.pk, now), now=now + timedelta(seconds=2))
    assert not row.waiting and row.run is not None


def test_a_running_job_whose_worker_went_quiet_is_silent(bob):
    now = timezone.now()
    run = JobRun.objects.create(job="gc")
    assert not gc_row(bob, system_figures=True, watched=None, now=now).silent
    JobRun.objects.filter(pk=run.pk).update(heartbeat_at=now - stale_after() - timedelta(seconds=1))
    assert gc_row(bob, system_figures=True, watched=None, now=now).silent
