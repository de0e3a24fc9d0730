from __future__ import annotations

import pytest
from django.urls import reverse

from checkpoints.models import AuditEvent, Delivery, DeliveryStatus, Event, NotificationRule, WebhookEndpoint
from checkpoints.outbox.notifications import create_rule
from checkpoints.services import Actor
from tests.helpers import select, text

pytestmark = pytest.mark.django_db
PAGE = "/notifications/acme/"
NEW = "/notifications/acme/rules/new/"
FORM = {
    "name": "on-call",
    "events": ["alert.opened", "alert.escalated"],
    "alert_kinds": ["repetition"],
    "min_severity": "critical",
    "channel": "email",
    "target": "oncall@example.com",
    "quiet_minutes": "15",
    "enabled": "on",
}


def make_rule(project, **fields):
    values = {**FORM, "quiet_minutes": 15, "enabled": True, **fields}
    return create_rule(project, actor=Actor.system("test"), **values)[0]


def test_the_routes_are_named():
    assert reverse("dashboard:notifications", args=["acme"]) == PAGE
    assert reverse("dashboard:notification_rule_create", args=["acme"]) == NEW


def test_operator_adds_a_rule_and_it_is_saved_and_audited(client, alice, project):
    client.force_login(alice)
    response = client.post(NEW, FORM)
    assert response.status_code == 302 and response["Location"] == PAGE
    rule = NotificationRule.objects.get()
    assert (rule.project, rule.events, rule.alert_kinds, rule.min_severity) == (
        project,
        ["alert.opened", "alert.escalated"],
        ["repetition"],
        "critical",
    )
    assert (rule.channel, rule.target, rule.quiet_minutes, rule.created_by) == ("email", FORM["target"], 15, alice)
    assert AuditEvent.objects.get(action="create_rule").actor == "alice"
    html = client.get(PAGE).content.decode()
    assert "Rule 'on-call' added." in [text(notice) for notice in select(html, "#messages .notice")]
    assert [text(a) for a in select(html, ".rule-table tbody td:first-child a")] == ["on-call"]


def test_a_signed_webhook_rules_secret_is_shown_once(client, alice, project, settings):
    settings.WEBHOOK_ALLOW_PRIVATE = True
    client.force_login(alice)
    client.post(NEW, {**FORM, "channel": "webhook", "target": "http://127.0.0.1:9/hook"})
    secret = NotificationRule.objects.get().secret
    assert secret.startswith("whsec_")
    assert [text(code) for code in select(client.get(PAGE).content.decode(), "#new-secret")] == [secret]
    assert secret not in client.get(PAGE).content.decode()


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"channel": "slack", "target": "http://10.0.0.5/hook"}, "private"),
        ({"channel": "slack", "target": "not a url"}, "http:// or https://"),
        ({"channel": "email", "target": "nobody"}, "not an email address"),
        ({"channel": "apprise", "target": "nosuchservice://x"}, "Apprise rules take json://"),
        ({"channel": "apprise", "target": "mmost://127.0.0.1:8065/token"}, "Apprise rules take json://"),
        ({"channel": "apprise", "target": "ntfy://127.0.0.1:9/topic"}, "private"),
        ({"events": []}, "This field is required"),
        ({"quiet_minutes": "-1"}, "greater than or equal to 0"),
    ],
)
def test_bad_input_is_a_form_error_and_saves_nothing(client, alice, project, settings, change, error):
    settings.WEBHOOK_ALLOW_PRIVATE = False
    client.force_login(alice)
    response = client.post(NEW, {**FORM, **change}, headers={"HX-Request": "true"})
    assert response.status_code == 200
    html = response.content.decode()
    assert select(html, "form#rule-form") and error in text(select(html, "form#rule-form")[0])
    assert "<html" not in html  # the form partial only
    assert not NotificationRule.objects.exists() and not AuditEvent.objects.exists()


def test_operator_edits_a_rule(client, alice, project):
    rule = make_rule(project)
    client.force_login(alice)
    url = f"/notifications/acme/rules/{rule.pk}/"
    form = client.get(url).content.decode()
    assert select(form, "#id_target")[0].get("value") == "oncall@example.com"
    response = client.post(url, {**FORM, "target": "ops@example.com", "enabled": ""}, headers={"HX-Request": "true"})
    assert response.status_code == 200 and response["HX-Redirect"] == PAGE
    rule.refresh_from_db()
    assert (rule.target, rule.enabled) == ("ops@example.com", False)
    assert AuditEvent.objects.get(action="update_rule").details["target"] == ["oncall@example.com", "ops@example.com"]


def test_delete_asks_first_says_what_it_removes_then_deletes_keeping_deliveries(client, alice, project):
    rule = make_rule(project)
    Delivery.objects.create(event=Event.objects.create(project=project, type="ping"), rule=rule, target="t")
    client.force_login(alice)
    url = f"/notifications/acme/rules/{rule.pk}/delete/"
    question = client.get(url).content.decode()
    assert "This removes the rule" in question and "1 past delivery stay in the delivery log" in question
    assert NotificationRule.objects.exists()
    assert client.post(url).status_code == 302
    assert not NotificationRule.objects.exists() and Delivery.objects.count() == 1
    assert AuditEvent.objects.filter(action="delete_rule").count() == 1


def test_send_test_records_a_delivery_and_says_how_it_went(client, alice, project, receiver):
    rule = make_rule(project, channel="slack", target=receiver.url)
    client.force_login(alice)
    response = client.post(f"/notifications/acme/rules/{rule.pk}/test/", headers={"HX-Request": "true"})
    assert response.status_code == 200
    assert "delivery-logged" in response["HX-Trigger"] and "sent (HTTP 200)" in response["HX-Trigger-After-Settle"]
    assert text(select(response.content.decode(), f"#rule-{rule.pk} .test-outcome")[0]) == "Test succeeded HTTP 200"
    delivery = Delivery.objects.get(rule=rule)
    assert (delivery.event.type, delivery.status, delivery.response_code) == ("ping", DeliveryStatus.SUCCEEDED, 200)
    assert "Test notification from Checkpoint Console" in receiver.received[-1].json["text"]
    log = client.get(PAGE, headers={"HX-Request": "true"}).content.decode()
    assert [text(cell) for cell in select(log, "#delivery-log tbody td:first-child")] == ["ping"]


def test_page_shows_the_projects_webhooks_their_deliveries_and_the_log(client, alice, project, other_project):
    endpoint = WebhookEndpoint.objects.create(project=project, url="https://hooks.example.com/in", events=["x"])
    event = Event.objects.create(project=project, type="checkpoint.created")
    Delivery.objects.create(
        event=event, endpoint=endpoint, channel="webhook", target=endpoint.url, status="failed", response_code=502,
        attempts=6, last_error="The receiver answered HTTP 502.",
    )  # fmt: skip
    WebhookEndpoint.objects.create(project=other_project, url="https://elsewhere.example.com/", events=["x"])
    client.force_login(alice)
    html = client.get(PAGE).content.decode()
    assert [text(td) for td in select(html, ".webhook-table tbody td:first-child")] == [endpoint.url]
    [row] = select(html, ".delivery-table tbody tr")
    assert "502" in text(row) and "6" in text(row) and "HTTP 502" in text(row) and "failed" in text(row)
    failed_only = client.get(PAGE, {"status": "succeeded"}, headers={"HX-Request": "true"}).content.decode()
    assert not select(failed_only, ".delivery-table tbody tr") and "No deliveries with status" in failed_only


def test_viewer_gets_403_and_another_projects_rule_is_404(client, alice, bob, project, other_project):
    theirs = make_rule(other_project)
    client.force_login(bob)
    assert client.get(PAGE).status_code == 403
    assert client.post(NEW, FORM).status_code == 403
    client.force_login(alice)
    assert client.get(f"/notifications/acme/rules/{theirs.pk}/").status_code == 404
    assert client.get("/notifications/globex/").status_code == 404
    assert client.post(f"/notifications/acme/rules/{theirs.pk}/delete/").status_code == 404
    assert NotificationRule.objects.count() == 1


def test_an_operator_of_one_project_is_403_on_another_they_only_view(client, alice, grant, other_project):
    grant(alice, other_project, "viewer")
    client.force_login(alice)
    assert client.get("/notifications/globex/").status_code == 403


def test_notifications_lists_the_projects_an_operator_manages_or_goes_to_the_one(client, alice, grant, other_project):
    client.force_login(alice)
    assert client.get("/notifications/")["Location"] == PAGE
    grant(alice, other_project, "operator")
    html = client.get("/notifications/").content.decode()
    links = [a.get("href") for a in select(html, "main li a")]
    assert links == [
        PAGE, "/projects/acme/settings/", "/projects/acme/tokens/",
        "/notifications/globex/", "/projects/globex/settings/", "/projects/globex/tokens/",
    ]  # fmt: skip


def test_nav_links_the_page_for_operators_only(client, alice, bob):
    client.force_login(alice)
    nav = [text(a) for a in select(client.get(PAGE).content.decode(), "nav.mainnav a[aria-current=page]")]
    assert nav == ["Notifications"]
    client.force_login(bob)
    assert "Notifications" not in [text(a) for a in select(client.get("/").content.decode(), "nav.mainnav a")]


def test_page_query_count_is_bounded(client, alice, project, django_assert_max_num_queries):
    for n in range(5):
        make_rule(project, name=f"rule {n}")
        endpoint = WebhookEndpoint.objects.create(project=project, url=f"https://h{n}.example.com/", events=["x"])
        event = Event.objects.create(project=project, type="checkpoint.created")
        Delivery.objects.create(event=event, endpoint=endpoint, channel="webhook", target=endpoint.url)
    client.force_login(alice)
    with django_assert_max_num_queries(12):
        assert client.get(PAGE).status_code == 200
