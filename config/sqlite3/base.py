"""SQLite as django-prometheus counts it, with two costs of a request taken out.

* Writers of one process queue on a lock instead of on SQLite's busy handler. A write transaction that finds the
  database locked (BEGIN IMMEDIATE) is retried by SQLite after sleeps of 1, 2, 5, 10, 15, 20, 25… ms: under
  `make run` a LangGraph step's put and put_writes reach the server together (LangGraph sends writes in the
  background), so one of them waited up to twice as long as the other's transaction lasted. Here the next writer
  of the process starts as soon as the previous one commits. SQLite's own locking stays the only guard: the lock
  only orders this process's writers (other processes — the worker, beat — still meet the busy handler), and a
  transaction that ends in any way releases it.
* django-prometheus builds its counting cursor class anew for every cursor (a class statement per query);
  here once per connection settings.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from django.db import OperationalError
from django_prometheus.db.backends.sqlite3 import base
from django_prometheus.db.common import ExportingCursorWrapper

DEFAULT_TIMEOUT = 5.0  # Python's sqlite3 default, when OPTIONS name no timeout

_writers: dict[str, threading.Lock] = {}  # database file → the lock its writers in this process take
_writers_guard = threading.Lock()


def _forget_writers() -> None:
    # A child forked while another thread held a lock would inherit it held, by a thread it does not have.
    global _writers_guard
    _writers.clear()
    _writers_guard = threading.Lock()


os.register_at_fork(after_in_child=_forget_writers)


def writer_lock(name: str) -> threading.Lock:
    with _writers_guard:
        return _writers.setdefault(name, threading.Lock())


class DatabaseWrapper(base.DatabaseWrapper):  # type: ignore[misc]  # django-prometheus has no types
    _cursor_classes: dict[tuple[Any, str, str], type] = {}
    _holds_writer: threading.Lock | None = None

    def create_cursor(self, name: str | None = None) -> Any:
        key = (self.CURSOR_CLASS, self.alias, self.vendor)
        cursor_class = self._cursor_classes.get(key)
        if cursor_class is None:
            cursor_class = self._cursor_classes.setdefault(key, ExportingCursorWrapper(*key))
        return self.connection.cursor(factory=cursor_class)

    def _start_transaction_under_autocommit(self) -> None:
        lock = writer_lock(str(self.settings_dict["NAME"]))
        timeout = float(self.settings_dict.get("OPTIONS", {}).get("timeout", DEFAULT_TIMEOUT))
        if not lock.acquire(timeout=timeout):
            raise OperationalError("database is locked")  # what SQLite says when its busy timeout runs out
        self._holds_writer = lock
        try:
            super()._start_transaction_under_autocommit()
        except BaseException:
            self._release_writer()
            raise

    def _commit(self) -> None:
        try:
            super()._commit()
        finally:
            self._release_writer()

    def _rollback(self) -> None:
        try:
            super()._rollback()
        finally:
            self._release_writer()

    def _close(self) -> None:
        try:
            super()._close()
        finally:
            self._release_writer()

    def _release_writer(self) -> None:
        lock, self._holds_writer = self._holds_writer, None
        if lock is not None:
            lock.release()
