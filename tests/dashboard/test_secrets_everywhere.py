"""A key planted in a session is masked on every page and read a person makes (issue #26 item 2): console pages
and their fragments, the console's downloads, notification and webhook payloads, `/metrics`, and the API through a
read-only token (agent API and LangGraph reads), which also gets no digests of a checkpoint holding it. Agents' write
tokens read the real state. Revealing needs `reveal_secrets`, a reason, and leaves one audit row."""

from __future__ import annotations

import io
import json
import zipfile

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from checkpoints.models import AuditEvent, Checkpoint, Event
from checkpoints.outbox.webhooks import create_webhook
from checkpoints.services import Actor, restore_checkpoint
from tests.kits.langgraph_kit import put_body

pytestmark = pytest.mark.django_db
GITHUB = "ghp_" + "Zq9Xw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe9Dc8"
MASKED = "[masked github_token …9Dc8]"
PIECES = [GITHUB, GITHUB[4:24], GITHUB[-20:]]  # the key, or a cut part of it


def leaks(body: str) -> list[str]:
    return [piece for piece in PIECES if piece in body]


@pytest.fixture
def planted(project, make_session, make_checkpoint, alice, receiver, django_capture_on_commit_callbacks):
    """Step 2 of a session reads the environment (the key in a tool's output) and fails quoting the key: its
    preview, its status reason, its failed alert, the alert's event and a restore's reason all hold it."""
    create_webhook(
        project, url=receiver.url, events=["checkpoint.created", "alert.opened"], actor=Actor.for_user(alice)
    )
    session = make_session("leaky")
    asked = {"role": "user", "content": "show me the env"}
    with django_capture_on_commit_callbacks(execute=True):  # each step committed (its alerts, its deliveries)
        first = make_checkpoint(session, {"messages": [asked]}, name="asked")
    with django_capture_on_commit_callbacks(execute=True):
        second = make_checkpoint(
            session,
            {"messages": [asked, {"role": "tool", "content": f"HOME=/root GH_TOKEN={GITHUB} SHELL=/bin/bash"}]},
            name="env_read",
            status="failed",
            status_reason=f"git push refused for {GITHUB}",
        )
    with django_capture_on_commit_callbacks(execute=True):
        restore_checkpoint(second, actor=Actor.for_user(alice), reason=f"retry, the key {GITHUB} is fine")
    return first, second


def console_bodies(client, first: Checkpoint, second: Checkpoint) -> dict[str, str]:
    session = second.session
    ids = {"a": f"id:{first.pk}", "b": f"id:{second.pk}"}
    pages = {
        "checkpoint": reverse("dashboard:checkpoint_detail", args=[second.pk]),
        "download": reverse("dashboard:checkpoint_download", args=[second.pk]),
        "compare": reverse("dashboard:compare") + f"?a={ids['a']}&b={ids['b']}",
        "timeline": reverse("dashboard:session_detail", args=[session.pk]),
        "alerts": reverse("dashboard:alert_list") + "?state=",
        "audit": reverse("dashboard:audit_log"),
        "overview": reverse("dashboard:overview"),
    }
    bodies = {}
    for name, url in pages.items():
        response = client.get(url)
        assert response.status_code == 200, (name, response.status_code)
        bodies[name] = response.content.decode()
    export = client.get(reverse("dashboard:session_export", args=[session.pk]), {"format": "breakpilot"})
    assert export.status_code == 200
    with zipfile.ZipFile(io.BytesIO(b"".join(export.streaming_content))) as archive:
        bodies["export"] = "".join(archive.read(name).decode() for name in archive.namelist())
    return bodies


@pytest.mark.parametrize("member", ["alice", "bob"])  # an operator and a viewer
def test_the_key_is_masked_on_every_console_page_and_download(client, request, planted, member):
    client.force_login(request.getfixturevalue(member))
    bodies = console_bodies(client, *planted)
    for name, body in bodies.items():
        assert leaks(body) == [], name
    for name in ("checkpoint", "download", "compare", "timeline", "alerts", "audit", "export"):
        assert "[masked github_token" in bodies[name], name  # an export may write the ellipsis as \u2026
    assert "SHELL=/bin/bash" in bodies["download"]  # the rest of the text stays


def test_the_state_editor_and_the_restore_dialog_show_the_key_masked(client, alice, planted):
    url = reverse("dashboard:checkpoint_edit", args=[planted[1].pk])
    client.force_login(alice)
    editor = client.get(url, {"path": "/messages/1/content"}).content.decode()
    asked = {"path": "/messages/0/content", "value": '"hi"', "reason": "look", "action": "preview"}
    preview = client.post(url, asked).content.decode()
    restore = client.get(reverse("dashboard:checkpoint_restore", args=[planted[0].pk])).content.decode()
    for body in (editor, preview, restore):
        assert leaks(body) == []
    assert "[masked github_token" in editor and "[masked github_token" in restore  # what the restore drops


def test_a_superuser_sees_the_key_masked_too(client, django_user_model, planted):
    client.force_login(django_user_model.objects.create_superuser("root", password="root-password-1"))
    for name, body in console_bodies(client, *planted).items():
        assert leaks(body) == [], name


def test_notification_and_webhook_payloads_and_metrics_hold_no_key(client, planted, receiver, settings):
    settings.METRICS_TOKEN = "scrape"
    stored = [json.dumps(event.data, ensure_ascii=False) for event in Event.objects.all()]
    sent = [got.body.decode() for got in receiver.received]
    assert {event.type for event in Event.objects.all()} >= {"checkpoint.created", "alert.opened"}
    assert len(sent) >= 3
    for body in [*stored, *sent]:
        assert leaks(body) == []
    assert any("[masked github_token" in body for body in sent)  # the failed alert's message quotes it, masked
    metrics = client.get("/metrics", headers={"Authorization": "Bearer scrape"})
    assert metrics.status_code == 200 and leaks(metrics.content.decode()) == []


def api_reads(api, first: Checkpoint, second: Checkpoint) -> dict[str, dict]:
    paths = {
        "checkpoint": f"/checkpoints/{second.pk}",
        "list": "/sessions/leaky/checkpoints",
        "session": "/sessions/leaky",
        "summary": "/sessions/leaky/summary",
        "resume": "/sessions/leaky/resume",
        "diff": f"/checkpoints/{first.pk}/diff/{second.pk}",
        "alerts": "/alerts",
    }
    answers = {}
    for name, path in paths.items():
        response = api.get(path)
        assert response.status_code == 200, (name, response.content)
        answers[name] = response.json()
    return answers


def test_a_read_only_token_reads_masked_states_and_no_digests(read_only_api, planted):
    answers = api_reads(read_only_api, *planted)
    for name, answer in answers.items():
        assert leaks(json.dumps(answer, ensure_ascii=False)) == [], name
    assert MASKED in answers["checkpoint"]["state"]["messages"][1]["content"]
    assert MASKED in answers["resume"]["state"]["messages"][1]["content"]
    described = [
        answers["checkpoint"],
        answers["resume"]["checkpoint"],
        answers["session"]["head"],
        answers["summary"]["last"],
        *answers["list"]["items"],
    ]
    for checkpoint in described:
        assert (checkpoint["state_hash"], checkpoint["root"], checkpoint["stored_bytes"]) == (None, None, None)
    # nor a session's stored size: how little it stored would tell that its content is stored already
    assert answers["session"]["stored_bytes"] is None and answers["summary"]["stored_bytes"] is None
    assert answers["session"]["raw_bytes"] > 0


def test_the_agents_write_token_resumes_with_the_real_state_and_its_digests(api, planted):
    answers = api_reads(api, *planted)
    assert GITHUB in answers["resume"]["state"]["messages"][1]["content"]
    assert GITHUB in answers["checkpoint"]["state"]["messages"][1]["content"]
    assert answers["checkpoint"]["state_hash"] == bytes(planted[1].state_hash).hex()
    assert answers["session"]["stored_bytes"] > 0 and answers["summary"]["stored_bytes"] > 0


def test_langgraph_reads_through_a_read_only_token_are_masked(api, read_only_api, planted):
    values = {"messages": [{"type": "tool", "content": f"token={GITHUB}"}]}
    assert api.post("/langgraph/checkpoints", put_body("thread-9", 1, values=values)).status_code == 201
    for reader, masked in ((read_only_api, True), (api, False)):
        got = reader.get("/langgraph/checkpoint", {"thread_id": "thread-9"})
        listed = reader.get("/langgraph/checkpoints", {"thread_id": "thread-9"})
        assert got.status_code == listed.status_code == 200
        for body in (got.content.decode(), listed.content.decode()):
            assert (leaks(body) == []) is masked
            assert (MASKED in body) is masked


# ---- the gaps #26 left: phase pages, the admin, keyed values quoted in texts, events published before ----------


def test_a_phase_page_shows_what_agents_and_reviewers_quoted_masked(client, bob, planted):
    from checkpoints.models import AgentOutput, Phase, PhaseFeedback

    phase = Phase.objects.create(
        session=planted[1].session, number=1, name="deploy", status="failed", errors=[f"push refused for {GITHUB}"]
    )
    AgentOutput.objects.create(
        phase=phase,
        agent_name="deployer",
        content=f"Used `{GITHUB}` to push.",
        error=f"401 for {GITHUB}",
        tools_used=[f"git push https://x:{GITHUB}@github.com/acme/app"],
        error_details={"token": GITHUB},
    )
    PhaseFeedback.objects.create(
        phase=phase,
        action="changes_requested",
        comments=f"never paste {GITHUB}",
        requested_changes=[f"revoke {GITHUB}"],
    )
    client.force_login(bob)  # a viewer: the reviewers' page is every member's to read
    page = client.get(reverse("dashboard:phase_detail", args=[phase.session_id, 1]))
    assert page.status_code == 200
    body = page.content.decode()
    assert leaks(body) == [] and body.count("[masked github_token") >= 5


def test_the_admin_shows_checkpoints_alerts_events_and_audit_rows_masked(admin_client, planted):
    from checkpoints.models import DriftAlert

    first, second = planted
    alert = DriftAlert.objects.filter(session=second.session, kind="failed").get()
    assert GITHUB in alert.message  # stored as it was raised: masked where people look
    event = Event.objects.filter(type="alert.opened").first()
    audit = AuditEvent.objects.get(action="restore")
    pages = {
        "checkpoint": reverse("admin:checkpoints_checkpoint_change", args=[second.pk]),
        "checkpoints": reverse("admin:checkpoints_checkpoint_changelist"),
        "alert": reverse("admin:checkpoints_driftalert_change", args=[alert.pk]),
        "alerts": reverse("admin:checkpoints_driftalert_changelist"),
        "event": reverse("admin:checkpoints_event_change", args=[event.pk]),
        "audit": reverse("admin:checkpoints_auditevent_change", args=[audit.pk]),
        "audit list": reverse("admin:checkpoints_auditevent_changelist"),
    }
    for name, url in pages.items():
        response = admin_client.get(url)
        assert response.status_code == 200, name
        assert leaks(response.content.decode()) == [], name
    for name in ("checkpoint", "alert", "audit", "audit list"):
        assert "[masked github_token" in admin_client.get(pages[name]).content.decode(), name
    # read-only: nothing masked can be saved back over the row
    assert admin_client.post(pages["alert"], {"message": "x"}).status_code == 403
    assert GITHUB in DriftAlert.objects.get(pk=alert.pk).message


PASSWORD = "hR8kq2LzP0v9wXyQ"  # random-looking, of no known format: found only as the value of a key named so


def test_a_keyed_value_quoted_in_a_free_text_is_masked(client, alice, make_session, make_checkpoint):
    session = make_session("db-login")
    make_checkpoint(session, {"env": {"DB_PASSWORD": PASSWORD}})
    failed = make_checkpoint(
        session,
        {"env": {"DB_PASSWORD": PASSWORD}, "log": f"psql: auth failed (password={PASSWORD}), retrying"},
        status="failed",
        status_reason=f'login refused: "password": "{PASSWORD}".',
    )
    client.force_login(alice)
    bodies = [
        client.get(reverse("dashboard:checkpoint_detail", args=[failed.pk])).content.decode(),
        client.get(reverse("dashboard:session_detail", args=[session.pk])).content.decode(),
        client.get(reverse("dashboard:alert_list") + "?state=").content.decode(),
        client.get(reverse("dashboard:checkpoint_download", args=[failed.pk])).content.decode(),
    ]
    for body in bodies:
        assert PASSWORD not in body and PASSWORD[:10] not in body
    assert "[masked keyword_entropy" in bodies[0] and "retrying" in bodies[3]


def test_an_event_published_before_its_value_was_found_is_masked_when_delivered(
    project, make_session, alice, receiver, settings, django_capture_on_commit_callbacks, admin_client
):
    from checkpoints.models import Delivery
    from checkpoints.outbox import deliveries
    from checkpoints.services import CheckpointInput, ingest_checkpoints

    create_webhook(project, url=receiver.url, events=["checkpoint.created"], actor=Actor.for_user(alice))
    settings.SECRETS_SCAN = False  # stored before the scan knew it (or before a project's pattern)
    with django_capture_on_commit_callbacks(execute=False):  # its delivery not sent yet (a queue, a retry)
        ingest_checkpoints([(make_session("early"), [CheckpointInput(state={"n": 1}, name=f"leaked {GITHUB}")])])
    [early] = Delivery.objects.filter(event__data__checkpoint__name=f"leaked {GITHUB}")
    settings.SECRETS_SCAN = True
    with django_capture_on_commit_callbacks(execute=False):
        ingest_checkpoints([(make_session("later"), [CheckpointInput(state={"env": f"GH_TOKEN={GITHUB}"})])])

    deliveries.attempt(early.pk)

    [sent] = [got.body.decode() for got in receiver.received]
    assert leaks(sent) == [] and "leaked [masked github_token" in sent
    event = admin_client.get(reverse("admin:checkpoints_event_change", args=[early.event_id])).content.decode()
    assert leaks(event) == []


# ---- revealing a value ---------------------------------------------------------------------------------------


def reveal_url(project, finding_pk: int) -> str:
    return reverse("dashboard:secret_reveal", args=[project.slug, finding_pk])


@pytest.fixture
def revealer(staff_operator):
    """Staff (an operator in every project) given `reveal_secrets` in the admin: no role holds it."""
    staff_operator.user_permissions.add(Permission.objects.get(codename="reveal_secrets"))
    return staff_operator


@pytest.mark.parametrize("member", ["alice", "bob"])
def test_members_without_reveal_secrets_cannot_reveal(client, request, project, planted, member):
    from checkpoints.models import SecretFinding

    finding = SecretFinding.objects.get()
    client.force_login(request.getfixturevalue(member))
    assert client.get(reveal_url(project, finding.pk)).status_code == 403
    response = client.post(reveal_url(project, finding.pk), {"reason": "curious"})
    assert response.status_code == 403 and GITHUB not in response.content.decode()
    assert not AuditEvent.objects.filter(action="reveal_secret").exists()
    assert "Reveal…" not in client.get(reverse("dashboard:secrets", args=[project.slug])).content.decode()


def test_a_reveal_asks_why_and_is_audited_naming_the_finding_not_the_value(client, project, planted, revealer):
    from checkpoints.models import SecretFinding

    finding = SecretFinding.objects.get()
    client.force_login(revealer)
    assert "Reveal…" in client.get(reverse("dashboard:secrets", args=[project.slug])).content.decode()
    form = client.get(reveal_url(project, finding.pk))
    assert form.status_code == 200 and GITHUB not in form.content.decode()
    refused = client.post(reveal_url(project, finding.pk), {"reason": "  "})
    assert refused.status_code == 200 and GITHUB not in refused.content.decode()
    assert not AuditEvent.objects.filter(action="reveal_secret").exists()

    shown = client.post(reveal_url(project, finding.pk), {"reason": "rotating it at GitHub"})
    assert shown.status_code == 200 and GITHUB in shown.content.decode()
    assert "no-store" in shown["Cache-Control"]
    [event] = AuditEvent.objects.filter(action="reveal_secret")
    assert (event.actor_user, event.reason, event.details["finding"]) == (revealer, "rotating it at GitHub", finding.pk)
    assert GITHUB not in json.dumps([event.target, event.reason, event.details])


def test_a_finding_of_another_project_is_not_found(client, other_project, planted, revealer):
    from checkpoints.models import SecretFinding

    client.force_login(revealer)
    response = client.post(reveal_url(other_project, SecretFinding.objects.get().pk), {"reason": "x"})
    assert response.status_code == 404 and GITHUB not in response.content.decode()


def test_the_admin_shows_a_session_title_and_metadata_that_quote_a_key_masked_and_never_saves_the_mask(
    admin_client, planted
):
    from checkpoints.models import AgentSession

    session = planted[1].session
    AgentSession.objects.filter(pk=session.pk).update(title=f"deploy with {GITHUB}", metadata={"env": GITHUB})
    change = reverse("admin:checkpoints_agentsession_change", args=[session.pk])
    for url in (change, reverse("admin:checkpoints_agentsession_changelist")):
        body = admin_client.get(url).content.decode()
        assert leaks(body) == [] and "[masked github_token" in body, url
    form = admin_client.get(change).context["adminform"].form
    assert "title" not in form.fields and "metadata" not in form.fields  # shown read-only, masked
    data = {name: "" if form.initial.get(name) is None else form.initial[name] for name in form.fields}
    data.update({"agent": "renamed-agent", "project": session.project_id})
    response = admin_client.post(change, data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    session.refresh_from_db()
    assert session.agent == "renamed-agent"  # the rest stays editable
    assert session.title == f"deploy with {GITHUB}" and session.metadata == {"env": GITHUB}  # never the mask
