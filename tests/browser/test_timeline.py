from __future__ import annotations

import re

import pytest
from django.core.management import call_command
from playwright.sync_api import expect

from checkpoints.models import AgentSession

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def demo(db):
    call_command("seed_demo", "--small")


def _open_lazy_subtree(page) -> None:
    """Open the first branch of the state tree that loads on demand (its ancestors first)."""
    page.locator("#state details[hx-get]:has(> ul > li.lazy)").first.evaluate(
        """el => {
            el.dataset.picked = "";
            for (let p = el.parentElement.closest('details'); p; p = p.parentElement.closest('details')) p.open = true;
        }"""
    )
    lazy = page.locator("#state details[data-picked]")
    lazy.locator("> summary").click()
    expect(lazy.locator("> ul > li.lazy")).to_have_count(0)
    expect(lazy.locator("> ul > li").first).to_be_visible()


def test_operator_moves_through_the_timeline_with_the_keyboard_and_reads_a_checkpoint(
    page, live_server, sign_in, alice, demo, screenshot
):
    session = AgentSession.objects.get(external_id="patchwright-batch-ingest")  # has a restore: two branches
    sign_in(alice)
    page.goto(f"{live_server.url}/sessions/{session.pk}/")
    expect(page.get_by_role("heading", name="Timeline")).to_be_visible()
    expect(page.locator(".tag-side").first).to_be_visible()  # the branch the restore left behind
    expect(page.locator("svg.chart-svg")).to_have_count(3)
    screenshot("session-timeline")

    page.keyboard.press("j")  # outside the timeline j is only a letter (WCAG 2.1.4)
    expect(page.locator("[data-keynav-item].is-selected")).to_have_count(0)
    page.locator("table.timeline a[data-open]").first.focus()
    page.keyboard.press("j")
    page.keyboard.press("j")
    page.keyboard.press("k")
    page.keyboard.press("j")
    selected = page.locator("[data-keynav-item].is-selected")
    expect(selected).to_have_count(1)
    expect(selected).to_have_id(re.compile(r"cp-\d+"))
    target = selected.locator("a[data-open]").get_attribute("href")
    page.keyboard.press("Enter")
    page.wait_for_url(f"{live_server.url}{target}")
    expect(page.get_by_role("heading", name="Transcript")).to_be_visible()
    expect(page.locator(".tool-call").first).to_be_visible()

    _open_lazy_subtree(page)
    screenshot("checkpoint-detail")


def test_a_run_of_routine_checkpoints_opens_in_place(page, live_server, sign_in, bob, demo):
    session = AgentSession.objects.get(external_id="captain.1")  # routine checkpoints every 30 minutes
    sign_in(bob)
    page.goto(f"{live_server.url}/sessions/{session.pk}/")
    toggle = page.locator("a.run-toggle").first
    count = int(re.match(r"\D*(\d+)", toggle.inner_text()).group(1))
    rows_before = page.locator("tr[data-keynav-item]").count()
    toggle.focus()
    page.keyboard.press("Enter")
    expect(page.locator("tr[data-keynav-item]")).to_have_count(rows_before - 1 + count)
    assert "/sessions/" in page.url and "expand" not in page.url  # swapped in place, no navigation
    expect(page.locator("tbody.expanded tr").first).to_have_class(re.compile("is-selected"))  # j/k go on from here


@pytest.mark.parametrize("variant", ["1024", "dark"])
def test_timeline_and_checkpoint_at_laptop_width_and_in_dark_mode(
    page, live_server, sign_in, alice, demo, screenshot, variant
):
    if variant == "dark":
        page.emulate_media(color_scheme="dark")
    else:
        page.set_viewport_size({"width": 1024, "height": 760})
    session = AgentSession.objects.get(external_id="patchwright-batch-ingest")
    sign_in(alice)
    page.goto(f"{live_server.url}/sessions/{session.pk}/")
    expect(page.get_by_role("heading", name="Timeline")).to_be_visible()
    screenshot(f"session-timeline-{variant}")
    page.locator("tr.is-head a[data-open]").click()
    expect(page.get_by_role("heading", name="State")).to_be_visible()
    _open_lazy_subtree(page)
    screenshot(f"checkpoint-detail-{variant}")
    phased = AgentSession.objects.get(external_id="idea-validation-456")
    page.goto(f"{live_server.url}/sessions/{phased.pk}/")
    expect(page.get_by_role("heading", name="Phases")).to_be_visible()
    screenshot(f"session-phases-{variant}")
