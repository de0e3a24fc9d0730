from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.django_db(transaction=True)


def test_overview_sessions_list_and_audit_log(page, live_server, sign_in, bob, demo, screenshot):
    sign_in(bob)
    expect(page.get_by_role("heading", name="Overview", level=1)).to_be_visible()
    expect(page.get_by_role("heading", name="Needs attention")).to_be_visible()
    expect(page.get_by_text("active sessions")).to_be_visible()
    expect(page.locator("#overview-live")).to_have_attribute("hx-trigger", "every 30s")
    screenshot("overview", guide=True)

    page.get_by_role("navigation", name="Main").get_by_role("link", name="Sessions").click()
    expect(page.get_by_role("heading", name="Sessions", level=1)).to_be_visible()
    rows = page.locator("#session-results tbody tr")
    total = rows.count()
    assert total > 3
    expect(page.get_by_role("img", name=re.compile("State size over the last")).first).to_be_visible()
    screenshot("sessions", guide=True)
    screenshot("sessions-phone", guide=True, width=390)

    # htmx swaps only the results and pushes the filtered URL; the form stays as it was
    page.get_by_label("Status").select_option("active")
    expect(page).to_have_url(re.compile(r"status=active"))
    expect(rows).not_to_have_count(total)  # the results were swapped, not only the URL pushed
    expect(rows.first.locator(".status-active")).to_be_visible()
    expect(rows.filter(has_not=page.locator(".status-active"))).to_have_count(0)
    page.get_by_label("Search").fill("nightly")
    expect(page).to_have_url(re.compile(r"q=nightly"))
    expect(rows).to_have_count(1)
    expect(page.get_by_label("Status")).to_have_value("active")
    screenshot("session-list")

    # in the list, j moves to the next row, Enter opens it
    page.get_by_label("Search").fill("")
    expect(page).not_to_have_url(re.compile(r"q=nightly"))
    rows.first.locator("a[data-open]").focus()
    page.keyboard.press("j")
    expect(rows.nth(1)).to_have_class(re.compile("is-selected"))
    page.keyboard.press("k")
    expect(rows.first).to_have_class(re.compile("is-selected"))
    href = rows.first.locator("a[data-open]").get_attribute("href")
    assert href and re.fullmatch(r"/sessions/\d+/", href)

    page.get_by_role("navigation", name="Main").get_by_role("link", name="Audit log").click()
    expect(page.get_by_role("heading", name="Audit log", level=1)).to_be_visible()
    entries = page.locator("#audit-results tbody tr")
    expect(entries.first).to_be_visible()
    page.get_by_label("Action").select_option("pin")
    expect(page).to_have_url(re.compile(r"action=pin"))
    expect(entries.first.locator(".action-name")).to_have_text("pin")
    page.get_by_label("Action").select_option("")
    expect(page).to_have_url(re.compile(r"action=(&|$)"))
    screenshot("audit-log", guide=True)


def test_lists_fit_a_laptop_screen(page, live_server, sign_in, bob, demo, screenshot):
    page.set_viewport_size({"width": 1024, "height": 768})
    sign_in(bob)
    screenshot("overview-1024")
    for path, name in (("/sessions/", "session-list-1024"), ("/audit/", "audit-log-1024")):
        page.goto(f"{live_server.url}{path}")
        overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert overflow <= 0, f"{path} scrolls sideways by {overflow}px at 1024 px"
        screenshot(name)


def test_dark_mode_follows_the_system(page, live_server, sign_in, bob, demo, screenshot):
    page.emulate_media(color_scheme="dark")
    sign_in(bob)
    screenshot("overview-dark", guide=True)
    page.goto(f"{live_server.url}/sessions/")
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background != "rgb(246, 247, 249)"
    screenshot("session-list-dark")
