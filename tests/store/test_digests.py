from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from checkpoints import store
from checkpoints.store import digests, jsoncodec
from checkpoints.store.jsoncodec import canonical
from tests.store.test_store import HYPOTHESIS, json_values

pytestmark = pytest.mark.django_db


def chat(n: int) -> dict[str, Any]:
    return {
        "messages": [{"type": "ai", "content": f"message {i} " * 40, "id": f"m{i}"} for i in range(n)],
        "memory": {f"key-{k}": f"value {k}" for k in range(50)},
        "progress": {"step": n},
    }


def lists_encoded(monkeypatch) -> list[int]:
    """The lengths of the lists `digests` encodes whole to compare them, from now on."""
    encoded: list[int] = []
    dumps = digests._canonical
    monkeypatch.setattr(digests, "_canonical", lambda value: encoded.append(len(value)) or dumps(value))
    return encoded


@HYPOTHESIS
@given(value=json_values)
def test_a_states_size_is_its_canonical_json_and_its_digest_is_the_same_saved_or_not(db, value):
    saved = store.save_state(value)
    assert saved.raw_bytes == len(canonical(value))
    assert saved.state_hash == store.state_digest(value) == store.state_digest(jsoncodec.loads(canonical(value)))


def test_a_state_built_on_the_one_before_has_the_digest_of_the_same_state_built_anew():
    first = store.save_state(chat(300))
    base = store.load_shared(first.root)
    built = {**base, "messages": [*base["messages"], *chat(302)["messages"][300:]], "progress": {"step": 302}}
    saved = store.save_state(built, base=first.root)
    assert saved.state_hash == store.state_digest(chat(302)) and saved.raw_bytes == len(canonical(chat(302)))
    assert saved.state_hash != first.state_hash


def test_a_state_built_on_the_one_before_encodes_only_what_it_adds(monkeypatch):
    first = store.save_state(chat(300))
    base = store.load_shared(first.root)
    encoded: list[int] = []
    encode = jsoncodec.encode

    def counting(value: Any) -> tuple[bytes, bool]:
        result = encode(value)
        encoded.append(len(result[0]))
        return result

    monkeypatch.setattr(jsoncodec, "encode", counting)
    built = {**base, "messages": [*base["messages"], *chat(301)["messages"][300:]], "progress": {"step": 301}}
    saved = store.save_state(built, base=first.root)
    assert sum(encoded) < 5_000 < saved.raw_bytes // 20  # the new message and the patch, not the 300 before


def test_a_state_another_process_stored_is_replayed_from_the_one_held_and_the_next_encodes_only_its_news(
    monkeypatch,
):
    """Gunicorn's workers each cache the states they stored: a put whose base another worker stored reads only
    the patches above a state this one holds, and still hashes only what it adds."""
    keyframe = store.save_state(chat(299))
    first = store.save_state(chat(300), base=store.save_state(chat(299) | {"n": 1}, base=keyframe.root).root)
    held = store.cache.snapshot()[first.root]
    second = store.save_state(chat(301), base=first.root)
    store.cache.clear()  # this worker holds the first state only: the other one stored the second
    store.cache.put(first.root, held)
    chains: list[int] = []
    fetch_chain = store._fetch_chain
    monkeypatch.setattr(store, "_fetch_chain", lambda *a, **k: chains.append(len(rows := fetch_chain(*a, **k))) or rows)
    base = store.load_shared(second.root)
    encoded: list[int] = []
    encode = jsoncodec.encode
    monkeypatch.setattr(jsoncodec, "encode", lambda value: encoded.append(len((result := encode(value))[0])) or result)
    built = {**base, "messages": [*base["messages"], *chat(302)["messages"][301:]], "progress": {"step": 302}}
    saved = store.save_state(built, base=second.root)
    assert chains == [2]  # the second state's patch and the first state, not the patches below down to the keyframe
    assert sum(encoded) < 5_000 < saved.raw_bytes // 20
    assert saved.state_hash == store.state_digest(chat(302))


def test_a_whole_state_of_new_objects_hashes_only_the_items_it_adds(monkeypatch):
    """An agent sends its whole state each time (over HTTP: parsed anew): its list items are new objects, yet
    equal in canonical JSON to the ones stored, so only the new items are hashed (and the walk does not compare the
    others item by item)."""
    first = store.save_state(chat(300))
    hashed: list[int] = []
    digest = digests.digest
    monkeypatch.setattr(digests, "digest", lambda data: hashed.append(len(data)) or digest(data))
    saved = store.save_state(jsoncodec.loads(canonical(chat(302))), base=first.root)
    assert sum(hashed) < 5_000 < saved.raw_bytes // 20  # two messages, the progress (and the patch's node)
    assert saved.state_hash == store.state_digest(chat(302))
    assert store.load_state(saved.root) == chat(302)


@pytest.mark.parametrize(
    "change",
    [
        lambda messages: messages[10].update(id=1),  # an item changed in place: the same list object
        lambda messages: messages[10].update(n=True),  # `==` cannot tell 1 from True, nor 1.0: the bytes can
        lambda messages: messages[10].update(n=1.0),
        lambda messages: messages.insert(0, {"type": "human"}),
        lambda messages: messages.pop(0),
    ],
)
def test_a_whole_state_whose_old_items_changed_is_stored_exactly(change):
    state = chat(300)
    state["messages"][10]["n"] = 1
    first = store.save_state(state)
    change(state["messages"])  # the agent's own objects, changed in place since it sent them
    state["messages"].append({"type": "ai", "content": "new"})
    saved = store.save_state(state, base=first.root)
    assert saved.state_hash == store.state_digest(jsoncodec.loads(canonical(state))) != first.state_hash
    store.cache.clear()
    assert canonical(store.load_state(saved.root)) == canonical(state)


def test_a_whole_state_after_another_encodes_only_the_callers_side(monkeypatch):
    """The lists a caller's state was told by are kept encoded with the state stored (its newest, not the one before
    it): the next whole state of new objects encodes only its own lists, not the stored ones again."""
    first = store.save_state(chat(300))
    second = store.save_state(jsoncodec.loads(canonical(chat(301))), base=first.root)
    held = store.cache.snapshot()
    assert held[second.root].parts["messages"].encoded == canonical(chat(301)["messages"])
    assert held[first.root].parts["messages"].encoded is None  # released: one copy a chain
    encoded = lists_encoded(monkeypatch)
    saved = store.save_state(jsoncodec.loads(canonical(chat(303))), base=second.root)
    assert encoded == [303]  # the caller's messages, once; the stored 301 were not encoded again
    assert saved.state_hash == store.state_digest(chat(303))


def _told_then_stored_elsewhere(n: int) -> tuple[store.Saved, store.Saved]:
    """A caller's whole state told and held here, then the next one stored by another worker (this one holds the
    first only, its lists' canonical bytes with it)."""
    first = store.save_state(chat(n - 1))
    told = store.save_state(jsoncodec.loads(canonical(chat(n))), base=first.root)
    held = store.cache.snapshot()[told.root]
    assert held.parts["messages"].encoded is not None
    elsewhere = store.save_state(jsoncodec.loads(canonical(chat(n + 1))), base=told.root)
    store.cache.clear()
    store.cache.put(told.root, held)
    return told, elsewhere


def test_a_whole_state_on_a_head_another_worker_stored_encodes_only_the_callers_side(monkeypatch):
    """Behind two workers a create often finds its head stored by the other one and replays it from a state it
    holds: the bytes the caller's last state left there grow by the replayed items, so the caller's list
    is again the only one encoded (it was encoded on both sides), and the older state gives its copy up."""
    told, elsewhere = _told_then_stored_elsewhere(300)
    encoded = lists_encoded(monkeypatch)
    saved = store.save_state(jsoncodec.loads(canonical(chat(303))), base=elsewhere.root)
    assert encoded == [303]  # the caller's messages; not the replayed 301 as well
    assert saved.state_hash == store.state_digest(chat(303))
    held = store.cache.snapshot()
    assert held[saved.root].parts["messages"].encoded == canonical(chat(303)["messages"])
    assert held[elsewhere.root].parts["messages"].encoded is None
    assert held[told.root].parts["messages"].encoded is None  # one copy a chain, as before
    store.cache.clear()
    assert canonical(store.load_state(saved.root)) == canonical(chat(303))


def test_a_state_read_and_not_kept_leaves_the_bytes_where_the_next_create_finds_them(monkeypatch):
    """A read that does not cache what it replays (`load_state`) must not take the bytes from the state it replayed
    from: the create that follows replays the head again and needs them there."""
    told, elsewhere = _told_then_stored_elsewhere(300)
    assert store.load_state(elsewhere.root) == chat(301)
    assert store.cache.snapshot()[told.root].parts["messages"].encoded is not None
    encoded = lists_encoded(monkeypatch)
    store.save_state(jsoncodec.loads(canonical(chat(303))), base=elsewhere.root)
    assert encoded == [303]


@pytest.mark.parametrize(
    "change",
    [
        lambda messages: messages[10].update(id=1),
        lambda messages: messages[10].update(content=True),
        lambda messages: messages.insert(0, {"type": "human"}),
        lambda messages: messages.pop(),  # fewer items than the replayed head: nothing of it is kept
    ],
)
def test_a_whole_state_on_a_head_another_worker_stored_is_stored_exactly_when_old_items_changed(change):
    _, elsewhere = _told_then_stored_elsewhere(300)
    state = jsoncodec.loads(canonical(chat(302)))
    change(state["messages"])
    saved = store.save_state(state, base=elsewhere.root)
    assert saved.state_hash == store.state_digest(jsoncodec.loads(canonical(state)))
    store.cache.clear()
    assert canonical(store.load_state(saved.root)) == canonical(state)


@HYPOTHESIS
@given(before=st.lists(json_values, max_size=8), after=st.lists(json_values, max_size=8))
def test_a_lists_canonical_json_grows_by_its_new_items(before, after):
    known, big = jsoncodec.encode(before)
    new = [jsoncodec.encode(item) for item in after]
    if big or any(item_big for _, item_big in new):
        return  # the standard library's encoding: never grown (`_part` encodes such lists anew)
    assert digests._grown(known, [encoded for encoded, _ in new]) == canonical(before + after)


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (["a", 12], ["a", 123, 4]),  # a number the kept bytes end in is no prefix of a longer one
        (["a", 12], ["a", 12.0, 4]),
        (["a", True], ["a", 1, 4]),
        ([{"a": "x"}], [{"a": "x", "b": 1}, 4]),
        (["a", "b"], ["a"]),
        (["a", "b"], ["a", "b"]),
    ],
)
def test_a_list_is_told_by_its_kept_bytes_exactly(before, after):
    first = store.save_state({"l": before, "n": 0})
    told = store.save_state(jsoncodec.loads(canonical({"l": before, "n": 1})), base=first.root)
    assert store.cache.snapshot()[told.root].parts["l"].encoded == canonical(before)
    saved = store.save_state({"l": after, "n": 2}, base=told.root)
    assert saved.state_hash == store.state_digest(jsoncodec.loads(canonical({"l": after, "n": 2})))
    store.cache.clear()
    assert canonical(store.load_state(saved.root)) == canonical({"l": after, "n": 2})


@pytest.mark.parametrize(
    "other",
    [
        {"messages": [["a", "b"]], "n": 1},  # a list's items are not its value's pieces
        {"messages": ["a", "b"], "n": 1.0},
        {"messages": ["a"], "n": 1, "": None},
    ],
)
def test_different_states_have_different_digests(other):
    assert digests.state_digest({"messages": ["a", "b"], "n": 1}) != digests.state_digest(other)


def test_the_upgrade_gives_stored_checkpoints_the_digests_new_ones_get(make_session):
    """Equal states must keep equal digests across the upgrade: drift's stalled detector and idempotent retries
    compare a new checkpoint's digest with stored ones."""
    from importlib import import_module

    from django.apps import apps

    from checkpoints.models import Checkpoint
    from checkpoints.services import CheckpointInput, create_checkpoint

    session = make_session()
    create_checkpoint(session, CheckpointInput(state=chat(3)))
    Checkpoint.objects.update(state_hash=digests.digest(canonical(chat(3))))  # as the previous release hashed
    import_module("checkpoints.migrations.0028_state_hash_by_part").rehash(apps, None)
    assert bytes(Checkpoint.objects.get().state_hash) == store.state_digest(chat(3))
