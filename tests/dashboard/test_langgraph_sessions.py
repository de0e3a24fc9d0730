"""A LangGraph thread in the console: its transcript, readable state and diff, its LangGraph ids on the checkpoint
page, and its subgraph runs grouped on the timeline. The threads are real graphs' checkpoints (tests.lg_states)."""

from __future__ import annotations

import json
from importlib import import_module
from urllib.parse import quote

import pytest
from django.apps import apps as django_apps
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from langchain_core.messages import AIMessage

from checkpoint_console import typedjson
from checkpoints.models import Checkpoint
from checkpoints.services import CheckpointInput, create_checkpoint
from dashboard.presenters.branches import Layout
from dashboard.presenters.timeline import BranchRow, CheckpointRow, GapRow, timeline_page
from tests.helpers import select, text
from tests.lg_states import langgraph_session, many_subgraph_runs, put, run_thread, store_thread

from .test_checkpoint_detail import tool_io

PAGE_QUERIES = (19, 8)  # (full page, htmx page) of a LangGraph thread's timeline: measured once, fixed


@pytest.fixture
def thread(make_session):
    session = langgraph_session(make_session)
    return session, store_thread(session, run_thread())


@pytest.fixture
def subgraph_thread(make_session):
    session = langgraph_session(make_session)
    return session, store_thread(session, run_thread(with_subgraph=True))


def page(client, user, checkpoint) -> str:
    client.force_login(user)
    response = client.get(reverse("dashboard:checkpoint_detail", args=[checkpoint.pk]))
    assert response.status_code == 200
    return response.content.decode()


def test_the_transcript_shows_langchain_messages_with_the_failed_call_under_the_ai_message(client, bob, thread):
    session, checkpoints = thread
    [transcript] = select(page(client, bob, checkpoints[-1]), "#transcript")
    assert [text(role) for role in transcript.cssselect(".msg-role")] == ["user", "assistant", "assistant"]
    [call] = transcript.cssselect(".msg-assistant .tool-call")  # the ToolMessage is shown with its call, once
    assert text(call.cssselect(".tool-name")[0]) == "search"
    assert tool_io(call) == {"Arguments": '{"q": "flights to Oslo"}', "Error": "HTTP 503 from the search API"}
    assert text(call.cssselect(".badge")[0]) == "✕ failed"


def test_the_state_and_its_changes_show_tagged_values_readably_without_the_tag(client, bob, thread):
    session, checkpoints = thread
    after_agent = next(c for c in checkpoints if c.step == 1)
    html = page(client, bob, after_agent)
    assert "__lg__" not in html and "model_validate_json" not in html
    [changes] = select(html, "#changes")
    assert "datetime(2026-01-02T03:04:05)" in text(changes)  # the `when` channel it added
    [message] = changes.cssselect(".msg")  # the AIMessage it appended, read as a message with its call
    assert [text(part) for part in message.cssselect(".msg-role, .msg-content, .kind")] == [
        "assistant",
        "Let me look that up.",
        "calls search",
    ]
    [state] = select(html, "#state")
    assert "datetime(2026-01-02T03:04:05)" in text(state)
    assert "type: ai" in text(state)  # a closed message previews its fields


def test_an_opaque_value_is_named_with_its_size_and_not_decoded(client, bob, make_session):
    session = langgraph_session(make_session, "opaque")
    blob = typedjson.from_typed("pickle", b"\x80\x04" + b"x" * 98)
    checkpoint, _ = create_checkpoint(
        session, CheckpointInput(state={"blob": blob}, metadata={"checkpoint_id": "cp-1"})
    )
    html = page(client, bob, checkpoint)
    assert "<pickle value, 100 bytes, not decoded>" in text(select(html, "#state")[0]) and "__lg__" not in html


def test_the_checkpoint_page_names_its_langgraph_id_namespace_source_and_the_checkpoint_it_ran_under(
    client, bob, subgraph_thread
):
    session, checkpoints = subgraph_thread
    inner = next(c for c in checkpoints if c.metadata["checkpoint_ns"] and c.name == "loop")
    html = page(client, bob, inner)
    facts = {text(dt): dd for dt, dd in zip(select(html, "dl.meta dt"), select(html, "dl.meta dd"), strict=True)}
    assert text(facts["LangGraph id"]) == inner.metadata["checkpoint_id"]
    assert inner.metadata["checkpoint_ns"].startswith("child:")
    assert inner.metadata["checkpoint_ns"] in text(facts["Namespace"])
    assert text(facts["Source"]) == "loop"
    [link] = facts["Ran under"].cssselect("a")
    outer_id = inner.metadata["parents"][""]
    outer = next(c for c in checkpoints if c.metadata["checkpoint_id"] == outer_id and not c.metadata["checkpoint_ns"])
    assert link.get("href") == reverse("dashboard:checkpoint_detail", args=[outer.pk])


def test_a_subgraph_run_is_folded_into_the_root_row_it_ran_under_not_a_branch(subgraph_thread, bob):
    session, checkpoints = subgraph_thread
    inner = [c for c in checkpoints if c.metadata["checkpoint_ns"]]
    timeline = timeline_page(session, user=bob)
    assert not [row for row in timeline.rows if isinstance(row, BranchRow)]
    rows = [row for row in timeline.rows if isinstance(row, CheckpointRow)]
    assert [row.checkpoint.seq for row in rows] == [c.seq for c in reversed(checkpoints) if c not in inner]
    assert [(row.main, row.start) for row in rows] == [(True, None)] * len(rows)  # the root graph goes on: no branch
    [under] = [row for row in rows if row.subgraph_runs]
    assert under.checkpoint.seq == inner[0].seq - 1  # the root checkpoint it ran under
    [run] = under.subgraph_runs
    assert (run.namespace, run.first, run.last, run.count) == (
        inner[0].metadata["checkpoint_ns"],
        inner[0].seq,
        inner[-1].seq,
        len(inner),
    )

    opened = timeline_page(session, at=inner[-1].seq, user=bob)
    shown = {row.checkpoint.seq: row for row in opened.rows if isinstance(row, CheckpointRow)}
    assert {shown[c.seq].namespace for c in inner} == {inner[0].metadata["checkpoint_ns"]}
    assert not any(row.namespace for seq, row in shown.items() if seq not in {c.seq for c in inner})
    assert not any(row.subgraph_runs for row in shown.values())  # shown open, not folded as well


def test_the_timeline_page_labels_subgraph_rows_with_their_namespace(client, bob, subgraph_thread):
    session, checkpoints = subgraph_thread
    inner = [c for c in checkpoints if c.metadata["checkpoint_ns"]]
    client.force_login(bob)
    html = client.get(reverse("dashboard:session_detail", args=[session.pk]) + f"?at={inner[-1].seq}").content.decode()
    badges = select(html, ".badge-ns")
    assert len(badges) == len(inner)
    assert all(badge.get("title").endswith(inner[0].metadata["checkpoint_ns"]) for badge in badges)
    assert not select(html, ", ".join(f"#cp-{c.seq} .tag-side, #cp-{c.seq} .marker-start" for c in inner))  # said once


def test_langgraph_time_travel_from_an_old_checkpoint_starts_a_branch_the_timeline_draws(make_session, bob):
    session = langgraph_session(make_session)
    checkpoints = store_thread(session, run_thread(time_travel=True))
    fork = next(c for c in checkpoints if c.name == "fork")  # what LangGraph writes replaying an old checkpoint
    old = fork.parent
    assert fork.starts_branch and old.seq < fork.seq - 1
    assert Layout.for_session(session).starts[fork.seq].label == f"branched from #{old.seq}"
    timeline = timeline_page(session, user=bob)
    rows = {row.checkpoint.seq: row for row in timeline.rows if isinstance(row, CheckpointRow)}
    assert rows[fork.seq].start is not None and rows[fork.seq].main
    assert rows[checkpoints[-1].seq].is_head
    [branch] = [row for row in timeline.rows if isinstance(row, BranchRow)]  # the replayed steps, left behind
    assert (branch.branch.attach, branch.branch.lane, branch.summary.count) == (old.seq, 1, fork.seq - old.seq - 1)
    assert all(not rows[seq].main for seq in range(old.seq + 1, fork.seq))


def test_a_state_tree_path_reaches_into_tagged_values_by_their_readable_keys(client, bob, make_session):
    session = langgraph_session(make_session, "paths")
    checkpoint = put(
        session,
        {"by_id": {1: AIMessage("one"), 2: AIMessage("two")}},
        {"source": "loop", "step": 0},
        checkpoint_id="cp-1",
    )
    client.force_login(bob)
    path = quote(json.dumps(["by_id", "2"]))
    response = client.get(reverse("dashboard:checkpoint_subtree", args=[checkpoint.pk]) + f"?path={path}")
    assert response.status_code == 200
    html = response.content.decode()
    assert "two" in html and "__lg__" not in html


def test_the_timeline_index_lists_subgraph_runs_and_each_jump_shows_its_run_open(client, bob, subgraph_thread):
    session, checkpoints = subgraph_thread
    inner = [c for c in checkpoints if c.metadata["checkpoint_ns"]]
    client.force_login(bob)
    here = reverse("dashboard:session_detail", args=[session.pk])
    html = client.get(here).content.decode()
    [group] = [group for group in select(html, ".landmark-group") if "Subgraph runs" in text(group)]
    [jump] = group.cssselect("a.landmark")
    assert text(jump).startswith(f"#{inner[0].seq}–{inner[-1].seq} child:")
    opened = client.get(jump.get("href")).content.decode()
    assert len(select(opened, ".badge-ns")) == len(inner)


def test_a_subgraph_checkpoint_offers_no_restore_or_fork_and_names_the_root_checkpoint_instead(
    client, alice, subgraph_thread
):
    session, checkpoints = subgraph_thread
    inner = next(c for c in checkpoints if c.metadata["checkpoint_ns"] and c.name == "loop")
    outer = next(
        c for c in checkpoints if c.metadata["checkpoint_id"] == inner.metadata["parents"][""] and c not in [inner]
    )
    html = page(client, alice, inner)
    assert not select(html, f"a[href='{reverse('dashboard:checkpoint_restore', args=[inner.pk])}']")
    [note] = select(html, ".lg-no-restore")
    assert note.cssselect("a")[0].get("href") == reverse("dashboard:checkpoint_detail", args=[outer.pk])
    assert select(page(client, alice, outer), f"a[href='{reverse('dashboard:checkpoint_restore', args=[outer.pk])}']")

    timeline = client.get(reverse("dashboard:session_detail", args=[session.pk]) + f"?at={inner.seq}").content.decode()
    # a row's menu is filled by console.js from the page's template: a subgraph row's menu leaves restore and fork out
    assert select(timeline, f"#cp-{inner.seq} details.row-menu[data-subgraph]")
    assert not select(timeline, f"#cp-{outer.seq} details.row-menu[data-subgraph]")
    assert select(timeline, "template#row-menu a[data-action='restore/']")


def test_subgraph_checkpoints_are_hops_and_time_travel_after_a_run_is_still_a_branch(make_session, bob):
    session = langgraph_session(make_session)
    checkpoints = store_thread(session, run_thread(with_subgraph=True, turns=2, time_travel=True))
    hops = {c.seq for c in checkpoints if Checkpoint.objects.get(pk=c.pk).subgraph_hop}
    assert {c.seq for c in checkpoints if c.metadata["checkpoint_ns"] and c.starts_branch} <= hops
    roots = [c for c in checkpoints if not c.metadata["checkpoint_ns"] and c.parent_id]
    replay = next(c for i, c in enumerate(roots) if any(r.parent_id == c.parent_id for r in roots[:i]))
    assert replay.starts_branch and replay.seq not in hops  # the replay's first step: a branch of the path
    timeline = timeline_page(session, user=bob)
    [branch] = [row for row in timeline.rows if isinstance(row, BranchRow)]
    assert branch.branch.attach == replay.parent.seq
    rows = [row for row in timeline.rows if isinstance(row, CheckpointRow)]
    folded = [(run.first, row.checkpoint.seq) for row in rows for run in row.subgraph_runs]
    assert folded and all(first == seq + 1 for first, seq in folded)  # those left behind stay in their branch


@pytest.mark.parametrize("runs", [3, 60])
def test_a_timeline_page_costs_the_same_queries_however_many_subgraph_runs(client, bob, make_session, runs):
    session = langgraph_session(make_session)
    many_subgraph_runs(session, runs)
    client.force_login(bob)
    url = reverse("dashboard:session_detail", args=[session.pk])
    client.get(url)  # sessions, permissions and templates warm
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url).status_code == 200
    with CaptureQueriesContext(connection) as htmx:
        assert client.get(url, headers={"HX-Request": "true"}).status_code == 200
    assert (len(queries), len(htmx)) == PAGE_QUERIES


def test_each_subgraph_run_shows_folded_on_the_page_it_starts_in_under_the_row_it_ran_under(make_session, bob):
    session = langgraph_session(make_session)
    spans = many_subgraph_runs(session, 150)
    seen: list[tuple[int, int]] = []
    before = None
    while True:
        timeline = timeline_page(session, before=before, user=bob)
        rows = [row for row in timeline.rows if isinstance(row, CheckpointRow)]
        assert not any(row.namespace for row in rows) and not any(isinstance(r, GapRow) for r in timeline.rows)
        for row in rows:
            for run in row.subgraph_runs:
                assert row.checkpoint.seq == run.first - 1 and timeline.bottom <= run.first  # its root row: here
                seen.append((run.first, run.last))
        if timeline.older is None:
            break
        before = timeline.older
    assert sorted(seen) == spans  # every run once, on the page it starts in


def test_the_index_lists_the_subgraph_runs_near_the_page_not_the_newest(client, bob, make_session):
    session = langgraph_session(make_session)
    spans = many_subgraph_runs(session, 150)
    client.force_login(bob)
    here = reverse("dashboard:session_detail", args=[session.pk])
    middle = spans[40]
    html = client.get(f"{here}?before={middle[1] + 2}").content.decode()
    [group] = [group for group in select(html, ".landmark-group") if "Subgraph runs" in text(group)]
    listed = [text(jump).split()[0] for jump in group.cssselect("a.landmark")]
    nearest = sorted(spans, key=lambda span: abs(span[0] - (middle[1] + 1)))[:12]
    assert sorted(listed) == sorted(f"#{first}–{last}" for first, last in nearest)
    newest = client.get(here).content.decode()
    [group] = [group for group in select(newest, ".landmark-group") if "Subgraph runs" in text(group)]
    assert text(group.cssselect("a.landmark")[0]).startswith(f"#{spans[-1][0]}–{spans[-1][1]} ")


def test_the_migration_marks_the_hops_of_threads_stored_before_it_as_the_ingest_does(make_session):
    session = langgraph_session(make_session)
    store_thread(session, run_thread(with_subgraph=True, turns=2, time_travel=True))
    marked = set(Checkpoint.objects.filter(session=session, subgraph_hop=True).values_list("seq", flat=True))
    assert len(marked) == 6  # three runs: each one's first checkpoint and the root step after it
    Checkpoint.objects.filter(session=session).update(subgraph_hop=False)
    import_module("checkpoints.migrations.0035_subgraphs_hops").mark_hops(django_apps, None)
    assert set(Checkpoint.objects.filter(session=session, subgraph_hop=True).values_list("seq", flat=True)) == marked
