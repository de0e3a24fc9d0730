from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.django_db(transaction=True)


def test_signing_in_leads_to_the_overview(page, live_server, sign_in, bob, screenshot):
    page.goto(f"{live_server.url}/accounts/login/")
    screenshot("sign-in")
    sign_in(bob)
    expect(page.get_by_role("link", name="Sessions")).to_be_visible()


def test_a_wrong_password_is_refused_with_a_message(page, live_server, bob):
    page.goto(f"{live_server.url}/accounts/login/")
    page.get_by_label("Username").fill("bob")
    page.get_by_label("Password").fill("wrong")
    page.get_by_role("button", name="Sign in").click()
    # is_visible() does not wait: right after the click the form may still be on its way back
    expect(page.get_by_role("alert")).to_be_visible()
    expect(page).to_have_url(re.compile(r"/accounts/login/"))
