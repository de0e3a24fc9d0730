"""`GET /checkpoints/{id}?base=&base_tag=`: a state read relative to one the reader holds (issue #23 item 3).
The patch is made against exactly the state the reader was shown (its tag): another token's view, a base of
another project or one the server does not know never yields a patch, and a hostile base is a 4xx, never a 5xx."""

from __future__ import annotations

import json
from typing import Any

import jsonpatch
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkpoints.models import Checkpoint

pytestmark = pytest.mark.django_db
GITHUB = "ghp_" + "Zq9Xw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe9Dc8"


def state_at(step: int, secret: str = "") -> dict[str, Any]:
    messages = [{"role": "assistant", "content": f"message {i} ✓"} for i in range(step)]
    return {"step": step, "messages": messages, "env": f"GH_TOKEN={secret}" if secret else "clean"}


@pytest.fixture
def steps(make_session, make_checkpoint) -> list[Checkpoint]:
    session = make_session("run-1")
    return [make_checkpoint(session, state_at(n)) for n in range(1, 6)]


def read(api, checkpoint_id: int, **query: Any) -> Any:
    response = api.get(f"/checkpoints/{checkpoint_id}", query)
    assert response.status_code == 200, response.content
    return response.json()


def test_a_read_against_a_base_sends_only_what_changed_and_patching_the_base_gives_the_state(api, steps):
    base = read(api, steps[2].pk)
    answer = read(api, steps[4].pk, base=steps[2].pk, base_tag=base["state_tag"])
    assert "state" not in answer
    assert answer["base"] == {"id": steps[2].pk, "tag": base["state_tag"]}
    assert sorted(op["op"] for op in answer["state_patch"]) == ["add", "add", "replace"]
    assert jsonpatch.apply_patch(base["state"], answer["state_patch"]) == state_at(5)
    assert answer["state_tag"] == read(api, steps[4].pk)["state_tag"] == bytes(steps[4].root).hex()


def test_a_tag_that_is_not_the_bases_gets_the_whole_state(api, steps):
    answer = read(api, steps[4].pk, base=steps[2].pk, base_tag="0" * 32)
    assert answer["state"] == state_at(5) and "state_patch" not in answer
    assert read(api, steps[4].pk, base=steps[2].pk)["state"] == state_at(5)  # no tag: nothing to patch against


@pytest.mark.parametrize("base", ["999999999", "0", "-1", "x", "1e3", "9" * 30])
def test_a_base_the_server_does_not_know_or_cannot_read_is_a_4xx(api, steps, base):
    response = api.get(f"/checkpoints/{steps[4].pk}", {"base": base, "base_tag": "ab"})
    assert response.status_code in (404, 422), response.content
    if response.status_code == 404:
        assert response.json()["detail"] == f"no base checkpoint {int(base)} in project 'acme'"


def test_another_projects_base_is_refused_as_if_unknown(api, steps, other_project, make_session, make_checkpoint):
    theirs = make_checkpoint(make_session("theirs", in_project=other_project), state_at(4))
    response = api.get(f"/checkpoints/{steps[4].pk}", {"base": theirs.pk, "base_tag": bytes(theirs.root).hex()})
    assert response.status_code == 404
    assert response.json() == {"detail": f"no base checkpoint {theirs.pk} in project 'acme'"}


def test_a_base_tag_longer_than_a_tag_is_refused(api, steps):
    response = api.get(f"/checkpoints/{steps[4].pk}", {"base": steps[2].pk, "base_tag": "a" * 65})
    assert response.status_code == 422


def test_a_read_only_tokens_masked_tag_gets_no_patch_for_the_write_token(
    api, read_only_api, make_session, make_checkpoint
):
    """A masked base is never a write token's base: patching it would leave the mask in the agent's state."""
    session = make_session("leaky")
    first = make_checkpoint(session, state_at(1, GITHUB))
    second = make_checkpoint(session, state_at(2, GITHUB))
    masked = read(read_only_api, first.pk)
    assert GITHUB not in masked["state"]["env"] and masked["state_tag"] != bytes(first.root).hex()
    relative = read(read_only_api, second.pk, base=first.pk, base_tag=masked["state_tag"])
    assert GITHUB not in str(relative["state_patch"])
    assert jsonpatch.apply_patch(masked["state"], relative["state_patch"]) == read(read_only_api, second.pk)["state"]
    by_writer = read(api, second.pk, base=first.pk, base_tag=masked["state_tag"])
    assert by_writer["state"] == state_at(2, GITHUB) and "state_patch" not in by_writer
    real = read(api, first.pk)
    assert read(read_only_api, second.pk, base=first.pk, base_tag=real["state_tag"]).get("state_patch") is None


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from([0.0, -0.0, 1.0, 1.5]) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from("ab/~c"), inner, max_size=3),
    max_leaves=12,
)


def same_json(a: Any, b: Any) -> bool:
    """Equal as JSON: 1, 1.0, true and -0.0 told apart, an object's keys in any order."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(states=st.lists(json_values, min_size=2, max_size=4))
def test_relative_reads_equal_whole_reads(api, make_session, make_checkpoint, states):
    session = make_session(f"h-{Checkpoint.objects.count()}")
    made = [make_checkpoint(session, state) for state in states]
    held = read(api, made[0].pk)
    for checkpoint in made[1:]:
        whole = read(api, checkpoint.pk)
        answer = read(api, checkpoint.pk, base=held["id"], base_tag=held["state_tag"])
        state = jsonpatch.apply_patch(held["state"], answer["state_patch"]) if "state_patch" in answer else None
        state = answer["state"] if state is None else state
        assert same_json(state, whole["state"])
        held = {**whole, "state": state}
