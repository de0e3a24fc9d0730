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


class _Item:
    """What the conftest's ordering reads of a collected test: its node id, markers and fixtures."""

    def __init__(self, nodeid: str, *, transaction: bool = False, shared: bool = False) -> None:
        self.nodeid = self.name = nodeid
        self.parent = None
        self.fixturenames = ["db"]
        self._marker = pytest.mark.django_db(transaction=True).mark if transaction else pytest.mark.django_db.mark
        scope = "module" if shared else "function"
        definition = type("Definition", (), {"baseid": "tests/jobs", "scope": scope})()
        self._fixtureinfo = type("Info", (), {"name2fixturedefs": {"world": [definition]}})()

    def get_closest_marker(self, name: str) -> pytest.Mark | None:
        return self._marker if name == "django_db" else None


def test_a_module_run_alone_keeps_its_shared_tests_before_its_transactional_ones():
    """`pytest tests/jobs/test_retention.py` alone: one run of the module holds both kinds, as pytest-django
    orders them; a test of a module-shared world moved behind the transactional tests would find roles and
    schedules flushed (`in_collection_order` failed it)."""
    from tests.conftest import pytest_collection_modifyitems, transactional

    items = [
        _Item("m.py::plain"),
        _Item("m.py::shared", shared=True),
        _Item("m.py::committed", transaction=True),
        _Item("m.py::committed_shared", transaction=True, shared=True),
    ]
    pytest_collection_modifyitems(None, items)  # type: ignore[arg-type]
    assert [item.nodeid for item in items] == [
        "m.py::plain",
        "m.py::shared",
        "m.py::committed",
        "m.py::committed_shared",
    ]
    kinds = [transactional(item) for item in items]  # type: ignore[arg-type]
    assert kinds == sorted(kinds)


def test_a_modules_transactional_tests_start_outside_its_shared_rows_transaction(django_db_setup, django_db_blocker):
    """Run alone, a module's transactional tests follow its shared tests while the module's shared rows are still
    held in their open transaction (pytest keeps a module's fixtures until its last test): they would commit
    nothing, and their flush would empty the shared rows. The first one rolls the shared rows back."""
    from django.db import connection

    from tests.conftest import OPEN_SHARED, pytest_runtest_setup, shared_rows

    with shared_rows(django_db_blocker):
        assert connection.in_atomic_block
        pytest_runtest_setup(_Item("m.py::plain"))  # type: ignore[arg-type]
        assert connection.in_atomic_block  # a test in a transaction nests in the shared rows
        pytest_runtest_setup(_Item("m.py::committed", transaction=True))  # type: ignore[arg-type]
        assert not connection.in_atomic_block and OPEN_SHARED == []
    assert not connection.in_atomic_block  # the module's teardown has nothing left to roll back
