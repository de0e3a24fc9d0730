"""Work across sessions in batches, each in a savepoint: one session's failure is recorded, the rest goes on.

A job (or an import) hands its sessions to `each_batch`; when a batch fails it runs it again in halves, down to
one session, whose failure is recorded in `Failures` while the work goes on with the rest. A run with failures
ends `succeeded_with_errors`; its result lists the first failures (`errors`: [{session, id, error}]), their
count (`error_count`) and the sessions done. A time limit or a lost database stops the whole run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any, TypeVar

from billiard.exceptions import SoftTimeLimitExceeded
from django.db import InterfaceError, OperationalError, connection, transaction

from ..humanize import short_value
from ..models import AgentSession

logger = logging.getLogger(__name__)

ERRORS_KEPT = 20  # failures listed in a run's result; `error_count` counts every one
ERROR_CHARS = 500

T = TypeVar("T")
R = TypeVar("R")


def session_label(pk: int) -> str:
    """`project/external_id`, read from text columns only: the session's other columns may be what broke."""
    row = AgentSession.objects.filter(pk=pk).values_list("project__slug", "external_id").first()
    return f"{row[0]}/{row[1]}" if row else f"session #{pk}"


def describe_error(exc: BaseException) -> str:
    return short_value(f"{type(exc).__name__}: {exc}".strip(), ERROR_CHARS)


def concerns_the_whole_run(exc: BaseException) -> bool:
    """A time limit or a lost database is no fault of one session: the run stops (and is retried)."""
    if isinstance(exc, SoftTimeLimitExceeded | InterfaceError):
        return True
    return isinstance(exc, OperationalError) and not connection.is_usable()


@dataclass
class Failures:
    """Which units (sessions, or watched folders) a job finished, and which failed with what (the first few)."""

    unit: str = "session"
    label: Callable[[int], str] = session_label
    errors: list[dict[str, Any]] = field(default_factory=list)
    _done: set[int] = field(default_factory=set)
    _failed: set[int] = field(default_factory=set)

    @property
    def count(self) -> int:
        return len(self._failed)

    @property
    def done(self) -> int:
        return len(self._done - self._failed)

    def failed(self, pk: int) -> bool:
        return pk in self._failed

    def succeeded(self, pks: Iterable[int]) -> None:
        self._done.update(pks)

    def record(self, pk: int, exc: Exception) -> None:
        """Note that unit `pk` failed (logged with its traceback); an error that concerns the whole run re-raises."""
        if concerns_the_whole_run(exc):
            raise exc
        logger.error("%s #%s failed; the job goes on with the others", self.unit, pk, exc_info=exc)
        if pk in self._failed:
            return
        self._failed.add(pk)
        if len(self.errors) < ERRORS_KEPT:
            self.errors.append({self.unit: self.label(pk), "id": pk, "error": describe_error(exc)})

    def as_dict(self) -> dict[str, Any]:
        return {f"{self.unit}s_done": self.done, "errors": list(self.errors), "error_count": self.count}


@contextmanager
def contained(pk: int, failures: Failures) -> Iterator[None]:
    """Run the block for unit `pk`, recording its failure in `failures` instead of raising it.

    Inside a transaction the block gets a savepoint, so a failed statement cannot poison it; outside one every
    statement commits on its own and there is nothing to poison (a long import must not become one transaction).
    """
    try:
        with savepoint():
            yield
    except Exception as exc:
        failures.record(pk, exc)
    else:
        failures.succeeded([pk])


def savepoint() -> AbstractContextManager[Any]:
    """A savepoint inside a transaction (a failed statement there would poison it); nothing outside one."""
    return transaction.atomic() if connection.in_atomic_block else nullcontext()


def each_batch(
    items: Iterable[T],
    work: Callable[[list[T]], R],
    failures: Failures,
    *,
    size: int,
    key: Callable[[T], Any] = lambda item: item,  # each item's unit id, as `failures` names it
) -> Iterator[R]:
    """`work` over `items` in batches of `size`, each batch in a savepoint; yields each batch's result.

    A batch that raises is rolled back (so a failed statement cannot poison the connection) and run again in
    halves, down to single items; an item that still fails is recorded in `failures` and skipped. The work must
    be idempotent: a retried half repeats what the failed batch had done before it was rolled back.
    """
    batch: list[T] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield from _isolated(batch, work, failures, key)
            batch = []
    if batch:
        yield from _isolated(batch, work, failures, key)


def _isolated(batch: list[T], work: Callable[[list[T]], R], failures: Failures, key: Callable[[T], Any]) -> Iterator[R]:
    try:
        with transaction.atomic():
            result = work(batch)
    except Exception as exc:
        if len(batch) == 1:
            failures.record(key(batch[0]), exc)
            return
        if concerns_the_whole_run(exc):
            raise
        half = len(batch) // 2
        yield from _isolated(batch[:half], work, failures, key)
        yield from _isolated(batch[half:], work, failures, key)
        return
    failures.succeeded(key(item) for item in batch)
    yield result


@dataclass
class ImportReport:
    """What an import run (file_import, langgraph_import) reports: a failing session is one of its lines."""

    imported: int = 0
    skipped: int = 0  # already stored, identical
    errors: list[dict[str, str]] = field(default_factory=list)
    sessions: list[str] = field(default_factory=list)
    failed_sessions: list[str] = field(default_factory=list)  # whose stored rows broke the import (also in errors)
    notes: list[str] = field(default_factory=list)  # what the operator should know that is no error

    def as_dict(self) -> dict[str, Any]:
        found = {"imported": self.imported, "skipped": self.skipped, "errors": self.errors, "sessions": self.sessions}
        return found | ({"notes": self.notes} if self.notes else {})

    def problem(self, path: Any, error: str) -> None:
        self.errors.append({"path": str(path), "error": error})

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def session_failed(self, external_id: str, exc: Exception, *, step: str) -> None:
        if concerns_the_whole_run(exc):
            raise exc
        self.problem(f"session {external_id}", f"not {step}: {describe_error(exc)}")
        if external_id not in self.failed_sessions:
            self.failed_sessions.append(external_id)
