"""Grouping a long diff: by top-level key with counts, list items added or removed together as one run."""

from __future__ import annotations

from checkpoints.store.diff import DiffEntry, Run, diff_states, group_changes


def message(i: int) -> dict:
    return {"role": "assistant" if i % 2 else "user", "content": f"message {i}"}


def test_changes_are_grouped_by_top_level_key_in_state_order_each_counted_once():
    before = {"memory": {"goal": "a", "old": 1}, "messages": [message(0)], "step": 1}
    after = {"memory": {"goal": "b", "new": 2}, "messages": [message(i) for i in range(313)], "step": 2}
    groups = group_changes(diff_states(before, after).entries)
    assert [group.label for group in groups] == ["memory", "messages", "step"]
    memory, messages, step = groups
    assert memory.counts == {"changed": 1, "added": 1, "removed": 1}
    assert messages.counts == {"changed": 0, "added": 312, "removed": 0}
    assert step.counts == {"changed": 1, "added": 0, "removed": 0}
    assert sum(group.total for group in groups) == len(diff_states(before, after).entries) == 316


def test_appended_items_collapse_into_one_run_with_its_count():
    before = {"messages": [message(0)]}
    after = {"messages": [message(i) for i in range(313)]}
    [group] = group_changes(diff_states(before, after).entries)
    [run] = group.items
    assert isinstance(run, Run)
    assert (run.list_op, run.op, run.start, run.count, run.key) == ("appended", "added", 1, 312, "messages@1")
    assert run.entries[-1].new == message(312)


def test_a_sliding_window_is_two_runs_the_items_dropped_and_the_items_appended():
    before = {"log": [f"line {i}" for i in range(100)]}
    after = {"log": [f"line {i}" for i in range(40, 140)]}
    [group] = group_changes(diff_states(before, after).entries)
    dropped, appended = group.items
    assert (dropped.list_op, dropped.start, dropped.count) == ("removed", 0, 40)
    assert (appended.list_op, appended.start, appended.count) == ("appended", 60, 40)
    assert group.counts == {"changed": 0, "added": 40, "removed": 40}


def test_runs_in_different_lists_and_keyed_changes_stay_apart():
    before = {"task": {"done": [1], "todo": [1, 2]}, "notes": []}
    after = {"task": {"done": [1, 2, 3], "todo": [1, 2, 3, 4], "title": "x"}, "notes": ["a", "b"]}
    groups = {group.label: group for group in group_changes(diff_states(before, after).entries)}
    task = groups["task"].items
    runs = [(item.list_path, item.count) for item in task if isinstance(item, Run)]
    assert runs == [(("task", "done"), 2), (("task", "todo"), 2)]
    assert [item.path_text for item in task if isinstance(item, DiffEntry)] == ["task.title"]
    assert [(item.key, item.count) for item in groups["notes"].items] == [("notes@0", 2)]


def test_items_changed_in_place_are_rows_of_their_own_not_a_run():
    before = {"messages": [message(i) for i in range(3)]}
    after = {"messages": [message(0), {"role": "assistant", "content": "edited"}, {"role": "user", "content": "too"}]}
    [group] = group_changes(diff_states(before, after).entries)
    assert [item.path_text for item in group.items] == ["messages[1].content", "messages[2].content"]


def test_a_state_that_is_a_list_groups_under_the_root():
    [group] = group_changes(diff_states([1], [1, 2, 3, 4]).entries)
    assert group.key is None and group.label == "(root)"
    [run] = group.items
    assert (run.key, run.count) == ("(root)@1", 3)
