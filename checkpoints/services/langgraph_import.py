"""Importing LangGraph history (a SqliteSaver file, a PostgresSaver database) through the LangGraph service.

Each thread goes in through `langgraph.put_checkpoint` and `put_writes`, as a live agent's puts would: one
session per thread, with its namespaces, parents, metadata and pending writes, `CHUNK` checkpoints (or tasks'
writes) per transaction: in one transaction for a whole thread every put was slower than the one before
(PostgreSQL keeps every version of the session row a transaction writes until it ends: 37 ms a checkpoint at
1,600, 213 ms at 16,000). A refused checkpoint (or task's writes) is a report line and the others go in; a
thread that breaks off keeps what went in and is reported, and importing again adds the rest. Importing again
stores nothing: put_checkpoint keeps an identical repeat as it is (counted skipped), and put_writes keeps the
writes already stored.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from itertools import chain, groupby, islice
from typing import Any

from django.db import transaction

from ..audit import Actor, CheckpointError
from ..models import Project
from ..sources.formats.base import Problem
from ..sources.formats.langgraph import Saved, Thread, Write, where
from . import langgraph
from .batches import ImportReport

CHUNK = 500  # checkpoints (or tasks' writes) per transaction


def import_threads(
    threads: Iterable[Thread | Problem],
    *,
    source: str,
    project_of: Callable[[], Project],
    actor: Actor,
    report: ImportReport,
    progress: Callable[[ImportReport], None] | None = None,
) -> None:
    """Put every thread's checkpoints and writes into the project `project_of` gives (asked once a thread has
    checkpoints: an import finding none creates no project), counting into `report`; `source` names the file or
    database in report lines."""
    for thread in threads:
        if isinstance(thread, Problem):
            report.problem(thread.path, thread.error)
            continue
        external_id = langgraph.thread_external_id(thread.thread_id)
        try:
            first = _first_readable(thread.checkpoints, report)
        except Exception as exc:  # the source broke off: the other threads may still read
            report.session_failed(external_id, exc, step="imported")
            continue
        if first is None:
            continue
        project = project_of()  # outside the thread's transactions: a failing thread must not take it along
        try:
            _put_thread(
                project,
                thread,
                chain([first], thread.checkpoints),
                source=source,
                actor=actor,
                report=report,
                progress=progress,
            )
        except Exception as exc:  # the thread's stored rows broke, not the source: the other threads go on
            report.session_failed(external_id, exc, step="imported")
            continue
        if external_id not in report.sessions:
            report.sessions.append(external_id)


def _first_readable(checkpoints: Iterator[Saved | Problem], report: ImportReport) -> Saved | None:
    """The thread's first checkpoint that reads, reporting those before it that do not; None when none reads."""
    for item in checkpoints:
        if isinstance(item, Problem):
            report.problem(item.path, item.error)
        else:
            return item
    return None


def _put_thread(
    project: Project,
    thread: Thread,
    checkpoints: Iterator[Saved | Problem],
    *,
    source: str,
    actor: Actor,
    report: ImportReport,
    progress: Callable[[ImportReport], None] | None,
) -> None:
    """Checkpoints oldest id first (parents before children), then the pending writes, task by task; counted
    into the report as each chunk commits."""
    stored: set[tuple[str, str]] = set()
    while chunk := list(islice(checkpoints, CHUNK)):
        with transaction.atomic():
            imported, skipped = _put_checkpoints(
                project, thread, chunk, stored, source=source, actor=actor, report=report
            )
        report.imported += imported
        report.skipped += skipped
        if progress:
            progress(report)
    tasks = ((key, list(writes)) for key, writes in groupby(thread.writes, key=_task))
    while chunk_of_tasks := list(islice(tasks, CHUNK)):
        with transaction.atomic():
            _put_writes(project, thread, chunk_of_tasks, stored, source=source, actor=actor, report=report)


def _put_checkpoints(
    project: Project,
    thread: Thread,
    chunk: list[Saved | Problem],
    stored: set[tuple[str, str]],
    *,
    source: str,
    actor: Actor,
    report: ImportReport,
) -> tuple[int, int]:
    imported = skipped = 0
    for saved in chunk:
        if isinstance(saved, Problem):
            report.problem(saved.path, saved.error)
            continue
        item = langgraph.PutInput(
            thread_id=saved.thread_id,
            checkpoint_ns=saved.checkpoint_ns,
            checkpoint={**saved.header, "id": saved.checkpoint_id},
            metadata=saved.metadata,
            values=saved.values,
            parent_checkpoint_id=saved.parent_checkpoint_id,
        )
        try:
            _, created = langgraph.put_checkpoint(project, item, actor=actor)  # its own savepoint
        except CheckpointError as exc:
            place = where(source, thread.thread_id, saved.checkpoint_ns, saved.checkpoint_id)
            report.problem(place, f"not imported: {exc}")
            continue
        stored.add((saved.checkpoint_ns, saved.checkpoint_id))
        imported += created
        skipped += not created
    return imported, skipped


def _put_writes(
    project: Project,
    thread: Thread,
    tasks: list[tuple[tuple[str, str, str, str], list[Write]]],
    stored: set[tuple[str, str]],
    *,
    source: str,
    actor: Actor,
    report: ImportReport,
) -> None:
    for (ns, checkpoint_id, task_id, task_path), writes in tasks:
        place = where(source, thread.thread_id, ns, checkpoint_id)
        if (ns, checkpoint_id) not in stored:
            report.problem(place, f"pending writes of task {task_id} skipped: their checkpoint was not imported")
            continue
        try:
            langgraph.put_writes(
                project,
                actor=actor,
                thread_id=thread.thread_id,
                checkpoint_ns=ns,
                checkpoint_id=checkpoint_id,
                task_id=task_id,
                task_path=task_path,
                writes=_in_put_order(writes),
            )
        except CheckpointError as exc:
            report.problem(place, f"pending writes of task {task_id} not imported: {exc}")


def _task(write: Write) -> tuple[str, str, str, str]:
    return write.checkpoint_ns, write.checkpoint_id, write.task_id, write.task_path


def _in_put_order(writes: list[Write]) -> list[tuple[str, Any]]:
    """A task's writes as one put_writes call: the ordinary channels first, by idx, so that each lands on its idx
    again (put_writes numbers them by position); the special channels' slots come from their names."""
    ordinary = sorted((w for w in writes if w.idx >= 0), key=lambda w: w.idx)
    special = sorted((w for w in writes if w.idx < 0), key=lambda w: w.idx)
    return [(w.channel, w.value) for w in ordinary + special]
