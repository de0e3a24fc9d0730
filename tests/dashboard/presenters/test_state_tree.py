"""The state tree: a few levels come with the page, the rest on demand, closed objects named by their telling fields."""

from __future__ import annotations

import pytest

from dashboard.presenters.state_tree import (
    CHILD_CAP,
    INLINE_DEPTH,
    INLINE_TEXT,
    BadPath,
    parse_path,
    resolve,
    state_tree,
    subtree,
)


def test_a_closed_object_previews_its_telling_fields_first_each_cut_to_a_line():
    tree = state_tree({"messages": [{"content": "x" * 100, "role": "assistant", "meta": {"a": 1}, "id": 7}]})
    [messages] = tree.children or []
    [message] = messages.children or []
    assert message.preview == f"role: assistant · id: 7 · content: {'x' * 47}…"


def test_small_first_level_containers_start_open_and_deep_levels_load_on_demand():
    deep: dict = {"leaf": 1}
    for level in range(INLINE_DEPTH + 2):
        deep = {f"level{level}": deep}
    tree = state_tree({"small": [1, 2], "big": list(range(20)), "deep": deep})
    small, big, nested = tree.children or []
    assert small.open and not big.open
    node = nested
    while node.children:
        [node] = node.children
    assert node.container and node.children is None  # drawn closed; its entries load when opened


def test_a_long_string_comes_whole_with_the_page_only_up_to_the_inline_limit():
    [short], [long] = (state_tree({"text": "y" * size}).children or [] for size in (INLINE_TEXT, INLINE_TEXT + 1))
    assert short.long and short.full == "y" * INLINE_TEXT
    assert long.long and long.full is None and len(long.text) < INLINE_TEXT


def test_a_subtree_pages_through_a_big_list_from_its_offset():
    node = subtree(list(range(CHILD_CAP * 2 + 5)), ["items"], CHILD_CAP)
    assert [child.key for child in node.children or []] == list(range(CHILD_CAP, CHILD_CAP * 2))
    assert node.more == CHILD_CAP * 2 and node.remaining == 5


@pytest.mark.parametrize(
    ("raw", "message"),
    [("messages", "must be a JSON list"), ('[["a"]]', "path parts are keys"), ("[" * 2000, "must be a JSON list")],
)
def test_a_path_that_is_not_a_list_of_keys_and_indexes_is_refused(raw, message):
    with pytest.raises(BadPath, match=message):
        parse_path(raw)


def test_resolving_a_path_names_the_part_that_is_missing():
    state = {"messages": [{"role": "user"}]}
    assert resolve(state, ["messages", 0, "role"]) == "user"
    with pytest.raises(BadPath, match=r"no index 3 in .*\(1 items\)"):
        resolve(state, ["messages", 3])
