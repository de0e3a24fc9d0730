"""An operator adds a Slack rule on the Notifications page, sends it a test and reads the delivery log, in
Chromium; the page is shot at 1280 and 390 px."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from checkpoints.models import Delivery, DeliveryStatus, Event, NotificationRule, WebhookEndpoint

pytestmark = pytest.mark.django_db(transaction=True)


def test_operator_adds_a_rule_and_sends_it_a_test(
    page, live_server, sign_in, alice, project, receiver, widths, screenshot
):
    endpoint = WebhookEndpoint.objects.create(
        project=project,
        url="https://hooks.example.com/checkpoints",
        events=["checkpoint.created"],
        created_by="token:ci",
    )
    Delivery.objects.create(
        event=Event.objects.create(project=project, type="checkpoint.created"), endpoint=endpoint,
        channel="webhook", target=endpoint.url, status=DeliveryStatus.PENDING, attempts=2, response_code=503,
        last_error="The receiver answered HTTP 503.",
    )  # fmt: skip
    sign_in(alice, everywhere=False)
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Notifications").click()
    expect(page.get_by_role("heading", name="Notifications of acme")).to_be_visible()
    page.get_by_role("link", name="Add a rule").click()

    page.get_by_label("Name").fill("on-call Slack")
    page.get_by_label("alert.opened").check()
    page.get_by_label("phase.waiting").check()
    page.get_by_label("Channel").select_option("slack")
    page.get_by_label("Target").fill("hooks.slack.com/services/x")
    page.get_by_role("button", name="Add the rule").click()
    expect(page.locator("#rule-form")).to_contain_text("Enter an http:// or https:// URL.")
    widths("notification-rule")
    page.get_by_label("Quiet period (minutes)").fill("20")
    page.get_by_label("Target").fill(receiver.url)
    page.get_by_role("button", name="Add the rule").click()
    expect(page.get_by_role("heading", name="Notifications of acme")).to_be_visible()
    expect(page.locator("#messages")).to_contain_text("Rule 'on-call Slack' added.")

    rule = NotificationRule.objects.get()
    page.get_by_role("button", name="Send test to on-call Slack").click()
    expect(page.locator(f"#rule-{rule.pk} .test-outcome")).to_contain_text("HTTP 200")
    expect(page.locator("#delivery-log tbody tr")).to_have_count(2)  # refreshed by the test's delivery
    assert "Test notification" in receiver.received[-1].json["text"]
    widths("notifications")
    screenshot("notifications", guide=True)

    page.get_by_role("link", name="Delete… on-call Slack").click()
    expect(page.locator("main")).to_contain_text("This removes the rule")
    page.get_by_role("button", name="Delete the rule").click()
    expect(page.locator("#messages")).to_contain_text("deleted")
    assert not NotificationRule.objects.exists()


def test_operator_adds_a_type_to_the_projects_langgraph_allow_list(
    page, live_server, sign_in, alice, project, screenshot
):
    sign_in(alice, everywhere=False)
    page.goto(f"{live_server.url}/notifications/acme/")
    page.get_by_role("link", name="Project settings").click()
    expect(page.get_by_role("heading", name="Project settings of")).to_be_visible()
    allowed = page.get_by_label("Types LangGraph values may name")
    allowed.fill(f"{allowed.input_value()}\nmyapp.state.")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#messages")).to_contain_text("Settings of acme saved.")
    expect(page.locator("#settings-form")).to_contain_text("Beyond the defaults: myapp.state.")
    screenshot("project-settings", guide=True)
    project.refresh_from_db()
    assert project.type_allowlist[-1] == "myapp.state."
