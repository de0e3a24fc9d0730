"""Who acts and the audit row every write records in its own transaction; the errors operations raise."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

from django.db import transaction
from django.db.models import Field, Model
from django.utils import timezone

from .models import AgentSession, ApiToken, AuditEvent, Checkpoint, Project

if TYPE_CHECKING:
    from django.contrib.auth.models import User


class CheckpointError(Exception):
    """A domain rule refused the operation; the message is meant for the operator or agent."""


class InvalidState(CheckpointError):
    pass


class InvalidInput(CheckpointError):
    """A field's value is outside what can be stored (a time out of range, a step beyond 32 bits…)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class IdempotencyConflict(CheckpointError):
    """An idempotency key seen before came with a different checkpoint."""

    def __init__(self, message: str, *, differences: Sequence[str] = (), seq: int | None = None) -> None:
        super().__init__(message)
        self.differences = list(differences)  # the fields that differ ("state", "created_at", …)
        self.seq = seq  # the stored checkpoint holding the key, when there is one


class NothingToUndo(CheckpointError):
    pass


class HeadMoved(CheckpointError):
    """The session's head is no longer the one the caller decided on (`restore_checkpoint(expect_head=…)`)."""


class BaseMoved(CheckpointError):
    """A patch was made against a head that is no longer the session's (an operator restored, undid, or another
    writer went on): applying it would overwrite what happened since. Names the head to resume from."""

    def __init__(self, *, head_id: int | None, head_seq: int | None, restore_generation: int) -> None:
        where = f"checkpoint {head_id} (#{head_seq})" if head_id is not None else "no checkpoint"
        super().__init__(
            f"base_moved: the session's head is now {where} at restore generation {restore_generation}, not the "
            "base this patch was made against; resume from the head and send the next checkpoint against it"
        )
        self.head_id = head_id
        self.head_seq = head_seq
        self.restore_generation = restore_generation


class HistoryPurged(CheckpointError):
    """A purge rewrote the session's history while a checkpoint was being stored against its old head: stored,
    it would name a parent the purge deleted. Nothing is stored; sending it again stores it on the new head."""

    def __init__(self) -> None:
        super().__init__("the session's history was purged while this checkpoint was stored: send it again")


@dataclass(frozen=True)
class Actor:
    """Who acts: a console user, an API token, or the system (jobs and commands)."""

    label: str
    user: User | None = None
    token: ApiToken | None = None

    @classmethod
    def system(cls, label: str = "system") -> Actor:
        return cls(label=label)

    @classmethod
    def for_user(cls, user: User) -> Actor:
        return cls(label=user.get_username(), user=user)

    @classmethod
    def for_token(cls, token: ApiToken) -> Actor:
        return cls(label=f"token:{token.name}", token=token)


def max_length(model: type[Model], name: str) -> int:
    """A CharField's max_length, to cut a generated value to what the column holds."""
    field = model._meta.get_field(name)
    if not isinstance(field, Field) or field.max_length is None:
        raise TypeError(f"{model.__name__}.{name} has no max_length")
    return field.max_length


TARGET_MAX = max_length(AuditEvent, "target")


class AuditFields(TypedDict, total=False):
    """What an audit row says besides who did what: `record_audit` and `audit_event` take the same."""

    project: Project | None
    session: AgentSession | None
    checkpoint: Checkpoint | None
    target: str
    reason: str
    details: dict[str, Any] | None
    now: datetime | None


def record_audit(actor: Actor, action: str, **fields: Unpack[AuditFields]) -> AuditEvent:
    event = audit_event(actor, action, **fields)
    event.save()
    return event


def audit_event(
    actor: Actor,
    action: str,
    *,
    project: Project | None = None,
    session: AgentSession | None = None,
    checkpoint: Checkpoint | None = None,
    target: str = "",
    reason: str = "",
    details: dict[str, Any] | None = None,
    now: datetime | None = None,
) -> AuditEvent:
    """The AuditEvent `record_audit` saves, unsaved: for a job that writes many in one statement."""
    # the session's project by id: a job auditing many sessions does not load each one's project
    project_id = project.pk if project is not None else session.project_id if session is not None else None
    return AuditEvent(
        actor_user=actor.user,
        actor_token=actor.token,
        actor=actor.label,
        action=action,
        project_id=project_id,
        session=session,
        checkpoint=checkpoint,
        target=(target or (str(checkpoint) if checkpoint else str(session) if session else ""))[:TARGET_MAX],
        reason=reason,
        details=details or {},
        created_at=now or timezone.now(),
    )


@transaction.atomic
def request_job_run(job: str, *, actor: Actor, details: dict[str, Any] | None = None) -> AuditEvent:
    """An operator asked for a background job to run now (the caller queues it once this commits); `details`
    keep what the operator was shown, e.g. the counts a retention run was expected to delete."""
    return record_audit(actor, "run_job", target=job, details=details)
