"""CheckpointClient sends patches against the last state it wrote, falls back to the whole state, never writes
over an operator's restore (HeadMoved), and a patch whose answer was lost is stored once."""

from __future__ import annotations

from typing import Any

import pytest

from checkpoints.client import CheckpointClient, HeadMoved
from checkpoints.models import AgentSession, Checkpoint
from checkpoints.services import Actor, undo_restore
from tests.kits.fault_proxy import LOSE_ANSWER, UNAVAILABLE, FaultProxy

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def cp(proxy, token_secret) -> CheckpointClient:
    """A client that patches (the default), through the proxy, with a session to write to; the proxy saw it all."""
    client = CheckpointClient(proxy.url, token_secret, timeout=10, backoff=0.05)
    client.create_session("run-1", agent="agent-7")
    return client


def sent(proxy: FaultProxy) -> list[Any]:
    return [seen.body for seen in proxy.seen if seen.method == "POST" and seen.path.endswith("/run-1/checkpoints")]


SYSTEM = "You are a careful agent. " * 20  # what every state carries: a patch is smaller than the state


def state_at(step: int) -> dict[str, Any]:
    messages = [{"role": "assistant", "content": f"message {i} ✓"} for i in range(step)]
    return {"step": step, "system": SYSTEM, "messages": messages}


def test_after_the_first_state_only_what_changed_is_sent_and_stored_exactly(cp, proxy):
    for step in range(1, 6):
        cp.create("run-1", state_at(step), name="step")
    bodies = sent(proxy)
    assert "state" in bodies[0] and "state_patch" not in bodies[0]
    for body in bodies[1:]:
        assert "state" not in body
        assert body["state_patch"][-1] == {
            "op": "add",
            "path": "/messages/-",
            "value": body["state_patch"][-1]["value"],
        }
        assert body["restore_generation"] == 0
    assert bodies[2]["base"] == {"id": Checkpoint.objects.get(seq=2).pk}
    latest = cp.get_latest("run-1")
    assert latest is not None and latest["state"] == state_at(5)


def test_a_state_the_caller_changes_in_place_after_writing_is_diffed_against_what_was_written(cp, proxy):
    state = state_at(1)
    cp.create("run-1", state)
    state["messages"].append({"role": "user", "content": "more"})  # the agent's own object, changed in place
    cp.create("run-1", state)
    assert cp.get_latest("run-1")["state"] == state
    assert "state_patch" in sent(proxy)[1]


def test_a_large_patch_bigger_than_the_state_is_sent_as_the_state(cp, proxy):
    cp.create("run-1", {"items": list(range(5_000))})
    cp.create("run-1", {"items": list(range(1, 5_001))})  # every item shifted: the patch would be larger
    assert "state" in sent(proxy)[1]
    assert cp.get_latest("run-1")["state"] == {"items": list(range(1, 5_001))}
    cp.create("run-1", {"items": list(range(1, 5_001)), "more": 1})
    assert "state_patch" in sent(proxy)[2]


def test_after_an_operator_restore_the_client_raises_head_moved_and_resumes_from_it(cp, proxy, live_server):
    first = cp.create("run-1", state_at(1))
    cp.create("run-1", state_at(2))
    restored = cp.rollback_to(first["id"], reason="bad turn")  # the operator, from the console
    with pytest.raises(HeadMoved) as moved:
        cp.create("run-1", state_at(3))
    assert moved.value.head == {"id": restored["id"], "seq": restored["seq"]}
    assert moved.value.restore_generation == 1 and moved.value.status == 409
    assert Checkpoint.objects.count() == 3  # nothing written over the restore
    # the agent's loop: resume, go on from the operator's state
    resumed = cp.resume("run-1")
    assert resumed["state"] == state_at(1)
    state = resumed["state"]
    state["messages"].append({"role": "assistant", "content": "a better turn"})
    cp.create("run-1", state)
    assert "state_patch" in sent(proxy)[-1] and sent(proxy)[-1]["restore_generation"] == 1
    assert cp.get_latest("run-1")["state"] == state


def test_after_an_undo_the_client_raises_head_moved(cp):
    first = cp.create("run-1", state_at(1))
    cp.create("run-1", state_at(2))
    cp.rollback_to(first["id"])
    undo_restore(AgentSession.objects.get(), actor=Actor.system())
    with pytest.raises(HeadMoved) as moved:
        cp.create("run-1", state_at(4))
    assert moved.value.restore_generation == 2


@pytest.mark.parametrize("fault", [LOSE_ANSWER, UNAVAILABLE])
def test_a_patch_whose_answer_was_lost_is_stored_once_and_the_next_patches_it(cp, proxy, fault):
    cp.create("run-1", state_at(1))
    proxy.plan = [fault]
    created = cp.create("run-1", state_at(2))
    first, retry = sent(proxy)[1:3]
    assert first == retry and "state_patch" in first
    assert Checkpoint.objects.count() == 2 and created["seq"] == 2
    cp.create("run-1", state_at(3))  # against the retried one's id: no base_moved
    assert Checkpoint.objects.count() == 3
    assert cp.get_latest("run-1")["state"] == state_at(3)


def test_a_client_without_patches_sends_whole_states(proxy, token_secret):
    client = CheckpointClient(proxy.url, token_secret, patches=False)
    client.create_session("run-1", agent="a")
    client.create("run-1", state_at(1))
    client.create("run-1", state_at(2))
    assert all("state" in body for body in sent(proxy))
