"""How two checkpoints are related: on one line, or on branches that meet at a common ancestor."""

from __future__ import annotations

import pytest

from checkpoints.jobs.retention import apply_retention
from checkpoints.models import Checkpoint, RetentionPolicy
from checkpoints.services import Actor, fork_session, pin_checkpoint, restore_checkpoint
from checkpoints.services.cleanup import delete_checkpoints
from checkpoints.store.lineage import Relation, relate

pytestmark = pytest.mark.django_db


@pytest.fixture
def line(make_session, make_checkpoint):
    """#1 … #6 on one line."""
    session = make_session()
    return [make_checkpoint(session, {"step": i}, name=f"step_{i}") for i in range(1, 7)]


def test_a_checkpoint_and_a_later_one_on_its_line_are_ancestor_and_descendant(line):
    assert relate(line[1], line[5]).relation == Relation.ANCESTOR
    assert relate(line[1], line[5]).ancestor == line[1]
    assert relate(line[5], line[1]).relation == Relation.DESCENDANT
    assert relate(line[5], line[1]).ancestor == line[1]
    assert relate(line[3], line[3]).relation == Relation.SAME


def test_branches_made_by_the_agent_meet_where_it_went_back(line, make_checkpoint):
    session = line[0].session
    retry = make_checkpoint(session, {"step": "retry"}, parent=line[2].pk)  # #7 continues #3
    retry_next = make_checkpoint(session, {"step": "retry 2"})  # #8, after the head #7
    lineage = relate(line[5], retry_next)
    assert lineage.relation == Relation.DIVERGED
    assert lineage.ancestor == line[2]
    assert relate(line[1], retry_next).relation == Relation.ANCESTOR  # #2 is before the branch point
    assert relate(retry, retry_next).relation == Relation.ANCESTOR


def test_a_restore_branches_at_its_target(line, make_checkpoint):
    restored = restore_checkpoint(line[1], actor=Actor.system())  # #7 restores #2
    after = make_checkpoint(line[0].session, {"step": "after"})
    assert relate(line[4], after).ancestor == line[1]
    assert relate(line[4], after).relation == Relation.DIVERGED
    assert relate(line[1], restored).relation == Relation.ANCESTOR


def test_a_fork_meets_its_source_at_the_forked_checkpoint_even_forks_of_forks(line, make_checkpoint):
    fork = fork_session(line[2], actor=Actor.system())
    in_fork = make_checkpoint(fork, {"step": "fork 1"})
    lineage = relate(line[5], in_fork)
    assert (lineage.relation, lineage.ancestor) == (Relation.DIVERGED, line[2])
    assert relate(line[1], in_fork).relation == Relation.ANCESTOR  # across the fork, back in the source
    fork_of_fork = fork_session(in_fork, actor=Actor.system())
    deeper = make_checkpoint(fork_of_fork, {"step": "deeper"})
    assert relate(line[4], deeper).ancestor == line[2]
    assert relate(in_fork, deeper).relation == Relation.ANCESTOR
    other = make_checkpoint(fork, {"step": "fork 2"}, parent=fork.checkpoints.get(seq=1).pk)
    assert relate(other, deeper).ancestor == fork.checkpoints.get(seq=1)


def test_two_roots_share_no_history(line, make_checkpoint, make_session):
    second_run = make_checkpoint(line[0].session, {"step": "again"}, new_root=True)
    after = make_checkpoint(line[0].session, {"step": "again 2"})
    assert relate(line[4], after).relation == Relation.UNRELATED
    assert relate(second_run, after).relation == Relation.ANCESTOR
    elsewhere = make_checkpoint(make_session("other"), {"step": 1})
    assert relate(line[0], elsewhere).ancestor is None


def test_when_the_meeting_point_was_deleted_the_newest_checkpoint_before_it_stands_in(line, make_checkpoint):
    session = line[0].session
    branch = make_checkpoint(session, {"step": "branch"}, parent=line[3].pk)  # continues #4
    delete_checkpoints([line[3].pk, line[2].pk], actor=Actor.system())
    lineage = relate(line[5], branch)
    assert (lineage.relation, lineage.ancestor) == (Relation.DIVERGED, line[1])


def test_a_branch_whose_first_checkpoint_was_deleted_still_branches(line, make_checkpoint):
    """The checkpoint after a deleted branch start now continues the branch point: it must not look like it
    continues whatever arrived just before it (the timeline reads the same marks)."""
    session = line[0].session
    first = make_checkpoint(session, {"step": "b1"}, parent=line[1].pk)  # #7 continues #2
    second = make_checkpoint(session, {"step": "b2"})  # #8 continues #7
    delete_checkpoints([first.pk], actor=Actor.system())
    second.refresh_from_db()
    assert second.parent_id == line[1].pk
    assert relate(line[5], second).ancestor == line[1]
    assert (8, 2, "step") in set(Checkpoint.objects.for_session(session).branch_points())


def test_retention_that_deletes_the_first_checkpoint_of_a_branch_keeps_the_branch(line, make_checkpoint):
    RetentionPolicy.objects.filter(project=None, kind="step").update(
        keep_last=1, keep_first=False, keep_latest_per_name=False, max_age=None
    )
    session = line[0].session
    make_checkpoint(session, {"step": "b1"}, parent=line[1].pk)  # #7 continues #2
    tip = make_checkpoint(session, {"step": "b2"})  # #8, the head
    for kept in (line[1], line[3]):
        pin_checkpoint(kept, actor=Actor.system())
    apply_retention()
    assert list(Checkpoint.objects.for_session(session).values_list("seq", flat=True)) == [2, 4, 8]
    lineage = relate(line[3], tip)
    assert (lineage.relation, lineage.ancestor) == (Relation.DIVERGED, line[1])


def test_relating_two_ends_of_a_big_session_takes_a_few_queries(big_session, django_assert_max_num_queries):
    first = Checkpoint.objects.get(session=big_session, seq=10)
    last = big_session.head
    side = Checkpoint.objects.get(session=big_session, seq=2999)  # after the restore went back to #1501
    with django_assert_max_num_queries(5):  # branch points, fork source, the meeting point
        lineage = relate(side, last)
    assert lineage.relation == Relation.DIVERGED and lineage.ancestor.seq == 1501
    with django_assert_max_num_queries(4):
        assert relate(first, last).relation == Relation.ANCESTOR
