"""CheckpointClient against the live server through a proxy that loses answers or says 503: a retried write
is stored once, waits are bounded and follow Retry-After, and a write the server cannot deduplicate is never
sent twice."""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from checkpoint_console import client as client_module
from checkpoints.client import CheckpointAPIError, CheckpointClient
from checkpoints.models import AgentSession, Checkpoint
from tests.kits.fault_proxy import LOSE_ANSWER, UNAVAILABLE, FaultProxy

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def cp(proxy, token_secret) -> CheckpointClient:
    client = CheckpointClient(proxy.url, token_secret, timeout=10, backoff=0.05)
    client.create_session("run-1", agent="agent-7")
    proxy.seen.clear()
    return client


def posts(proxy: FaultProxy, path: str) -> list[Any]:
    return [seen.body for seen in proxy.seen if seen.method == "POST" and seen.path == f"/api/v1{path}"]


def test_a_checkpoint_whose_answer_was_lost_is_sent_again_with_its_key_and_stored_once(cp, proxy):
    proxy.plan = [LOSE_ANSWER]
    created = cp.create("run-1", {"n": 1}, name="step")
    first, retry = posts(proxy, "/sessions/run-1/checkpoints")
    assert first["idempotency_key"] and first["idempotency_key"] == retry["idempotency_key"]
    assert Checkpoint.objects.count() == 1
    assert created["id"] == Checkpoint.objects.get().pk and created["seq"] == 1


def test_a_batch_whose_answer_was_lost_is_stored_once(cp, proxy):
    proxy.plan = [LOSE_ANSWER, LOSE_ANSWER]
    result = cp.create_batch([{"session": "run-1", "state": {"n": n}} for n in range(3)])
    assert len(posts(proxy, "/checkpoints/batch")) == 3
    assert Checkpoint.objects.count() == 3
    assert (result["created"], result["existing"]) == (0, 3)  # the third send found the first's checkpoints


def test_every_checkpoint_write_carries_its_own_key(cp, proxy):
    cp.create("run-1", {"n": 1})
    cp.create("run-1", {"n": 1})
    cp.create_batch([{"session": "run-1", "state": {"n": 2}}, {"session": "run-1", "state": {"n": 2}}])
    keys = [body["idempotency_key"] for body in posts(proxy, "/sessions/run-1/checkpoints")]
    keys += [item["idempotency_key"] for body in posts(proxy, "/checkpoints/batch") for item in body["checkpoints"]]
    assert len(keys) == len(set(keys)) == 4 and all(keys)
    assert Checkpoint.objects.count() == 4  # two identical writes are two checkpoints, as without keys


def test_a_key_given_by_the_caller_is_the_one_sent(cp, proxy):
    cp.create("run-1", {"n": 1}, idempotency_key="step-1")
    assert posts(proxy, "/sessions/run-1/checkpoints")[0]["idempotency_key"] == "step-1"


def test_a_503_is_retried_after_the_servers_retry_after(cp, proxy):
    proxy.plan, proxy.retry_after = [UNAVAILABLE], "1"
    started = time.monotonic()
    cp.create("run-1", {"n": 1})
    assert time.monotonic() - started >= 1
    assert len(posts(proxy, "/sessions/run-1/checkpoints")) == 2
    assert Checkpoint.objects.count() == 1


def test_retries_are_bounded_and_the_last_answer_is_raised(cp, proxy):
    cp.retries = 3
    proxy.plan = [UNAVAILABLE] * 10
    with pytest.raises(CheckpointAPIError) as caught:
        cp.create("run-1", {"n": 1})
    assert caught.value.status == 503 and caught.value.detail == "try again later"
    assert len(posts(proxy, "/sessions/run-1/checkpoints")) == 4  # the first and three retries
    assert Checkpoint.objects.count() == 0


def test_a_long_retry_after_is_capped_at_max_wait(cp, proxy):
    cp.max_wait = 0.2
    proxy.plan, proxy.retry_after = [UNAVAILABLE], "3600"
    started = time.monotonic()
    cp.create("run-1", {"n": 1})
    assert time.monotonic() - started < 5


def test_a_fork_whose_answer_was_lost_is_not_sent_again(cp, proxy):
    """A fork has no idempotency key: sending it again would make a second session."""
    checkpoint = cp.create("run-1", {"n": 1})
    proxy.plan = [LOSE_ANSWER, UNAVAILABLE]
    with pytest.raises(CheckpointAPIError) as lost:
        cp.fork(checkpoint["id"], title="try 2")
    assert lost.value.status == 0
    with pytest.raises(CheckpointAPIError) as unavailable:
        cp.fork(checkpoint["id"], title="try 3")
    assert unavailable.value.status == 503
    assert len(posts(proxy, f"/checkpoints/{checkpoint['id']}/fork")) == 2
    assert AgentSession.objects.count() == 2  # run-1 and the one fork the server carried out


def test_a_refused_connection_is_retried_even_for_a_fork(token_secret, live_server):
    """Refused: the request never reached a server, so sending it again cannot repeat it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = CheckpointClient(f"http://127.0.0.1:{port}", token_secret, timeout=2, retries=2, backoff=0.01)
    started = time.monotonic()
    with pytest.raises(CheckpointAPIError) as caught:
        client.fork(1)
    assert caught.value.status == 0 and isinstance(caught.value.__cause__.reason, ConnectionRefusedError)
    assert time.monotonic() - started < 2


def test_a_4xx_is_never_retried(cp, proxy):
    with pytest.raises(CheckpointAPIError) as caught:
        cp.create("no-such-session", {"n": 1})
    assert caught.value.status == 404
    assert len(posts(proxy, "/sessions/no-such-session/checkpoints")) == 1


@given(seconds=st.integers(min_value=0, max_value=10**6))
def test_retry_after_in_seconds_or_as_an_http_date_is_read(seconds):
    from datetime import UTC, datetime, timedelta
    from email.utils import format_datetime

    assert client_module._retry_after(str(seconds)) == seconds
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=seconds), usegmt=True)
    assert seconds - 2 <= client_module._retry_after(when) <= seconds + 1


@given(value=st.text(max_size=40) | st.sampled_from(["²", "١٢", "1.5", "-1", " 7 ", "Fri, 31 Feb 2026 00:00:00 GMT"]))
def test_a_retry_after_that_is_neither_is_ignored_not_fatal(value):
    waited = client_module._retry_after(value)
    assert waited is None or waited >= 0
