from __future__ import annotations

import pytest
from django.contrib import admin
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.messages import get_messages
from django.urls import reverse

from checkpoints.admin import CappedCountPaginator
from checkpoints.models import (
    AgentSession,
    AlertKind,
    AlertState,
    ApiToken,
    AuditEvent,
    Checkpoint,
    CheckpointKind,
    Delivery,
    DriftAlert,
    Event,
    JobRun,
    NotificationRule,
    RetentionPolicy,
    SessionStatus,
)
from checkpoints.outbox.webhooks import create_webhook
from checkpoints.services import Actor, create_api_token, fork_session, pin_checkpoint
from tests.helpers import select

pytestmark = pytest.mark.django_db

CHECKPOINTS = reverse("admin:checkpoints_checkpoint_changelist")
SESSIONS = reverse("admin:checkpoints_agentsession_changelist")


def _messages(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def _act(client, url: str, action: str, objects, **extra):
    data = {"action": action, ACTION_CHECKBOX_NAME: [o.pk for o in objects], **extra}
    return client.post(url, data, follow=True)


@pytest.fixture
def session(make_session, make_checkpoint):
    session = make_session("run-1")
    for i in range(5):
        make_checkpoint(session, {"i": i}, name=f"s{i}", kind="recovery" if i in (1, 2) else "step")
    session.refresh_from_db()
    return session


def _checkpoints(session) -> list[Checkpoint]:
    return list(Checkpoint.objects.filter(session=session).order_by("seq"))


@pytest.mark.parametrize("model", list(admin.site._registry), ids=lambda m: m._meta.label)
def test_every_changelist_loads(admin_client, session, model):
    opts = model._meta
    response = admin_client.get(reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist"))
    assert response.status_code == 200


def test_the_admin_index_names_every_model_in_plain_english_under_the_consoles_name(admin_client):
    html = admin_client.get(reverse("admin:index")).content.decode()
    names = [a.text_content().strip() for a in select(html, "#content-main table caption ~ tbody th a")]
    names = names or [a.text_content().strip() for a in select(html, "#content-main th[scope=row] a")]
    assert "Lang graph writess" not in names
    for expected in ("LangGraph checkpoints", "LangGraph pending writes", "LangGraph tombstones", "API tokens"):
        assert expected in names, names
    assert "Phase feedback" in names and "Retention policies" in names and "Deliveries" in names
    for name in names:  # no doubled plural, no split brand names
        assert not name.endswith("ss") and "Lang graph" not in name and "Api " not in name, name
    assert [h.text_content().strip() for h in select(html, "#site-name")] == ["Checkpoint Console administration"]
    assert "<title>Records and settings | Checkpoint Console admin</title>" in html


@pytest.mark.parametrize(
    "url",
    [
        CHECKPOINTS,
        CHECKPOINTS + "?kind__exact=recovery",
        CHECKPOINTS + "?q=step_3",
        CHECKPOINTS + "?pinned__exact=0&kind__exact=step",
        reverse("admin:checkpoints_auditevent_changelist"),
        reverse("admin:checkpoints_chunk_changelist"),
    ],
)
def test_big_changelists_have_bounded_queries(admin_client, big_session, django_assert_max_num_queries, url):
    with django_assert_max_num_queries(10):
        response = admin_client.get(url)
    assert response.status_code == 200


def test_checkpoint_changelist_never_counts_the_whole_table(admin_client, big_session, django_assert_max_num_queries):
    with django_assert_max_num_queries(10) as captured:
        admin_client.get(CHECKPOINTS)
    sql = [q["sql"] for q in captured.captured_queries]
    assert not [s for s in sql if s.startswith("SELECT COUNT(*)") and "LIMIT" not in s]


def test_a_search_matching_more_than_the_cap_counts_only_up_to_it_and_lists_every_match(
    admin_client, session, django_assert_max_num_queries, monkeypatch
):
    monkeypatch.setattr(CappedCountPaginator, "cap", 2)
    with django_assert_max_num_queries(10) as captured:
        html = admin_client.get(CHECKPOINTS + "?q=s").content.decode()  # s0 … s4
    counts = [q["sql"] for q in captured.captured_queries if q["sql"].startswith("SELECT COUNT(*)")]
    assert counts and all("LIMIT 3" in sql for sql in counts)
    assert all(f">s{i}<" in html for i in range(5))


def test_checkpoint_page_shows_the_state_read_only(admin_client, session):
    checkpoint = _checkpoints(session)[3]
    response = admin_client.get(reverse("admin:checkpoints_checkpoint_change", args=[checkpoint.pk]))
    assert response.status_code == 200
    assert "&quot;i&quot;: 3" in response.content.decode()
    assert not select(response, "[name=name]")  # no editable form


def test_a_sessions_tallies_are_shown_but_not_editable(admin_client, session):
    html = admin_client.get(reverse("admin:checkpoints_agentsession_change", args=[session.pk])).content.decode()
    assert "Checkpoint count" in html and "Tool failed count" in html
    assert not select(html, "[name=checkpoint_count], [name=raw_bytes]")


def test_state_view_is_truncated(admin_client, make_session, make_checkpoint):
    checkpoint = make_checkpoint(make_session("huge"), {"blob": ["x" * 100] * 500})
    response = admin_client.get(reverse("admin:checkpoints_checkpoint_change", args=[checkpoint.pk]))
    assert "truncated" in response.content.decode()
    assert len(response.content) < 80_000


def test_pin_and_unpin_are_audited(admin_client, admin_user, session):
    first, second = _checkpoints(session)[:2]
    response = _act(admin_client, CHECKPOINTS, "pin", [first, second])
    assert "Pinned 2 checkpoints" in _messages(response)[0]
    assert Checkpoint.objects.filter(pk__in=[first.pk, second.pk], pinned=True).count() == 2
    response = _act(admin_client, CHECKPOINTS, "unpin", [first])
    assert "Unpinned 1 checkpoint" in _messages(response)[0]
    events = AuditEvent.objects.filter(actor_user=admin_user).values_list("action", flat=True)
    assert sorted(events) == ["pin", "pin", "unpin"]


def test_default_delete_selected_is_replaced(admin_client):
    response = admin_client.get(CHECKPOINTS)
    actions = dict(response.context["action_form"].fields["action"].choices)
    assert "delete_selected" not in actions
    assert "delete_safely" in actions


def test_safe_delete_refuses_protected_and_deletes_the_rest(admin_client, admin_user, session, project):
    rows = _checkpoints(session)
    pin_checkpoint(rows[0], actor=Actor.system())
    fork_session(rows[1], actor=Actor.system(), external_id="fork-1")
    DriftAlert.objects.create(session=session, kind=AlertKind.STALLED, message="stuck", last_good=rows[2])
    head = rows[4]
    assert AgentSession.objects.get(pk=session.pk).head_id == head.pk

    response = _act(admin_client, CHECKPOINTS, "delete_safely", rows)

    messages = _messages(response)
    assert "Deleted 1 checkpoints" in messages[0]
    assert "Refused 4 protected checkpoints" in messages[1]
    for row in (rows[0], rows[1], rows[2], head):
        assert str(row) in messages[1]
    assert set(Checkpoint.objects.filter(session=session).values_list("pk", flat=True)) == {
        rows[0].pk,
        rows[1].pk,
        rows[2].pk,
        head.pk,
    }
    assert Checkpoint.objects.get(pk=head.pk).parent_id == rows[2].pk  # re-pointed past the deleted one
    event = AuditEvent.objects.get(action="delete_checkpoints")
    assert event.actor_user == admin_user
    assert event.details == {"deleted_seqs": [rows[3].seq], "refused_seqs": [1, 2, 3, 5]}


def test_single_delete_of_a_head_is_refused(admin_client, session):
    head = _checkpoints(session)[-1]
    url = reverse("admin:checkpoints_checkpoint_delete", args=[head.pk])
    response = admin_client.post(url, {"post": "yes"}, follow=True)
    assert "Refused" in _messages(response)[0]
    assert Checkpoint.objects.filter(pk=head.pk).exists()
    change = admin_client.get(reverse("admin:checkpoints_checkpoint_change", args=[head.pk]))
    assert url not in change.content.decode()  # no delete link offered


def test_single_delete_of_an_unprotected_checkpoint(admin_client, admin_user, session):
    victim = _checkpoints(session)[3]
    url = reverse("admin:checkpoints_checkpoint_delete", args=[victim.pk])
    response = admin_client.post(url, {"post": "yes"})
    assert response.status_code == 302
    assert not Checkpoint.objects.filter(pk=victim.pk).exists()
    assert AuditEvent.objects.get(action="delete_checkpoints").actor_user == admin_user


def test_clear_recovery_checkpoints(admin_client, admin_user, session):
    recovery = [c for c in _checkpoints(session) if c.kind == CheckpointKind.RECOVERY]
    pin_checkpoint(recovery[0], actor=Actor.system())
    response = _act(admin_client, SESSIONS, "clear_recovery", [session])
    messages = _messages(response)
    assert "Deleted 1 recovery checkpoints" in messages[0]
    assert "Refused 1 protected checkpoint" in messages[1]
    assert list(Checkpoint.objects.filter(session=session, kind="recovery")) == [recovery[0]]
    assert AuditEvent.objects.get(action="delete_checkpoints").actor_user == admin_user


def test_archive_session(admin_client, admin_user, session):
    response = _act(admin_client, SESSIONS, "archive_sessions", [session])
    assert "Archived 1 session" in _messages(response)[0]
    assert AgentSession.objects.get(pk=session.pk).status == SessionStatus.ARCHIVED
    assert AuditEvent.objects.get(action="archive_session").actor_user == admin_user


def test_purge_session_asks_for_confirmation_first(admin_client, admin_user, session, make_session):
    other = make_session("run-2")
    response = admin_client.post(SESSIONS, {"action": "purge_sessions", ACTION_CHECKBOX_NAME: [session.pk]})
    assert response.status_code == 200
    assert "5 checkpoints" in response.content.decode()
    assert AgentSession.objects.filter(pk=session.pk).exists()

    response = _act(admin_client, SESSIONS, "purge_sessions", [session], post="yes")
    assert "Purged 1 session" in _messages(response)[0]
    assert not AgentSession.objects.filter(pk=session.pk).exists()
    assert not Checkpoint.objects.filter(session_id=session.pk).exists()
    assert AgentSession.objects.filter(pk=other.pk).exists()
    event = AuditEvent.objects.get(action="purge_session")
    assert event.actor_user == admin_user
    assert event.details["checkpoints"] == 5


def test_purge_keeps_forks_of_the_purged_session(admin_client, session):
    fork_session(_checkpoints(session)[1], actor=Actor.system(), external_id="fork-1")
    _act(admin_client, SESSIONS, "purge_sessions", [session], post="yes")
    assert AgentSession.objects.get(external_id="fork-1").forked_from_id is None


def test_revoke_tokens(admin_client, admin_user, project):
    token, _ = create_api_token(project, name="ci")
    response = _act(admin_client, reverse("admin:checkpoints_apitoken_changelist"), "revoke", [token])
    assert "Revoked 1 token" in _messages(response)[0]
    assert ApiToken.objects.get(pk=token.pk).revoked_at is not None
    assert AuditEvent.objects.get(action="revoke_token").actor_user == admin_user


def test_acknowledge_and_resolve_alerts(admin_client, admin_user, session):
    alert = DriftAlert.objects.create(session=session, kind=AlertKind.STALLED, message="stuck")
    url = reverse("admin:checkpoints_driftalert_changelist")
    response = _act(admin_client, url, "acknowledge", [alert])
    assert "Acknowledged 1 alert" in _messages(response)[0]
    assert DriftAlert.objects.get(pk=alert.pk).state == AlertState.ACKNOWLEDGED
    response = _act(admin_client, url, "resolve", [alert])
    assert "Resolved 1 alert" in _messages(response)[0]
    assert DriftAlert.objects.get(pk=alert.pk).state == AlertState.RESOLVED
    actions = AuditEvent.objects.filter(actor_user=admin_user).values_list("action", flat=True)
    assert sorted(actions) == ["acknowledge", "resolve"]


def test_retention_dry_run_then_confirm(admin_client, admin_user, session, django_capture_on_commit_callbacks):
    RetentionPolicy.objects.all().delete()  # not the installed defaults: one rule, easy to count
    RetentionPolicy.objects.create(kind=CheckpointKind.STEP, keep_last=1)
    url = reverse("admin:checkpoints_retention_run")

    response = admin_client.get(url)
    assert response.status_code == 200
    assert response.context["plan"].deleted == 2  # steps 1, 4 and 5: 5 is the head and the newest
    assert response.context["by_kind"] == [("step", 2)]
    assert Checkpoint.objects.filter(session=session).count() == 5

    with django_capture_on_commit_callbacks(execute=True):  # the task is queued once the request commits
        response = admin_client.post(url, follow=True)
    assert "Retention run queued" in _messages(response)[0]
    assert Checkpoint.objects.filter(session=session).count() == 3
    run = JobRun.objects.get(job="retention", dry_run=False)
    assert run.triggered_by == "admin:admin"
    request = AuditEvent.objects.get(action="run_job")  # the request, once; the run is the task's
    assert (request.actor_user, request.target) == (admin_user, "Apply retention")


def test_retention_changelist_links_to_run_now(admin_client):
    response = admin_client.get(reverse("admin:checkpoints_retentionpolicy_changelist"))
    assert reverse("admin:checkpoints_retention_run") in response.content.decode()


def test_retention_policy_form_explains_each_rule(admin_client):
    response = admin_client.get(reverse("admin:checkpoints_retentionpolicy_add"))
    assert "overrides the global one" in response.content.decode()
    assert "Keep rules" in response.content.decode()


def test_audit_events_and_chunks_are_read_only(admin_client, session):
    event = AuditEvent.objects.create(actor="system", action="x")
    assert admin_client.get(reverse("admin:checkpoints_auditevent_add")).status_code == 403
    assert admin_client.post(reverse("admin:checkpoints_auditevent_delete", args=[event.pk])).status_code == 403
    chunks = admin_client.get(reverse("admin:checkpoints_chunk_changelist"))
    assert not [link for link in select(chunks, "#changelist a[href]") if "checkpoints/chunk/" in link.get("href")]
    assert admin_client.get(reverse("admin:checkpoints_chunk_add")).status_code == 403


def test_non_staff_cannot_reach_admin_actions(client, alice, session):
    client.force_login(alice)
    response = client.get(reverse("admin:checkpoints_retention_run"))
    assert response.status_code == 302


def test_langgraph_rows_are_listed_and_shown_read_only(admin_client, project):
    from checkpoints.models import LangGraphCheckpoint
    from checkpoints.services import langgraph as lg
    from tests.kits.langgraph_kit import lg_id, put_body, typed

    lg.put_checkpoint(project, lg.PutInput(**put_body("thread-a", 0)), actor=Actor.system("test"))
    lg.put_writes(
        project, actor=Actor.system("test"), thread_id="thread-a", checkpoint_ns="", checkpoint_id=lg_id(0),
        task_id="task-9", task_path="", writes=[["__interrupt__", typed("approve?")]],
    )  # fmt: skip
    listed = admin_client.get(reverse("admin:checkpoints_langgraphcheckpoint_changelist"))
    assert lg_id(0) in listed.content.decode()
    writes = admin_client.get(reverse("admin:checkpoints_langgraphwrites_changelist") + "?interrupted__exact=1")
    assert "task-9" in writes.content.decode()
    row = LangGraphCheckpoint.objects.get()
    detail = admin_client.get(reverse("admin:checkpoints_langgraphcheckpoint_change", args=[row.pk]))
    assert detail.status_code == 200 and b'name="_save"' not in detail.content


def test_notification_rules_added_changed_and_deleted_in_the_admin_are_audited(admin_client, project, settings):
    settings.WEBHOOK_ALLOW_PRIVATE = False
    add = reverse("admin:checkpoints_notificationrule_add")
    form = {
        "project": project.pk,
        "name": "pager",
        "events": ["alert.opened"],
        "min_severity": "critical",
        "channel": "webhook",
        "target": "http://10.0.0.1/hook",
        "quiet_minutes": 30,
        "enabled": "on",
    }
    refused = admin_client.post(add, form)
    assert refused.status_code == 200 and "private" in refused.content.decode()
    assert not NotificationRule.objects.exists()
    settings.WEBHOOK_ALLOW_PRIVATE = True
    response = admin_client.post(add, form, follow=True)
    rule = NotificationRule.objects.get()
    assert rule.secret.startswith("whsec_")
    assert any(rule.secret in message for message in _messages(response))
    change = reverse("admin:checkpoints_notificationrule_change", args=[rule.pk])
    admin_client.post(change, {**form, "channel": "email", "target": "ops@example.com"})
    rule.refresh_from_db()
    assert (rule.channel, rule.target) == ("email", "ops@example.com")
    admin_client.post(reverse("admin:checkpoints_notificationrule_delete", args=[rule.pk]), {"post": "yes"})
    assert not NotificationRule.objects.exists()
    actions = list(AuditEvent.objects.filter(action__endswith="_rule").values_list("action", flat=True))
    assert sorted(actions) == ["create_rule", "delete_rule", "update_rule"]


def test_retry_now_gives_a_failed_delivery_another_attempt_and_is_audited(
    admin_client, admin_user, project, receiver, django_capture_on_commit_callbacks
):
    endpoint = create_webhook(project, url=receiver.url, events=["ping"], actor=Actor.system("test"))
    event = Event.objects.create(project=project, type="ping", data={"message": "hi"})
    failed = Delivery.objects.create(
        event=event, endpoint=endpoint, channel="webhook", target=receiver.url, status="failed", attempts=6
    )
    changelist = reverse("admin:checkpoints_delivery_changelist")
    assert admin_client.get(changelist + "?status__exact=failed").status_code == 200

    with django_capture_on_commit_callbacks(execute=True):
        response = _act(admin_client, changelist, "retry", [failed])

    assert "Queued 1 delivery for one more attempt." in _messages(response)
    failed.refresh_from_db()
    assert (failed.status, failed.attempts, failed.response_code) == ("succeeded", 7, 200)
    assert len(receiver.received) == 1
    assert AuditEvent.objects.get(action="retry_delivery").actor_user == admin_user


def test_webhooks_are_deleted_softly_from_the_admin_and_their_secret_is_not_shown(
    admin_client, admin_user, project, receiver
):
    endpoint = create_webhook(project, url=receiver.url, events=["ping"], actor=Actor.system("test"))
    page = admin_client.get(reverse("admin:checkpoints_webhookendpoint_change", args=[endpoint.pk]))
    assert endpoint.secret not in page.content.decode()

    changelist = reverse("admin:checkpoints_webhookendpoint_changelist")
    _act(admin_client, changelist, "delete_endpoints", [endpoint])

    endpoint.refresh_from_db()
    assert endpoint.deleted_at is not None
    assert AuditEvent.objects.get(action="delete_webhook").actor_user == admin_user
