"""An operator compares checkpoints far apart and on different branches, at 1280 px and on a 390 px phone."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.django_db(transaction=True)


def message(i: int) -> dict:
    role = "assistant" if i % 2 else "user"
    return {"role": role, "content": f"Message {i}: checked the build log, the flaky test fails on the retry path."}


@pytest.fixture
def far_apart(make_session, make_checkpoint):
    """#1 and #2 of a long run: 312 messages appended, twelve memory keys changed, the plan rewritten."""
    session = make_session("long-run")
    plan = [f"{i}. read the logs of job {i}, find the failing test, rerun it" for i in range(1, 30)]
    first = make_checkpoint(
        session,
        {
            "messages": [message(0)],
            "memory": {f"fact_{i:02}": f"unknown {i}" for i in range(12)},
            "plan": "\n".join(plan),
            "summary": "Nothing yet: the logs of the last three nightly builds are still being read.",
        },
        name="task_started",
    )
    plan[9] = "10. skip job 10: it is the flaky one, and page the on-call engineer"
    last = make_checkpoint(
        session,
        {
            "messages": [message(i) for i in range(313)],
            "memory": {f"fact_{i:02}": f"known: value {i * 7}" for i in range(12)},
            "plan": "\n".join(plan),
            "report": {"status": "draft", "sections": 3},
            "summary": "The suite is green again after skipping job 10, the flaky one; the on-call engineer has it.",
        },
        name="report_drafted",
    )
    return first, last


def no_sideways_scroll(page) -> bool:
    return page.evaluate("document.scrollingElement.scrollWidth <= window.innerWidth")


def test_operator_reads_a_distant_compare_by_group_and_opens_the_collapsed_messages(
    page, live_server, sign_in, bob, far_apart, screenshot
):
    first, last = far_apart
    page.set_viewport_size({"width": 1280, "height": 900})
    sign_in(bob)
    page.goto(f"{live_server.url}/compare/?a={first.pk}&b={last.pk}")
    expect(page.locator("#diff-summary")).to_contain_text("327 changes in 5 keys")
    expect(page.locator(".diff-index")).to_contain_text("messages +312")
    run = page.locator(".diff-run")
    expect(run).to_contain_text("+ 312 messages")
    screenshot("compare-distance-1280")

    run.get_by_role("link", name="Show them").click()
    expect(page.locator(".diff-run-head").first).to_be_focused()
    messages = page.locator("#" + page.locator(".diff-group").nth(1).get_attribute("id"))
    expect(messages.locator(".diff-item")).to_have_count(50)
    messages.get_by_role("link", name="Show 50 more").click()
    expect(messages.locator(".diff-item")).to_have_count(100)
    expect(messages.locator(".diff-more")).to_contain_text("212 more in messages[1–312]")
    screenshot("compare-distance-opened-1280")

    page.get_by_label("Filter by path").fill("memory.fact_1")
    page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(r"path=memory.fact_1"))
    expect(page.locator("#diff-summary")).to_contain_text("2 changes on paths containing “memory.fact_1”")
    expect(page.locator(".diff-item")).to_have_count(2)


def test_on_a_phone_a_changed_value_shows_a_above_b(page, live_server, sign_in, bob, far_apart, screenshot):
    first, last = far_apart
    page.set_viewport_size({"width": 390, "height": 844})
    sign_in(bob)
    page.goto(f"{live_server.url}/compare/?a={first.pk}&b={last.pk}")
    pair = page.locator(".diff-pair").first
    a_box = pair.locator(".diff-del").bounding_box()
    b_box = pair.locator(".diff-add").bounding_box()
    assert a_box["y"] + a_box["height"] <= b_box["y"] and b_box["width"] > 250  # stacked, full width
    lines = page.locator("table.sbs")
    removed = lines.locator("td.diff-del").first.bounding_box()
    added = lines.locator("td.diff-add").first.bounding_box()
    assert removed["y"] < added["y"] and added["width"] > 250  # the line diff: A's line above B's
    assert no_sideways_scroll(page)
    screenshot("compare-distance-390")


def test_branches_are_compared_from_their_common_ancestor(
    page, live_server, sign_in, bob, make_session, make_checkpoint, screenshot
):
    session = make_session("retry-run")
    base = make_checkpoint(session, {"plan": "fix the test", "tried": []}, name="planned")
    first_try = make_checkpoint(session, {"plan": "fix the test", "tried": ["rerun"]}, name="first_try")
    second_try = make_checkpoint(session, {"plan": "skip the test", "tried": ["skip"]}, parent=base.pk)
    page.set_viewport_size({"width": 1280, "height": 900})
    sign_in(bob)
    page.goto(f"{live_server.url}/compare/?a={first_try.pk}&b={second_try.pk}")
    lineage = page.locator("#lineage")
    expect(lineage).to_contain_text("A and B are on different branches. Their common ancestor is #1 planned")
    expect(page.locator(".diff-short del").first).to_contain_text("#1 · common ancestor")
    screenshot("compare-branches-1280")
    lineage.get_by_role("link", name="Compare A and B directly").click()
    expect(page.locator("#lineage")).to_contain_text("Showing A and B directly.")


def test_the_checkpoint_page_starts_with_what_changed_here(page, live_server, sign_in, bob, far_apart, screenshot):
    _, last = far_apart
    sign_in(bob)
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(f"{live_server.url}/checkpoints/{last.pk}/")
        changes = page.locator("#changes")
        expect(changes).to_contain_text("What changed here")
        expect(changes.locator(".diff-run")).to_contain_text("+ 312 messages")
        assert changes.bounding_box()["y"] < 900  # on the first screen
        assert no_sideways_scroll(page)
        screenshot(f"checkpoint-changes-{width}")
    page.get_by_role("link", name="Newest message").click()
    expect(page.locator("#msg-312")).to_be_in_viewport()
