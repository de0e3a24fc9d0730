from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from django_celery_beat.models import CrontabSchedule, IntervalSchedule, PeriodicTask
from lxml.html import HtmlElement

from checkpoints.models import AuditEvent, JobRun, RetentionPolicy
from tests.helpers import select, text

JOBS = reverse("dashboard:jobs")


def _gc_task() -> PeriodicTask:
    return PeriodicTask.objects.get(task="checkpoints.tasks.collect_garbage")


def _gc_run() -> JobRun:
    return JobRun.objects.create(
        job="gc",
        status="succeeded",
        triggered_by="beat",
        started_at=timezone.now() - timedelta(seconds=3),
        finished_at=timezone.now(),
        result={"marked": 12, "deleted": 4, "bytes_freed": 2048},
    )


def test_viewers_see_schedules_and_runs_but_no_run_button(client, bob):
    _gc_run()
    client.force_login(bob)
    response = client.get(JOBS)
    assert response.status_code == 200
    html = response.content.decode()
    for name in ("Apply retention", "Take routine checkpoints", "Detect drift", "Collect unreferenced chunks"):
        assert name in html
    assert select(html, ".status-succeeded")
    assert "Run now" not in html
    assert select(html, f'nav a[href="{JOBS}"]')  # the nav link


def test_a_runs_figures_span_every_project_so_only_staff_see_them(client, alice, staff_operator):
    _gc_run()
    client.force_login(alice)
    html = client.get(JOBS).content.decode()
    assert "deleted: 4" not in html and "only staff see them" in html
    client.force_login(staff_operator)
    html = client.get(JOBS).content.decode()
    assert "deleted: 4" in html and "bytes freed: 2048" in html


def test_a_project_operator_is_not_offered_a_run_for_every_project(client, alice):
    client.force_login(alice)
    assert "Run now" not in client.get(JOBS).content.decode()


def _row(client, task: PeriodicTask) -> HtmlElement:
    [row] = select(client.get(JOBS), f"tr#job-{task.pk}")
    return row


def _next_run(client, task: PeriodicTask) -> HtmlElement:
    [cell] = _row(client, task).cssselect("td[data-label='Next run']")
    return cell


def _local(at: datetime) -> str:
    return timezone.localtime(at).strftime("%Y-%m-%d %H:%M")


def test_next_run_is_last_run_plus_interval_or_due_now(client, alice, time_machine):
    time_machine.move_to(datetime(2027, 3, 2, 9, 0, tzinfo=UTC), tick=False)
    task = _gc_task()  # every day
    client.force_login(alice)
    PeriodicTask.objects.filter(pk=task.pk).update(last_run_at=timezone.now() - timedelta(hours=1))
    [when] = _next_run(client, task).cssselect("time")
    assert (when.get("title"), text(when)) == (_local(datetime(2027, 3, 3, 8, 0, tzinfo=UTC)), "in 23 h")
    PeriodicTask.objects.filter(pk=task.pk).update(last_run_at=timezone.now() - timedelta(days=2))
    assert text(_next_run(client, task)) == "due now"


def test_a_crontab_schedule_shows_its_next_run(client, alice, time_machine):
    time_machine.move_to(datetime(2027, 3, 2, 9, 0, tzinfo=UTC), tick=False)
    four_am, _ = CrontabSchedule.objects.get_or_create(minute="0", hour="4", timezone="UTC")
    task = PeriodicTask.objects.create(name="Nightly", task="checkpoints.tasks.collect_garbage", crontab=four_am)
    client.force_login(alice)
    [when] = _next_run(client, task).cssselect("time")
    assert when.get("title") == _local(datetime(2027, 3, 3, 4, 0, tzinfo=UTC))  # 04:00 has passed today


def test_celerys_own_clean_up_task_is_named_plainly(client, alice):
    task = PeriodicTask.objects.create(
        name="celery.backend_cleanup",
        task="celery.backend_cleanup",
        crontab=CrontabSchedule.objects.get_or_create(minute="0", hour="4")[0],
    )
    client.force_login(alice)
    assert [text(name) for name in _row(client, task).cssselect("strong")] == ["Celery: clear expired task results"]


def test_the_every_minute_delivery_sweep_shows_its_last_run_like_every_other_job(client, bob):
    from checkpoints import tasks
    from dashboard.presenters.jobs import JOB_FOR_TASK

    task = PeriodicTask.objects.get(task="checkpoints.tasks.send_due_deliveries")
    client.force_login(bob)
    [cell] = _row(client, task).cssselect("td[data-label='Last run']")
    assert text(cell) == "never"

    tasks.send_due_deliveries()  # as beat sends it every minute

    [cell] = _row(client, task).cssselect("td[data-label='Last run']")
    assert "never" not in text(cell) and cell.cssselect(".status-succeeded") and "by beat" in text(cell)
    # every job the migrations schedule records its runs where the page reads them
    scheduled = set(PeriodicTask.objects.filter(task__startswith="checkpoints.").values_list("task", flat=True))
    assert scheduled and scheduled <= set(JOB_FOR_TASK)


def test_a_task_whose_runs_are_not_recorded_says_so_and_when_beat_last_sent_it(client, alice):
    task = PeriodicTask.objects.create(
        name="celery.backend_cleanup",
        task="celery.backend_cleanup",
        crontab=CrontabSchedule.objects.get_or_create(minute="0", hour="4")[0],
        last_run_at=timezone.now() - timedelta(hours=3),
    )
    client.force_login(alice)
    [cell] = _row(client, task).cssselect("td[data-label='Last run']")
    assert "sent 3 h ago" in text(cell) and "not recorded" in text(cell)


def test_run_now_of_a_job_that_deletes_asks_first(client, staff_operator, django_capture_on_commit_callbacks):
    _gc_run()
    client.force_login(staff_operator)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = client.post(reverse("dashboard:job_run", args=[_gc_task().pk]))
    html = response.content.decode()
    assert response.status_code == 200 and not callbacks
    assert "Collect unreferenced chunks now?" in html
    assert "no checkpoint and no live state references" in html and "The last run deleted 4 chunks" in html
    assert select(html, "form input[name=confirm][value=yes]") and select(html, f'main a[href="{JOBS}"]')
    assert JobRun.objects.count() == 1


def test_run_now_of_retention_asks_first_with_the_counts_by_kind(
    client, staff_operator, make_session, make_checkpoint, django_capture_on_commit_callbacks
):
    RetentionPolicy.objects.filter(project=None, kind="step").update(
        keep_last=1, keep_first=False, keep_latest_per_name=False
    )
    session = make_session()
    for i in range(4):
        make_checkpoint(session, {"i": i})
    task = PeriodicTask.objects.get(task="checkpoints.tasks.apply_retention")
    client.force_login(staff_operator)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        html = client.post(reverse("dashboard:job_run", args=[task.pk])).content.decode()
    assert not callbacks and "Run retention now?" in html and "Delete 3 checkpoints now" in html


def test_run_now_of_a_job_that_deletes_nothing_runs_at_once(client, staff_operator, django_capture_on_commit_callbacks):
    task = PeriodicTask.objects.get(task="checkpoints.tasks.detect_drift")
    client.force_login(staff_operator)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = client.post(reverse("dashboard:job_run", args=[task.pk]))
    assert response.status_code == 302 and len(callbacks) == 1
    assert AuditEvent.objects.get(action="run_job").target == task.name


def test_staff_operator_run_now_queues_the_task_and_its_run_is_recorded(
    client, staff_operator, django_capture_on_commit_callbacks
):
    client.force_login(staff_operator)
    assert "Run now" in client.get(JOBS).content.decode()
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = client.post(reverse("dashboard:job_run", args=[_gc_task().pk]), {"confirm": "yes"})
    assert response.status_code == 302 and response.url.startswith(f"{JOBS}?queued={_gc_task().pk}&at=")
    assert len(callbacks) == 1
    run = JobRun.objects.get(job="gc")
    assert run.status == "succeeded" and run.triggered_by == "console:olga"
    page = client.get(JOBS).content.decode()
    assert "Queued" in page and "console:olga" in page


def test_after_run_now_the_table_refreshes_itself_until_the_run_is_recorded_and_done(client, staff_operator):
    task = _gc_task()
    client.force_login(staff_operator)
    response = client.post(reverse("dashboard:job_run", args=[task.pk]), {"confirm": "yes"})  # no worker runs it
    page = client.get(response.url).content.decode()
    [table] = select(page, "#job-table")
    assert (table.get("hx-get"), table.get("hx-trigger")) == (response.url, "every 2s")
    assert "queued, waiting for a worker" in page and "Run now" not in [text(name) for name in select(page, "strong")]
    htmx = {"HX-Request": "true", "HX-Trigger": "job-table"}  # the table's own poll
    polled = client.get(response.url, headers=htmx)
    assert polled.status_code == 200 and polled.content.decode().lstrip().startswith('<div id="job-table"')
    run = JobRun.objects.create(job="gc", worker="host:1:abc")  # a worker picked it up
    polled = client.get(response.url, headers=htmx)
    assert polled.status_code == 200 and "running…" in polled.content.decode()
    JobRun.objects.filter(pk=run.pk).update(status="succeeded", finished_at=timezone.now())
    polled = client.get(response.url, headers=htmx)
    assert polled.status_code == 286  # htmx swaps the finished run in and stops polling
    assert not select(polled, "[hx-trigger]") and select(polled, ".status-succeeded")


def test_a_stale_or_forged_queued_marker_does_not_make_the_page_poll(client, staff_operator):
    client.force_login(staff_operator)
    old = int((timezone.now() - timedelta(hours=1)).timestamp())
    for query in (f"queued={_gc_task().pk}&at={old}", "queued=x&at=1", "queued=1&at=99999999999999"):
        assert not select(client.get(f"{JOBS}?{query}"), "#job-table[hx-trigger]")


def test_run_now_buttons_name_their_job(client, staff_operator):
    client.force_login(staff_operator)
    buttons = [text(button) for button in select(client.get(JOBS), "#job-table form button")]
    assert "Run now: Detect drift" in buttons
    assert "Run now…: Collect unreferenced chunks" in buttons  # it asks first


def test_run_now_sends_no_triggered_by_to_tasks_that_do_not_take_it(
    client, staff_operator, django_capture_on_commit_callbacks
):
    task = PeriodicTask.objects.filter(task="checkpoints.tasks.scan_watched_sources").first()
    if task is None:
        interval, _ = IntervalSchedule.objects.get_or_create(every=1, period="minutes")
        task = PeriodicTask.objects.create(
            name="Scan", task="checkpoints.tasks.scan_watched_sources", interval=interval
        )
    client.force_login(staff_operator)
    with django_capture_on_commit_callbacks(execute=True):
        client.post(reverse("dashboard:job_run", args=[task.pk]))
    assert JobRun.objects.get(job="watched_sources").triggered_by == "beat"


def test_run_now_needs_a_csrf_token(staff_operator):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(staff_operator)
    assert client.post(reverse("dashboard:job_run", args=[_gc_task().pk])).status_code == 403
    assert not JobRun.objects.exists()


@pytest.mark.parametrize("extra", [0, 20])
def test_the_page_costs_a_fixed_number_of_queries(client, alice, django_assert_max_num_queries, extra):
    interval, _ = IntervalSchedule.objects.get_or_create(every=10, period="minutes")
    for n in range(extra):
        PeriodicTask.objects.create(name=f"extra {n}", task="checkpoints.tasks.detect_drift", interval=interval)
    for job in ("gc", "retention", "drift_detection"):
        for _ in range(5):
            JobRun.objects.create(job=job, status="succeeded", finished_at=timezone.now(), result={"n": 1})
    client.force_login(alice)
    with django_assert_max_num_queries(8):
        assert client.get(JOBS).status_code == 200


def _run_with_failures(bad):
    JobRun.objects.create(
        job="retention",
        status="succeeded_with_errors",
        started_at=timezone.now() - timedelta(seconds=3),
        finished_at=timezone.now(),
        result={
            "deleted": 7,
            "kept": 3,
            "sessions_done": 12,
            "error_count": 3,
            "errors": [
                {"session": "acme/bad", "id": bad.pk, "error": "DataError: timestamp too small (before year 1)"},
                {"session": "acme/deleted-since", "id": bad.pk + 1000, "error": "ValueError: day is out of range"},
            ],
        },
    )


def test_staff_see_a_runs_figures_and_every_failed_session_still_there(client, staff_operator, make_session):
    bad = make_session("bad")
    _run_with_failures(bad)
    client.force_login(staff_operator)
    html = client.get(JOBS).content.decode()
    assert "succeeded with errors" in html
    assert "3 sessions failed and were left out" in html
    assert [text(link) for link in select(html, f'a[href="{reverse("dashboard:session_detail", args=[bad.pk])}"]')] == [
        "acme/bad"
    ]
    assert "timestamp too small" in html and "deleted-since" not in html  # a session gone since
    assert "2 more not listed" in html
    assert "deleted: 7" in html and "sessions done: 12" in html and "error count" not in html


def test_members_see_only_the_failures_of_their_own_sessions(client, bob, make_session, other_project):
    bad = make_session("bad")
    _run_with_failures(bad)
    client.force_login(bob)
    html = client.get(JOBS).content.decode()
    assert "1 session failed and was left out" in html and "more not listed" not in html
    assert [text(link) for link in select(html, f'a[href="{reverse("dashboard:session_detail", args=[bad.pk])}"]')] == [
        "acme/bad"
    ]
    assert "deleted: 7" not in html  # the run's figures span every project


def test_a_run_whose_worker_went_silent_shows_it_is_not_responding(client, bob, settings):
    silent = timezone.now() - timedelta(seconds=settings.JOB_STALE_AFTER_SECONDS + 60)
    JobRun.objects.create(job="gc", started_at=silent, heartbeat_at=silent, worker="host:1:abc")
    JobRun.objects.create(job="drift_detection", heartbeat_at=timezone.now(), worker="host:2:def")
    client.force_login(bob)
    html = client.get(JOBS).content.decode()
    [silent] = select(html, ".job-silent")  # the gc run only
    assert text(silent).startswith("not responding since")
    assert "running…" in html  # the drift run beats: it is simply running
