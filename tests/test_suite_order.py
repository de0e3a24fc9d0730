"""The suite's own scheduling under `make test` (pytest-xdist, `--dist load`): each worker empties only its own
Redis database, and the conftest's order reaches every worker."""

from __future__ import annotations

import pytest

from tests.conftest import worker_redis_url


@pytest.mark.parametrize(
    ("url", "worker", "expected"),
    [
        ("redis://127.0.0.1:6379/15", "gw0", "redis://127.0.0.1:6379/15"),
        ("redis://127.0.0.1:6379/15", "gw2", "redis://127.0.0.1:6379/13"),
        ("redis://127.0.0.1:6379/1", "gw2", "redis://127.0.0.1:6379/15"),
        ("redis://127.0.0.1:6379", "gw1", "redis://127.0.0.1:6379/15"),
        ("redis://:pw@127.0.0.1:6379/4?socket_timeout=1", "gw1", "redis://:pw@127.0.0.1:6379/3?socket_timeout=1"),
        ("redis://127.0.0.1:6379/4", None, "redis://127.0.0.1:6379/4"),
        ("redis://127.0.0.1:6379/4", "master", "redis://127.0.0.1:6379/4"),
    ],
)
def test_each_xdist_worker_takes_its_own_redis_database(url, worker, expected):
    assert worker_redis_url(url, worker) == expected
