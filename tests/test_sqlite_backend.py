"""`make run`'s SQLite backend (config/sqlite3): a process's writers queue on a lock, which every way a
transaction ends releases, and django-prometheus still counts the queries."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from django.db import OperationalError
from django.db.utils import ConnectionHandler
from django_prometheus.db import execute_total

from config.sqlite3.base import writer_lock


@pytest.fixture
def database(tmp_path: Path, django_db_blocker: Any) -> Iterator[ConnectionHandler]:
    """A file database on the backend, as settings.py configures it for `make run` (short timeout); each thread
    gets its own connection from the handler, as each of gunicorn's threads does."""
    name = str(tmp_path / "db.sqlite3")
    handler = ConnectionHandler(
        {
            "default": {
                "ENGINE": "config.sqlite3",
                "NAME": name,
                "OPTIONS": {"init_command": "PRAGMA journal_mode=WAL;", "transaction_mode": "IMMEDIATE", "timeout": 1},
            }
        }
    )
    with django_db_blocker.unblock():
        with handler["default"].cursor() as cursor:
            cursor.execute("CREATE TABLE steps (n integer)")
        yield handler
        handler.close_all()


@contextmanager
def atomic(connection: Any) -> Iterator[Any]:
    """What transaction.atomic does with an outermost block, for a connection outside `django.db.connections`."""
    connection.set_autocommit(False, force_begin_transaction_with_broken_autocommit=True)
    try:
        yield connection.cursor()
    except BaseException:
        connection.rollback()
        raise
    else:
        connection.commit()
    finally:
        connection.set_autocommit(True)


def held(handler: ConnectionHandler) -> bool:
    return writer_lock(handler["default"].settings_dict["NAME"]).locked()


def test_a_write_transaction_holds_the_lock_until_it_commits_or_rolls_back(database):
    connection = database["default"]
    with atomic(connection) as cursor:
        cursor.execute("INSERT INTO steps VALUES (1)")
        assert held(database)
    assert not held(database)
    with pytest.raises(ZeroDivisionError), atomic(connection) as cursor:
        cursor.execute("INSERT INTO steps VALUES (2)")
        1 / 0  # noqa: B018 - the failure inside the transaction
    assert not held(database)
    connection.set_autocommit(False, force_begin_transaction_with_broken_autocommit=True)
    assert held(database)
    connection.close()  # a connection closed mid-transaction (Django does after a failed rollback)
    assert not held(database)
    with database["default"].cursor() as cursor:
        cursor.execute("SELECT n FROM steps")
        assert cursor.fetchall() == [(1,)]


def test_a_second_writer_of_the_process_waits_for_the_first_and_then_writes(database):
    events: list[str] = []
    first_in = threading.Event()

    def first() -> None:
        with atomic(database["default"]) as cursor:
            cursor.execute("INSERT INTO steps VALUES (1)")
            first_in.set()
            time.sleep(0.2)
            events.append("first commits")
        database["default"].close()

    def second() -> None:
        first_in.wait()
        with atomic(database["default"]) as cursor:
            events.append("second begins")
            cursor.execute("INSERT INTO steps VALUES (2)")
        database["default"].close()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert events == ["first commits", "second begins"]
    with database["default"].cursor() as cursor:
        cursor.execute("SELECT n FROM steps ORDER BY n")
        assert cursor.fetchall() == [(1,), (2,)]


def test_a_writer_that_waits_past_the_timeout_gets_sqlites_error_and_leaves_the_lock_alone(database):
    lock = writer_lock(database["default"].settings_dict["NAME"])
    outcome: list[BaseException] = []

    def late() -> None:
        try:
            with atomic(database["default"]) as cursor:
                cursor.execute("INSERT INTO steps VALUES (3)")
        except OperationalError as exc:
            outcome.append(exc)
        finally:
            database["default"].close()

    with lock:  # another thread of the process in a long write transaction (1 s timeout here)
        waiting = threading.Thread(target=late)
        waiting.start()
        waiting.join(10)
        assert [str(exc) for exc in outcome] == ["database is locked"]
    assert not lock.locked()
    with atomic(database["default"]) as cursor:  # the lock works on
        cursor.execute("INSERT INTO steps VALUES (4)")


def test_queries_are_still_counted_with_one_cursor_class(database):
    counted = execute_total.labels("default", "sqlite")
    before = counted._value.get()  # noqa: SLF001 - prometheus_client's counter value
    connection = database["default"]
    cursors = [connection.cursor() for _ in range(3)]
    for cursor in cursors:
        cursor.execute("SELECT 1")
    assert counted._value.get() - before == 3  # noqa: SLF001
    assert len({type(cursor.cursor) for cursor in cursors}) == 1
