from __future__ import annotations

from typing import Any

import pytest

from checkpoints.models import Checkpoint
from checkpoints.services import Actor, CheckpointInput, ingest_checkpoints, restore_checkpoint
from checkpoints.store import history
from checkpoints.store.previews import fill_previews

pytestmark = pytest.mark.django_db
OPERATOR = Actor.system("test")


def calls(n: int) -> dict[str, Any]:
    """An agent state that has made `n` tool calls."""
    return {"step": n, "tool_calls": [{"id": f"call-{i}", "tool_name": "run_tests"} for i in range(n)]}


def run(session, start: int, end: int, **fields: Any) -> list[Checkpoint]:
    """Checkpoints with start … end tool calls so far, the first hung under `fields` (e.g. parent=…)."""
    items = [CheckpointInput(state=calls(n), step=n, **(fields if n == start else {})) for n in range(start, end + 1)]
    return [checkpoint for checkpoint, _ in ingest_checkpoints([(session, items)])]


def seqs(*checkpoints: Checkpoint) -> list[int]:
    return [checkpoint.seq for checkpoint in checkpoints]


def test_ingest_counts_the_tool_calls_made_on_the_path_to_each_checkpoint(make_session, make_checkpoint):
    session = make_session()
    log = make_checkpoint(session, calls(7))
    chat = make_checkpoint(
        session,
        {
            "messages": [
                {"role": "user", "content": "fix the tests"},
                {"role": "assistant", "tool_calls": [{"id": "a", "name": "read"}, {"id": "b", "name": "grep"}]},
                {"role": "tool", "tool_call_id": "a", "content": "…"},
                {"role": "assistant", "tool_calls": [{"id": "c", "name": "edit"}]},
            ]
        },
    )
    plain = make_checkpoint(session, ["not", "a", "dict"])
    assert [c.calls_made for c in Checkpoint.objects.order_by("seq")] == [7, 10, 10]  # 7 logged, 3 in messages
    assert (log.calls_made, chat.calls_made, plain.calls_made) == (7, 10, 10)


def window(n: int, keep: int = 4, per_step: int = 1) -> dict[str, Any]:
    """The state of an agent that keeps only its last `keep` messages, after `n` steps of `per_step` calls."""
    messages = [
        {"role": "assistant", "tool_calls": [{"id": f"call-{i}-{j}", "name": "run_tests"} for j in range(per_step)]}
        for i in range(n)
    ]
    return {"step": n, "messages": messages[-keep:]}


def test_the_calls_of_an_agent_keeping_a_sliding_window_are_counted_as_they_are_made(make_session):
    """Its state records at most four calls however long it runs: each checkpoint counts the calls it added."""
    session = make_session()
    items = [CheckpointInput(state=window(n, per_step=2), step=n) for n in range(1, 11)]
    line = [checkpoint for checkpoint, _ in ingest_checkpoints([(session, items)])]
    assert history.discards(line[3]).tool_calls == 12  # #5 … #10 made two calls each
    restore_checkpoint(line[3], actor=OPERATOR)
    assert history.discards(line[1]).tool_calls == 4  # #3 and #4; the restore added none


def test_restoring_an_earlier_checkpoint_discards_the_rest_of_the_line(make_session):
    session = make_session()
    line = run(session, 1, 10)
    found = history.discards(line[3])
    assert (found.checkpoints, found.tool_calls) == (6, 6)  # #5 … #10, calls 5 … 10


def test_checkpoints_off_the_heads_path_are_not_counted(make_session):
    """#6 … #10 were left by an earlier restore: restoring #3 takes the agent off #12 … #15 and the restore
    #11 that led there, and off #4 and #5 — not off a branch it is no longer on."""
    session = make_session()
    line = run(session, 1, 10)
    restore = restore_checkpoint(line[4], actor=OPERATOR)
    after = run(session, 6, 9)
    assert seqs(restore, *after) == [11, 12, 13, 14, 15]
    found = history.discards(line[2])
    assert found.checkpoints == 7  # #15, #14, #13, #12, #11, #5, #4
    assert found.tool_calls == 9 - 3


def test_a_target_on_a_side_branch_discards_from_where_its_branch_left(make_session):
    session = make_session()
    line = run(session, 1, 10)
    restore_checkpoint(line[4], actor=OPERATOR)
    run(session, 6, 9)
    found = history.discards(line[7])  # #8, on the branch the restore left; it forks from #5
    assert found.checkpoints == 5  # #11 … #15
    assert found.tool_calls == 9 - 5


def test_retention_gaps_are_not_counted(make_session):
    session = make_session()
    line = run(session, 1, 10)
    Checkpoint.objects.filter(pk=line[6].pk).update(parent=line[4])  # retention re-points, then deletes
    Checkpoint.objects.filter(pk=line[5].pk).delete()
    assert history.discards(line[1]).checkpoints == 7  # #3 … #10 but #6


def test_the_head_discards_nothing(make_session):
    session = make_session()
    line = run(session, 1, 4)
    assert history.discards(line[-1]) == history.Discards(checkpoints=0, tool_calls=0)


def test_a_target_in_another_run_of_the_session_discards_the_whole_path(make_session):
    session = make_session()
    first = run(session, 1, 3)
    run(session, 1, 5, new_root=True)
    found = history.discards(first[1])
    assert (found.checkpoints, found.tool_calls) == (5, 5)


def test_checkpoints_stored_before_calls_were_counted_are_counted_by_fill_previews(make_session):
    session = make_session()
    line = run(session, 1, 6)
    restore_checkpoint(line[2], actor=OPERATOR)
    run(session, 4, 5)
    Checkpoint.objects.update(calls_made=None)  # stored before the counter existed
    assert history.discards(line[1]).tool_calls is None  # the offer names the checkpoints alone
    assert fill_previews() == 9
    assert list(Checkpoint.objects.order_by("seq").values_list("calls_made", flat=True)) == [1, 2, 3, 4, 5, 6, 3, 4, 5]
    assert history.discards(line[1]).tool_calls == 5 - 2


def test_many_targets_cost_a_fixed_number_of_queries(make_session, django_assert_max_num_queries):
    targets = []
    for n in range(6):
        session = make_session(f"run-{n}")
        line = run(session, 1, 12)
        restore_checkpoint(line[5], actor=OPERATOR)
        run(session, 7, 9)
        targets += [line[2], line[8]]
    with django_assert_max_num_queries(3):
        found = history.discards_for(targets)
    assert {found[t.pk].checkpoints for t in targets} == {7, 4}
