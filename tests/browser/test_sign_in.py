from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db(transaction=True)


def test_signing_in_leads_to_the_overview(page, live_server, sign_in, bob, screenshot):
    page.goto(f"{live_server.url}/accounts/login/")
    screenshot("sign-in")
    sign_in(bob)
    assert page.get_by_role("link", name="Sessions").is_visible()


def test_a_wrong_password_is_refused_with_a_message(page, live_server, bob):
    page.goto(f"{live_server.url}/accounts/login/")
    page.get_by_label("Username").fill("bob")
    page.get_by_label("Password").fill("wrong")
    page.get_by_role("button", name="Sign in").click()
    assert page.get_by_role("alert").is_visible()
    assert "/accounts/login/" in page.url
