from __future__ import annotations

import re
import unicodedata
from datetime import timedelta
from xml.etree import ElementTree

import orjson
import pytest
import time_machine
from django.core import mail
from django.utils import timezone
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from checkpoints.models import (
    AuditEvent,
    Channel,
    Delivery,
    DeliveryStatus,
    Event,
    EventType,
    NotificationRule,
    PhaseStatus,
)
from checkpoints.outbox.apprise_urls import requests_for
from checkpoints.outbox.channels.common import message_of
from checkpoints.outbox.channels.email import send_email
from checkpoints.outbox.channels.slack import slack_lines
from checkpoints.outbox.deliveries import attempt
from checkpoints.outbox.events import publish
from checkpoints.outbox.notifications import (
    InvalidTarget,
    create_rule,
    delete_rule,
    deliveries_for,
    send_test,
    update_rule,
)
from checkpoints.services import Actor
from checkpoints.services.phases import report_phase

pytestmark = pytest.mark.django_db
ACTOR = Actor.system("test")
SESSION = {"id": "run-1", "project": "acme", "agent": "a", "title": "Night run", "status": "active", "url": "u"}


def rule_in(project, **fields):
    values = {
        "name": "ops",
        "events": [EventType.ALERT_OPENED],
        "alert_kinds": [],
        "min_severity": "warning",
        "channel": Channel.EMAIL,
        "target": "ops@example.com",
        "quiet_minutes": 30,
        "enabled": True,
    }
    return create_rule(project, actor=ACTOR, **{**values, **fields})[0]


def alert_event(project, *, kind="repetition", severity="warning", type=EventType.ALERT_OPENED):
    alert = {"id": 7, "kind": kind, "severity": severity, "message": "same call 5 times", "url": "http://c/alerts/"}
    return Event(
        project=project,
        type=type,
        data={"session": SESSION, "alert": alert},
        dedupe_key=f"alert:1:{kind}",
    )


def published(event, *, at=None):
    """`events.publish` of an event built here, at time `at`; the deliveries its rules got."""
    with time_machine.travel(at or timezone.now(), tick=False):
        saved = publish(event.type, project=event.project, data=event.data, dedupe_key=event.dedupe_key)
    return list(Delivery.objects.filter(event=saved, rule__isnull=False)) if saved else []


def test_rule_matches_event_type_alert_kind_and_minimum_severity(project):
    rule = rule_in(project, events=[EventType.ALERT_OPENED], alert_kinds=["repetition"], min_severity="warning")
    assert [d.rule for d in deliveries_for(alert_event(project))] == [rule]
    assert deliveries_for(alert_event(project, severity="critical"))
    assert not deliveries_for(alert_event(project, severity="info"))
    assert not deliveries_for(alert_event(project, kind="stalled"))
    assert not deliveries_for(alert_event(project, type=EventType.ALERT_RESOLVED))


def test_rule_without_kinds_takes_every_kind_and_other_projects_rules_stay_out(project, other_project):
    mine = rule_in(project, alert_kinds=[], min_severity="info")
    rule_in(other_project)
    rule_in(project, name="off", enabled=False)
    assert [d.rule for d in deliveries_for(alert_event(project, kind="stalled", severity="info"))] == [mine]


def test_failed_job_reaches_the_matching_rules_of_every_project(project, other_project):
    here = rule_in(project, events=[EventType.JOB_FAILED])
    there = rule_in(other_project, events=[EventType.JOB_FAILED])
    rule_in(other_project, name="alerts only")
    event = Event(project=None, type=EventType.JOB_FAILED, data={"job": {"name": "retention"}}, dedupe_key="job:r")
    assert {d.rule for d in deliveries_for(event)} == {here, there}


def test_checkpoint_created_asks_no_query_of_the_rules(project, django_assert_num_queries):
    rule_in(project)
    with django_assert_num_queries(0):
        assert deliveries_for(Event(project=project, type=EventType.CHECKPOINT_CREATED, data={})) == []


def test_second_alert_within_the_quiet_period_is_suppressed_and_after_it_sent(project):
    rule_in(project, quiet_minutes=30)
    start = timezone.now()
    [first] = published(alert_event(project), at=start)
    [flap] = published(alert_event(project), at=start + timedelta(minutes=10))
    [again] = published(alert_event(project), at=start + timedelta(minutes=31))
    assert first.status == DeliveryStatus.PENDING
    assert flap.status == DeliveryStatus.SUPPRESSED and flap.next_attempt_at is None
    assert again.status == DeliveryStatus.PENDING


def test_quiet_period_is_per_condition_and_per_event_type(project):
    rule_in(project, events=[EventType.ALERT_OPENED, EventType.ALERT_RESOLVED], quiet_minutes=30)
    published(alert_event(project))
    [other_kind] = published(alert_event(project, kind="stalled"))
    [resolved] = published(alert_event(project, type=EventType.ALERT_RESOLVED))
    assert other_kind.status == resolved.status == DeliveryStatus.PENDING


def test_email_rule_lands_in_the_outbox_with_the_link(project):
    rule_in(project, target="ops@example.com, oncall@example.com")
    [delivery] = published(alert_event(project))
    done = attempt(delivery.pk)
    assert done.status == DeliveryStatus.SUCCEEDED
    [message] = mail.outbox
    assert message.to == ["ops@example.com", "oncall@example.com"]
    assert "repetition alert (warning) opened in Night run" in message.subject
    assert "same call 5 times" in message.body and "http://c/alerts/" in message.body


def test_waiting_phase_emails_the_approvers_with_an_address_a_link_to_the_form(project, carol, alice, grant):
    carol.email = "carol@example.com"
    carol.save()
    alice.email = "alice@example.com"  # an operator: not asked to approve
    alice.save()
    grant(type(carol).objects.create_user("dave"), project, "approver")  # an approver without an address
    form = "http://console/sessions/1/phases/2/"
    data = {"session": SESSION, "phase": {"number": 2, "name": "design", "status": "completed", "url": form}}
    event = publish(EventType.PHASE_WAITING, project=project, data=data, dedupe_key="phase:1:2")
    [delivery] = Delivery.objects.filter(event=event)
    assert (delivery.channel, delivery.target, delivery.rule) == (Channel.EMAIL, "carol@example.com", None)
    attempt(delivery.pk)
    [message] = mail.outbox
    assert message.to == ["carol@example.com"]
    assert message.subject == "Phase 2 design of Night run waits for your approval"
    assert form in message.body


def test_slack_rule_posts_text_with_a_link_to_a_real_receiver(project, receiver):
    rule_in(project, channel=Channel.SLACK, target=receiver.url)
    [delivery] = published(alert_event(project))
    done = attempt(delivery.pk)
    assert (done.status, done.response_code, done.attempts) == (DeliveryStatus.SUCCEEDED, 200, 1)
    text = receiver.received[-1].json["text"]
    assert "repetition alert (warning) opened in Night run" in text
    assert "<http://c/alerts/|Open in Checkpoint Console>" in text


def test_slack_receiver_answering_500_is_retried_later(project, receiver):
    rule_in(project, channel=Channel.SLACK, target=receiver.url)
    receiver.status = 500
    [delivery] = published(alert_event(project))
    done = attempt(delivery.pk)
    assert (done.status, done.response_code, done.attempts) == (DeliveryStatus.PENDING, 500, 1)
    assert done.next_attempt_at > timezone.now()


def apprise_received(project, receiver, event, *, scheme, path="/hook"):
    """What `receiver` got for `event` from an Apprise rule of `scheme` pointed at it (at `path`)."""
    rule_in(
        project, channel=Channel.APPRISE, target=receiver.url.replace("http://", f"{scheme}://").replace("/hook", path)
    )
    [delivery] = published(event)
    done = attempt(delivery.pk)
    assert done.status == DeliveryStatus.SUCCEEDED, done.last_error
    return receiver.received[-1]


def test_apprise_json_url_reaches_the_receiver(project, receiver):
    got = apprise_received(project, receiver, alert_event(project), scheme="json", path="/apprise")
    assert got.path == "/apprise"
    body = got.json
    assert body["title"] == "repetition alert (warning) opened in Night run"
    assert "http://c/alerts/" in body["message"]


@pytest.mark.parametrize(
    ("channel", "target"),
    [
        (Channel.SLACK, "http://127.0.0.1:9/hook"),
        (Channel.WEBHOOK, "http://10.1.2.3/hook"),
        (Channel.APPRISE, "json://169.254.169.254/"),
        (Channel.SLACK, "ftp://example.com/"),
        (Channel.EMAIL, "ops@example.com, not an address"),
        (Channel.APPRISE, "nosuchservice://x"),
    ],
)
def test_rule_with_an_unusable_target_is_refused_and_nothing_saved(project, settings, channel, target):
    settings.WEBHOOK_ALLOW_PRIVATE = False
    with pytest.raises(InvalidTarget):
        rule_in(project, channel=channel, target=target)
    assert not NotificationRule.objects.exists() and not AuditEvent.objects.filter(action="create_rule").exists()


def test_rules_are_created_changed_and_deleted_with_audit_rows_and_a_webhook_secret_once(project, receiver):
    rule, secret = create_rule(
        project,
        actor=ACTOR,
        name="hook",
        events=[EventType.IMPORT_FAILED],
        alert_kinds=[],
        min_severity="warning",
        channel=Channel.EMAIL,
        target="a@example.com",
        quiet_minutes=0,
        enabled=True,
    )
    assert secret == "" and rule.secret == ""
    rule, secret = update_rule(rule, actor=ACTOR, channel=Channel.WEBHOOK, target=receiver.url)
    assert secret.startswith("whsec_") and NotificationRule.objects.get().secret == secret
    _, again = update_rule(rule, actor=ACTOR, name="hook 2")
    assert again == ""  # the secret stays; it is not shown again
    waiting = Delivery.objects.create(event=Event.objects.create(project=project, type="ping"), rule=rule, target="t")
    assert delete_rule(rule, actor=ACTOR) == 1
    assert not NotificationRule.objects.exists() and Delivery.objects.count() == 1
    waiting.refresh_from_db()
    assert (waiting.status, waiting.last_error) == (DeliveryStatus.FAILED, "Its rule was deleted; not sent.")
    actions = list(AuditEvent.objects.order_by("pk").values_list("action", "details"))
    assert [a for a, _ in actions] == ["create_rule", "update_rule", "update_rule", "delete_rule"]
    assert actions[1][1]["channel"] == ["email", "webhook"] and "secret" not in str(actions)


def test_send_test_sends_a_signed_ping_now_and_records_it(project, receiver):
    rule = rule_in(project, channel=Channel.WEBHOOK, target=receiver.url)
    delivery = send_test(rule, actor=ACTOR)
    assert (delivery.status, delivery.response_code, delivery.attempts) == (DeliveryStatus.SUCCEEDED, 200, 1)
    assert delivery.event.type == EventType.PING and delivery.rule == rule
    headers = receiver.received[-1].headers
    assert headers["X-Checkpoint-Event"] == "ping" and headers["X-Checkpoint-Signature"].startswith("t=")
    assert AuditEvent.objects.filter(action="test_rule").exists()


def test_send_test_to_a_dead_receiver_fails_once_without_retries(project, receiver):
    rule = rule_in(project, channel=Channel.SLACK, target=receiver.url)
    receiver.status = 404
    delivery = send_test(rule, actor=ACTOR)
    assert (delivery.status, delivery.response_code, delivery.next_attempt_at) == (DeliveryStatus.FAILED, 404, None)


def test_an_approver_is_emailed_a_link_that_opens_the_approval_form(project, carol, make_session, client, settings):
    carol.email = "carol@example.com"
    carol.save()
    session = make_session("phased")
    report_phase(session, 2, actor=ACTOR, name="design", status=PhaseStatus.COMPLETED)
    [delivery] = Delivery.objects.filter(event__type=EventType.PHASE_WAITING)
    attempt(delivery.pk)
    [message] = mail.outbox
    link = message.body.split()[-1]
    assert link == f"{settings.CONSOLE_BASE_URL}/sessions/{session.pk}/phases/2/"
    client.force_login(carol)
    page = client.get(link.removeprefix(settings.CONSOLE_BASE_URL)).content.decode()
    assert 'id="phase-review"' in page and "Submit decision" in page


HOSTILE_TITLE = "<!channel> & <http://evil|x>\r\nBcc: victim@example.com"
HOSTILE_MESSAGE = (
    "<!here> see <http://evil|Open the console> <@U123> *now* @channel [Open](http://evil) ops@example.com"
)
ZWSP = "\u200b"


def hostile_alert(project):
    event = alert_event(project)
    event.data["session"] = {**SESSION, "title": HOSTILE_TITLE}
    event.data["alert"]["message"] = HOSTILE_MESSAGE
    return event


def test_slack_gets_agent_text_escaped_so_it_cannot_mention_or_link(project, receiver):
    rule_in(project, channel=Channel.SLACK, target=receiver.url)
    [delivery] = published(hostile_alert(project))
    assert attempt(delivery.pk).status == DeliveryStatus.SUCCEEDED
    text = receiver.received[-1].json["text"]
    assert "&lt;!channel&gt; &amp; &lt;http://evil|x&gt; Bcc: victim@example.com" in text
    assert f"&lt;!here&gt; see &lt;http://evil|Open the console&gt; &lt;@{ZWSP}U123&gt;" in text
    # The same body reaches Mattermost and Rocket.Chat, which read @mentions and Markdown links in plain text.
    assert f"@{ZWSP}channel [Open]{ZWSP}(http://evil) ops@example.com" in text
    assert text.count("<") == 1 and text.endswith("<http://c/alerts/|Open in Checkpoint Console>")  # ours only
    assert "\r" not in text.splitlines()[0]


@given(title=st.text(), message=st.text())
@hypothesis_settings(max_examples=200, deadline=None)
def test_no_agent_text_opens_slack_markup(title, message):
    event = Event(type=EventType.ALERT_OPENED, data={"session": {"title": title}, "alert": {"message": message}})
    lines = slack_lines(message_of(event))
    assert "<" not in "".join(lines[:-1]) and ">" not in "".join(lines[:-1])
    unescaped = lines[1].replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    assert unescaped.replace(ZWSP, "") == message.replace(ZWSP, "")
    assert not re.search(r"(?<!\w)@\w|\]\(", lines[1])


def test_an_email_alert_is_sent_when_the_session_title_holds_a_line_break(project):
    rule_in(project, target="ops@example.com")
    [delivery] = published(hostile_alert(project))
    done = attempt(delivery.pk)
    assert done.status == DeliveryStatus.SUCCEEDED, done.last_error
    [message] = mail.outbox
    assert message.subject == (
        "repetition alert (warning) opened in <!channel> & <http://evil|x> Bcc: victim@example.com"
    )
    assert message.to == ["ops@example.com"] and message.bcc == []
    assert message.message()["Bcc"] is None


@given(title=st.text(min_size=1))
@hypothesis_settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_session_title_makes_a_one_line_subject_of_at_most_200_characters(mailoutbox, title):
    event = Event(type=EventType.ALERT_OPENED, data={"session": {"title": title}, "alert": {}})
    outcome = send_email(Delivery(event=event, channel=Channel.EMAIL, target="ops@example.com"))
    assert outcome.ok, outcome.error
    subject = mailoutbox[-1].subject
    assert len(subject) <= 200 and subject == subject.strip()
    assert not any(unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp") for char in subject)


def test_apprise_ntfy_publishes_plain_text_through_the_guarded_sender(project, receiver):
    got = apprise_received(project, receiver, hostile_alert(project), scheme="ntfy", path="/alerts")
    assert got.json["topic"] == "alerts" and got.json["message"].startswith(HOSTILE_MESSAGE)
    assert got.json["title"].endswith("<!channel> & <http://evil|x> Bcc: victim@example.com")
    assert "X-Markdown" not in got.headers


def test_apprise_xml_escapes_agent_text_into_its_elements(project, receiver):
    event = alert_event(project)
    event.data["alert"]["message"] = "</Message><Injected>1</Injected><Message>"
    document = ElementTree.fromstring(apprise_received(project, receiver, event, scheme="xml").body)  # noqa: S314 - the body this test's own receiver got
    assert [element.text for element in document.iter("Message")] == [
        "</Message><Injected>1</Injected><Message>\n\nhttp://c/alerts/"
    ]
    assert not list(document.iter("Injected"))


def test_discord_gets_escaped_markdown_and_no_mention_may_ping():
    [request] = requests_for("discord://1234/token-abc", HOSTILE_TITLE, "@everyone [Open](http://evil) **x**")
    assert request.url == "https://discord.com/api/webhooks/1234/token-abc"
    payload = orjson.loads(request.body)
    assert payload["allowed_mentions"] == {"parse": []}
    assert r"\@everyone \[Open\]\(http\://evil\) \*\*x\*\*" in payload["content"]
    assert r"\<!channel\>" in payload["content"]


def test_telegram_gets_plain_text_to_each_chat():
    bot = "123456789:ABCdefghijklmnopqrstuvwxyz0123456789"
    requests = requests_for(f"tgram://{bot}/12345/@news", "Title <b>x</b>", "body *y* @admin")
    assert [r.url for r in requests] == [f"https://api.telegram.org/bot{bot}/sendMessage"] * 2
    payloads = [orjson.loads(r.body) for r in requests]
    assert [p["chat_id"] for p in payloads] == [12345, "@news"]
    assert all("parse_mode" not in p and p["text"] == f"Title <b>x</b>\nbody *y* @{ZWSP}admin" for p in payloads)


def test_apprise_form_get_carries_the_message_in_the_query_and_the_urls_credentials():
    [request] = requests_for("form://ops:s3cret@hooks.example.com/in?method=GET&-team=a", "T & x", "b")
    assert (request.method, request.body, request.auth) == ("GET", b"", ("ops", "s3cret"))
    assert request.url == "http://hooks.example.com/in?version=1.0&title=T+%26+x&message=b&type=info&team=a"
