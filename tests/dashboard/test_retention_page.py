from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from checkpoints.models import AuditEvent, Checkpoint, JobRun, JobRunStatus, RetentionPolicy
from tests.helpers import select, text

URL = "/retention/"
DRY_RUN_URL = "/retention/dry-run/"


def stats(html: str) -> dict[str, str]:
    """The figures the page shows, by their label."""
    return {text(label): text(label.getprevious()) for label in select(html, ".stat .stat-label")}


def record_dry_run():
    """What beat, the command or the page's Recompute button leave behind: a recorded dry run."""
    from checkpoints.tasks import apply_retention

    return apply_retention.delay(dry_run=True, triggered_by="test").get()


@pytest.fixture
def doomed(make_session, make_checkpoint):
    """A session where a step policy of keep_last=2 deletes the three oldest checkpoints."""
    RetentionPolicy.objects.filter(project=None, kind="step").update(
        keep_last=2, keep_first=False, keep_latest_per_name=False
    )
    session = make_session("trimmed")
    for i in range(5):
        make_checkpoint(session, {"i": i}, name=f"step-{i}")
    return session


def test_the_route_is_named_retention():
    assert reverse("dashboard:retention") == URL


def test_viewer_sees_policies_and_the_last_dry_run_but_no_run_button(client, bob, doomed):
    record_dry_run()
    client.force_login(bob)
    response = client.get(URL)
    html = response.content.decode()
    assert response.status_code == 200
    assert "keep the last 2 per session" in html
    assert "keep the last 3 per agent" in html  # routine default
    assert stats(html)["to delete"] == "3"
    assert stats(html)["step"] == "3"
    for checkpoint in Checkpoint.objects.filter(session=doomed, seq__lte=3):
        assert reverse("dashboard:checkpoint_detail", args=[checkpoint.pk]) in html
    assert reverse("dashboard:session_detail", args=[doomed.pk]) in html
    assert "Run now" not in html and "Recompute" not in html
    assert "by a dry run (test)" in html
    assert [text(link) for link in select(html, "nav a[aria-current=page]")] == ["Retention"]
    assert Checkpoint.objects.filter(session=doomed).count() == 5  # the preview deletes nothing


def test_preview_and_policies_cover_only_the_users_projects(
    client, bob, doomed, other_project, make_checkpoint, make_session
):
    theirs = make_session("theirs-run", in_project=other_project)
    for i in range(5):
        make_checkpoint(theirs, {"i": i}, name=f"theirs-{i}")
    RetentionPolicy.objects.create(project=other_project, kind="routine", keep_last=9)
    record_dry_run()
    client.force_login(bob)
    html = client.get(URL).content.decode()
    assert stats(html)["to delete"] == "3"  # ours only, not 6
    assert "theirs" not in html and "globex" not in html and "keep the last 9" not in html


def test_a_project_operator_is_not_offered_a_run_for_every_project(client, alice, doomed):
    client.force_login(alice)
    assert "Run now" not in client.get(URL).content.decode()


def test_run_now_asks_first_with_the_counts_by_kind(client, staff_operator, doomed, django_capture_on_commit_callbacks):
    RetentionPolicy.objects.filter(project=None, kind="routine").update(keep_last=0, keep_last_scope="session")
    session = doomed
    Checkpoint.objects.filter(session=session, seq=2).update(kind="routine")
    client.force_login(staff_operator)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = client.post(URL)
    html = response.content.decode()
    assert response.status_code == 200 and not callbacks
    assert "Run retention now?" in html
    counts = [[text(cell) for cell in row.cssselect("td")] for row in select(html, "table.confirm-counts tbody tr")]
    assert counts == [["routine", "1"], ["step", "2"]]
    [confirm] = select(html, "form:has(input[name=confirm][value=yes]) button")
    assert text(confirm) == "Delete 3 checkpoints now"
    assert select(html, f'main a[href="{URL}"]')  # Cancel goes back
    assert Checkpoint.objects.filter(session=session).count() == 5 and not JobRun.objects.exists()


def test_staff_operator_run_now_queues_a_run_and_records_it(
    client, staff_operator, doomed, django_capture_on_commit_callbacks
):
    client.force_login(staff_operator)
    assert "Run now" in client.get(URL).content.decode()

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = client.post(URL, {"confirm": "yes"})

    assert response.status_code == 302 and response["Location"] == URL
    assert len(callbacks) == 1
    run = JobRun.objects.get(job="retention", dry_run=False)
    assert run.triggered_by == "console:olga" and not run.dry_run and run.status == JobRunStatus.SUCCEEDED
    assert run.result["deleted"] == 3
    assert list(Checkpoint.objects.filter(session=doomed).values_list("seq", flat=True)) == [4, 5]

    page = client.get(URL).content.decode()
    assert "Retention run queued" in page
    assert "console:olga" in page and "by a dry run (after retention)" in page  # the run refreshed the preview
    runs = [[text(cell) for cell in row.cssselect("td")][1:5] for row in select(page, "table.retention-runs tbody tr")]
    assert ["console:olga", "no", "3", "2"] in runs  # who, not a dry run, deleted and kept
    event = AuditEvent.objects.get(action="run_job")
    assert (event.actor, event.target) == ("olga", "Apply retention")


def test_run_now_requires_a_csrf_token(staff_operator, doomed, django_capture_on_commit_callbacks):
    client = Client(enforce_csrf_checks=True)
    client.force_login(staff_operator)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        assert client.post(URL).status_code == 403
    assert not callbacks and not JobRun.objects.exists()

    page = client.get(URL).content.decode()
    token = select(page, "input[name=csrfmiddlewaretoken]")[0].get("value")
    with django_capture_on_commit_callbacks(execute=True):
        assert client.post(URL, {"csrfmiddlewaretoken": token, "confirm": "yes"}).status_code == 302
    assert JobRun.objects.filter(job="retention", triggered_by="console:olga").exists()


def test_page_shows_runs_from_the_command_and_skipped_runs(client, bob, db):
    JobRun.objects.create(job="retention", triggered_by="beat", status=JobRunStatus.SKIPPED, result={"reason": "x"})
    JobRun.objects.create(job="gc", triggered_by="beat")
    client.force_login(bob)
    html = client.get(URL).content.decode()
    assert select(html, ".status-skipped") and not select(html, ".status-running")


def test_page_query_count_is_bounded_on_a_big_session(client, bob, big_session, django_assert_max_num_queries):
    record_dry_run()
    client.force_login(bob)
    with django_assert_max_num_queries(16):
        response = client.get(URL)
    assert response.status_code == 200
    assert "and " in response.content.decode()  # more doomed checkpoints than the preview lists


def test_the_preview_plans_the_other_sessions_and_names_one_it_cannot_read(
    client, bob, doomed, make_session, make_checkpoint, poison
):
    bad = make_session("unreadable")
    for i in range(4):
        make_checkpoint(bad, {"i": i}, name=f"step-{i}")
    poison(bad)
    record_dry_run()
    client.force_login(bob)
    response = client.get(URL)
    html = response.content.decode()
    assert response.status_code == 200
    assert response.context["plan"].deleted == 3  # the doomed session's plan, complete
    assert "1 session failed and was left out" in html and "acme/unreadable" in html


def test_the_page_shows_the_last_dry_run_with_its_time_not_a_plan_of_its_own(
    client, bob, doomed, make_checkpoint, time_machine
):
    time_machine.move_to("2027-03-02 09:00Z")
    record_dry_run()
    for i in range(5, 9):  # arrive after the dry run: the next real run deletes them too
        make_checkpoint(doomed, {"i": i}, name=f"step-{i}")
    time_machine.move_to("2027-03-02 09:30Z")
    client.force_login(bob)

    html = client.get(URL).content.decode()

    assert stats(html)["to delete"] == "3"
    assert 'Computed <time datetime="2027-03-02T09:00' in html and "30 min ago" in html
    assert "Retention ran after it" not in html


def test_no_dry_run_yet_says_so_and_offers_one_to_operators(client, alice, bob, doomed):
    client.force_login(bob)
    html = client.get(URL).content.decode()
    assert "No dry run recorded yet" in html and "to delete" not in html
    assert DRY_RUN_URL not in html
    client.force_login(alice)
    assert select(client.get(URL), f'form[action="{DRY_RUN_URL}"]')


def test_an_operator_queues_a_dry_run_that_refreshes_the_preview(
    client, alice, doomed, django_capture_on_commit_callbacks
):
    client.force_login(alice)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = client.post(DRY_RUN_URL)

    assert response.status_code == 302 and response["Location"] == URL
    assert len(callbacks) == 1
    run = JobRun.objects.get(job="retention", dry_run=True)
    assert run.dry_run and run.triggered_by == "console:alice" and run.status == JobRunStatus.SUCCEEDED
    assert Checkpoint.objects.filter(session=doomed).count() == 5
    event = AuditEvent.objects.get(action="run_job")
    assert (event.actor, event.target) == ("alice", "Apply retention (dry run)")
    html = client.get(URL).content.decode()
    assert "Dry run queued" in html and "by a dry run (console:alice)" in html and "Recompute" in html
    assert stats(html)["to delete"] == "3"


def test_a_real_run_after_the_dry_run_is_said(client, staff_operator, doomed):
    record_dry_run()
    call_command("apply_retention", stdout=StringIO())  # the command does not queue a dry run after it
    client.force_login(staff_operator)
    html = client.get(URL).content.decode()
    assert "Retention ran after it: some of these checkpoints may be gone." in html
