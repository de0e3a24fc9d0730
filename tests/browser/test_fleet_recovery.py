"""An operator recovers a fleet in Chromium: tick sessions (or all matching), preview, run with a reason, follow
the progress, undo the batch."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from checkpoints.models import AgentSession, DriftAlert, Recovery

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def outage(make_session, make_checkpoint):
    """Three sessions the search API broke (#3 failed after two good steps; the failed detector opened an alert on
    each) and one that is fine."""
    broken = []
    for number in range(3):
        session = make_session(f"crawler-{number}", agent="crawler")
        make_checkpoint(session, {"step": 1}, name="plan")
        make_checkpoint(session, {"step": 2})
        make_checkpoint(session, {"step": 3}, status="failed", status_reason="search API: 503")
        session.refresh_from_db()
        assert DriftAlert.objects.filter(session=session, kind="failed").exists()  # the detector saw it
        broken.append(session)
    fine = make_session("crawler-fine", agent="crawler")
    make_checkpoint(fine, {"step": 1})
    return broken, fine


def test_operator_recovers_ticked_sessions_follows_the_progress_and_undoes_the_batch(
    page, live_server, sign_in, alice, outage, screenshot
):
    broken, _ = outage
    heads = {session.pk: session.head_id for session in broken}
    sign_in(alice)
    page.goto(f"{live_server.url}/sessions/?agent=crawler")
    for session in broken[:2]:
        page.get_by_label(f"Select {session.external_id}").check()
    page.get_by_role("button", name="Recover…").click()

    expect(page.get_by_role("heading", name="Recover sessions")).to_be_visible()
    totals = page.locator(".recovery-totals")
    expect(totals).to_contain_text("2 sessions: 2 to restore, 0 skipped")
    expect(page.locator(".recovery-table")).to_contain_text("discards 1 checkpoint")
    screenshot("fleet-preview")
    page.get_by_role("button", name="Restore 2 sessions").click()
    expect(page.get_by_role("alert")).to_contain_text("say why")  # nothing ran without a reason
    assert not Recovery.objects.exists()
    page.get_by_label("Reason (required)").fill("search API outage 02:10–02:40")
    page.get_by_role("button", name="Restore 2 sessions").click()

    page.wait_for_url(re.compile(r"/recoveries/\d+/$"))
    expect(page.get_by_role("heading", name="Recovery finished")).to_be_visible()
    expect(page.locator(".recovery-counts")).to_contain_text("2 of 2 done: 2 restored, 0 skipped, 0 failed")
    screenshot("fleet-progress")
    for session in AgentSession.objects.filter(pk__in=[s.pk for s in broken[:2]]):
        assert session.head.metadata["restored_from_seq"] == 2
    assert AgentSession.objects.get(pk=broken[2].pk).restore_generation == 0  # not ticked

    page.get_by_role("button", name="Undo batch").click()
    expect(page.locator(".notice-success")).to_contain_text("Batch undone: 2 sessions")
    for session in AgentSession.objects.filter(pk__in=[s.pk for s in broken[:2]]):
        assert session.head.parent_id == heads[session.pk]  # the head before the batch, as a new head
    expect(page.get_by_role("button", name="Undo batch")).to_have_count(0)


def test_operator_recovers_every_session_matching_the_alert_filters(page, live_server, sign_in, alice, outage):
    broken, fine = outage
    sign_in(alice)
    page.goto(f"{live_server.url}/alerts/?kind=failed&severity=critical")
    page.get_by_label(re.compile("All .*matching the filters")).check()
    page.get_by_role("button", name="Recover…").click()
    expect(page.locator(".recovery-totals")).to_contain_text("3 sessions: 3 to restore")
    expect(page.locator(".recovery-table")).not_to_contain_text("crawler-fine")
    page.get_by_label("Reason (required)").fill("search API outage")
    page.get_by_role("button", name="Restore 3 sessions").click()
    expect(page.locator(".recovery-counts")).to_contain_text("3 of 3 done")
    assert sorted(AgentSession.objects.filter(agent="crawler").values_list("restore_generation", flat=True)) == [
        0,
        1,
        1,
        1,
    ]
