"""The notification channels' registry (checkpoints/outbox/channels/): every channel the models declare is
registered with a sender, a label, a check of its target and a row in the docs, and a channel registered by a
fixture alone is one a rule can use, from the console's form to its delivery."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from checkpoints.models import Channel, Delivery, DeliveryStatus, EventType, NotificationRule
from checkpoints.outbox import channels
from checkpoints.outbox.apprise_urls import ALLOWED_SCHEMES, scheme_refusal
from checkpoints.outbox.channels import ChannelKind, InvalidTarget
from checkpoints.outbox.deliveries import attempt
from checkpoints.outbox.events import publish
from checkpoints.outbox.notifications import check_rule_target, create_rule, target_error
from checkpoints.outbox.outcome import Outcome
from checkpoints.services import Actor
from dashboard.forms import RuleForm

DOCS = Path(__file__).resolve().parents[2] / "docs"
ACTOR = Actor.system("test")
# A target each channel refuses, and why (the message the form shows)
REFUSED = {
    "webhook": ("ftp://example.com/hook", "Enter an http:// or https:// URL."),
    "slack": ("not a url", "Enter an http:// or https:// URL."),
    "email": ("ops@example.com, nobody", "'nobody' is not an email address."),
    "apprise": ("mailto://ops@example.com", "mailto:// URLs are not sent by this console"),
}


def docs_rows() -> dict[str, str]:
    """The table of docs/notifications.md's "Channels" section: value → its row."""
    text = (DOCS / "notifications.md").read_text()
    section = text.split("\n## Channels\n", 1)[1].split("\n## ", 1)[0]
    return {row.group(1): row.group(0) for row in re.finditer(r"^\| [^|]+ \| `(\w+)` \| .*$", section, re.MULTILINE)}


def docs_row(kind: ChannelKind) -> str:
    return f"| {kind.label} | `{kind.value}` | {kind.target_help} | {'yes' if kind.signed else 'no'} |"


def test_every_declared_channel_is_registered_and_nothing_else():
    assert list(channels.REGISTRY) == list(Channel.values)


@pytest.mark.parametrize("value", Channel.values)
def test_each_channel_has_a_sender_its_models_label_a_target_check_and_a_docs_row(value):
    kind = channels.REGISTRY[value]
    assert callable(kind.send)
    assert kind.label == Channel(value).label  # the console shows what the model's choices say
    assert dict(channels.choices())[value] == Channel(value).label
    target, message = REFUSED[value]  # a new channel adds the target it refuses here
    with pytest.raises(InvalidTarget, match=re.escape(message)):
        kind.check_target(target)
    assert docs_rows()[value] == docs_row(kind)


def test_the_docs_table_lists_the_registered_channels_in_order():
    assert list(docs_rows()) == list(channels.REGISTRY)


def test_the_forms_target_help_names_each_channels_target():
    assert channels.target_help() == (
        "Signed webhook and Slack: the https:// URL. Email: addresses separated by commas. "
        "Apprise: json(s)://, xml(s)://, form(s)://, ntfy(s)://, discord:// or tgram:// URL."
    )
    assert RuleForm().fields["target"].help_text == channels.target_help()
    assert RuleForm().fields["channel"].choices == Channel.choices


def test_the_apprise_help_names_exactly_the_schemes_the_check_lets_through():
    named = re.findall(r"(\w+)(\(s\))?://", channels.REGISTRY["apprise"].target_help)
    offered = {scheme + suffix for scheme, s in named for suffix in (("", "s") if s else ("",))}
    assert offered == set(ALLOWED_SCHEMES)
    for scheme in offered:
        assert scheme_refusal(f"{scheme}://example.com/") == ""


def test_only_the_signed_webhook_signs():
    assert [kind.value for kind in channels.REGISTRY.values() if kind.signed] == [Channel.WEBHOOK]


def test_a_channel_is_registered_once_and_its_value_fits_the_columns():
    toy = ChannelKind("slack", "Again", "anything", send=lambda d: Outcome(ok=True), check_target=lambda t: None)
    with pytest.raises(ValueError, match="registered already"):
        channels.register(toy)
    too_long = "x" * (Delivery._meta.get_field("channel").max_length + 1)
    with pytest.raises(ValueError, match="1 to 20 characters"):
        channels.register(ChannelKind(too_long, "Long", "x", send=toy.send, check_target=toy.check_target, label="l"))
    assert too_long not in channels.REGISTRY


@given(value=st.text(max_size=30))
def test_an_unknown_channel_is_refused_with_its_name(value):
    if value in channels.REGISTRY:
        return
    with pytest.raises(InvalidTarget, match="Unknown channel"):
        check_rule_target(value, "https://example.com/")
    assert target_error(value, "https://example.com/").startswith("Unknown channel") or not value


# ---- a channel registered by a fixture alone ----------------------------------------------------------------


@pytest.fixture
def toy_channel():
    """A channel no module of the console knows: it sends to a list, and takes targets starting with "toy:"."""
    sent: list[Delivery] = []

    def send(delivery: Delivery) -> Outcome:
        sent.append(delivery)
        return Outcome(ok=True, response_code=204)

    def check(target: str) -> None:
        if not target.startswith("toy:"):
            raise InvalidTarget("A toy target starts with toy:.")

    channels.register(ChannelKind("toy", "Toy", "toy:<name>", send=send, check_target=check, label="toy box"))
    yield sent
    channels.REGISTRY.pop("toy", None)


def test_a_registered_channel_is_offered_by_the_form_with_its_help_and_check(toy_channel):
    form = RuleForm()
    assert ("toy", "toy box") in form.fields["channel"].choices
    assert form.fields["target"].help_text.endswith(" Toy: toy:<name>.")
    fields = {"name": "t", "events": ["job.failed"], "min_severity": "warning", "quiet_minutes": "0"}
    assert RuleForm({**fields, "channel": "toy", "target": "toy:ops"}).is_valid()
    refused = RuleForm({**fields, "channel": "toy", "target": "https://example.com/"})
    assert not refused.is_valid() and refused.errors["target"] == ["A toy target starts with toy:."]


@pytest.mark.django_db
def test_a_registered_channel_is_used_by_a_rule_made_in_the_console_and_gets_its_deliveries(
    toy_channel, client, alice, project
):
    client.force_login(alice)
    form = {"name": "toys", "events": ["job.failed"], "min_severity": "warning", "channel": "toy", "enabled": "on"}
    response = client.post("/notifications/acme/rules/new/", {**form, "target": "toy:ops", "quiet_minutes": "0"})
    assert response.status_code == 302
    rule = NotificationRule.objects.get(channel="toy")
    publish(EventType.JOB_FAILED, project=None, data={"job": {"name": "gc"}}, dedupe_key="job:gc")
    delivery = Delivery.objects.get(rule=rule)
    assert attempt(delivery.pk).status == DeliveryStatus.SUCCEEDED
    assert [sent.pk for sent in toy_channel] == [delivery.pk]
    assert rule.secret == ""  # not a signing channel


@pytest.mark.django_db
def test_a_delivery_of_a_channel_no_longer_registered_fails_without_retry(toy_channel, project):
    fields = {"events": [EventType.JOB_FAILED], "alert_kinds": [], "min_severity": "warning", "quiet_minutes": 0}
    rule, _ = create_rule(project, actor=ACTOR, name="toys", channel="toy", target="toy:ops", enabled=True, **fields)
    publish(EventType.JOB_FAILED, project=None, data={"job": {"name": "gc"}}, dedupe_key="job:gc")
    del channels.REGISTRY["toy"]  # the module that registered it is gone
    delivery = attempt(Delivery.objects.get(rule=rule).pk)
    assert delivery.status == DeliveryStatus.FAILED and delivery.last_error == "No sender for the toy channel."
    assert toy_channel == []
