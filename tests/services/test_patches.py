"""Checkpoints sent as patches: what the client's differ makes, applied by the server, is exactly the new state,
stored faithfully, and the parent's cached state is never changed on the way."""

from __future__ import annotations

import copy
from itertools import count
from typing import Any

import jsonpatch
import pytest
from hypothesis import given
from hypothesis import strategies as st

from checkpoint_console.client import _apply_own, _copied, json_patch
from checkpoints import store
from checkpoints.services import BaseMoved, CheckpointInput, InvalidInput, create_checkpoint, upsert_session
from checkpoints.store.jsoncodec import canonical
from checkpoints.store.patching import PatchFailed, apply_patch
from tests.store.test_store import HYPOTHESIS, scalars

# keys a JSON Pointer must escape, beside ordinary ones
keys = st.sampled_from(["a", "b", "", "~", "/", "a/b", "~1", "0", "-"]) | st.text(max_size=8)
states = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=8) | st.dictionaries(keys, children, max_size=8),
    max_leaves=50,
)
_numbers = count()


@st.composite
def grown(draw: st.DrawFn) -> tuple[Any, Any]:
    """An agent's next state: the last one with messages appended, keys changed, added and removed."""
    before = draw(st.dictionaries(keys, states, max_size=6))
    before["messages"] = draw(st.lists(states, max_size=6))
    after = copy.deepcopy(before)
    after["messages"] += draw(st.lists(states, max_size=4))
    for key in draw(st.lists(st.sampled_from(sorted(before)), max_size=3)):
        if draw(st.booleans()):
            after.pop(key, None)
        else:
            after[key] = draw(states)
    after.update(draw(st.dictionaries(keys, states, max_size=2)))
    return before, after


def stored_through_a_patch(project: Any, before: Any, after: Any) -> Any:
    session, _ = upsert_session(project, external_id=f"run-{next(_numbers)}", agent="a")
    create_checkpoint(session, CheckpointInput(state=before))
    checkpoint, created = create_checkpoint(session, CheckpointInput(state=None, state_patch=json_patch(before, after)))
    assert created
    store.cache.clear()  # read back from the database, not from memory
    return store.load_state(bytes(checkpoint.root))


def pointers(document: Any, prefix: str = "") -> list[str]:
    """Every JSON Pointer into `document`, "" (the whole) first."""
    found = [prefix]
    if isinstance(document, dict):
        for key, value in document.items():
            found += pointers(value, f"{prefix}/{key.replace('~', '~0').replace('/', '~1')}")
    elif isinstance(document, list):
        for index, value in enumerate(document):
            found += pointers(value, f"{prefix}/{index}")
    return found


@st.composite
def rfc6902(draw: st.DrawFn) -> tuple[Any, list[dict[str, Any]]]:
    """A state and any RFC 6902 patch against it: every op, pointers mostly into what the state holds by then
    (new keys, indexes at and past the end, `-`), now and then one that does not apply."""
    document = draw(st.dictionaries(keys, states, max_size=5))
    current, operations = copy.deepcopy(document), []
    for _ in range(draw(st.integers(0, 8))):
        existing = pointers(current)
        parent = draw(st.sampled_from(existing))
        escaped = keys.map(lambda key: key.replace("~", "~0").replace("/", "~1"))
        last = draw(st.sampled_from(["-", "0", "1", "99"]) | escaped)
        target = draw(st.sampled_from([*existing, f"{parent}/{last}"]))
        op = draw(st.sampled_from(["add", "remove", "replace", "move", "copy", "test"]))
        operation: dict[str, Any] = {"op": op, "path": target}
        if op in ("add", "replace"):
            operation["value"] = draw(states)
        elif op == "test":
            operation["value"] = draw(st.just(jsonpatch.JsonPointer(target).resolve(current, None)) | states)
        elif op in ("move", "copy"):
            operation["from"] = draw(st.sampled_from(existing))
        operations.append(operation)
        try:
            current = jsonpatch.apply_patch(current, [operation])
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, TypeError, KeyError, IndexError):
            break  # a patch that does not apply ends here
    return document, operations


def applied_by_jsonpatch(document: Any, operations: list[dict[str, Any]]) -> Any:
    try:
        return jsonpatch.apply_patch(copy.deepcopy(document), copy.deepcopy(operations))
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, TypeError, KeyError, IndexError):
        return PatchFailed


@HYPOTHESIS
@given(case=rfc6902())
def test_any_rfc6902_patch_is_stored_as_jsonpatch_applies_it_or_refused_with_nothing_stored(project, case):
    """The server's copy-on-write application and what it stores equal the library applying the patch to a deep
    copy; a patch the library refuses is a 422 naming an operation, and nothing is stored."""
    document, operations = case
    expected = applied_by_jsonpatch(document, operations)
    session, _ = upsert_session(project, external_id=f"run-{next(_numbers)}", agent="a")
    create_checkpoint(session, CheckpointInput(state=document))
    patch = CheckpointInput(state=None, state_patch=copy.deepcopy(operations))
    if expected is PatchFailed:
        with pytest.raises(InvalidInput, match=r"operation \d+ \("):
            create_checkpoint(session, patch)
        assert session.checkpoints.count() == 1
        return
    checkpoint, _ = create_checkpoint(session, patch)
    store.cache.clear()
    assert canonical(store.load_state(bytes(checkpoint.root))) == canonical(expected)
    assert canonical(store.load_state(bytes(session.checkpoints.get(seq=1).root))) == canonical(document)


@HYPOTHESIS
@given(pair=grown())
def test_a_grown_state_sent_as_the_clients_patch_is_stored_exactly(project, pair):
    before, after = pair
    assert canonical(stored_through_a_patch(project, before, after)) == canonical(after)


@HYPOTHESIS
@given(before=states, after=states)
def test_any_state_patched_into_any_other_is_stored_exactly(project, before, after):
    assert canonical(stored_through_a_patch(project, before, after)) == canonical(after)


@HYPOTHESIS
@given(before=states, after=states)
def test_applying_a_patch_never_changes_its_base(db, before, after):
    base = copy.deepcopy(before)
    patched = apply_patch(base, json_patch(before, after))
    assert canonical(patched) == canonical(after)
    assert canonical(base) == canonical(before)


@HYPOTHESIS
@given(before=states, after=states)
def test_the_clients_copy_brought_up_to_date_by_its_patch_is_the_new_state_and_shares_nothing_with_it(before, after):
    """CheckpointClient remembers what it wrote by applying its own patch to its copy of the last state."""
    own = _copied(before)
    updated = _apply_own(own, _copied(json_patch(before, after)))
    assert canonical(updated) == canonical(after)
    if isinstance(after, dict | list) and after:
        mutable = after if isinstance(after, list) else list(after.values())
        snapshot = canonical(updated)
        for item in mutable:
            if isinstance(item, list):
                item.append("changed by the agent")
            elif isinstance(item, dict):
                item["changed by the agent"] = 1
        assert canonical(updated) == snapshot  # the agent's objects are not the client's


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (0.0, -0.0),
        ({"a": 1}, {"a": True}),
        ([1], [1.0]),
        ({"a/b~": 1}, {}),
        ({"a": [0, 1, "x"]}, {"a": [False, True, "x"]}),  # inside a list and an object, where the client's diff
        ({"a": {"b": 2, "c": None}}, {"a": {"b": 2.0, "c": None}}),  # compares strings and integers in place
        ({"a": [0.0]}, {"a": [-0.0]}),
        ({"a": [2**70]}, {"a": [2**70 + 1]}),
    ],
)
def test_values_python_calls_equal_and_json_does_not_are_patched(before, after):
    assert canonical(apply_patch(before, json_patch(before, after))) == canonical(after)


def test_a_failing_patch_names_its_operation_and_leaves_the_base_alone():
    base = {"a": [1, 2], "b": {"c": 1}}
    with pytest.raises(PatchFailed, match=r"operation 2 \(remove '/b/x'\)"):
        apply_patch(base, [{"op": "add", "path": "/a/-", "value": 3}, {"op": "remove", "path": "/b/c"},
                           {"op": "remove", "path": "/b/x"}])  # fmt: skip
    assert base == {"a": [1, 2], "b": {"c": 1}}


def test_a_patch_that_does_not_apply_stores_nothing_and_a_stale_generation_is_base_moved(project):
    session, _ = upsert_session(project, external_id="run", agent="a")
    create_checkpoint(session, CheckpointInput(state={"n": 1}))
    with pytest.raises(InvalidInput, match="operation 0"):
        create_checkpoint(session, CheckpointInput(state=None, state_patch=[{"op": "remove", "path": "/x"}]))
    stale = CheckpointInput(state=None, state_patch=[], restore_generation=3)
    with pytest.raises(BaseMoved) as moved:
        create_checkpoint(session, stale)
    assert (moved.value.head_seq, moved.value.restore_generation) == (1, 0)
    assert session.checkpoints.count() == 1


def test_a_restore_landing_while_a_patch_is_applied_wins_and_the_patch_stores_nothing(project):
    """The API read the session (head and generation) before an operator's restore committed: the check under the
    session's lock sees the restore, and the patch's transaction stores nothing."""
    from checkpoints.models import AgentSession
    from checkpoints.services import Actor, restore_checkpoint

    session, _ = upsert_session(project, external_id="race", agent="a")
    first, _ = create_checkpoint(session, CheckpointInput(state={"n": 1}))
    create_checkpoint(session, CheckpointInput(state={"n": 2}))
    read_before = AgentSession.objects.select_related("head").get(pk=session.pk)  # what the API request holds
    restored = restore_checkpoint(first, actor=Actor.system())
    patch = CheckpointInput(state=None, state_patch=[{"op": "replace", "path": "/n", "value": 3}], restore_generation=0)
    with pytest.raises(BaseMoved) as moved:
        create_checkpoint(read_before, patch)
    assert (moved.value.head_id, moved.value.restore_generation) == (restored.pk, 1)
    assert AgentSession.objects.get(pk=session.pk).head_id == restored.pk
    assert session.checkpoints.count() == 3
