"""An approver finds a LangGraph thread waiting for input on the overview, reads what the graph asks, and
answers it in the form, in Chromium; the pages pass axe-core and are shot at 1280 and 390 px, light and dark."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from checkpoints.models import InterruptAnswer
from tests.kits.interrupts import waiting_thread

from .test_accessibility import axe, sideways  # noqa: F401 - axe is a fixture

pytestmark = pytest.mark.django_db(transaction=True)


def shots(page, screenshot, name: str) -> None:
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        for width, height in ((1280, 800), (390, 844)):
            page.set_viewport_size({"width": width, "height": height})
            screenshot(f"{name}-{width}-{scheme}")
            if width == 390:
                assert sideways(page) <= 0, f"{name} scrolls sideways at 390 px"
    page.emulate_media(color_scheme="light")
    page.set_viewport_size({"width": 1366, "height": 860})


def test_an_approver_answers_a_waiting_thread(page, live_server, sign_in, carol, project, screenshot, axe):  # noqa: F811
    waiting_thread(
        project,
        "email-ceo",
        asks={
            "i-1": {"question": "Send the quarterly numbers to the CEO?", "to": "ceo@example.com"},
            "i-2": {"draft": "<script>document.title='owned'</script>Numbers attached.", "choices": ["send", "edit"]},
        },
    )
    sign_in(carol)
    queue = page.locator(".input-queue")
    expect(queue).to_contain_text("email-ceo")
    queue.get_by_role("link", name="email-ceo").click()
    expect(page.get_by_role("heading", name="The graph asks")).to_be_visible()
    expect(page.locator(".interrupt-value").nth(1)).to_contain_text("<script>")  # shown as text, never run
    assert page.title() != "owned"
    assert axe() == []
    shots(page, screenshot, "interrupt-form")

    first = page.locator(".interrupt").first
    first.get_by_label("Comment").fill("Numbers checked with finance.")
    first.get_by_role("button", name="Approve").click()
    expect(page.locator(".interrupt").first).to_contain_text("answered")
    expect(page.locator(".interrupt").first).to_contain_text("waiting for the runner to resume")

    second = page.locator(".interrupt").nth(1)
    second.get_by_label("Answer").fill('{"choice": "edit", "note": "shorter"}')
    second.get_by_role("button", name="Send answer").click()
    expect(page.locator(".interrupt").nth(1)).to_contain_text("answered")
    values = dict(InterruptAnswer.objects.values_list("interrupt_id", "value"))
    assert values == {"i-1": True, "i-2": {"choice": "edit", "note": "shorter"}}

    page.get_by_role("link", name="email-ceo").click()
    expect(page.locator(".interrupt-notice")).to_contain_text("Answered; waiting for the runner")  # both answered
    assert axe() == []
    shots(page, screenshot, "interrupt-session")
