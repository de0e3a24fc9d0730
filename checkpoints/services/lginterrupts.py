"""A LangGraph thread's interrupts and node errors as the console shows them, and people's answers.

What a thread is waiting for is read from the pending writes of its latest root checkpoint (the session's head):
each `__interrupt__` write holds LangGraph `Interrupt` records (value and id), each `__error__` write the error a
node raised. Statuses follow the writes as they arrive (`after_writes`, `after_head_moved`), never on a page view:
an interrupt makes the session `waiting`, a node error `failed` with a `node_error` alert, and a later root
checkpoint (the thread moved on) makes it `active` again and resolves the alert.

Answers are the console's own rows (`InterruptAnswer`), not LangGraph writes; the runner takes them with
`ConsoleSaver.pending_resume` (`pending_resume` here). An answer is consumed when a `__resume__` write of its
interrupt's task arrives (the graph took it) or the thread's head moves past the checkpoint it waited at.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import Q
from django.utils import timezone

from checkpoint_console import typedjson

from ..audit import Actor, CheckpointError, InvalidInput, record_audit
from ..fields import escape_text
from ..models import (
    AgentSession,
    AlertKind,
    AlertSeverity,
    DriftAlert,
    InterruptAnswer,
    LangGraphCheckpoint,
    LangGraphWrites,
    SessionStatus,
)
from ..outbox import events
from ..store import jsoncodec, lgtuples
from .drift import DETECTOR_ACTOR, open_raised_alert, resolve_by_detector
from .typeguard import check_typed, check_types

INTERRUPT, ERROR, RESUME = -3, -1, -4  # LangGraph's WRITES_IDX_MAP slots
CHANNELS = {"__interrupt__": INTERRUPT, "__error__": ERROR, "__resume__": RESUME}
_LANGGRAPH_STATUSES = (SessionStatus.WAITING, SessionStatus.FAILED)  # what the writes of a head decide
_MESSAGE_MAX = 500
COMMENT_MAX = 10_000


class AlreadyAnswered(CheckpointError):
    """The interrupt has an answer already (409)."""


class NoSuchInterrupt(CheckpointError):
    """The thread is not waiting on that interrupt (404)."""


@dataclass(frozen=True)
class PendingInterrupt:
    """An interrupt the thread's latest root checkpoint waits on, with its answer when it has one."""

    id: str
    node: str
    value: Any  # typed JSON, as the graph raised it
    checkpoint_id: str
    task_id: str
    digest: str
    answer: InterruptAnswer | None

    @property
    def state(self) -> str:
        return "answered" if self.answer is not None else "open"

    @property
    def readable(self) -> Any:
        return typedjson.readable(self.value)

    @property
    def yes_no(self) -> bool:
        """Whether the value reads as a yes/no question: the form offers Approve and Reject."""
        text = self.readable
        if isinstance(text, dict):
            text = next((text[key] for key in ("question", "message", "prompt") if isinstance(text.get(key), str)), "")
        if not isinstance(text, str):
            return False
        words = text.strip().lower()
        return words.endswith("?") and words.split(" ", 1)[0] in _YES_NO_STARTS


_YES_NO_STARTS = {
    "approve", "allow", "are", "can", "confirm", "continue", "did", "do", "does", "go", "is", "may", "proceed",
    "run", "send", "shall", "should", "ok", "okay", "will", "would",
}  # fmt: skip


def node_of(task_path: str) -> str:
    """The node a task ran, from LangGraph's task path ("~__pregel_pull, ask"); "" for a Send's task."""
    parts = task_path.split(", ")
    return parts[1] if len(parts) > 1 and parts[0] == "~__pregel_pull" else ""


def digest(value: Any) -> str:
    return hashlib.sha256(jsoncodec.canonical(value)).hexdigest()


def _interrupts_in(value: Any) -> list[tuple[str, Any]]:
    """(id, value) of each Interrupt record of an `__interrupt__` write (LangGraph ≥ 0.6 and older layouts)."""
    found = []
    for record in value if isinstance(value, list) else [value]:
        inner = record.get("v") if isinstance(record, dict) and typedjson.TAG in record else record
        fields = inner[2] if isinstance(inner, list) and len(inner) >= 3 else inner
        if isinstance(fields, dict) and isinstance(fields.get("id") or fields.get("interrupt_id"), str):
            found.append((fields.get("id") or fields["interrupt_id"], fields.get("value")))
    return found


def _error_text(value: Any) -> str:
    text = typedjson.readable(value)
    text = text if isinstance(text, str) else jsoncodec.canonical(text).decode()
    return text[:_MESSAGE_MAX]


def head_row(session: AgentSession) -> LangGraphCheckpoint | None:
    if session.head_id is None:
        return None
    return LangGraphCheckpoint.objects.filter(console_id=session.head_id, checkpoint_ns="").first()


def _head_writes(session: AgentSession, checkpoint_id: str) -> Any:
    rows = LangGraphWrites.objects.filter(session=session, checkpoint_ns="", checkpoint_id=checkpoint_id)
    return rows.filter(Q(interrupted=True) | Q(failed=True)).order_by("task_path", "task_id")


def _has_head_writes(session: AgentSession, checkpoint_id: str) -> bool:
    """Whether `_head_writes` holds a row: what every root put asks, in a statement written out (the ORM spent more
    CPU building it than the database running it)."""
    table = connection.ops.quote_name(LangGraphWrites._meta.db_table)
    sql = (
        f"SELECT 1 FROM {table} WHERE session_id = %s AND checkpoint_ns = '' AND checkpoint_id = %s"  # noqa: S608 - the table's quoted name; values are parameters
        " AND (interrupted OR failed) LIMIT 1"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [session.pk, escape_text(checkpoint_id)])  # stored escaped (SafeCharField)
        return cursor.fetchone() is not None


def pending_interrupts(session: AgentSession) -> list[PendingInterrupt]:
    """The interrupts the thread's latest root checkpoint waits on (an interrupt in a subgraph is also recorded
    against the parent graph's task that ran it, so the root namespace holds every one), answers attached."""
    head = head_row(session)
    if head is None:
        return []
    found: list[tuple[str, Any, str, str]] = []
    for row in _head_writes(session, head.checkpoint_id).filter(interrupted=True):
        for idx, _, value in lgtuples.written_values(row):
            if idx == INTERRUPT:
                found += [(key, item, node_of(row.task_path), row.task_id) for key, item in _interrupts_in(value)]
    answers = {
        (answer.interrupt_id, answer.value_digest): answer
        for answer in InterruptAnswer.objects.filter(session=session, interrupt_id__in=[key for key, *_ in found])
    }
    return [
        PendingInterrupt(
            key, node, value, head.checkpoint_id, task_id, digest(value), answers.get((key, digest(value)))
        )
        for key, value, node, task_id in found
    ]


def node_errors(session: AgentSession, checkpoint_id: str) -> list[tuple[str, str]]:
    """(node, error) of each `__error__` write against the root checkpoint `checkpoint_id`."""
    errors = []
    for row in _head_writes(session, checkpoint_id).filter(failed=True):
        for idx, _, value in lgtuples.written_values(row):
            if idx == ERROR:
                errors.append((node_of(row.task_path) or row.task_id, _error_text(value)))
    return errors


# ---- statuses, as writes and puts arrive ----------------------------------------------------------------


def after_writes(
    session: AgentSession, *, checkpoint_ns: str, checkpoint_id: str, task_id: str, channels: set[str]
) -> None:
    """What a task's special writes change: a `__resume__` consumes the answers of its task's interrupts (the
    graph took them) and means the runner is running again; an `__interrupt__` or `__error__` against the
    thread's latest root checkpoint makes the thread wait or fail.

    The session row is locked first (NO KEY UPDATE; the writes held KEY SHARE so far), in the order a put takes
    its locks (session, then answers): a `__resume__` racing the next put would otherwise lock the answers it
    consumes while the put, holding the session, waits for them — a deadlock PostgreSQL breaks with a 503."""
    written = {CHANNELS[channel] for channel in channels if channel in CHANNELS}
    if not written:  # a task's ordinary writes: nothing to do, no query
        return
    now = timezone.now()
    locked = AgentSession.objects.select_for_update(no_key=True).filter(pk=session.pk)
    session.status, session.head_id = locked.values_list("status", "head_id").get()
    if RESUME in written:
        _consume_for_task(session, checkpoint_ns, checkpoint_id, task_id, now=now)
        if session.status == SessionStatus.WAITING:
            _set_status(session, SessionStatus.ACTIVE, now=now)
    if checkpoint_ns == "" and written & {INTERRUPT, ERROR}:
        head = head_row(session)
        if head is not None and head.checkpoint_id == checkpoint_id:
            sync_status(session, head, now=now, waiting=INTERRUPT in written)


def after_head_moved(
    session: AgentSession,
    head: LangGraphCheckpoint | None,
    *,
    previous_status: str | None = None,
    resync: bool = False,
) -> None:
    """A root put or a restore made `head` the thread's latest root checkpoint: answers waiting at earlier
    checkpoints are spent, and the head's own writes (with `durability="async"` they can arrive before its put)
    decide the status. `previous_status`: the session's before the put's ingest (which makes a failed session
    active; a restore, which does the same, says `resync`). One query on the usual put (no writes yet, nothing
    waiting)."""
    if head is None:
        return
    now = timezone.now()
    stopped = resync or session.status in _LANGGRAPH_STATUSES or previous_status in _LANGGRAPH_STATUSES
    if stopped:
        InterruptAnswer.objects.filter(
            session=session, consumed_at__isnull=True, checkpoint_id__lt=head.checkpoint_id
        ).update(consumed_at=now)
    if stopped or _has_head_writes(session, head.checkpoint_id):
        sync_status(session, head, now=now, waiting=False)


def sync_status(session: AgentSession, head: LangGraphCheckpoint, *, now: datetime, waiting: bool) -> None:
    """The status the head's writes give: a node error fails the thread (alert naming the node), an interrupt
    not yet resumed (or just raised: `waiting`) makes it wait; else a thread the writes had stopped is active."""
    errors = node_errors(session, head.checkpoint_id)
    rows = _head_writes(session, head.checkpoint_id)
    asking = waiting or rows.filter(interrupted=True, resumed=False).exists()
    alert = DriftAlert.objects.unresolved().filter(session=session, kind=AlertKind.NODE_ERROR).first()
    if errors:
        _raise_node_error(session, head, errors, alert, now=now)
        _set_status(session, SessionStatus.FAILED, now=now)
        return
    if alert is not None:
        alert.session = session
        resolve_by_detector(alert, actor=DETECTOR_ACTOR, reason="the thread moved on past the error", now=now)
    if asking:
        if session.status != SessionStatus.WAITING:
            _set_status(session, SessionStatus.WAITING, now=now)
            events.publish_interrupt_waiting(session, [item.node or item.id for item in pending_interrupts(session)])
    elif session.status in _LANGGRAPH_STATUSES:
        _set_status(session, SessionStatus.ACTIVE, now=now)


def _raise_node_error(
    session: AgentSession,
    head: LangGraphCheckpoint,
    errors: list[tuple[str, str]],
    alert: DriftAlert | None,
    *,
    now: datetime,
) -> None:
    message = "; ".join(f"Node {node!r} raised {error}" for node, error in errors)[:_MESSAGE_MAX]
    evidence = {"checkpoint_id": head.checkpoint_id, "errors": [{"node": n, "error": e} for n, e in errors]}
    if alert is not None:
        if alert.message != message:
            DriftAlert.objects.filter(pk=alert.pk).update(message=message, evidence=evidence)
        return
    # the head is the state before the node ran: restoring it runs the node again
    open_raised_alert(
        session,
        actor=DETECTOR_ACTOR,
        now=now,
        kind=AlertKind.NODE_ERROR,
        severity=AlertSeverity.CRITICAL,
        message=message,
        evidence=evidence,
        checkpoint_id=head.console_id,
        last_good_id=head.console_id,
    )


def _set_status(session: AgentSession, status: str, *, now: datetime) -> None:
    AgentSession.objects.filter(pk=session.pk).update(status=status, updated_at=now)
    session.status = status


def _consume_for_task(
    session: AgentSession, checkpoint_ns: str, checkpoint_id: str, task_id: str, *, now: datetime
) -> None:
    """The graph took the answers to the task's interrupts (its `__resume__` write); a resume that names no task
    (LangGraph's null task: `Command(resume=value)`) takes every answer given at that checkpoint."""
    row = LangGraphWrites.objects.filter(
        session=session, checkpoint_ns=checkpoint_ns, checkpoint_id=checkpoint_id, task_id=task_id, interrupted=True
    ).first()
    answers = InterruptAnswer.objects.filter(session=session, consumed_at__isnull=True)
    if row is None:
        if checkpoint_ns == "":
            answers.filter(checkpoint_id=checkpoint_id).update(consumed_at=now)
        return
    ids = [
        key for idx, _, value in lgtuples.written_values(row) if idx == INTERRUPT for key, _ in _interrupts_in(value)
    ]
    answers.filter(interrupt_id__in=ids).update(consumed_at=now)


# ---- answers ---------------------------------------------------------------------------------------------


@transaction.atomic
def answer_interrupt(
    session: AgentSession, interrupt_id: str, *, actor: Actor, value: Any, comment: str = ""
) -> InterruptAnswer:
    """Keep a person's answer to an interrupt the thread waits on: audited, announced (`interrupt.answered`),
    for the runner to take with `pending_resume`. The value is typed JSON that passes the project's type
    allow-list; a second answer to the same question is refused (AlreadyAnswered)."""
    check_typed("value", value)
    check_types(session.project, [("value", value)])
    if not isinstance(comment, str) or len(comment) > COMMENT_MAX:
        raise InvalidInput("comment", f"must be text of at most {COMMENT_MAX:,} characters")
    # one answer at a time per thread, against the head as it is now (a put may have moved it since the read)
    locked = AgentSession.objects.select_for_update(no_key=True).filter(pk=session.pk)
    session.head_id = locked.values_list("head_id", flat=True).get()
    pending = next((item for item in pending_interrupts(session) if item.id == interrupt_id), None)
    if pending is None:
        raise NoSuchInterrupt(f"thread {session.external_id!r} is not waiting on interrupt {interrupt_id!r}")
    if pending.answer is not None:
        by = pending.answer.answered_by_name or "someone"
        raise AlreadyAnswered(f"interrupt {interrupt_id!r} was answered already (by {by}); it cannot be answered again")
    try:
        with transaction.atomic():
            answer = InterruptAnswer.objects.create(
                session=session,
                interrupt_id=interrupt_id,
                value_digest=pending.digest,
                checkpoint_id=pending.checkpoint_id,
                node=pending.node,
                question=pending.value,
                value=value,
                comment=comment,
                answered_by=actor.user,
                answered_by_name=actor.label,
            )
    except IntegrityError:
        raise AlreadyAnswered(f"interrupt {interrupt_id!r} was answered already") from None
    record_audit(
        actor,
        "interrupt_answered",
        session=session,
        checkpoint=session.head,
        target=f"interrupt {interrupt_id} of {pending.node or 'a task'}",
        reason=comment,
        details={"interrupt_id": interrupt_id, "node": pending.node, "value": value},
    )
    events.publish_interrupt_answered(session, answer)
    return answer


def pending_resume(session: AgentSession) -> dict[str, Any]:
    """interrupt id → answer (typed JSON) of the answers the graph has not taken yet."""
    answers = InterruptAnswer.objects.filter(session=session, consumed_at__isnull=True).order_by("answered_at", "pk")
    return {answer.interrupt_id: answer.value for answer in answers}
