"""The branch layout for the shapes real agents grow: two runs, resumed forks, time travel, restores."""

from __future__ import annotations

from dashboard.presenters.branches import Branch, Folding, Layout, Stretch

RESTORE, STEP = "restore", "step"


def lanes(layout: Layout) -> dict[tuple[int, int], tuple[int, int | None]]:
    """(lo, hi) → (lane, attach) of each stretch, checked to be drawable."""
    seqs = sorted(seq for s in layout.stretches for seq in range(s.lo, s.hi + 1))
    assert seqs == list(range(1, len(seqs) + 1)), "every checkpoint is in exactly one stretch"
    assert all((s.lane == 0) == s.branch.main for s in layout.stretches), "the head's line alone is lane 0"
    for lane in range(1, layout.lanes):  # lines sharing a side lane never overlap
        spans = sorted(((s.hi, s.bottom) for s in layout.stretches if s.lane == lane), reverse=True)
        assert all(lower_hi <= upper_bottom for (_, upper_bottom), (lower_hi, _) in zip(spans, spans[1:], strict=False))
    return {(s.lo, s.hi): (s.lane, s.attach) for s in layout.stretches}


def sides(layout: Layout) -> dict[int, tuple[int, int | None, int, str]]:
    """First seq → (newest seq, attach, size, origin) of each side branch."""
    assert layout.branches[0].main and not any(b.main for b in layout.branches[1:])
    return {b.lo: (b.hi, b.attach, b.size, b.origin) for b in layout.branches[1:]}


def branch(layout: Layout, lo: int) -> Branch:
    return next(b for b in layout.branches if b.lo == lo)


def stretch(layout: Layout, lo: int) -> Stretch:
    return next(s for s in layout.stretches if s.lo == lo)


def test_two_runs_in_one_session_are_two_roots_with_the_later_run_first():
    layout = Layout.build(80, 80, [(51, None, STEP)])
    assert lanes(layout) == {(51, 80): (0, None), (1, 50): (1, None)}
    assert sides(layout) == {1: (50, None, 50, "first run")} and branch(layout, 1).is_run
    assert layout.branches[0].origin == "new run"
    new_run, _ = layout.graph(51, 51, "dot")
    assert not new_run[0].down and not new_run[1].up  # no line below a root, none above the first run


def test_a_run_resumed_from_an_older_checkpoint_leaves_the_interrupted_steps_beside_it():
    layout = Layout.build(60, 60, [(41, 30, STEP)])  # Kaizen: interrupted after #40, resumed from #30
    assert lanes(layout) == {(41, 60): (0, 30), (1, 30): (0, None), (31, 40): (1, 30)}
    assert sides(layout) == {31: (40, 30, 10, "left behind by #41, branched from #30")}
    at_30, _ = layout.graph(30, 30, "dot")
    assert "elbow from c1" in at_30[0].segments and "elbow to c1" in at_30[1].segments and at_30[1].up


def test_a_reused_agent_id_gives_two_runs_and_the_first_folds_whole_with_its_fork():
    # run 1: #1–40, resumed from #30 as #41–60; run 2, a new root: #61–85, resumed from #75 as #86–90 (head)
    layout = Layout.build(90, 90, [(41, 30, STEP), (61, None, STEP), (86, 75, STEP)])
    assert lanes(layout) == {
        (86, 90): (0, 75),
        (61, 75): (0, None),
        (76, 85): (1, 75),
        (41, 60): (1, 30),  # run 1's line from its newest checkpoint down to its root
        (1, 30): (1, None),
        (31, 40): (2, 30),  # what its resumption left behind
    }
    assert sides(layout) == {76: (85, 75, 10, "left behind by #86, branched from #75"), 1: (60, None, 60, "first run")}
    layout.fold(Folding())
    assert layout.folds.keys() == {1, 76}
    run_1, _ = layout.graph(60, 60, "fold", layout.folds[1])
    assert run_1[1].node == "fold" and not run_1[1].down and not run_1[2].up  # one row, no lines of its fork


def test_a_fork_inside_a_side_branch_folds_with_it():
    # #1–10; back to #5: #11–20; back to #15 of that attempt: #21–25; back to #3: #26–30 (head)
    layout = Layout.build(30, 30, [(11, 5, STEP), (21, 15, STEP), (26, 3, STEP)])
    assert lanes(layout) == {
        (26, 30): (0, 3),
        (1, 3): (0, None),
        (21, 25): (1, 15),
        (11, 15): (1, 5),
        (4, 5): (1, 3),
        (16, 20): (2, 15),
        (6, 10): (2, 5),
    }
    assert sides(layout) == {4: (25, 3, 22, "left behind by #26, branched from #3")}
    layout.fold(Folding())
    folded, _ = layout.graph(25, 25, "fold", layout.folds[4])
    assert folded[1].node == "fold" and folded[1].down and folded[0].up and folded[0].down
    assert not folded[2].up and not folded[2].down
    at_3, _ = layout.graph(3, 3, "dot")
    assert "elbow to c1" in at_3[1].segments and not at_3[2].up


def test_many_time_travel_branches_share_one_side_lane_when_they_do_not_overlap():
    starts, tip = [], 10
    for _ in range(20):  # LangGraph: back three checkpoints, then on for five
        starts.append((tip + 1, tip - 3, STEP))
        tip += 5
    layout = Layout.build(tip, tip, starts)
    lanes(layout)
    assert layout.lanes == 2 and len(sides(layout)) == 20 and {b.size for b in layout.branches[1:]} == {3}
    assert sides(layout)[8] == (10, 7, 3, "left behind by #11, branched from #7")


def test_time_travel_back_into_a_line_it_had_left():
    # #1–10; back to #5 for #11–15; back to #8 of the first line for #16–20 (head)
    layout = Layout.build(20, 20, [(11, 5, STEP), (16, 8, STEP)])
    assert lanes(layout) == {(16, 20): (0, 8), (1, 8): (0, None), (11, 15): (1, 5), (9, 10): (2, 8)}
    assert sides(layout) == {11: (15, 5, 5, "branched from #5"), 9: (10, 8, 2, "left behind by #16, branched from #8")}
    beside, _ = layout.graph(9, 10, "dot")
    assert beside[1].up and beside[1].down  # #11–15's line passes on its way down to #5


def test_restores_mixed_with_branches_each_leave_their_stretch_beside_the_heads_line():
    layout = Layout.build(21, 21, [(11, 4, RESTORE), (16, 13, STEP), (21, 18, RESTORE)])
    assert lanes(layout) == {
        (21, 21): (0, 18),
        (16, 18): (0, 13),
        (11, 13): (0, 4),
        (1, 4): (0, None),
        (19, 20): (1, 18),
        (14, 15): (1, 13),
        (5, 10): (1, 4),
    }
    assert sides(layout) == {
        19: (20, 18, 2, "left behind by #21, restore of #18"),
        14: (15, 13, 2, "left behind by #16, branched from #13"),
        5: (10, 4, 6, "left behind by #11, restore of #4"),
    }
    assert layout.restore_targets == {4: [11], 18: [21]}


def test_two_restores_back_to_one_checkpoint_give_their_branches_their_own_lanes():
    layout = Layout.build(9, 9, [(6, 2, RESTORE), (9, 2, RESTORE)])  # #3–5 and #6–8 both grow from #2
    assert lanes(layout) == {(9, 9): (0, 2), (1, 2): (0, None), (6, 8): (1, 2), (3, 5): (2, 2)}


def test_checkpoints_newer_than_the_head_on_its_line_are_a_side_branch():
    layout = Layout.build(10, 6, [])
    assert lanes(layout) == {(1, 6): (0, None), (7, 10): (1, 6)}
    assert sides(layout) == {7: (10, 6, 4, "after the head #6")}


def test_an_open_branchs_heading_starts_its_line_and_lets_the_others_pass():
    layout = Layout.build(60, 60, [(41, 30, STEP)])
    heading, _ = layout.graph(40.5, 40.5, "open", stretch(layout, 31))
    assert heading[1].node == "open" and heading[1].down and not heading[1].up
    assert heading[0].up and heading[0].down and not heading[0].node  # the head's line, on its way to #30


def test_long_side_branches_start_folded_short_ones_open_and_the_heads_line_never_folds():
    layout = Layout.build(60, 60, [(41, 30, STEP), (58, 55, STEP)])
    long, short, main = branch(layout, 31), branch(layout, 56), layout.branches[0]
    folding = Folding()
    assert folding.folds(long) and not folding.folds(short) and not folding.folds(main)
    opened = folding.toggled(long)
    assert not opened.folds(long) and opened.params() == [("open", 31)]
    assert opened.toggled(long) == folding  # and back to the default, which the URL does not repeat
    assert folding.toggled(short).folds(short) and folding.toggled(short).params() == [("fold", 56)]
    assert folding.opening(long) == opened and opened.opening(long) == opened
    assert folding.toggled(main) == folding
    layout.fold(opened.toggled(short))
    assert sorted(s.lo for s in layout.drawn) == [1, 31, 41, 57, 58] and layout.folds[56].lo == 57
