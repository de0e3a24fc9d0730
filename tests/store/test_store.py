from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkpoints import store
from checkpoints.models import Chunk
from checkpoints.store import diff
from checkpoints.store.jsoncodec import InvalidJSON, canonical

HYPOTHESIS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# PostgreSQL text cannot hold NUL, and our states go through the database as JSON only inside
# compressed chunks, so NUL is fine in the store; it is excluded only where a JSONField would see it.
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=300)
)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=12) | st.dictionaries(st.text(max_size=20), children, max_size=12),
    max_leaves=60,
)


def roundtrip(value: Any, base: bytes | None = None) -> tuple[store.Saved, Any]:
    saved = store.save_state(value, base=base)
    store.cache.clear()  # read from the database, not from memory
    return saved, store.load_state(saved.root)


@HYPOTHESIS
@given(value=json_values)
def test_any_json_document_loads_back_exactly(db, value):
    _, loaded = roundtrip(value)
    assert canonical(loaded) == canonical(value)


@HYPOTHESIS
@given(before=json_values, after=json_values)
def test_a_state_stored_as_patch_against_another_loads_back_exactly(db, before, after):
    first = store.save_state({"state": before, "pad": "x" * 5000})
    _, loaded = roundtrip({"state": after, "pad": "x" * 5000}, base=first.root)
    assert canonical(loaded) == canonical({"state": after, "pad": "x" * 5000})


@pytest.mark.parametrize(
    "value",
    [
        {},
        [],
        "",
        0,
        2**100,
        -(2**64),
        1e308,
        -0.0,
        5e-324,
        "žluťoučký kůň 🐎 \u2028",
        {"": {"": [[], {}, [[]]]}},
        list(range(50_000)),
        {f"key{i}": "v" * (i % 7000) for i in range(300)},
        ["x" * 100_000, "y" * 100_000],
    ],
    ids=lambda v: type(v).__name__ + str(len(canonical(v))),
)
def test_edge_case_documents_load_back_exactly(db, value):
    _, loaded = roundtrip(value)
    assert canonical(loaded) == canonical(value)


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def test_nesting_up_to_the_limit_is_accepted_and_beyond_it_refused(db, settings):
    settings.CHECKPOINT_MAX_DEPTH = 200
    _, loaded = roundtrip(nested(200))
    assert loaded == nested(200)
    with pytest.raises(InvalidJSON, match="deeper than 200"):
        store.save_state(nested(201))


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"x": float("nan")}, "not a valid JSON number"),
        ({"x": [float("inf")]}, "not a valid JSON number"),
        ({1: "a"}, "not JSON-serialisable|not a string"),
        ({"x": {1, 2}}, "not JSON-serialisable|not a JSON type"),
    ],
)
def test_values_json_cannot_hold_are_refused_and_nothing_is_stored(db, value, message):
    with pytest.raises(InvalidJSON, match=message):
        store.save_state(value)
    assert Chunk.objects.count() == 0


def test_a_patch_introducing_nan_is_refused(db):
    base = store.save_state({"x": 1, "pad": "p" * 10_000})
    with pytest.raises(InvalidJSON):
        store.save_state({"x": float("nan"), "pad": "p" * 10_000}, base=base.root)


def test_changing_one_to_true_is_not_mistaken_for_no_change(db):
    """Python says 1 == True; JSON does not, and neither may the store."""
    base = store.save_state({"flags": [1, 0, 1.0], "pad": "p" * 10_000})
    _, loaded = roundtrip({"flags": [True, False, 1], "pad": "p" * 10_000}, base=base.root)
    assert canonical(loaded["flags"]) == b"[true,false,1]"


def test_a_state_built_on_its_parents_objects_is_patched_and_loads_back_exactly(db):
    """A LangGraph put holds the parent's own (shared) objects plus new ones; only the new ones are compared
    encoded, and 1 vs true in them still counts."""
    base = store.save_state({"messages": [{"n": n, "text": "t" * 500} for n in range(40)], "flags": {"a": 1}})
    shared = store.load_shared(base.root)
    grown = {"messages": [*shared["messages"], {"n": 40, "text": "new"}], "flags": shared["flags"]}
    saved = store.save_state(grown, base=base.root)
    assert Chunk.objects.get(hash=saved.root).base is not None  # a patch
    flipped = {"messages": [*shared["messages"], {"n": True, "text": "new"}], "flags": {"a": True}}
    _, loaded = roundtrip(flipped, base=base.root)
    assert canonical(loaded) == canonical(flipped)
    assert canonical(loaded["flags"]) == b'{"a":true}'


def words(rng: random.Random, size: int) -> str:
    vocabulary = [
        "the",
        "agent",
        "read",
        "wrote",
        "file",
        "test",
        "passed",
        "failed",
        "retry",
        "tool",
        "search",
        "result",
        "plan",
        "step",
        "memory",
    ]
    out: list[str] = []
    while sum(len(w) + 1 for w in out) < size:
        out.append(rng.choice(vocabulary) + str(rng.randrange(1000)))
    return " ".join(out)


def test_appending_a_message_stores_the_change_not_the_history(db):
    rng = random.Random(7)
    state: dict[str, Any] = {"messages": [], "memory": {f"k{i}": words(rng, 40) for i in range(50)}}
    root = None
    stored: list[int] = []
    for _ in range(300):
        state["messages"].append({"role": "assistant", "content": words(rng, 1000)})
        state["memory"][f"k{rng.randrange(50)}"] = words(rng, 40)
        saved = store.save_state(state, base=root)
        root = saved.root
        stored.append(saved.stored_bytes)
    assert saved.raw_bytes > 300_000
    # On average a step stores about one compressed message, whether the history is 10 or 300 long.
    early, late = sum(stored[20:70]) / 50, sum(stored[250:300]) / 50
    assert late < 2 * early
    assert late < 2_000
    store.cache.clear()
    assert canonical(store.load_state(root)) == canonical(state)


def test_patch_chains_are_cut_by_a_keyframe(db, settings):
    settings.CHECKPOINT_KEYFRAME_INTERVAL = 8
    state: dict[str, Any] = {"log": [], "pad": "p" * 20_000}
    root = None
    chain_lengths = []
    for i in range(20):
        state["log"].append(f"entry {i}")
        root = store.save_state(state, base=root).root
        chain_lengths.append(len(store._fetch_chain(root)))
    assert chain_lengths[:9] == [1, 2, 3, 4, 5, 6, 7, 8, 1]
    assert max(chain_lengths) == 8
    store.cache.clear()
    assert store.load_state(root) == state


def test_patches_compress_against_the_patches_before_them(db):
    rng = random.Random(3)
    state: dict[str, Any] = {"messages": [], "pad": "p" * 50_000}
    root, sizes = None, []
    for _ in range(12):
        state["messages"].append({"role": "assistant", "content": words(rng, 1500)})
        saved = store.save_state(state, base=root)
        root, sizes = saved.root, [*sizes, saved.stored_bytes]
    # the second patch onwards has earlier patches as dictionary: same vocabulary, fewer bytes
    assert sum(sizes[6:]) / 6 < 0.9 * sizes[1]
    store.cache.clear()
    assert store.load_state(root) == state


@HYPOTHESIS
@given(steps=st.lists(json_values, min_size=1, max_size=24))
def test_every_state_of_a_long_patch_chain_loads_back_exactly(db, steps):
    # chains longer than PATCH_CONTEXT: each patch's dictionary is up to 16 patches before it
    state: dict[str, Any] = {"log": [], "pad": "p" * 5000}
    roots, expected = [], []
    root = None
    for value in steps:
        state["log"].append(value)
        root = store.save_state(state, base=root).root
        roots.append(root)
        expected.append(canonical(state))
    store.cache.clear()
    assert [canonical(store.load_state(r)) for r in roots] == expected


def _agent_steps(
    rng: random.Random, steps: int, after: Sequence[tuple[bytes, bytes]] = ()
) -> list[tuple[bytes, bytes]]:
    """An agent appending a message a step (arrays big enough for leaves) with a memory key changed, from scratch or
    on the last of `after`: (root, canonical state) per step."""
    state: dict[str, Any] = (
        orjson.loads(after[-1][1])
        if after
        else {"messages": [], "memory": {f"k{i}": words(rng, 30) for i in range(20)}}
    )
    root, out = (after[-1][0] if after else None), []
    for _ in range(steps):
        state["messages"].append({"role": "assistant", "content": words(rng, 600)})
        state["memory"][f"k{rng.randrange(20)}"] = words(rng, 30)
        root = store.save_state(state, base=root).root
        out.append((root, canonical(state)))
    return out


def _data(root: bytes) -> bytes:
    return bytes(Chunk.objects.get(hash=root).data)


def test_a_keyframe_compresses_the_patches_before_it_again_with_its_leaves_and_their_roots_stay(db, settings):
    settings.CHECKPOINT_KEYFRAME_INTERVAL = 8
    rng = random.Random(11)
    first = _agent_steps(rng, 7)  # a keyframe, then six patches
    before = {root: len(_data(root)) for root, _ in first[1:]}
    assert all(_data(root)[0] != store.REBASED for root in before)
    steps = first + _agent_steps(rng, 2, after=first)  # a seventh patch, then the next keyframe
    assert Chunk.objects.get(hash=steps[8][0]).base is None

    after = {root: _data(root) for root in before}
    assert all(data[0] == store.REBASED for data in after.values())  # same digests: no root or row changed
    assert sum(map(len, after.values())) < 0.6 * sum(before.values())  # what they added is in the keyframe's leaves
    named = {store.rebased_on(data) for data in after.values()}
    assert len(named) == 1 and Chunk.objects.filter(hash=named.pop()).exists()
    store.cache.clear()
    assert [canonical(store.load_state(root)) for root, _ in steps] == [expected for _, expected in steps]


@pytest.mark.postgres
def test_a_keyframe_create_neither_waits_for_nor_deadlocks_on_a_patch_row_another_transaction_holds(
    transactional_db, settings
):
    """A fork's keyframe may be rebasing the patches it shares with this session, in another order: a create skips a
    row another transaction holds (it keeps the data it had, which reads the same) instead of waiting for it."""
    import psycopg
    from django.db import connection, transaction

    settings.CHECKPOINT_KEYFRAME_INTERVAL = 8
    rng = random.Random(14)
    steps = _agent_steps(rng, 8)
    held = steps[3][0]
    params = connection.get_connection_params()
    other = psycopg.connect(**{k: v for k, v in params.items() if k != "cursor_factory"})
    try:
        other.execute("SELECT 1 FROM checkpoints_chunk WHERE hash = %s FOR UPDATE", [held])
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout = '3s'")  # a create that waited would fail here instead
            steps += _agent_steps(rng, 1, after=steps)  # the keyframe
    finally:
        other.rollback()
        other.close()
    assert Chunk.objects.get(hash=steps[8][0]).base is None
    assert _data(held)[0] != store.REBASED
    assert _data(steps[4][0])[0] == store.REBASED
    store.cache.clear()
    assert [canonical(store.load_state(root)) for root, _ in steps] == [expected for _, expected in steps]


def test_with_rebasing_off_a_keyframe_leaves_the_patches_before_it_as_they_were(db, settings):
    """What a rolling upgrade from a release that cannot read rebased patches sets until every process runs this one."""
    settings.CHECKPOINT_KEYFRAME_INTERVAL = 8
    settings.CHECKPOINT_REBASE = False
    steps = _agent_steps(random.Random(13), 10)
    assert Chunk.objects.get(hash=steps[8][0]).base is None
    assert not [data for data in Chunk.objects.values_list("data", flat=True) if bytes(data)[0] == store.REBASED]
    store.cache.clear()
    assert [canonical(store.load_state(root)) for root, _ in steps] == [expected for _, expected in steps]


def test_a_process_holding_a_state_from_before_the_rebase_reads_the_rebased_patches_above_it(db, settings):
    """Another worker cached a state of the segment (its context: the patches' raw bytes) before a keyframe rebased
    the patches above it: those bytes are unchanged, so its reads stop at that state and decode the rest."""
    settings.CHECKPOINT_KEYFRAME_INTERVAL = 8
    rng = random.Random(12)
    steps = _agent_steps(rng, 4)
    held = store.cache.get(steps[2][0])
    assert held is not None and held.depth == 2
    steps += _agent_steps(rng, 6, after=steps)
    assert _data(steps[4][0])[0] == store.REBASED
    Chunk.objects.filter(hash=steps[0][0]).delete()  # the keyframe's root: a read must stop at the held state
    store.cache.clear()
    store.cache.put(steps[2][0], held)
    assert canonical(store.load_state(steps[6][0])) == steps[6][1]


@HYPOTHESIS
@given(values=st.lists(json_values, min_size=2, max_size=20), order=st.randoms(use_true_random=False))
def test_every_state_across_rebased_segments_loads_back_exactly_in_any_order(db, values, order):
    from django.conf import settings as django_settings

    interval = django_settings.CHECKPOINT_KEYFRAME_INTERVAL
    django_settings.CHECKPOINT_KEYFRAME_INTERVAL = 4
    try:
        state: dict[str, Any] = {"log": [], "pad": ["p" * 1500 for _ in range(4)]}
        saved, root = [], None
        for value in values:
            state["log"].append(value)
            state["pad"].append(canonical(value).decode()[:2000] + "q" * 1500)
            root = store.save_state(state, base=root).root
            saved.append((root, canonical(state)))
    finally:
        django_settings.CHECKPOINT_KEYFRAME_INTERVAL = interval
    store.cache.clear()
    order.shuffle(saved)
    for root, expected in saved:  # each read leaves states cached that later reads may stop at
        assert canonical(store.load_state(root)) == expected


def test_patches_use_up_to_sixteen_earlier_patches_as_dictionary(db):
    rng = random.Random(5)
    state: dict[str, Any] = {"messages": [], "pad": "p" * 50_000}
    root = store.save_state(state).root
    for _ in range(20):
        state["messages"].append({"role": "assistant", "content": words(rng, 800)})
        root = store.save_state(state, base=root).root
    used = [bytes(data)[0] for data in Chunk.objects.filter(base__isnull=False).values_list("data", flat=True)]
    assert sorted(used) == [*range(16), 16, 16, 16, 16]
    store.cache.clear()
    assert store.load_state(root) == state


def test_patches_written_with_four_earlier_patches_as_dictionary_still_load(db, settings):
    """What releases before 16 stored (and a rolling upgrade's setting of 4 stores) is read, and extended, by this
    one."""
    rng = random.Random(6)
    state: dict[str, Any] = {"messages": [], "pad": "p" * 50_000}
    settings.CHECKPOINT_PATCH_CONTEXT = 4
    root = store.save_state(state).root
    old_roots = []
    for _ in range(10):
        state["messages"].append({"content": words(rng, 600)})
        root = store.save_state(state, base=root).root
        old_roots.append((root, canonical(state)))
    assert max(bytes(d)[0] for d in Chunk.objects.filter(base__isnull=False).values_list("data", flat=True)) == 4
    settings.CHECKPOINT_PATCH_CONTEXT = 16
    store.cache.clear()
    for old_root, expected in old_roots:
        assert canonical(store.load_state(old_root)) == expected
    for _ in range(10):  # the next patches build on the old chain with the longer dictionary
        state["messages"].append({"content": words(rng, 600)})
        root = store.save_state(state, base=root).root
    store.cache.clear()
    assert store.load_state(root) == state
    assert max(bytes(d)[0] for d in Chunk.objects.filter(base__isnull=False).values_list("data", flat=True)) > 4


def test_reading_a_state_costs_one_query_per_tree_level(db, django_assert_max_num_queries):
    rng = random.Random(1)
    state = {"messages": [{"content": words(rng, 800)} for _ in range(2000)], "memory": {"a": 1}}
    root = store.save_state(state).root
    store.cache.clear()
    with django_assert_max_num_queries(6):
        loaded = store.load_state(root)
    assert len(loaded["messages"]) == 2000


def test_a_node_whose_header_names_more_references_than_it_holds_is_refused(db):
    """What a corrupted row or a wrong dictionary decodes to: refused before a reference list is allocated for it."""
    import zstandard

    raw = b"Oo" + (1_000_000).to_bytes(4, "big") + b"[0,[]]"
    root = bytes(range(16))
    Chunk.objects.create(hash=root, data=b"\x00" + zstandard.ZstdCompressor().compress(raw), raw_size=len(raw))
    store.cache.clear()
    with pytest.raises(store.StateNotFound, match="references than it holds"):
        store.load_state(root)


def test_identical_state_adds_nothing_and_shares_the_root(db):
    first = store.save_state({"a": list(range(1000))})
    again = store.save_state({"a": list(range(1000))}, base=first.root)
    assert again.root == first.root
    assert again.stored_bytes == 0


def test_missing_root_raises_state_not_found(db):
    with pytest.raises(store.StateNotFound):
        store.load_state(b"\x00" * 16)


# ---- diff -------------------------------------------------------------------------------------


def paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    found = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            found += paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += paths(child, (*prefix, index))
    return found


def set_at(value: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    copy = value.copy()
    copy[path[0]] = set_at(value[path[0]], path[1:], new)
    return copy


@HYPOTHESIS
@given(data=st.data(), value=json_values)
def test_diff_reports_only_the_changed_path_and_descends_only_along_it(data, value):
    path = data.draw(st.sampled_from(paths(value)))
    old = value
    for part in path:
        old = old[part]
    new = "\u27c2 changed" if old != "\u27c2 changed" else 0
    changed = set_at(value, path, new)
    result = diff.diff_states(value, changed)
    assert [(entry.op, entry.path) for entry in result.entries] == [("changed", path)]
    # Equal siblings are skipped, not walked: at most one descent per level of the path.
    assert result.stats.descents <= len(path)


@HYPOTHESIS
@given(a=json_values, b=json_values)
def test_replaying_the_diff_turns_one_state_into_the_other(a, b):
    ops = diff.to_ops(diff.walk(a, b, strict=True))
    assert canonical(diff.apply_ops(a, ops)) == canonical(b)


def test_diff_of_appended_messages_and_long_text():
    before = {"messages": [{"role": "user", "content": "hi"}], "notes": "line one\nline two\nline three"}
    after = {
        "messages": [*before["messages"], {"role": "assistant", "content": "hello"}],
        "notes": "line one\nline 2\nline three",
        "new_key": 1,
    }
    result = diff.diff_states(before, after)
    assert result.counts == {"added": 2, "removed": 0, "changed": 1, "appended": 1}
    appended = next(e for e in result.entries if e.list_op == "appended")
    assert appended.path_text == "messages[1]" and appended.new["content"] == "hello"
    notes = next(e for e in result.entries if e.path == ("notes",))
    assert "-line two" in notes.line_diff and "+line 2" in notes.line_diff
    assert result.summary == "1 changed, 2 added, 1 list item appended"


def test_diff_of_removed_key_and_removed_items():
    result = diff.diff_states({"a": 1, "items": [1, 2, 3, 4]}, {"items": [1, 4]})
    assert {(e.op, e.path_text) for e in result.entries} == {
        ("removed", "a"),
        ("removed", "items[1]"),
        ("removed", "items[2]"),
    }


def test_diff_skips_shared_subtrees_without_comparing_them():
    big = [{"content": str(i)} for i in range(10_000)]
    before = {"messages": big, "memory": {"goal": "a"}}
    after = {"messages": big, "memory": {"goal": "b"}}
    result = diff.diff_states(before, after)
    assert [e.path_text for e in result.entries] == ["memory.goal"]
    assert result.stats.descents == 2


def test_a_missing_parent_state_does_not_block_the_next_checkpoint(db):
    saved = store.save_state({"n": 1}, base=b"\x01" * 16)
    store.cache.clear()
    assert store.load_state(saved.root) == {"n": 1}


def test_a_sliding_window_is_a_small_patch_not_a_rewrite(db):
    """A mailbox that keeps its last 8 messages drops one and appends one per step."""
    mailbox = [{"from": f"agent-{i}", "body": f"message {i} " * 40} for i in range(8)]
    first = store.save_state({"mailbox": mailbox})
    slid = {"mailbox": [*mailbox[1:], {"from": "agent-8", "body": "message 8 " * 40}]}
    ops = diff.to_ops(diff.walk({"mailbox": mailbox}, slid))
    assert ops == [["l", ["mailbox"], 0, 1, []], ["l", ["mailbox"], 7, 0, [slid["mailbox"][-1]]]]
    saved = store.save_state(slid, base=first.root)
    assert saved.stored_bytes < 300
    store.cache.clear()
    assert store.load_state(saved.root) == slid
    changes = diff.diff_states({"mailbox": mailbox}, slid)
    assert [(e.op, e.path_text, e.list_op) for e in changes.entries] == [
        ("removed", "mailbox[0]", "removed"),
        ("added", "mailbox[7]", "appended"),
    ]


def test_reusing_an_old_chunk_renews_it_so_garbage_collection_spares_it(db):
    from datetime import timedelta

    from django.utils import timezone

    state = {"big": ["x" * 5000, "y" * 5000]}
    saved = store.save_state(state)
    Chunk.objects.update(created_at=timezone.now() - timedelta(days=3))
    store.cache.clear()
    store.save_state(state)  # the same content again: nothing new, but the old nodes are in use again
    assert Chunk.objects.get(hash=saved.root).created_at > timezone.now() - timedelta(minutes=1)


def test_each_thread_compresses_with_its_own_zstd_objects_which_are_not_thread_safe():
    import threading

    from checkpoints.store import jsoncodec

    mine = jsoncodec.zstd_pair(jsoncodec.PACK_LEVEL)
    theirs = []
    worker = threading.Thread(target=lambda: theirs.append(jsoncodec.zstd_pair(jsoncodec.PACK_LEVEL)))
    worker.start()
    worker.join()
    assert jsoncodec.zstd_pair(jsoncodec.PACK_LEVEL) is mine
    assert theirs[0][0] is not mine[0] and theirs[0][1] is not mine[1]
    assert jsoncodec.unpack(jsoncodec.pack({"a": [1, "é"]})) == {"a": [1, "é"]}


def test_prefetching_a_pages_states_loads_each_exactly_in_two_queries(db, django_assert_num_queries):
    state: dict[str, Any] = {"log": [], "pad": "p" * 20_000}
    roots, states, root = [], [], None
    for i in range(12):
        state["log"].append({"step": i, "note": f"n{i}" * 50})
        root = store.save_state(state, base=root).root
        roots.append(root)
        states.append(canonical(state))
    store.cache.clear()
    postgres = store.connection.vendor == "postgresql"
    # PostgreSQL: the twelve chains in one query, and the keyframe's tree (one level). Elsewhere prefetch does
    # nothing and each state is read as load_shared reads it: one query a state, plus the keyframe's tree.
    with django_assert_num_queries(2 if postgres else 0):
        store.prefetch(reversed(roots))  # newest first, as a page lists them
    with django_assert_num_queries(0 if postgres else len(roots) + 1):
        loaded = [canonical(store.load_shared(root)) for root in roots]
    assert loaded == states


def test_prefetching_replays_a_chain_that_stops_at_a_state_the_page_evicted_meanwhile(db, monkeypatch):
    # A chain that stops at a cached state is replayed after the shorter chains, whose states, cached as they are
    # made, may evict it (least recently used): the replay must still start from it (it failed: "no keyframe").
    def chain(name: str, length: int) -> tuple[list[bytes], list[Any]]:
        state: dict[str, Any] = {"log": [], "pad": name * 20_000}
        roots, states, root = [], [], None
        for i in range(length):
            state["log"].append({"step": i, "note": f"{name}{i}" * 50})
            root = store.save_state(state, base=root).root
            roots.append(root)
            states.append(canonical(state))
        return roots, states

    a_roots, a_states = chain("a", 5)
    b_roots, b_states = chain("b", 3)
    store.cache.clear()
    store.load_shared(a_roots[1])  # the chains of a[4] stop here: a patch, not a keyframe
    monkeypatch.setattr(store.cache, "size", 3)
    store.prefetch([a_roots[4], *b_roots])  # b's three states, cached first, evict a[1]
    if store.connection.vendor == "postgresql":  # elsewhere prefetch leaves each state to its first read
        assert a_roots[1] not in store.cache.snapshot()
    assert canonical(store.load_shared(a_roots[4])) == a_states[4]
    assert [canonical(store.load_shared(root)) for root in b_roots] == b_states
