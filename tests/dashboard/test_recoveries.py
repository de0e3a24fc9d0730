"""The console's fleet recovery: the Recover bar on the Alerts and Sessions pages, the preview (nothing written),
the run with its required reason, the progress page and Undo batch; per-project roles apply to every session."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from checkpoints.models import AgentSession, AuditEvent, Checkpoint, DriftAlert, Recovery


@pytest.fixture
def broken(make_session, make_checkpoint):
    def make(external_id: str, *, project=None):
        session = make_session(external_id, in_project=project)
        make_checkpoint(session, {"ok": 1})
        make_checkpoint(session, {"ok": 2})
        make_checkpoint(session, {"down": 1}, status="failed")
        session.refresh_from_db()
        return session

    return make


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def fingerprint():
    return Checkpoint.objects.count(), AuditEvent.objects.count(), Recovery.objects.count()


def test_the_lists_offer_the_recover_bar_and_row_boxes_to_operators_only(broken, alice, bob):
    session = broken("run-a")
    DriftAlert.objects.create(session=session, kind="failed", severity="critical", message="down")
    for name in ("alert_list", "session_list"):
        html = signed_in(alice).get(reverse(f"dashboard:{name}")).content.decode()
        assert 'id="fleet-form"' in html and f'value="{session.pk}" form="fleet-form"' in html
        assert "Recover…" in html and "Fork…" in html
        viewer = signed_in(bob).get(reverse(f"dashboard:{name}")).content.decode()
        assert "fleet-form" not in viewer


def test_choosing_all_reads_as_sessions_whether_or_not_the_list_counts_them(broken, alice):
    session = broken("run-a")
    DriftAlert.objects.create(session=session, kind="failed", severity="critical", message="down")
    alerts = signed_in(alice).get(reverse("dashboard:alert_list")).content.decode()  # alerts: sessions not counted
    assert "All sessions matching the filters (with such alerts)" in alerts
    sessions = signed_in(alice).get(reverse("dashboard:session_list")).content.decode()
    assert "All 1 session matching the filters" in sessions


def test_the_bar_carries_the_page_s_filters(broken, alice):
    broken("run-a")
    html = signed_in(alice).get(reverse("dashboard:session_list"), {"agent": "agent-7", "status": "failed"})
    text = html.content.decode()
    assert '<input type="hidden" name="agent" value="agent-7">' in text
    assert '<input type="hidden" name="status" value="failed">' in text


def test_the_preview_shows_each_session_and_writes_nothing(broken, alice, make_session, make_checkpoint):
    _a, _b = broken("run-a"), broken("run-b")
    before = fingerprint()
    response = signed_in(alice).get(reverse("dashboard:recovery_new"), {"all": "on", "action": "restore"})
    html = response.content.decode()
    assert response.status_code == 200
    assert fingerprint() == before
    assert "run-a" in html and "run-b" in html
    assert "discards 1 checkpoint" in html and "Restore 2 sessions" in html
    assert "Reason (required)" in html


def test_a_preview_of_nothing_ticked_says_what_to_do(alice, broken):
    broken("run-a")
    response = signed_in(alice).get(reverse("dashboard:recovery_new"), {"action": "restore", "rule": "last_good"})
    assert response.status_code == 400
    assert "Tick the sessions to recover" in response.content.decode()


def test_sessions_of_a_project_viewed_only_are_skipped_and_others_are_never_named(broken, alice, other_project, grant):
    third = type(other_project).objects.create(slug="initech", name="Initech")
    grant(alice, other_project, "viewer")
    broken("run-mine")
    broken("run-viewed", project=other_project)
    broken("run-hidden", project=third)
    html = signed_in(alice).get(reverse("dashboard:recovery_new"), {"all": "on"}).content.decode()
    assert "run-mine" in html and "run-viewed" in html and "run-hidden" not in html
    assert "you may see this session but not restore it" in html
    assert "Restore 1 session" in html


def test_running_needs_a_reason_then_queues_the_batch_and_the_progress_page_follows_it(
    broken, alice, django_capture_on_commit_callbacks
):
    a = broken("run-a")
    client = signed_in(alice)
    url = reverse("dashboard:recovery_new")
    refused = client.post(url, {"session": [a.pk], "action": "restore", "rule": "last_good", "reason": " "})
    assert refused.status_code == 200 and "say why" in refused.content.decode()
    assert not Recovery.objects.exists()
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(url, {"session": [a.pk], "action": "restore", "rule": "last_good", "reason": "outage"})
    recovery = Recovery.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse(
        "dashboard:recovery_detail", args=[recovery.pk]
    )
    page = client.get(response["Location"]).content.decode()
    assert "Recovery finished" in page and "1</strong> of 1 done" in page and "Undo batch" in page
    a.refresh_from_db()
    assert a.restore_generation == 1 and a.head.metadata["recovery"] == recovery.pk


def test_the_progress_partial_polls_until_the_recovery_finishes(alice, project):
    recovery = Recovery.objects.create(project=project, action="restore", rule="last_good", reason="r", total=3)
    client = signed_in(alice)
    partial = client.get(reverse("dashboard:recovery_detail", args=[recovery.pk]), headers={"HX-Request": "true"})
    html = partial.content.decode()
    assert 'hx-trigger="every 1s"' in html and "Waiting for a worker" in html and "<html" not in html
    Recovery.objects.filter(pk=recovery.pk).update(state="finished")
    assert (
        'hx-trigger="every 1s"'
        not in client.get(reverse("dashboard:recovery_detail", args=[recovery.pk])).content.decode()
    )


def test_undo_batch_returns_the_sessions_and_reports_those_written_to_since(
    broken, alice, make_checkpoint, django_capture_on_commit_callbacks
):
    _a, b = broken("run-a"), broken("run-b")
    client = signed_in(alice)
    with django_capture_on_commit_callbacks(execute=True):
        client.post(reverse("dashboard:recovery_new"), {"all": "on", "reason": "outage"})
    recovery = Recovery.objects.get()
    make_checkpoint(AgentSession.objects.get(pk=b.pk), {"resumed": 1})
    response = client.post(reverse("dashboard:recovery_undo", args=[recovery.pk]), follow=True)
    html = response.content.decode()
    assert "Batch undone: 1 sessions" in html and "run-b" in html
    assert AuditEvent.objects.filter(action="recovery_undo").count() == 1


def test_the_alerts_page_filters_by_the_opened_window_and_passes_it_to_the_recover_bar(broken, alice):
    from datetime import UTC, datetime

    early, late = broken("run-early"), broken("run-late")
    DriftAlert.objects.create(
        session=early, kind="failed", message="down", opened_at=datetime(2026, 3, 12, 1, 0, tzinfo=UTC)
    )
    DriftAlert.objects.create(
        session=late, kind="failed", message="down", opened_at=datetime(2026, 3, 12, 2, 20, tzinfo=UTC)
    )
    client = signed_in(alice)
    window = {"opened_since": "2026-03-12T02:10", "opened_until": "2026-03-12T02:40"}
    html = client.get(reverse("dashboard:alert_list"), window).content.decode()
    assert "run-late" in html and "run-early" not in html
    assert '<input type="hidden" name="opened_since" value="2026-03-12T02:10:00">' in html
    assert '<input type="hidden" name="opened_until" value="2026-03-12T02:40:00">' in html
    # the bar's "all matching" selects what the page listed: the same filter set
    passed = {"opened_since": "2026-03-12T02:10:00", "opened_until": "2026-03-12T02:40:00"}  # as the bar sends it
    preview = client.get(reverse("dashboard:recovery_new"), {"all": "on", "state": "unresolved", **passed})
    text = preview.content.decode()
    assert "run-late" in text and "run-early" not in text
    assert 'value="2026-03-12T02:10:00"' in text  # the recovery form shows the window it was given


@pytest.mark.parametrize(
    ("window", "error"),
    [
        ({"opened_since": "2026-13-40T99:00"}, "Enter a date and time"),
        ({"opened_since": "2026-03-12T03:00", "opened_until": "2026-03-12T02:00"}, "The window ends before it starts"),
    ],
)
def test_a_bad_opened_window_on_the_alerts_page_is_said_and_ignored(broken, alice, window, error):
    session = broken("run-a")
    DriftAlert.objects.create(session=session, kind="failed", message="down")
    response = signed_in(alice).get(reverse("dashboard:alert_list"), window)
    html = response.content.decode()
    assert response.status_code == 200 and error in html and "The filter was ignored" in html and "run-a" in html


def test_a_batch_over_two_projects_is_one_audit_row_that_members_of_one_project_do_not_read(
    broken, alice, bob, other_project, grant, django_user_model, django_capture_on_commit_callbacks
):
    grant(alice, other_project, "operator")
    broken("run-a")
    broken("run-g", project=other_project)
    with django_capture_on_commit_callbacks(execute=True):
        signed_in(alice).post(reverse("dashboard:recovery_new"), {"all": "on", "reason": "outage"})
    [batch] = AuditEvent.objects.filter(action="recovery")
    assert batch.project_id is None and batch.actor == "alice" and batch.reason == "outage"
    assert batch.details["sessions"] == {"acme/run-a": "restored", "globex/run-g": "restored"}
    assert batch.details["counts"] == {"restored": 2}
    assert batch.details["projects"] == {"acme": {"restored": 1}, "globex": {"restored": 1}}
    # bob views acme only: neither the batch row nor globex's session name reaches him
    assert not AuditEvent.objects.visible_to(bob).filter(action="recovery").exists()
    log = signed_in(bob).get(reverse("dashboard:audit_log")).content.decode()
    assert "run-g" not in log and "globex" not in log
    assert (
        AuditEvent.objects.visible_to(bob).filter(action="restore", details__recovery=batch.details["recovery"]).count()
        == 1
    )
    staff = django_user_model.objects.create_superuser("root", "root@example.com", "pw")
    assert AuditEvent.objects.visible_to(staff).filter(action="recovery").count() == 1
