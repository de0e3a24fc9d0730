"""An operator reads a LangGraph thread (two turns with a subgraph, then time travel) in Chromium."""

from __future__ import annotations

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from playwright.sync_api import expect

from checkpoints.models import AgentSession
from tests.browser.conftest import SCREENSHOTS
from tests.browser.test_accessibility import AXE, AXE_PATH, SERIOUS, WIDTHS, sideways
from tests.lg_states import langgraph_session, put_thread, run_thread, store_thread
from tests.services.test_langgraph_nodes import CONFIG, tool_calling_graph

pytestmark = pytest.mark.django_db(transaction=True)


def test_operator_reads_a_langgraph_thread_its_subgraph_runs_and_a_checkpoint(
    page, live_server, sign_in, alice, make_session, widths
):
    session = langgraph_session(make_session, "support-bot-thread-42")
    checkpoints = store_thread(
        session,
        run_thread("support-bot-thread-42", with_subgraph=True, turns=2, time_travel=True),
        "support-bot-thread-42",
    )
    inner = [c for c in checkpoints if c.metadata["checkpoint_ns"]]
    sign_in(alice)

    page.goto(f"{live_server.url}/sessions/{session.pk}/")
    subgraphs = page.locator("tr.cp a.marker-subgraph")
    expect(subgraphs).to_have_count(1)  # folded into the root row it ran under; the two before went with the branch
    expect(subgraphs.first).to_contain_text("subgraph child:")
    expect(page.locator("tbody.branch")).to_have_count(1)  # the steps the time travel left behind, with their run
    expect(page.locator("tr.cp .marker-start", has_text="branched from")).to_have_count(1)  # the time travel
    widths("langgraph-timeline")

    page.set_viewport_size(WIDTHS["390"])
    wrap = page.locator(".table-wrap:has(table.timeline)")
    assert wrap.evaluate("el => el.scrollWidth - el.clientWidth") <= 0  # a namespace label wraps on a phone
    page.set_viewport_size({"width": 1366, "height": 860})
    subgraphs.first.click()
    expect(page.locator(".badge-ns").first).to_be_visible()
    widths("langgraph-timeline-subgraph-open")
    readable_everywhere(page, live_server)

    latest = checkpoints[-1]
    page.goto(f"{live_server.url}/checkpoints/{latest.pk}/#transcript")
    expect(page.locator("#transcript .tool-call").first).to_contain_text("HTTP 503 from the search API")
    expect(page.locator("body")).not_to_contain_text("__lg__")
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 844})
        page.locator("#transcript").screenshot(path=str(SCREENSHOTS / f"langgraph-transcript-{width}.png"))
    page.set_viewport_size({"width": 1366, "height": 860})

    page.goto(f"{live_server.url}/checkpoints/{inner[-1].pk}/")
    expect(page.locator("dl.meta")).to_contain_text(inner[-1].metadata["checkpoint_id"])
    expect(page.locator("dl.meta")).to_contain_text("Ran under")
    widths("langgraph-checkpoint")
    readable_everywhere(page, live_server)


def test_a_threads_rows_and_checkpoint_read_as_nodes_and_internal_channels_show_on_request(
    page, live_server, sign_in, alice, project, widths
):
    saver = InMemorySaver()
    tool_calling_graph(saver).invoke({"messages": [HumanMessage("Book me a flight to Oslo")]}, CONFIG)
    stored = put_thread(project, saver)
    session = AgentSession.objects.get(pk=stored[0].session_id)
    sign_in(alice)

    page.goto(f"{live_server.url}/sessions/{session.pk}/")
    after_agent = page.locator(f"#cp-{stored[2].seq}")
    expect(after_agent.locator(".cp-name")).to_have_text("agent")
    expect(after_agent.locator(".what > .kind")).to_have_text("loop")
    expect(after_agent.locator(".lg-next")).to_contain_text("tools")
    expect(page.locator(f"#cp-{stored[-1].seq} .lg-next")).to_contain_text("end")
    shoot_light_and_dark(page, widths, "langgraph-nodes-timeline")
    readable_everywhere(page, live_server)

    page.goto(f"{live_server.url}/checkpoints/{stored[2].pk}/")
    expect(page.locator("h1")).to_contain_text("agent")
    expect(page.locator("#state")).not_to_contain_text("branch:to:tools")
    shoot_light_and_dark(page, widths, "langgraph-nodes-checkpoint")
    readable_everywhere(page, live_server)
    page.get_by_role("link", name="Show internal channels").first.click()
    expect(page.locator("#state")).to_contain_text("branch:to:tools")

    page.goto(f"{live_server.url}/checkpoints/{stored[2].pk}/restore/")
    expect(page.locator(".forgotten-table tbody tr")).to_have_count(3)
    widths("langgraph-nodes-restore")
    page.set_viewport_size(WIDTHS["390"])
    wrap = page.locator(".table-wrap:has(.forgotten-table)")
    assert wrap.evaluate("el => el.scrollWidth - el.clientWidth") <= 0  # each call a card: its outcome in view
    expect(page.locator(".forgotten-table tbody tr").nth(1)).to_contain_text("failed")
    page.set_viewport_size({"width": 1366, "height": 860})

    page.goto(f"{live_server.url}/checkpoints/{stored[2].pk}/edit/")
    note = page.locator(".lg-edit-note")
    for size in WIDTHS.values():
        page.set_viewport_size(size)
        assert note.evaluate(FLOWS) < 4, "the note's text breaks into a line per word and code"
    page.set_viewport_size({"width": 1366, "height": 860})


# how far the full stop after the note's last <code> sits from that code's last line: 0 when the note reads as
# one paragraph, a line or more when each piece of text and code is a flex item of its own
FLOWS = """note => {
  const codes = note.querySelectorAll("code"), last = codes[codes.length - 1], range = document.createRange();
  range.selectNodeContents(last.nextSibling);
  const lines = last.getClientRects();
  return Math.abs(range.getBoundingClientRect().top - lines[lines.length - 1].top);
}"""


def shoot_light_and_dark(page, widths, name: str) -> None:
    widths(name)
    page.emulate_media(color_scheme="dark")
    widths(f"{name}-dark")
    page.emulate_media(color_scheme="light")


def readable_everywhere(page, live_server) -> None:
    """No serious axe-core finding, and nothing scrolling sideways on a phone (long namespaces wrap)."""
    url = f"{live_server.url}{AXE_PATH}"
    page.route(url, lambda route: route.fulfill(path=AXE, content_type="text/javascript"))
    for size in WIDTHS.values():
        page.set_viewport_size(size)
        page.add_script_tag(url=url)
        assert page.evaluate(SERIOUS) == []
        assert sideways(page) <= 0
