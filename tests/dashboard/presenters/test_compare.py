"""A comparison's base and labels: from A, or from the common ancestor of two branches."""

from __future__ import annotations

from dashboard.presenters.compare import comparison

from ..trees import grow


def test_checkpoints_on_two_branches_compare_from_their_common_ancestor_unless_asked_from_a(make_session):
    session = grow(make_session("run-1"), 6, restores={5: 2})
    a, b, ancestor = (session.checkpoints.get(seq=seq) for seq in (4, 6, 2))
    since_ancestor = comparison(a, b, from_a=False)
    assert since_ancestor["base"] == ancestor and since_ancestor["old_label"] == "#2 · common ancestor"
    direct = comparison(a, b, from_a=True)
    assert direct["base"] == a and (direct["old_label"], direct["new_label"]) == ("A · #4", "B · #6")
    assert direct["fields"] == {"session": session.pk, "a": "#4", "b": "#6"}


def test_a_checkpoint_of_another_session_is_named_by_its_id(make_session):
    first, second = (grow(make_session(name), 2) for name in ("run-1", "run-2"))
    a, b = first.checkpoints.get(seq=1), second.checkpoints.get(seq=2)
    assert comparison(a, b, from_a=False)["fields"]["b"] == f"id:{b.pk}"
