"""A timeline page's rows: checkpoints newest first, runs of routine ones collapsed, gaps said where rows are gone."""

from __future__ import annotations

import pytest

from checkpoints.services import Actor, CheckpointInput, ingest_checkpoints
from checkpoints.services.cleanup import delete_checkpoints
from dashboard.presenters import timeline
from dashboard.presenters.timeline import CheckpointRow, GapRow, expanded_run, timeline_page

from ..trees import grow


def seqs(rows: list) -> list[tuple[str, int, int]]:
    """Each row as (kind, top, bottom)."""
    return [("gap" if row.is_gap else "branch" if row.is_branch else "row", row.top, row.bottom) for row in rows]


@pytest.fixture
def session(make_session):
    return make_session("run-1")


def test_a_gap_marker_stands_where_retention_deleted_checkpoints(session, bob):
    grow(session, 10)
    gone = session.checkpoints.filter(seq__in=[4, 5, 6]).values_list("pk", flat=True)
    delete_checkpoints(list(gone), actor=Actor.system("retention"))
    session.refresh_from_db()
    page = timeline_page(session, user=bob)
    assert [row for row in seqs(page.rows) if row[0] == "gap"] == [("gap", 6, 4)]
    assert [row[1] for row in seqs(page.rows)] == [10, 9, 8, 7, 6, 3, 2, 1]
    [gap] = [row for row in page.rows if isinstance(row, GapRow)]
    assert gap.count == 3


def test_a_run_of_routine_checkpoints_is_one_row_and_opens_on_request(session, bob):
    kinds = ["step", "routine", "routine", "routine", "routine", "step"]
    items = [CheckpointInput(state={"i": i}, name=f"c{i}", kind=kind) for i, kind in enumerate(kinds, 1)]
    ingest_checkpoints([(session, items)])
    session.refresh_from_db()
    page = timeline_page(session, user=bob)
    assert seqs(page.rows) == [("row", 6, 6), ("row", 5, 2), ("row", 1, 1)]
    run = page.rows[1]
    assert isinstance(run, CheckpointRow) and [c.seq for c in run.run] == [5, 4, 3, 2]
    opened = expanded_run(session, (2, 5), folding=timeline.Folding(), user=bob)
    assert seqs(opened.rows) == [("row", 5, 5), ("row", 4, 4), ("row", 3, 3), ("row", 2, 2)]


def test_pages_go_back_by_seq_and_say_where_the_next_ones_start(session, bob, monkeypatch):
    monkeypatch.setattr(timeline, "PAGE_SIZE", 4)
    grow(session, 10)
    first = timeline_page(session, user=bob)
    assert [row.top for row in first.rows] == [10, 9, 8, 7] and first.at_newest
    assert (first.newer, first.older) == (None, 7)
    second = timeline_page(session, before=first.older, user=bob)
    assert [row.top for row in second.rows] == [6, 5, 4, 3] and (second.newer, second.older) == (6, 3)


def test_a_restore_row_compares_with_the_head_it_replaced_which_heads_its_side_branch(session, bob):
    grow(session, 6, restores={6: 2})
    page = timeline_page(session, user=bob)
    rows = [("row", 6, 6), ("branch", 5, 5), ("row", 5, 5), ("row", 4, 4), ("row", 3, 3), ("row", 2, 2), ("row", 1, 1)]
    assert seqs(page.rows) == rows
    by_seq = {row.checkpoint.seq: row for row in page.rows if isinstance(row, CheckpointRow)}
    assert by_seq[6].is_head and by_seq[6].previous_id == by_seq[5].checkpoint.pk
    assert by_seq[2].restored_by == [6]
