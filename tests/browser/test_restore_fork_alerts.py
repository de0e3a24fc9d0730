"""An operator compares, restores (and undoes), forks and acknowledges an alert, in Chromium."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from checkpoints.models import AgentSession, AlertState, Checkpoint, CheckpointKind, DriftAlert
from checkpoints.services import drift

pytestmark = pytest.mark.django_db(transaction=True)


def test_operator_compares_two_checkpoints(looks, page, live_server, sign_in, alice, demo, screenshot):
    session = AgentSession.objects.get(external_id="patchwright-batch-ingest")
    a = Checkpoint.objects.get(session=session, seq=2)
    b = Checkpoint.objects.get(session=session, seq=12)
    sign_in(alice)
    page.goto(f"{live_server.url}/compare/?a={a.pk}&b={b.pk}")
    expect(page.get_by_role("heading", name="Compare checkpoints")).to_be_visible()
    expect(page.locator(".compare-side-a")).to_contain_text(f"#{a.seq}")
    expect(page.locator("#diff-summary")).to_contain_text("changed")
    looks("compare")
    screenshot("compare", guide=True)
    page.get_by_role("link", name="Swap A and B").click()
    expect(page).to_have_url(re.compile(rf"a={b.pk}&b={a.pk}"))
    expect(page.locator(".compare-side-a")).to_contain_text(f"#{b.seq}")


def test_compare_shows_long_texts_side_by_side(
    looks, page, live_server, sign_in, alice, make_session, make_checkpoint, screenshot
):
    session = make_session()
    plan = [f"{i}. step {i} of the plan: read the logs, find the failing job, rerun it" for i in range(1, 40)]
    a = make_checkpoint(session, {"plan": "\n".join(plan), "step": 1})
    plan[19] = "20. step 20 of the plan: skip the failing job and page the on-call engineer"
    b = make_checkpoint(session, {"plan": "\n".join([*plan, "40. write the incident report"]), "step": 2})
    sign_in(alice)
    page.goto(f"{live_server.url}/compare/?a={a.pk}&b={b.pk}")
    lines = page.locator("table.sbs")
    expect(lines.locator("del").first).to_contain_text("read the logs")  # the words that changed
    expect(lines.locator("ins").first).to_contain_text("skip")
    expect(lines.locator("ins").last).to_have_text("40. write the incident report")
    expect(lines).to_contain_text("unchanged lines")
    looks("compare-lines")


def test_restore_preview_opens_as_a_modal_over_a_page(page, live_server, sign_in, alice, demo, screenshot):
    alert = DriftAlert.objects.get(kind="stalled")
    sign_in(alice)
    page.goto(f"{live_server.url}/alerts/")
    url = f"/checkpoints/{alert.last_good_id}/restore/"
    page.evaluate(f"htmx.ajax('GET', '{url}', {{target: 'body', swap: 'beforeend'}})")
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    expect(dialog.get_by_role("button", name="Restore", exact=True)).to_be_visible()
    screenshot("restore-modal")
    dialog.get_by_role("link", name="Cancel").click()
    expect(page.get_by_role("dialog")).to_have_count(0)
    page.evaluate(f"htmx.ajax('GET', '{url}', {{target: 'body', swap: 'beforeend'}})")
    expect(page.get_by_role("dialog")).to_be_focused()
    page.keyboard.press("Escape")
    expect(page.get_by_role("dialog")).to_have_count(0)
    expect(page).to_have_url(re.compile(r"/alerts/$"))


def test_operator_restores_with_a_preview_then_undoes(
    looks, page, live_server, sign_in, alice, demo, screenshot, widths
):
    alert = DriftAlert.objects.select_related("session").get(kind="repetition")
    session, target = alert.session, alert.last_good
    head_before = session.head_id
    sign_in(alice)
    page.goto(f"{live_server.url}/alerts/")
    row = page.locator(f"#alert-{alert.pk}")
    expect(row).to_contain_text(re.compile(r"discards \d+ checkpoints?, \d+ tool calls?"))
    widths("alerts-discards")
    row.get_by_role("link", name="Restore last good").click()
    expect(page.get_by_role("heading", name=re.compile(rf"Restore to #{target.seq}"))).to_be_visible()
    expect(page.get_by_text("tool calls the agent will no longer remember").first).to_be_visible()
    expect(page.get_by_text(re.compile(rf"Restoring #{target.seq} discards \d+ checkpoints"))).to_be_visible()
    looks("restore-preview")
    screenshot("restore-preview", guide=True)
    widths("restore-preview")
    page.get_by_label("Reason").fill("looping on get_order")
    page.get_by_role("button", name="Restore", exact=True).click()
    page.wait_for_url(re.compile(rf"/sessions/{session.pk}/$"))
    notice = page.locator(".notice-success")
    expect(notice).to_contain_text(f"to #{target.seq}")
    session.refresh_from_db()
    assert session.head.kind == CheckpointKind.RESTORE and session.head.parent_id == target.pk
    notice.get_by_role("button", name="Undo").click()
    expect(page.locator(".notice-success")).to_contain_text("undone: the agent resumes from new checkpoint")
    session.refresh_from_db()
    assert session.head.parent_id == head_before and session.restore_generation == 2
    undo = page.locator(f"#cp-{session.head.seq}")
    expect(undo).to_contain_text(f"undoes restore #{session.head.seq - 1} (to #{target.seq})")
    expect(page.locator(f"#cp-{session.head.seq - 1}")).to_have_count(0)  # folded into the undo
    expect(page.locator(".tag-side")).to_have_count(0)  # no branch left behind
    widths("timeline-undo")


def test_compare_takes_the_seqs_the_console_shows_and_failed_requests_say_so(
    page, live_server, sign_in, alice, demo, widths
):
    session = AgentSession.objects.get(external_id="patchwright-batch-ingest")
    a, b = (Checkpoint.objects.get(session=session, seq=seq) for seq in (2, 5))
    sign_in(alice)
    page.goto(f"{live_server.url}/compare/?a={a.pk}&b={b.pk}")  # a link: ids
    expect(page.get_by_label(re.compile("Checkpoint A"))).to_have_value("#2")
    page.get_by_label(re.compile("Checkpoint B")).fill("#999")
    page.get_by_role("button", name="Compare").click()
    result = page.locator("#compare-result")
    expect(result).to_contain_text(f"No checkpoint #999 in {session.external_id}.")
    expect(page.locator("#diff-summary")).to_have_count(0)  # the old comparison went
    widths("compare-not-found")
    page.get_by_label(re.compile("Checkpoint B")).fill("7")
    page.get_by_role("button", name="Compare").click()
    expect(page.locator(".compare-side-b")).to_contain_text("#7")
    expect(page).to_have_url(re.compile(rf"session={session.pk}&a=%232&b=7"))

    page.evaluate("htmx.ajax('GET', '/checkpoints/999999999/restore/', {target: 'body', swap: 'beforeend'})")
    toast = page.get_by_role("alert").filter(has_text="That did not work (404")
    expect(toast).to_contain_text("Not found: There is nothing here, or you may not see it.")
    widths("request-failed", full=False)
    toast.get_by_role("button", name="Dismiss").click()
    expect(toast).to_have_count(0)

    page.route("**/alerts/**", lambda route: route.abort())
    page.evaluate("() => { htmx.ajax('GET', '/alerts/', {target: '#compare-result'}).catch(() => null); }")
    expect(page.get_by_role("alert").filter(has_text="The console did not answer")).to_be_visible()


def test_operator_forks_and_lands_on_the_new_session(looks, page, live_server, sign_in, alice, demo, screenshot):
    session = AgentSession.objects.get(external_id="scout-agent-memory")
    source = Checkpoint.objects.get(session=session, seq=6)
    sign_in(alice)
    page.goto(f"{live_server.url}/checkpoints/{source.pk}/fork/")
    title = page.get_by_label("Title")
    expect(title).to_have_value(re.compile(r"^Fork of .* at #6$"))
    looks("fork")
    title.fill("Memory survey, second attempt")
    page.get_by_role("button", name="Fork", exact=True).click()
    fork = AgentSession.objects.filter(forked_from=source)
    page.wait_for_url(re.compile(r"/sessions/\d+/$"))
    assert page.url.endswith(f"/sessions/{fork.get().pk}/")
    assert fork.get().title == "Memory survey, second attempt"


def test_operator_acknowledges_an_alert(looks, page, live_server, sign_in, alice, demo, screenshot):
    alert = DriftAlert.objects.get(kind="stalled")
    sign_in(alice)
    page.goto(f"{live_server.url}/alerts/")
    expect(page.get_by_role("heading", name="Drift alerts")).to_be_visible()
    looks("alerts")
    screenshot("alerts", guide=True)
    row = page.locator(f"#alert-{alert.pk}")
    row.get_by_role("button", name="Acknowledge").click()
    expect(page.locator(f"#alert-{alert.pk}")).to_contain_text("by alice")
    expect(page.locator(f"#alert-{alert.pk}").get_by_role("button", name="Acknowledge")).to_have_count(0)
    alert.refresh_from_db()
    assert alert.state == AlertState.ACKNOWLEDGED
    critical = DriftAlert.objects.filter(severity="critical").exclude(state=AlertState.RESOLVED).count()
    assert critical >= 1
    page.locator("select[name=severity]").select_option("critical")
    expect(page.locator("#alert-results tbody tr")).to_have_count(critical)
    expect(page).to_have_url(re.compile(r"severity=critical"))
    page.locator("select[name=severity]").select_option("")
    row = page.locator(f"#alert-{alert.pk}")
    row.get_by_text("Resolve…").click()
    row.get_by_label(f"Reason for resolving alert {alert.pk} (optional)").fill("restored #10")
    screenshot("alerts-triaged")
    row.get_by_role("button", name=f"Resolve alert {alert.pk}", exact=True).click()
    expect(page.locator(f"#alert-{alert.pk}")).to_contain_text("No action needed")
    alert.refresh_from_db()
    assert alert.state == AlertState.RESOLVED


def test_a_loop_alert_links_the_checkpoints_that_showed_it(page, live_server, sign_in, alice, demo, widths):
    refund_bot = AgentSession.objects.get(external_id="refund-bot-0412")
    drift.detect_session(refund_bot)
    alert = DriftAlert.objects.get(session=refund_bot, kind="repeated_action")
    sign_in(alice)
    page.goto(f"{live_server.url}/alerts/?kind=repeated_action")
    row = page.locator(f"#alert-{alert.pk}")
    expect(row).to_contain_text("The same tool call got the same result 4 times in a row")
    expect(row).to_contain_text("discards")
    widths("alerts-loop-evidence")
    first = alert.evidence["checkpoints"][0]
    row.get_by_role("link", name=f"checkpoint #{first['seq']} of alert {alert.pk}").click()
    expect(page).to_have_url(re.compile(f"/checkpoints/{first['id']}/$"))
