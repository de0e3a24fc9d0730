"""Every console page passes axe-core at a desktop and a phone width, and the keyboard and screen-reader
behaviours hold: focus stays on what an htmx update changed, the result is announced in the live notice,
the overview's refresh never takes focus, the restore notice with Undo opens <main> with focus, j/k act only
inside their list, and the header folds into a Menu on a phone.

axe-core is vendored under tests/browser/vendor/ and injected with `add_script_tag`; its URL is answered by
Playwright's router, so the console never serves it and the page's Content-Security-Policy stays on.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from checkpoints.models import AgentSession, AuditEvent, Checkpoint, DriftAlert, Phase, PhaseStatus

from .conftest import TEST_TOOLS, the_consoles
from .test_content_security_policy import console_pages

pytestmark = pytest.mark.django_db(transaction=True)

AXE = Path(__file__).resolve().parent / "vendor" / "axe.min.js"
AXE_PATH = f"{TEST_TOOLS}/axe.min.js"  # never a console URL: Playwright answers it
SERIOUS = """async () => {
  const result = await axe.run(document, {resultTypes: ["violations"]});
  return result.violations
    .filter((v) => v.impact === "serious" || v.impact === "critical")
    .map((v) => `${v.impact} ${v.id}: ${v.help} (${v.nodes.slice(0, 3).map((n) => n.target.join(" ")).join(", ")})`);
}"""
WIDTHS = {"1280": {"width": 1280, "height": 860}, "390": {"width": 390, "height": 844}}
# pages whose lists and shell are this change's: nothing on them may scroll sideways on a phone
NARROW_CLEAN = {"overview", "sessions", "alerts", "audit", "retention", "jobs", "import-upload", "import-job", "phase"}


@pytest.fixture
def axe(page, live_server):
    page.route(f"{live_server.url}{AXE_PATH}", lambda route: route.fulfill(path=AXE, content_type="text/javascript"))

    def serious_violations() -> list[str]:
        page.add_script_tag(url=f"{live_server.url}{AXE_PATH}")
        return page.evaluate(SERIOUS)

    return serious_violations


def sideways(page) -> int:
    """How far the page scrolls sideways, code and diff blocks aside (they scroll inside themselves)."""
    return page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")


def sign_in_as_root(page, live_server) -> None:
    page.goto(f"{live_server.url}/accounts/login/")
    page.get_by_label("Username").fill("root")
    page.get_by_label("Password").fill("root-password-1")
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{live_server.url}/")


@pytest.mark.parametrize("width", WIDTHS)
def test_every_console_page_passes_axe_and_runs_under_the_policy_without_errors(
    page, live_server, demo, root, axe, console_errors, csp_violations, screenshot, width
):
    """One walk per width (the two run side by side under pytest-xdist); each page also answers 200 with the
    Content-Security-Policy, and the browser reports no violation and no error on it."""
    pages = [(name, path) for name, path in console_pages(live_server.url) if name != "api-docs"]  # not ours
    found: dict[str, list[str]] = {}
    page.set_viewport_size(WIDTHS[width])
    page.goto(f"{live_server.url}/accounts/login/")
    found[f"login@{width}"] = axe()
    sign_in_as_root(page, live_server)
    console_errors.clear()  # what the login page reported is the CSP test's; the walk judges each page it opens
    for name, path in pages:
        response = page.goto(f"{live_server.url}{path}")
        assert response is not None and response.status == 200, f"{path} answered {response and response.status}"
        assert "'self'" in response.headers["content-security-policy"]
        page.wait_for_load_state("networkidle")
        screenshot(f"a11y-{name}-{width}")
        assert (the_consoles(csp_violations), console_errors) == ([], []), f"on {path}"
        found[f"{name}@{width}"] = axe()
        console_errors.clear()  # axe-core's own inline <style>, rightly blocked: the console names no source
        if width == "390" and name in NARROW_CLEAN:
            assert sideways(page) <= 0, f"{path} scrolls sideways by {sideways(page)} px at 390 px"
    failing = [f"{where}: {problem}" for where, problems in found.items() for problem in problems]
    assert not failing, "serious or critical axe violations:\n" + "\n".join(failing)


def test_on_a_phone_the_header_folds_into_a_menu(page, live_server, sign_in, alice, demo, screenshot):
    page.set_viewport_size(WIDTHS["390"])
    sign_in(alice)
    header = page.locator("header.topbar")
    assert header.bounding_box()["height"] < 70  # was 510 of 844 px
    menu = page.get_by_role("button", name="Menu")
    nav = page.get_by_role("navigation", name="Main")
    expect(nav).to_be_hidden()
    expect(menu).to_have_attribute("aria-expanded", "false")
    screenshot("mobile-header-closed-390")
    menu.click()
    expect(menu).to_have_attribute("aria-expanded", "true")
    expect(nav.get_by_role("link", name="Alerts")).to_be_visible()
    screenshot("mobile-header-open-390")
    nav.get_by_role("link", name="Alerts").focus()
    page.keyboard.press("Escape")
    expect(nav).to_be_hidden()
    expect(menu).to_be_focused()
    page.set_viewport_size(WIDTHS["1280"])
    expect(menu).to_be_hidden()
    expect(nav).to_be_visible()


def test_list_rows_become_cards_on_a_phone(page, live_server, sign_in, alice, demo, screenshot):
    page.set_viewport_size(WIDTHS["390"])
    sign_in(alice)
    for path, name in (("/sessions/", "sessions"), ("/alerts/", "alerts"), ("/audit/", "audit")):
        page.goto(f"{live_server.url}{path}")
        row = page.locator("table.table-cards tbody tr").first
        expect(row).to_be_visible()
        assert row.evaluate("r => getComputedStyle(r).display") == "block"
        assert sideways(page) <= 0
        screenshot(f"cards-{name}-390")


def test_shortcuts_act_only_while_focus_is_in_their_list(page, live_server, sign_in, bob, demo):
    sign_in(bob)
    page.goto(f"{live_server.url}/sessions/")
    rows = page.locator("#session-results tbody tr")
    page.locator("h1").click()
    page.keyboard.press("j")
    expect(page.locator("#session-results tr.is-selected")).to_have_count(0)  # WCAG 2.1.4: j is only a letter
    rows.first.locator("a[data-open]").focus()
    page.keyboard.press("j")
    expect(rows.nth(1)).to_have_class(re.compile("is-selected"))
    expect(rows.nth(1).locator("a[data-open]")).to_be_focused()


def test_acknowledge_keeps_focus_on_the_alert_and_announces_it(page, live_server, sign_in, alice, demo, screenshot):
    alert = DriftAlert.objects.select_related("session").filter(state="open").first()
    sign_in(alice)
    page.goto(f"{live_server.url}/alerts/")
    button = page.get_by_role("button", name=f"Acknowledge alert {alert.pk},")
    button.focus()
    page.keyboard.press("Enter")
    expect(page.locator(f"#alert-{alert.pk}-state")).to_be_focused()
    notice = page.locator("#live-notice")
    expect(notice).to_have_text(re.compile(rf"Acknowledged the .* alert on {re.escape(alert.session.external_id)}\."))
    expect(notice).to_be_in_viewport()
    screenshot("alerts-acknowledged-notice")


def refresh_overview(page) -> None:
    """The overview's 30 s refresh, now, returning once its own swap has settled (focus is put back on settle).

    Waits on the page, not on the next htmx:afterSettle: the page's own poll settles too, and a promise that
    resolved on another swap let the test read focus in the 20 ms between this swap and its settle, when
    focus is on <body>. The new region has no `data-before`, and htmx takes `htmx-settling` off it in the
    same task that puts focus back."""
    page.locator("#overview-live").evaluate("region => { region.dataset.before = ''; }")
    page.evaluate("htmx.ajax('GET', '/', {source: '#overview-live', target: '#overview-live', swap: 'outerHTML'})")
    expect(page.locator("#overview-live:not([data-before]):not(.htmx-settling)")).to_have_count(1)


def test_the_overview_refresh_never_takes_focus(page, live_server, sign_in, alice, demo):
    sign_in(alice)
    link = page.locator("#overview-live .attention-table a[data-open]").nth(1)
    href = link.get_attribute("href")
    link.focus()
    refresh_overview(page)
    expect(page.locator(f'#overview-live .attention-table a[data-open][href="{href}"]')).to_be_focused()
    page.locator("h1").click()  # focus elsewhere: a refresh leaves it there
    refresh_overview(page)
    assert page.evaluate("document.activeElement === document.body || !!document.activeElement.closest('h1, main')")
    expect(page.locator("#overview-live")).not_to_be_focused()
    expect(page.locator("#overview-live :focus")).to_have_count(0)


def test_after_a_restore_the_notice_with_undo_opens_main_with_focus(page, live_server, sign_in, alice, demo):
    alert = DriftAlert.objects.select_related("session").get(kind="repetition")
    sign_in(alice)
    page.goto(f"{live_server.url}/checkpoints/{alert.last_good_id}/restore/")
    page.get_by_role("button", name="Restore", exact=True).click()
    page.wait_for_url(re.compile(rf"/sessions/{alert.session_id}/$"))
    notice = page.locator("main .notice-success").first
    expect(notice).to_be_focused()
    page.keyboard.press("Tab")
    expect(page.get_by_role("button", name="Undo this restore")).to_be_focused()  # one Tab, not 13


def test_pin_keeps_focus_on_its_button_and_the_notice_shows_where_the_operator_is(
    page, live_server, sign_in, alice, demo, screenshot
):
    checkpoint = Checkpoint.objects.filter(pinned=False).order_by("pk").first()
    sign_in(alice)
    page.set_viewport_size(WIDTHS["390"])
    page.goto(f"{live_server.url}/checkpoints/{checkpoint.pk}/")
    page.get_by_role("button", name=f"Pin #{checkpoint.seq}").click()
    expect(page.get_by_role("button", name=f"Unpin #{checkpoint.seq}")).to_be_focused()
    notice = page.locator("#live-notice")
    expect(notice).to_have_text(f"#{checkpoint.seq} pinned: retention keeps it.")
    expect(notice).to_be_in_viewport()
    screenshot("checkpoint-pinned-390")
    checkpoint.refresh_from_db()
    assert checkpoint.pinned


def test_a_phase_decision_is_focused_and_an_approved_phase_offers_no_form(
    page, live_server, sign_in, carol, demo, screenshot
):
    phase = Phase.objects.filter(session__external_id="idea-validation-456", status=PhaseStatus.COMPLETED).first()
    phase.feedback.all().delete()
    Phase.objects.filter(pk=phase.pk).update(completed_at=timezone.now())
    sign_in(carol)
    page.goto(f"{live_server.url}/sessions/{phase.session_id}/phases/{phase.number}/")
    page.get_by_label("Approve").check()
    page.get_by_role("button", name="Submit decision").click()
    decided = page.locator(".phase-decided")
    expect(decided).to_be_focused()
    expect(decided).to_have_text(f"Phase {phase.number}: Approved recorded.")
    expect(page.locator("#live-notice")).to_have_text(f"Phase {phase.number}: Approved recorded.")
    expect(page.get_by_role("button", name="Submit decision")).to_have_count(0)
    expect(page.locator(".phase-approved")).to_contain_text("approved by carol")
    screenshot("phase-approved")
    page.set_viewport_size(WIDTHS["390"])
    screenshot("phase-approved-390")


def test_the_pager_keeps_focus_on_next(page, live_server, sign_in, bob, demo):
    session = AgentSession.objects.first()
    AuditEvent.objects.bulk_create(
        AuditEvent(actor="system:test", action="pin", project=session.project, session=session, target=f"#{n}")
        for n in range(60)
    )
    sign_in(bob)
    page.goto(f"{live_server.url}/audit/")
    older = page.get_by_role("navigation", name="Pages of the audit log").get_by_role("link", name="Older")
    older.focus()
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(r"after="))
    expect(older).to_be_focused()
