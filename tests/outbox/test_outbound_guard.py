"""The one guarded way out: every Apprise scheme, redirects, IPv6 forms of private IPv4 addresses, one resolution."""

from __future__ import annotations

import ipaddress
import socket

import pytest
from apprise.apprise import N_MGR
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from checkpoints.models import Channel, Delivery, DeliveryStatus, Event, EventType, NotificationRule
from checkpoints.outbox.deliveries import attempt
from checkpoints.outbox.notifications import InvalidTarget, create_rule, send_test
from checkpoints.outbox.safe_http import UnsafeTarget, check_target
from checkpoints.services import Actor
from tests.kits.webhook_kit import listen

pytestmark = pytest.mark.django_db
ACTOR = Actor.system("test")
APPRISE_SCHEMES = sorted(N_MGR.schemas())  # every scheme the installed Apprise registers, read at test time


@pytest.fixture
def listener():
    yield from listen()


@pytest.fixture
def everything_resolves_to(monkeypatch):
    """Point every name and port the console resolves at one loopback port (DNS answering with an inside
    address): a send that gets past the guard, wherever it was going, lands there."""

    def point(port: int) -> None:
        real = socket.getaddrinfo
        monkeypatch.setattr(socket, "getaddrinfo", lambda host, _port, *a, **k: real("127.0.0.1", port, *a, **k))

    return point


def rule_fields(channel: str, target: str) -> dict:
    return {
        "name": "ops",
        "events": [EventType.ALERT_OPENED],
        "alert_kinds": [],
        "min_severity": "warning",
        "channel": channel,
        "target": target,
        "quiet_minutes": 0,
        "enabled": True,
    }


@pytest.mark.parametrize("scheme", APPRISE_SCHEMES)
def test_no_apprise_scheme_reaches_a_loopback_listener_with_the_guard_on(
    project, settings, listener, everything_resolves_to, scheme
):
    settings.WEBHOOK_ALLOW_PRIVATE = False
    everything_resolves_to(listener.port)
    target = f"{scheme}://user:password@127.0.0.1:{listener.port}/token/target"
    with pytest.raises(InvalidTarget):
        create_rule(project, actor=ACTOR, **rule_fields(Channel.APPRISE, target))
    assert not NotificationRule.objects.exists()
    # A rule saved before these checks (or by hand) is refused again when it is sent.
    rule = NotificationRule.objects.create(project=project, **rule_fields(Channel.APPRISE, target))
    delivery = send_test(rule, actor=ACTOR)
    assert delivery.status == DeliveryStatus.FAILED and delivery.last_error
    assert listener.connections == []


@pytest.mark.parametrize("scheme", ["mmost", "gotify", "matrix", "rocket", "kodi", "mailto", "irc", "slack"])
def test_a_refused_scheme_says_which_ones_are_allowed(project, scheme):
    with pytest.raises(InvalidTarget, match=r"json://, jsons://, xml://.*ntfy://.*discord://, tgram://"):
        create_rule(project, actor=ACTOR, **rule_fields(Channel.APPRISE, f"{scheme}://example.com/a/b"))


@pytest.mark.parametrize("query", ["+X-Team=a%0D%0ABcc:%20x", "+X%0D%0AInjected=1", "+X-Nul=a%00b"])
def test_an_apprise_header_with_a_line_break_is_refused_when_the_rule_is_saved(project, settings, query):
    settings.WEBHOOK_ALLOW_PRIVATE = True
    with pytest.raises(InvalidTarget, match="line break"):
        create_rule(project, actor=ACTOR, **rule_fields(Channel.APPRISE, f"json://127.0.0.1:9/hook?{query}"))
    assert not NotificationRule.objects.exists()


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
@pytest.mark.parametrize(
    ("channel", "scheme"),
    [
        (Channel.WEBHOOK, "http"),
        (Channel.SLACK, "http"),
        (Channel.APPRISE, "json"),
        (Channel.APPRISE, "form"),
        (Channel.APPRISE, "xml"),
        (Channel.APPRISE, "ntfy"),
    ],
)
def test_a_redirect_is_a_failed_attempt_naming_its_location_and_is_not_followed(
    project, receiver, listener, channel, scheme, status
):
    # Private addresses are allowed here (the receiver is on 127.0.0.1), so only "never follow" stops the hop.
    receiver.status = status
    receiver.location = f"http://127.0.0.1:{listener.port}/latest/meta-data/"
    target = receiver.url.replace("http://", f"{scheme}://")
    rule = create_rule(project, actor=ACTOR, **rule_fields(channel, target))[0]
    delivery = send_test(rule, actor=ACTOR)
    assert (delivery.status, delivery.response_code) == (DeliveryStatus.FAILED, status)
    assert receiver.location in delivery.last_error and "not followed" in delivery.last_error
    assert len(receiver.received) == 1 and listener.connections == []


def test_a_send_resolves_the_host_once_and_connects_to_what_it_vetted(project, receiver, monkeypatch):
    rule = create_rule(project, actor=ACTOR, **rule_fields(Channel.SLACK, receiver.url))[0]
    real, asked = socket.getaddrinfo, []

    def resolve(host, port, *args, **kwargs):
        asked.append(host)
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    assert send_test(rule, actor=ACTOR).status == DeliveryStatus.SUCCEEDED
    assert asked == ["127.0.0.1"]  # a second lookup could answer differently (DNS rebinding)


PRIVATE_V4 = [
    ipaddress.IPv4Network(net)
    for net in (
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.0.0.0/24",
        "192.88.99.0/24",
        "192.168.0.0/16",
        "198.18.0.0/15",
        "224.0.0.0/4",
        "240.0.0.0/4",
    )
]


def embeddings(v4: ipaddress.IPv4Address, suffix: int) -> list[str]:
    """`v4` in each IPv6 form that carries an IPv4 address: mapped, compatible, NAT64, 6to4."""
    low = int(v4)
    return [
        f"::ffff:{v4}",
        f"::{v4}",
        str(ipaddress.IPv6Address((0x0064FF9B << 96) | low)),
        str(ipaddress.IPv6Address((0x2002 << 112) | (low << 80) | suffix)),
    ]


@hypothesis_settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    v4=st.sampled_from(PRIVATE_V4).flatmap(lambda net: st.ip_addresses(network=net)),
    suffix=st.integers(min_value=0, max_value=2**80 - 1),
)
def test_an_ipv6_address_embedding_a_private_ipv4_address_is_refused(settings, v4, suffix):
    settings.WEBHOOK_ALLOW_PRIVATE = False
    for v6 in embeddings(v4, suffix):
        with pytest.raises(UnsafeTarget, match="WEBHOOK_ALLOW_PRIVATE"):
            check_target(f"http://[{v6}]:8080/hook")


@pytest.mark.parametrize("v6", embeddings(ipaddress.IPv4Address("8.8.8.8"), 1)[2:] + ["2001:4860:4860::8888"])
def test_an_ipv6_address_embedding_a_public_ipv4_address_passes_the_guard(settings, v6):
    settings.WEBHOOK_ALLOW_PRIVATE = False
    check_target(f"http://[{v6}]/hook")  # judged by the embedded address, not refused for its form


@pytest.mark.parametrize("v6", ["64:ff9b:1::a00:1", "fec0::1", "::"])
def test_local_nat64_site_local_and_unspecified_ipv6_are_refused(settings, v6):
    settings.WEBHOOK_ALLOW_PRIVATE = False
    with pytest.raises(UnsafeTarget, match="WEBHOOK_ALLOW_PRIVATE"):
        check_target(f"http://[{v6}]/hook")


def test_a_rule_saved_with_a_scheme_now_refused_fails_at_once_without_retries(project):
    target = "mmost://chat.example.com/token"
    rule = NotificationRule.objects.create(project=project, **rule_fields(Channel.APPRISE, target))
    event = Event.objects.create(project=project, type=EventType.ALERT_OPENED, data={})
    due = Delivery.objects.create(
        event=event, rule=rule, channel=rule.channel, target=target, next_attempt_at=event.created_at
    )
    delivery = attempt(due.pk)
    assert (delivery.status, delivery.attempts, delivery.next_attempt_at) == (DeliveryStatus.FAILED, 1, None)
    assert "Apprise rules take json://" in delivery.last_error
