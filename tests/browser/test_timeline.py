from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from checkpoints.models import AgentSession
from tests.browser.conftest import SCREENSHOTS
from tests.dashboard.trees import NEW_ROOT, grow

pytestmark = pytest.mark.django_db(transaction=True)


def _open_lazy_subtree(page) -> None:
    """Open the first branch of the state tree that loads on demand (its ancestors first)."""
    page.locator("#state details:has(> ul > li.lazy)").first.evaluate(
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
    expect(page.locator("tbody.branch").first).to_be_visible()  # the branch the restore left behind
    expect(page.locator("svg.chart-svg")).to_have_count(3)
    screenshot("session-timeline", guide=True)
    screenshot("session-timeline-phone", guide=True, width=390)

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
    screenshot("checkpoint", guide=True)


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
    expect(page).to_have_url(re.compile(rf"/sessions/{session.pk}/$"))  # swapped in place, no navigation
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


@pytest.fixture
def branched(make_session):
    """Two runs in one session, each with the shapes agents grow: run 1 (#1–#20) resumed from #9 after an
    interruption; run 2 (a new root at #21) with two time-travel branches, a restore and a failed attempt."""
    return grow(
        make_session("branchy"),
        60,
        {13: 9, 21: NEW_ROOT, 41: 30, 49: 44},
        restores={56: 52},
        failed={48},
    )


def _set_width(page, width: int) -> None:
    page.set_viewport_size({"width": width, "height": 900})


def _shoot(page, screenshot, name: str) -> None:
    """A full-page screenshot from the top: scrolled, the sticky top bar would be drawn over the timeline."""
    page.evaluate("window.scrollTo(0, 0)")
    screenshot(name)


def test_side_branches_fold_and_open_in_place(page, live_server, sign_in, alice, branched, screenshot):
    sign_in(alice)
    _set_width(page, 1280)
    page.goto(f"{live_server.url}/sessions/{branched.pk}/")
    folded = page.locator("tbody.branch.is-folded")
    expect(folded).to_have_count(3)  # #45–48, #31–40 and the first run with its fork, #1–20
    expect(page.locator("tbody.branch.is-open")).to_have_count(1)  # #53–55 is short
    expect(page.locator("#branch-31")).to_contain_text("Branch of 10 checkpoints")
    expect(page.locator("#branch-1")).to_contain_text("Run of 20 checkpoints")
    expect(page.locator("#cp-21")).to_contain_text("new run")
    expect(page.locator("#cp-41")).to_contain_text("branched from #30")
    _shoot(page, screenshot, "timeline-branches-1280")

    page.locator("#toggle-31").click()
    expect(page.locator("#cp-35")).to_be_visible()
    expect(page.locator("#branch-31")).to_have_class(re.compile("is-open"))
    expect(page.locator("#toggle-31")).to_be_focused()  # the same control, now folding it
    expect(page).to_have_url(re.compile(r"open=31"))
    _shoot(page, screenshot, "timeline-branch-open-1280")

    page.keyboard.press("Enter")
    expect(page.locator("#cp-35")).to_have_count(0)
    expect(page.locator("#branch-31")).to_have_class(re.compile("is-folded"))
    expect(page).not_to_have_url(re.compile(r"open=31"))

    _set_width(page, 390)
    page.locator("#toggle-1").click()
    expect(page.locator("#cp-15")).to_be_visible()
    expect(page.locator("#cp-13")).to_contain_text("branched from #9")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390  # the table scrolls, not the page
    _shoot(page, screenshot, "timeline-branches-390")


@pytest.fixture
def agent_with_history(make_session):
    """60 agent steps with tool calls (every 7th fails, the agent goes on), a halt at #40, a restore of #57,
    a fork from #20, and #10–#14 removed by retention."""
    from checkpoints.services import Actor, CheckpointInput, fork_session, ingest_checkpoints, restore_checkpoint
    from checkpoints.services.cleanup import delete_checkpoints

    session = make_session("survey")
    calls: list[dict] = []
    items = []
    for step in range(1, 61):
        ok = step % 7 != 0
        query = f"context compression benchmark {step}"
        calls = [
            *calls,
            {"tool_name": "web_search", "arguments": {"query": query}, "success": ok}
            | ({"result": f"10 results; top: arXiv:2310.08560 MemGPT (step {step})"} if ok else {"error": "timeout"}),
        ]
        halted = step == 40
        items.append(
            CheckpointInput(
                state={"tool_calls": calls},
                name="loop_detected" if halted else "tool_called" if ok else "tool_failed",
                status="halted" if halted else "completed",
                status_reason="the same search 4 times without progress" if halted else "",
                step=step,
            )
        )
    ingest_checkpoints([(session, items)])
    actor = Actor.system("test")
    delete_checkpoints(session.checkpoints.filter(seq__range=(10, 14)).values_list("pk", flat=True), actor=actor)
    fork_session(session.checkpoints.get(seq=20), actor=actor)
    restore_checkpoint(session.checkpoints.get(seq=57), actor=actor, reason="before the last searches")
    session.refresh_from_db()
    return session


def test_rows_say_what_happened_failures_stand_out_and_the_index_jumps(
    page, live_server, sign_in, alice, agent_with_history, screenshot
):
    session = agent_with_history
    sign_in(alice)
    _set_width(page, 1280)
    page.goto(f"{live_server.url}/sessions/{session.pk}/")
    expect(page.locator("#cp-59 .preview")).to_contain_text("web_search(query=context compression benchmark 59) →")
    expect(page.locator("#cp-56")).to_have_class(re.compile("is-tool-failed"))
    expect(page.locator("#cp-56 .status-cell")).to_contain_text("tool failed")
    expect(page.locator(".chart-errors")).not_to_contain_text("No failed")
    expect(page.locator("#cp-20 .marker svg")).to_be_visible()  # the fork glyph
    menu = page.locator("#cp-59 details.row-menu")
    expect(menu.get_by_role("link", name="Restore #59")).to_be_hidden()
    menu.locator("summary").click()
    expect(menu.get_by_role("link", name="Restore #59")).to_be_visible()
    # filled on opening from the page's one template: the links and the pin form name this row
    expect(menu.get_by_role("link", name="Fork from #59")).to_have_attribute("href", re.compile(r"/fork/$"))
    expect(menu.get_by_role("button", name="Pin #59")).to_be_visible()
    expect(page.locator("#cp-58 .row-menu-items")).to_have_count(0)  # a closed menu stays empty
    head = page.locator("tr.is-head details.row-menu")
    head.locator("summary").click()
    expect(head.get_by_role("link", name=re.compile("^Fork from"))).to_be_visible()
    expect(head.get_by_role("link", name=re.compile("^Restore"))).to_have_count(0)  # it would discard nothing
    head.locator("summary").click()
    _shoot(page, screenshot, "timeline-rows-1280")
    page.evaluate("document.getElementById('cp-61').scrollIntoView()")
    page.screenshot(path=str(SCREENSHOTS / "timeline-rows-menu-1280.png"))  # the screen a reader sees, unscaled

    page.locator(".landmarks").get_by_role("link", name="#40 loop_detected").click()
    expect(page.locator("tr.is-target")).to_have_id("cp-40")
    expect(page).to_have_url(re.compile(r"at=40"))
    expect(page.locator("#gap-10")).to_contain_text("#10–#14 removed: 5 checkpoints")
    _shoot(page, screenshot, "timeline-jumped-1280")

    _set_width(page, 390)
    page.goto(f"{live_server.url}/sessions/{session.pk}/?at=16")
    expect(page.locator("#gap-10")).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390  # the table scrolls, not the page
    preview = page.locator("#cp-16 .preview")
    expect(preview).to_be_visible()
    assert preview.bounding_box()["width"] >= 150  # readable: not squeezed to a few characters
    wrap = page.locator(".table-wrap:has(table.timeline)")
    assert wrap.evaluate("el => el.scrollWidth <= el.clientWidth")  # every column fits: nothing to scroll to
    status, menu = page.locator("#cp-7 .status-folded"), page.locator("#cp-7 .actions summary")
    expect(status).to_contain_text("tool failed")  # folded under the name, on screen without scrolling
    for box in (status.bounding_box(), menu.bounding_box()):
        assert box["x"] + box["width"] <= 390
    _shoot(page, screenshot, "timeline-rows-390")
    page.evaluate("document.getElementById('gap-10').scrollIntoView()")
    page.screenshot(path=str(SCREENSHOTS / "timeline-rows-gap-390.png"))

    page.locator("#cp-7 a[data-open]").focus()
    page.keyboard.press("c")  # the compare link inside the closed menu still answers the shortcut
    page.wait_for_url(re.compile(r"/compare/\?a=\d+&b=\d+"))
