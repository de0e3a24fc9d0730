from __future__ import annotations

from datetime import timedelta

from django.urls import reverse
from django.utils import timezone

from checkpoints.models import AgentSession, Checkpoint, DriftAlert
from checkpoints.services import Actor, pin_checkpoint, record_audit
from tests.dashboard.test_session_list import add_sessions
from tests.helpers import select, text

URL = reverse("dashboard:overview")
HTMX = {"HX-Request": "true"}


def attention(response) -> list[str]:
    return [session.external_id for session in response.context["attention"]]


# ---- the page -------------------------------------------------------------------------------------


def test_counts_active_sessions_open_alerts_checkpoints_today_and_storage(client, bob, make_session, make_checkpoint):
    active, done = make_session("active"), make_session("done")
    AgentSession.objects.filter(pk=done.pk).update(status="completed")
    for i in range(3):
        make_checkpoint(active, {"items": list(range(i * 50))})
    make_checkpoint(done, {"n": 1}, created_at=timezone.now() - timedelta(days=2))
    DriftAlert.objects.create(session=active, kind="stalled", message="flat")
    DriftAlert.objects.create(session=done, kind="failed", message="x", state="resolved")
    client.force_login(bob)
    response = client.get(URL)
    html = response.content.decode()
    assert response.status_code == 200 and [text(heading) for heading in select(html, "h1")] == ["Overview"]
    assert response.context["counts"] == {"total": 2, "active": 1}
    assert response.context["open_alerts"] == 1
    totals = response.context["totals"]
    assert totals["created_since"] == 3
    assert totals["raw_bytes"] == sum(c.raw_bytes for c in Checkpoint.objects.all())
    assert totals["stored_bytes"] == sum(c.stored_bytes for c in Checkpoint.objects.all())
    assert "active session" in html and "open drift alert" in html and "checkpoints today" in html
    assert "storage used for" in html and "of states" in html


def test_counts_totals_attention_and_actions_cover_only_the_users_projects(
    client, bob, make_session, make_checkpoint, other_project
):
    ours = make_session("ours")
    make_checkpoint(ours, {"n": 1})
    theirs = make_session("theirs", in_project=other_project)
    for i in range(4):
        make_checkpoint(theirs, {"items": list(range(i * 100))})
    DriftAlert.objects.create(session=theirs, kind="stalled", message="their alert")
    record_audit(Actor.system("x"), "pin", session=theirs, reason="their action")
    client.force_login(bob)
    response = client.get(URL)
    assert response.context["counts"] == {"total": 1, "active": 1}
    assert response.context["open_alerts"] == 0
    totals = response.context["totals"]
    assert totals["created_since"] == 1
    assert totals["stored_bytes"] == Checkpoint.objects.get(session=ours).stored_bytes
    assert attention(response) == []
    html = response.content.decode()
    assert "their alert" not in html and "their action" not in html and "globex" not in html


def test_needs_attention_lists_the_most_severe_first_then_the_newest(client, bob, make_session):
    now = timezone.now()
    critical, warned, newest_warning, info = (make_session(name) for name in ("critical", "warned", "newer", "info"))
    AgentSession.objects.update(last_seen_at=now)
    DriftAlert.objects.create(
        session=critical, kind="failed", severity="critical", message="failed", opened_at=now - timedelta(hours=2)
    )
    DriftAlert.objects.create(session=critical, kind="stalled", message="stuck", opened_at=now)  # its warning
    DriftAlert.objects.create(session=warned, kind="repetition", message="m", opened_at=now - timedelta(minutes=5))
    DriftAlert.objects.create(session=newest_warning, kind="stalled", message="m", opened_at=now - timedelta(minutes=1))
    DriftAlert.objects.create(session=info, kind="cycle_count", severity="info", message="m", opened_at=now)
    client.force_login(bob)
    response = client.get(URL)
    assert attention(response) == ["critical", "newer", "warned", "info"]
    assert [(s.alert_kind, s.alert_message) for s in response.context["attention"]][0] == ("failed", "failed")


def test_sessions_needing_attention_come_first_by_severity_failures_then_alerts_then_silence(client, bob, make_session):
    now = timezone.now()
    alerting, failed, halted, silent, healthy, done = (
        make_session(name) for name in ("alerting", "failed", "halted", "silent", "healthy", "done")
    )
    AgentSession.objects.filter(pk__in=[failed.pk, halted.pk]).update(status="failed")
    AgentSession.objects.filter(pk=halted.pk).update(status="halted", updated_at=now + timedelta(seconds=1))
    AgentSession.objects.filter(pk=done.pk).update(status="completed", last_seen_at=now - timedelta(days=3))
    AgentSession.objects.filter(pk=silent.pk).update(last_seen_at=now - timedelta(minutes=45))
    AgentSession.objects.filter(pk__in=[alerting.pk, healthy.pk, failed.pk, halted.pk]).update(last_seen_at=now)
    DriftAlert.objects.create(session=alerting, kind="repetition", message="web_search('same query') 5 times")
    client.force_login(bob)
    response = client.get(URL)
    assert attention(response) == ["halted", "failed", "alerting", "silent"]  # a failed run is critical
    html = response.content.decode()
    assert "web_search(&#x27;same query&#x27;) 5 times" in html and "repetition" in html
    assert "silent for more than 30 min" in html
    assert select(html, f'a[href="{reverse("dashboard:session_detail", args=[alerting.pk])}"]')


def test_a_burst_of_alerts_of_one_kind_is_one_line_linking_to_the_filtered_alerts(client, bob, make_session):
    now = timezone.now()
    for i in range(6):
        DriftAlert.objects.create(session=make_session(f"long-{i}"), kind="long_running", message="long")
    looping = make_session("looping")
    DriftAlert.objects.create(session=looping, kind="repetition", message="same call 5 times")
    AgentSession.objects.update(last_seen_at=now)
    client.force_login(bob)
    response = client.get(URL)
    assert attention(response) == ["looping"]
    assert {kind: burst.sessions for kind, burst in response.context["bursts"].items()} == {"long_running": 6}
    link = reverse("dashboard:alert_list") + "?kind=long_running&state=open"
    assert [text(a) for a in select(response, f'a[data-open][href="{link}"]')] == ["6 sessions: long running"]
    assert "long-0" not in response.content.decode()


def test_a_burst_of_warnings_comes_after_a_critical_session_and_before_lesser_ones(client, bob, make_session):
    for i in range(5):
        DriftAlert.objects.create(
            session=make_session(f"slow-{i}"), kind="error_rate", message="errors", severity="warning"
        )
    failing = make_session("node-failed")
    DriftAlert.objects.create(session=failing, kind="node_error", message="Node 'deploy' raised", severity="critical")
    silent = make_session("silent")
    AgentSession.objects.exclude(pk=silent.pk).update(last_seen_at=timezone.now())
    AgentSession.objects.filter(pk=silent.pk).update(last_seen_at=timezone.now() - timedelta(hours=2))
    client.force_login(bob)
    rows = [text(a) for a in select(client.get(URL), ".attention-table a[data-open]")]
    assert rows == ["node-failed", "5 sessions: error rate", "silent"]


def test_attention_lists_the_most_urgent_few_of_many(client, bob, make_session):
    now = timezone.now()
    kinds = ["stalled", "repetition", "error_rate", "cycle_count"]
    alerting = []
    for i in range(12):  # three of each kind: no burst
        session = make_session(f"alerting-{i:02d}")
        DriftAlert.objects.create(session=session, kind=kinds[i % 4], message="m", opened_at=now - timedelta(minutes=i))
        alerting.append(session.external_id)
    failed = make_session("failed")
    AgentSession.objects.update(last_seen_at=now)
    AgentSession.objects.filter(pk=failed.pk).update(status="failed")
    client.force_login(bob)
    response = client.get(URL)
    assert attention(response) == ["failed", *alerting[:9]]  # the failed run (critical), then the newest warnings
    assert response.context["more_attention"]


def test_all_clear_when_nothing_needs_attention(client, bob, make_session):
    session = make_session()
    AgentSession.objects.filter(pk=session.pk).update(last_seen_at=timezone.now())
    client.force_login(bob)
    assert "All clear" in client.get(URL).content.decode()


def test_recent_operator_actions_show_who_what_why_with_links(client, bob, alice, make_session, make_checkpoint):
    session = make_session()
    checkpoint = make_checkpoint(session, {"a": 1})
    pin_checkpoint(checkpoint, actor=Actor.for_user(alice), reason="last green run")
    client.force_login(bob)
    html = client.get(URL).content.decode()
    assert "Recent operator actions" in html
    assert "alice" in html and "pin" in html and "last green run" in html
    assert select(html, f'a[href="{reverse("dashboard:checkpoint_detail", args=[checkpoint.pk])}"]')
    assert select(html, f'a[href="{reverse("dashboard:audit_log")}"]')


def test_only_the_latest_actions_are_listed(client, bob, make_session):
    session = make_session()
    for i in range(20):
        record_audit(Actor.system("job"), "retention", session=session, reason=f"batch {i:02d}")
    client.force_login(bob)
    response = client.get(URL)
    reasons = [event.reason for event in response.context["actions"]]
    assert reasons == [f"batch {i:02d}" for i in range(19, 11, -1)]


def test_empty_console_says_how_to_get_data(client, bob):
    client.force_login(bob)
    html = client.get(URL).content.decode()
    assert "No agent sessions yet" in html
    assert "seed_demo" in html and "/api/v1/sessions" in html and "import_checkpoints" in html


def test_htmx_poll_gets_only_the_live_region_which_keeps_polling(client, bob, make_session):
    make_session()
    client.force_login(bob)
    assert select(client.get(URL), "#overview-live[hx-trigger='every 30s']")
    response = client.get(URL, headers=HTMX)
    assert response.content.decode().lstrip().startswith('<div id="overview-live"')
    [live] = select(response, "#overview-live")
    assert (live.get("hx-trigger"), live.get("hx-swap")) == ("every 30s", "outerHTML")
    assert not select(response, "html, h1")


def test_query_count_is_bounded_on_thousands_of_checkpoints(
    client, bob, alice, project, big_session, django_assert_max_num_queries
):
    sessions = add_sessions(project, 60, checkpoints=20)
    for session in sessions[::5]:
        DriftAlert.objects.create(session=session, kind="stalled", message="flat")
        record_audit(Actor.for_user(alice), "acknowledge", session=session, reason="looking")
    AgentSession.objects.filter(pk__in=[s.pk for s in sessions[1::5]]).update(status="failed")
    AgentSession.objects.filter(pk__in=[s.pk for s in sessions[2::5]]).update(status="waiting")
    client.force_login(bob)
    # 14: the "Waiting for approval" and "Waiting for input" queues are one query each; "Needs attention" five
    # (bursts, then each class cut at ten rows by an index, then the sessions shown)
    with django_assert_max_num_queries(14):
        response = client.get(URL)
    assert len(response.context["attention"]) == 10 and response.context["more_attention"]
    assert len(response.context["inputs"]) == 8 and response.context["more_inputs"]
    with django_assert_max_num_queries(14):
        client.get(URL, headers=HTMX)
