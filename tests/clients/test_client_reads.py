"""CheckpointClient reads relative to a state it holds (issue #23 item 3): each caller gets its own object, a
relative read equals a whole one, a state read through one token is never the base of another token's read, and a
base the server no longer has is read around."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from checkpoint_console import client as client_module
from checkpoints.client import CheckpointClient
from checkpoints.models import AgentSession
from checkpoints.services import create_api_token
from checkpoints.store import diff

GITHUB = "ghp_" + "Zq9Xw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe9Dc8"


def state_at(step: int, secret: str = "") -> dict[str, Any]:
    messages = [{"role": "assistant", "content": f"message {i} ✓", "calls": [{"n": i}]} for i in range(step)]
    return {"step": step, "messages": messages, "env": f"GH_TOKEN={secret}" if secret else "clean"}


@pytest.fixture
def cp(proxy, token_secret) -> CheckpointClient:
    client = CheckpointClient(proxy.url, token_secret, timeout=10)
    client.create_session("run-1", agent="agent-7")
    return client


def reads(proxy) -> list[str]:
    return [seen.path for seen in proxy.seen if seen.method == "GET" and "/api/v1/checkpoints/" in seen.path]


@pytest.mark.django_db(transaction=True)
def test_a_caller_changing_a_returned_state_never_changes_the_next_read(cp, proxy):
    cp.create("run-1", state_at(3))
    first = cp.get_latest("run-1")["state"]
    first["messages"][0]["calls"].append({"n": "mine"})
    first["messages"].append({"role": "user"})
    second = cp.get_latest("run-1")["state"]  # relative to the first: the same content, its own objects
    assert second == state_at(3)
    second["messages"][1]["content"] = "changed"
    cp.create("run-1", state_at(4))
    third = cp.get_latest("run-1")["state"]
    assert third == state_at(4)
    assert third["messages"][0] is not second["messages"][0]
    assert "base=" in reads(proxy)[1] and "base=" in reads(proxy)[2]


@pytest.mark.django_db(transaction=True)
def test_reads_along_a_session_each_send_what_changed_and_equal_whole_reads(cp, proxy, live_server, token_secret):
    ids = [cp.create("run-1", state_at(step))["id"] for step in range(1, 8)]
    relative = [cp.get(checkpoint_id)["state"] for checkpoint_id in ids]
    whole = [CheckpointClient(live_server.url, token_secret).get(checkpoint_id)["state"] for checkpoint_id in ids]
    assert relative == whole == [state_at(step) for step in range(1, 8)]
    assert ["base=" in path for path in reads(proxy)] == [False] + [True] * 6


@pytest.mark.django_db(transaction=True)
def test_a_read_only_tokens_masked_state_is_never_the_base_of_a_write_tokens_read(
    cp, proxy, project, token_secret, make_checkpoint
):
    session = AgentSession.objects.get(external_id="run-1")
    first = make_checkpoint(session, state_at(1, GITHUB))
    second = make_checkpoint(session, state_at(2, GITHUB))
    viewer_secret = create_api_token(project, name="viewer", read_only=True)[1]
    shared = CheckpointClient(proxy.url, viewer_secret, timeout=10)
    assert GITHUB not in shared.get(first.pk)["state"]["env"]  # masked, held
    shared.token = token_secret  # the same client object, now with the agent's token
    assert shared.get(second.pk)["state"] == state_at(2, GITHUB)  # not the masked base patched
    assert "base=" not in reads(proxy)[-1]


@pytest.mark.django_db(transaction=True)
def test_a_base_the_server_no_longer_has_is_read_around(cp, proxy, make_session, make_checkpoint):
    gone = make_checkpoint(make_session("gone"), state_at(2))
    kept = cp.create("run-1", state_at(3))
    cp.get(gone.pk)
    AgentSession.objects.filter(external_id="gone").delete()  # retention or a deleted thread, meanwhile
    assert cp.get(kept["id"])["state"] == state_at(3)
    assert ["base=" in path for path in reads(proxy)] == [False, True, False]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from([0.0, -0.0, 1.5]) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.sampled_from(["a", "b", "/", "~", "0"]), inner),
    max_leaves=20,
)


def same_json(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


@settings(max_examples=400, deadline=None)
@given(states=st.lists(json_values, min_size=2, max_size=5))
def test_the_clients_patching_of_the_servers_patches_gives_each_state_and_keeps_the_base(states):
    held = json.loads(json.dumps(states[0]))
    for state in states[1:]:
        before = json.dumps(held, sort_keys=True)
        operations = json.loads(json.dumps(diff.json_patch(held, state)))  # as the wire carries them
        patched = client_module._apply_shared(held, operations)
        assert same_json(patched, state)
        assert json.dumps(held, sort_keys=True) == before  # the base stays as it was
        fresh = client_module._fresh(patched)
        assert same_json(fresh, state)
        held = patched
