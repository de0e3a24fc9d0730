"""Sign-in throttling (django-axes): per username and per client address, audited, shown plainly."""

from __future__ import annotations

import contextlib
import ipaddress
from datetime import datetime, timedelta

import pytest
import time_machine
from axes.models import AccessAttempt
from django.contrib.auth import SESSION_KEY
from django.test import Client, RequestFactory
from django.urls import reverse
from django.utils import timezone
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from checkpoints.models import AuditEvent
from config.security import client_ip
from tests.helpers import select, text

LOGIN = reverse("login")
ADMIN_LOGIN = reverse("admin:login")
ATTACKER, OFFICE = "203.0.113.5", "198.51.100.7"
PROXY = "10.0.0.2"


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """Each failed attempt hashes a password; the default hasher's 0.3 s each would make this file take minutes."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def sign_in(client: Client, username: str, password: str, *, url: str = LOGIN, **meta: str):
    return client.post(url, {"username": username, "password": password}, **meta)


def right_password(username: str) -> str:
    return f"{username}-password-1"  # what tests/conftest.py gives its users


def signed_in(client: Client) -> bool:
    return SESSION_KEY in client.session


def hammer(username: str, times: int, **meta: str) -> list[int]:
    """Wrong passwords from a fresh client each time (no cookie ties the attempts together)."""
    return [sign_in(Client(), username, "wrong password", **meta).status_code for _ in range(times)]


def test_fifty_wrong_passwords_then_the_right_one_is_refused(alice):
    statuses = hammer("alice", 50, REMOTE_ADDR=ATTACKER)
    assert statuses[:9] == [200] * 9  # the form says the password is wrong
    assert statuses[9:] == [429] * 41  # the tenth failure locks
    client = Client()
    response = sign_in(client, "alice", right_password("alice"), REMOTE_ADDR=ATTACKER)
    assert response.status_code == 429
    assert not signed_in(client)


def test_a_locked_username_is_refused_from_every_address(alice):
    hammer("alice", 10, REMOTE_ADDR=ATTACKER)
    client = Client()
    response = sign_in(client, "alice", right_password("alice"), REMOTE_ADDR=OFFICE)
    assert response.status_code == 429
    assert not signed_in(client)


def test_another_username_from_another_address_still_signs_in(alice, bob):
    hammer("alice", 50, REMOTE_ADDR=ATTACKER)
    client = Client()
    response = sign_in(client, "bob", right_password("bob"), REMOTE_ADDR=OFFICE)
    assert response.status_code == 302
    assert response.url == reverse("dashboard:overview")
    assert signed_in(client)


def test_a_run_across_usernames_from_one_address_locks_that_address(bob):
    for n in range(10):
        hammer(f"guess-{n}", 1, REMOTE_ADDR=ATTACKER)
    client = Client()
    assert sign_in(client, "bob", right_password("bob"), REMOTE_ADDR=ATTACKER).status_code == 429
    assert not signed_in(client)
    assert sign_in(client, "bob", right_password("bob"), REMOTE_ADDR=OFFICE).status_code == 302


def test_the_lockout_page_says_what_is_locked_and_for_how_long(alice):
    hammer("alice", 9, REMOTE_ADDR=ATTACKER)
    response = sign_in(Client(), "alice", "wrong password", REMOTE_ADDR=ATTACKER)
    html = response.content.decode()
    assert response.status_code == 429
    assert [text(heading) for heading in select(html, "h1")] == ["Sign-in locked"]
    assert [text(name) for name in select(html, "main strong")] == ["alice", "203.0.113.5"]
    assert "for the username alice and from your address 203.0.113.5" in text(html)
    assert "is locked for 15 minutes, until" in html
    assert "Even the right password is refused until then" in html
    assert select(html, 'link[href="/static/console/console.css"]')  # the console's own page, not axes' bare text


def test_a_lockout_writes_one_audit_event_naming_the_username_and_address(alice):
    hammer("alice", 50, REMOTE_ADDR=ATTACKER)
    events = list(AuditEvent.objects.filter(action="login_locked"))
    assert len(events) == 1
    event = events[0]
    assert (event.actor, event.actor_user, event.target) == ("alice", None, LOGIN)
    assert event.details["ip"] == ATTACKER
    assert event.details["locked"] == ["username", "ip_address"]
    until = datetime.fromisoformat(event.details["until"])
    assert timedelta(minutes=14) < until - timezone.now() <= timedelta(minutes=15)


def test_attempts_during_a_lockout_do_not_extend_it(alice, settings):
    start = timezone.now()
    with time_machine.travel(start, tick=False):
        hammer("alice", 10, REMOTE_ADDR=ATTACKER)
    with time_machine.travel(start + timedelta(minutes=10), tick=False):
        assert hammer("alice", 5, REMOTE_ADDR=ATTACKER) == [429] * 5
    with time_machine.travel(start + timedelta(minutes=15, seconds=1), tick=False):
        client = Client()
        assert sign_in(client, "alice", right_password("alice"), REMOTE_ADDR=ATTACKER).status_code == 302
        assert signed_in(client)


def test_limit_and_cool_off_come_from_the_settings(alice, settings):
    settings.AXES_FAILURE_LIMIT = 3
    settings.AXES_COOLOFF_TIME = timedelta(minutes=2)
    assert hammer("alice", 3, REMOTE_ADDR=ATTACKER) == [200, 200, 429]
    assert "is locked for 2 minutes" in sign_in(Client(), "alice", "x", REMOTE_ADDR=ATTACKER).content.decode()


def test_the_admin_sign_in_is_throttled_too(django_user_model):
    django_user_model.objects.create_superuser("root", password=right_password("root"))
    statuses = [
        sign_in(Client(), "root", "wrong", url=ADMIN_LOGIN, REMOTE_ADDR=ATTACKER).status_code for _ in range(12)
    ]
    assert statuses == [200] * 9 + [429] * 3
    client = Client()
    response = sign_in(client, "root", right_password("root"), url=ADMIN_LOGIN, REMOTE_ADDR=OFFICE)
    assert response.status_code == 429
    assert not signed_in(client)
    assert AuditEvent.objects.get(action="login_locked").target == ADMIN_LOGIN


def test_staff_lift_a_lockout_in_the_admin_and_it_is_audited(alice, django_user_model):
    hammer("alice", 10, REMOTE_ADDR=ATTACKER)
    admin = Client()
    admin.force_login(django_user_model.objects.create_superuser("root", password="unused-password-1"))
    changelist = reverse("admin:axes_accessattempt_changelist")
    assert "alice" in admin.get(changelist).content.decode()
    pks = list(AccessAttempt.objects.values_list("pk", flat=True))
    response = admin.post(changelist, {"action": "delete_selected", "_selected_action": pks, "post": "yes"})
    assert response.status_code == 302
    assert not AccessAttempt.objects.exists()
    event = AuditEvent.objects.get(action="login_unlocked")
    assert (event.actor, event.target) == ("root", "alice")
    assert event.details == {"count": 1, "attempts": [{"username": "alice", "ip": ATTACKER}]}
    client = Client()
    assert sign_in(client, "alice", right_password("alice"), REMOTE_ADDR=ATTACKER).status_code == 302


# ---- the client address behind the proxy --------------------------------------------------------------


def guess_usernames(forwarded: str, remote: str = PROXY) -> None:
    """A run of wrong passwords across usernames: only the address ties them together."""
    for n in range(10):
        hammer(f"guess-{n}", 1, REMOTE_ADDR=remote, HTTP_X_FORWARDED_FOR=forwarded.format(n=n))


def bob_signs_in(forwarded: str, remote: str = PROXY) -> int:
    return sign_in(
        Client(), "bob", right_password("bob"), REMOTE_ADDR=remote, HTTP_X_FORWARDED_FOR=forwarded
    ).status_code


def test_behind_the_proxy_each_forwarded_client_is_counted_apart(bob, settings):
    """Every request arrives from the proxy's address: counting that one would let one attacker lock out all."""
    settings.BEHIND_PROXY = True
    guess_usernames(ATTACKER)
    assert bob_signs_in(OFFICE) == 302
    assert bob_signs_in(ATTACKER) == 429
    assert AuditEvent.objects.get(action="login_locked").details["ip"] == ATTACKER


def test_behind_the_proxy_a_forged_forwarded_entry_does_not_dodge_the_throttle(bob, settings):
    """The proxy appends the address it saw; whatever the client put in front of it is not believed."""
    settings.BEHIND_PROXY = True
    guess_usernames(f"192.0.2.{{n}}, {ATTACKER}")
    assert bob_signs_in(f"{OFFICE}, {ATTACKER}") == 429


def test_with_two_proxies_the_client_is_the_second_address_from_the_right(bob, settings):
    settings.BEHIND_PROXY, settings.PROXY_COUNT = True, 2
    cdn = "192.0.2.80"
    guess_usernames(f"{ATTACKER}, {cdn}")
    assert bob_signs_in(f"{OFFICE}, {cdn}") == 302
    assert bob_signs_in(f"{ATTACKER}, {cdn}") == 429


def test_without_the_proxy_setting_the_forwarded_header_is_ignored(bob, settings):
    settings.BEHIND_PROXY = False
    guess_usernames("192.0.2.{n}", remote=ATTACKER)
    assert bob_signs_in(OFFICE, remote=ATTACKER) == 429


forwarded_header = st.one_of(
    st.text(max_size=60),
    st.lists(st.one_of(st.ip_addresses().map(str), st.text(max_size=12)), max_size=4).map(", ".join),
)


@hypothesis_settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(forwarded=forwarded_header, behind_proxy=st.booleans(), proxies=st.integers(0, 3))
def test_the_client_address_is_always_an_address_the_request_carries(settings, forwarded, behind_proxy, proxies):
    """Whatever the header holds, the throttle counts a valid address (stored in an IP column) or none."""
    settings.BEHIND_PROXY, settings.PROXY_COUNT = behind_proxy, proxies
    request = RequestFactory().post(LOGIN, REMOTE_ADDR=PROXY, HTTP_X_FORWARDED_FOR=forwarded)
    hops, expected = forwarded.split(","), PROXY
    if behind_proxy and 0 < proxies <= len(hops):
        with contextlib.suppress(ValueError):  # not an address: the connection's address counts
            expected = str(ipaddress.ip_address(hops[-proxies].strip()))
    assert client_ip(request) == expected


def test_a_garbled_forwarded_header_falls_back_to_the_connection_address(alice, settings):
    settings.BEHIND_PROXY = True
    statuses = hammer("alice", 10, REMOTE_ADDR=ATTACKER, HTTP_X_FORWARDED_FOR="unknown, \x00, 999.1.1.1")
    assert statuses[-1] == 429
    assert set(AccessAttempt.objects.values_list("ip_address", flat=True)) == {ATTACKER}
