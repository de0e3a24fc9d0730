"""A LangGraph thread reads as a graph in the console: each timeline row and checkpoint page names the nodes that
wrote it and those that run next, LangGraph's internal channels stay out of the state and the diffs unless asked
for, the restore preview counts the tool results the messages lose, and a subgraph's checkpoint is not offered
for restore. The thread is a real graph's, stored through the services as ConsoleSaver sends it."""

from __future__ import annotations

import pytest
from django.urls import reverse
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from checkpoints.models import AgentSession, Checkpoint
from tests.helpers import select, text
from tests.lg_states import put_thread, run_thread
from tests.services.test_langgraph_nodes import CONFIG, tool_calling_graph

pytestmark = pytest.mark.django_db


@pytest.fixture
def thread(project):
    saver = InMemorySaver()
    tool_calling_graph(saver).invoke({"messages": [HumanMessage("Book me a flight to Oslo")]}, CONFIG)
    stored = put_thread(project, saver)
    return AgentSession.objects.get(pk=stored[0].session_id), [Checkpoint.objects.get(pk=c.pk) for c in stored]


def get(client, user, url: str) -> str:
    client.force_login(user)
    response = client.get(url)
    assert response.status_code == 200
    return response.content.decode()


def test_each_timeline_row_names_the_nodes_that_wrote_it_and_runs_next_with_the_source_as_a_tag(
    client, bob, thread, django_assert_max_num_queries
):
    session, stored = thread
    client.force_login(bob)
    with django_assert_max_num_queries(19):  # the nodes come with the rows; the runs of subgraphs on them are one query
        html = client.get(reverse("dashboard:session_detail", args=[session.pk])).content.decode()
    rows = {c.seq: select(html, f"#cp-{c.seq}")[0] for c in stored}

    def row(checkpoint: Checkpoint) -> tuple[str, str, str]:
        found = rows[checkpoint.seq]
        return (
            text(found.cssselect(".cp-name")[0]),
            text(found.cssselect(".what > .kind")[0]),
            text(found.cssselect(".lg-next")[0]),
        )

    assert [row(c) for c in stored] == [
        ("input", "step", "→ runs next: __start__"),
        ("__start__", "loop", "→ runs next: agent"),
        ("agent", "loop", "→ runs next: tools"),
        ("tools", "loop", "→ runs next: agent"),
        ("agent", "loop", "→ runs next: tools"),
        ("tools", "loop", "→ runs next: agent"),
        ("agent", "loop", "→ runs next: end"),
    ]


def test_the_checkpoint_page_names_the_nodes_and_hides_internal_channels_unless_asked(client, bob, thread):
    session, stored = thread
    after_agent = stored[2]  # its state holds branch:to:tools beside the messages
    url = reverse("dashboard:checkpoint_detail", args=[after_agent.pk])
    html = get(client, bob, url)
    assert text(select(html, "h1")[0]) == f"#{after_agent.seq} agent"
    meta = dict(zip(map(text, select(html, ".meta dt")), map(text, select(html, ".meta dd")), strict=True))
    assert (meta["Written by"], meta["Runs next"]) == ("agent", "tools")
    [state] = select(html, "#state")
    assert "branch:to:tools" not in text(state) and "messages" in text(state)
    assert "1 internal LangGraph channel" in text(select(html, ".lg-internal")[0])
    [changes] = select(html, "#changes")
    assert "branch:to:agent" not in text(changes) and "branch:to:tools" not in text(changes)
    assert "hidden" in text(changes.cssselect(".diff-internal")[0])

    shown = get(client, bob, url + "?internal=1")
    assert "branch:to:tools" in text(select(shown, "#state")[0])
    assert "branch:to:agent" in text(select(shown, "#changes")[0])  # the trigger agent consumed


def test_the_compare_page_hides_internal_channels_unless_asked(client, bob, thread):
    session, stored = thread
    url = reverse("dashboard:compare") + f"?a={stored[1].pk}&b={stored[2].pk}"
    assert "branch:to:tools" not in text(select(get(client, bob, url), "#diff")[0])
    assert "branch:to:tools" in text(select(get(client, bob, url + "&internal=1"), "#diff")[0])


def test_the_restore_preview_lists_each_discarded_tool_result_with_its_step_node_and_outcome(client, alice, thread):
    session, stored = thread
    html = get(client, alice, reverse("dashboard:checkpoint_restore", args=[stored[2].pk]))
    assert text(select(html, ".restore-facts .stat-value")[1]) == "3"
    assert "discards 4 checkpoints, 3 tool calls" in text(select(html, ".restore-discards")[0])
    rows = [[text(cell) for cell in row.cssselect("td")] for row in select(html, ".forgotten-table tbody tr")]
    assert sorted((step, node, tool, outcome.split()[1]) for step, node, tool, _, outcome in rows) == [
        ("2", "tools", "search", "ok"),
        ("2", "tools", "weather", "failed"),
        ("4", "tools", "book", "ok"),
    ]
    point = text(select(html, ".lg-restore-point")[0])
    assert point == f"#{stored[2].seq} is LangGraph step 1, written by agent. The graph resumes by running tools."


def test_a_subgraph_checkpoints_restore_and_fork_pages_explain_and_link_the_root_checkpoint(client, alice, project):
    stored = [Checkpoint.objects.get(pk=c.pk) for c in put_thread(project, run_thread(with_subgraph=True))]
    inner = next(c for c in stored if c.metadata["checkpoint_ns"] and c.name == "loop")
    outer = next(c for c in stored if c.metadata["checkpoint_id"] == inner.metadata["parents"][""])
    for action in ("checkpoint_restore", "checkpoint_fork"):
        html = get(client, alice, reverse(f"dashboard:{action}", args=[inner.pk]))
        assert not select(html, "form button[type=submit].btn-primary")
        if action == "checkpoint_restore":  # no "Restore to …" heading, no counts of a restore that cannot be made
            assert text(select(html, "h1")[0]).endswith("ran in a subgraph")
            assert not select(html, ".restore-facts")
        [note] = select(html, ".lg-no-restore")
        assert note.cssselect("a")[0].get("href") == reverse("dashboard:checkpoint_detail", args=[outer.pk])
    client.force_login(alice)
    response = client.post(reverse("dashboard:checkpoint_restore", args=[inner.pk]), {"reason": "try"})
    assert "LangGraph resumes a thread from its parent graph" in response.content.decode()  # still refused
    assert AgentSession.objects.get(pk=inner.session_id).head.metadata["checkpoint_ns"] == ""


def test_links_and_the_failure_index_name_a_checkpoint_by_the_nodes_that_wrote_it_not_by_loop(client, bob, thread):
    session, stored = thread
    tools = stored[3]
    Checkpoint.objects.filter(pk=tools.pk).update(status="failed")

    timeline = get(client, bob, reverse("dashboard:session_detail", args=[session.pk]))
    groups = {text(g.cssselect(".landmark-title")[0]): g for g in select(timeline, ".landmark-group")}
    assert [text(a) for a in groups["Failures"].cssselect("a.landmark")] == [f"#{tools.seq} tools"]

    page = get(client, bob, reverse("dashboard:checkpoint_detail", args=[tools.pk]))
    assert text(select(page, 'a[rel="prev"]')[0]) == f"‹ #{stored[2].seq} agent"
    assert text(select(page, 'a[rel="next"]')[0]) == f"#{stored[4].seq} agent ›"
    meta = dict(zip(map(text, select(page, ".meta dt")), map(text, select(page, ".meta dd")), strict=True))
    assert meta["Parent"] == f"#{stored[2].seq} agent"
    assert f"From its parent, #{stored[2].seq} agent" in text(select(page, "main")[0])
