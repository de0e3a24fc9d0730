"""What a LangGraph thread adds to its session: the checkpoints' own rows, their pending writes, deleted threads' tombstones."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from ..fields import SafeCharField, SafeJSONField, SafeTextField
from .projects import Project
from .sessions import AgentSession, Checkpoint


class LangGraphCheckpoint(models.Model):
    """What LangGraph knows of a checkpoint besides its state (the Checkpoint beside it holds the channel values):
    its id in the thread, its namespace, its header and its exact metadata.

    A put repeating an id makes a new Checkpoint (the console keeps the old one in its history); the old row stays
    with `current` False, so LangGraph reads only current rows.
    """

    console = models.OneToOneField(Checkpoint, on_delete=models.CASCADE, primary_key=True, related_name="langgraph")
    session = models.ForeignKey(AgentSession, on_delete=models.CASCADE, related_name="+", db_index=False)
    checkpoint_ns = SafeTextField(blank=True)
    checkpoint_id = SafeCharField(max_length=200)
    parent_checkpoint_id = SafeCharField(max_length=200, blank=True)
    current = models.BooleanField(default=True)
    header = models.BinaryField(help_text="zstd'd JSON of LangGraph's checkpoint without id and channel values.")
    metadata = SafeJSONField(default=dict, blank=True, help_text="LangGraph's metadata as put (typed JSON).")
    run_id = SafeCharField(max_length=200, blank=True)

    class Meta:
        verbose_name = "LangGraph checkpoint"
        constraints = [
            # one current checkpoint per id; also serves "latest of a thread+ns" and `before` paging
            models.UniqueConstraint(
                fields=["session", "checkpoint_ns", "checkpoint_id"],
                condition=Q(current=True),
                name="langgraph_checkpoint_current_id",
            ),
        ]
        indexes = [
            # delete_for_runs
            models.Index(fields=["run_id"], condition=~Q(run_id=""), name="langgraph_checkpoint_run"),
        ]

    def __str__(self) -> str:
        return f"{self.checkpoint_ns}:{self.checkpoint_id}"


class LangGraphWrites(models.Model):
    """The pending writes of one task against one checkpoint, as LangGraph's put_writes leaves them: one row a
    task, its writes zstd'd together (idx → channel and typed JSON value), so a step costs one small row.

    A step writes each new value twice, as a pending write and in the next checkpoint's state (a message
    appended, a replaced channel's value); once that checkpoint arrives, the write names the value's place in its
    state instead of holding it."""

    session = models.ForeignKey(AgentSession, on_delete=models.CASCADE, related_name="+", db_index=False)
    checkpoint_ns = SafeTextField(blank=True)
    checkpoint_id = SafeCharField(max_length=200)
    task_id = SafeCharField(max_length=200)
    task_path = SafeTextField(blank=True)
    writes = models.BinaryField(
        help_text="zstd'd JSON [[idx, channel, value] or [idx, channel, null, positions], …], by idx: a value "
        "the next checkpoint holds in its state is kept there once, named by its positions in the channel "
        "(null: the channel's whole value)."
    )
    values_root = models.BinaryField(
        max_length=32, null=True, blank=True, help_text="Store address of the state holding the values named."
    )
    interrupted = models.BooleanField(default=False, help_text="Holds an __interrupt__ write.")
    resumed = models.BooleanField(default=False, help_text="Holds a __resume__ write.")
    failed = models.BooleanField(default=False, db_default=False, help_text="Holds an __error__ write.")

    class Meta:
        verbose_name = verbose_name_plural = "LangGraph pending writes"
        constraints = [
            # one row per task; also serves a checkpoint's pending writes
            models.UniqueConstraint(
                fields=["session", "checkpoint_ns", "checkpoint_id", "task_id"], name="langgraph_writes_per_task"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.checkpoint_ns}:{self.checkpoint_id} {self.task_id}"


# uuid1 and uuid6 count 100 ns intervals since the Gregorian calendar began
UUID_EPOCH = datetime(1582, 10, 15, tzinfo=UTC)


def _uuid_time(checkpoint_id: str) -> int | None:
    """The timestamp of a uuid1 or uuid6 id (LangGraph's are uuid6), None for any other id."""
    try:
        parsed = uuid.UUID(checkpoint_id)
    except ValueError:
        return None
    if parsed.version == 6:  # the timestamp's high 48 bits first, then the version, then its low 12 bits
        return ((parsed.int >> 80) << 12) | ((parsed.int >> 64) & 0xFFF)
    return parsed.time if parsed.version == 1 else None


def checkpoint_id_order(checkpoint_id: str) -> tuple[int, int, str]:
    """A key that sorts LangGraph checkpoint ids in the time they were made: uuid1 and uuid6 by their
    timestamp (then their remaining bits), other ids as text, after every uuid (LangGraph itself takes a
    thread's latest as the largest id)."""
    time = _uuid_time(checkpoint_id)
    if time is None:
        return (1, 0, checkpoint_id)
    return (0, time, f"{uuid.UUID(checkpoint_id).int & (2**64 - 1):016x}")


class LangGraphTombstone(models.Model):
    """A LangGraph thread its agent deleted. A late put or write naming a checkpoint of the deleted history
    (an id the thread does not hold, at or below the newest id deleted, in time order) is refused (410) instead
    of bringing it back; newer ids are a new run under the same thread id, as with LangGraph's own savers."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+", db_index=False)
    external_id = SafeCharField(max_length=200)
    deleted_at = models.DateTimeField(default=timezone.now)
    newest_checkpoint_id = SafeCharField(
        max_length=200,
        blank=True,
        help_text="The newest checkpoint id deleted (uuid time order): ids at or below it are the deleted history.",
    )

    class Meta:
        verbose_name = "LangGraph tombstone"
        constraints = [
            models.UniqueConstraint(fields=["project", "external_id"], name="langgraph_tombstone_per_thread"),
        ]

    def __str__(self) -> str:
        return f"{self.project_id}/{self.external_id} deleted"

    def refuses(self, checkpoint_id: str) -> bool:
        """Whether `checkpoint_id`, one the thread does not hold, belongs to the deleted history."""
        if self.newest_checkpoint_id:
            return checkpoint_id_order(checkpoint_id) <= checkpoint_id_order(self.newest_checkpoint_id)
        # a tombstone from before the newest id was kept: uuid ids made before the deletion
        time = _uuid_time(checkpoint_id)
        return time is None or UUID_EPOCH + timedelta(microseconds=time // 10) <= self.deleted_at


class InterruptAnswer(models.Model):
    """A person's answer to a LangGraph interrupt, kept by the console, never written as a LangGraph write: a
    stored `__resume__` write is dropped when a runner passes a checkpoint_id, and is ambiguous with parallel
    interrupts and in subgraphs. The runner takes it with `ConsoleSaver.pending_resume` as
    `Command(resume={interrupt_id: value})`; `consumed_at` is set once the graph took it (a `__resume__` write
    of the interrupt's task arrived, or the thread's latest root checkpoint moved past the one it waited at).

    An interrupt's id names the task that asked (LangGraph hashes the task's namespace), so a node asking twice
    asks under one id: the answer belongs to the question asked (`value_digest`), and a new question under the
    same id can be answered again."""

    session = models.ForeignKey(AgentSession, on_delete=models.CASCADE, related_name="interrupt_answers")
    interrupt_id = SafeCharField(max_length=200)
    value_digest = SafeCharField(max_length=64, help_text="SHA-256 of the interrupt's value (canonical JSON).")
    checkpoint_id = SafeCharField(max_length=200, help_text="The root checkpoint the thread waited at.")
    node = SafeCharField(max_length=200, blank=True)
    question = SafeJSONField(default=None, null=True, blank=True, help_text="The interrupt's value (typed JSON).")
    value = SafeJSONField(default=None, null=True, blank=True, help_text="The answer (typed JSON).")
    comment = SafeTextField(blank=True)
    answered_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    answered_by_name = SafeCharField(max_length=200, blank=True, help_text="The user, or token:<name>.")
    answered_at = models.DateTimeField(default=timezone.now)
    consumed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["session", "answered_at", "pk"]
        constraints = [
            # one answer a question: a second is refused (409) instead of racing the first
            models.UniqueConstraint(
                fields=["session", "interrupt_id", "value_digest"], name="interrupt_answer_per_question"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.session_id} {self.interrupt_id}"
