"""Phase writes: what agents report about their phases and outputs, and reviewers' decisions (audited).

A decision is what the agent polls for before it moves on; for sessions imported from Haytham-style folders
with write-back it is also written to the phase's `user_feedback.md` once it commits.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from .. import limits
from ..audit import Actor, CheckpointError, InvalidInput, InvalidState, record_audit
from ..models import AgentOutput, AgentSession, FeedbackAction, Phase, PhaseFeedback, PhaseStatus, SourceFormat
from ..outbox import events
from ..phases import standing_approval, validate_phase
from ..sources.formats import haytham
from .checkpoints import check_json_field

log = logging.getLogger(__name__)


class FeedbackRefused(CheckpointError):
    """The decision is not allowed for this phase (not completed, invalid, no changes listed…)."""


PHASE_FIELDS = (
    "name", "status", "started_at", "completed_at", "duration", "retry_count", "tokens_in", "tokens_out", "cost",
    "errors",
)  # fmt: skip


_INT_RANGES = {
    "retry_count": (0, limits.INT32_MAX),
    "tokens_in": (0, limits.INT64_MAX),
    "tokens_out": (0, limits.INT64_MAX),
}


def _check_phase_fields(fields: dict[str, Any]) -> None:
    """The API's schema checks these; importers and other callers get the same refusals."""
    for name, value in fields.items():
        if value is None:
            continue
        try:
            if name in ("started_at", "completed_at"):
                fields[name] = limits.as_utc(value)
            elif name in _INT_RANGES:
                limits.check_int(value, low=_INT_RANGES[name][0], high=_INT_RANGES[name][1])
            elif name == "cost" and not 0 <= value <= limits.COST_MAX:
                raise limits.OutOfRange(f"must be between 0 and {limits.COST_MAX}")
        except limits.OutOfRange as exc:
            raise InvalidInput(name, str(exc)) from None
    if "errors" in fields:
        check_json_field("errors", fields["errors"])


@transaction.atomic
def report_phase(session: AgentSession, number: int, *, actor: Actor, **fields: Any) -> tuple[Phase, bool]:
    """Create or update a phase from what the agent reports; only the given fields change."""
    unknown = set(fields) - set(PHASE_FIELDS)
    if unknown:
        raise ValueError(f"unknown phase fields: {', '.join(sorted(unknown))}")
    phase = Phase.objects.select_for_update().filter(session=session, number=number).first()
    created = phase is None
    if phase is None:
        if not fields.get("name"):
            raise InvalidState(f"phase {number} is new: its name is required")
        phase = Phase(session=session, number=number)
    _check_phase_fields(fields)
    was_completed = not created and phase.status == PhaseStatus.COMPLETED
    for name, value in fields.items():
        setattr(phase, name, Decimal(str(value)) if name == "cost" else value)
    phase.save()
    record_audit(
        actor,
        "phase_reported",
        session=session,
        target=str(phase),
        details={"number": number, "status": phase.status, "created": created},
    )
    if phase.status == PhaseStatus.COMPLETED and not was_completed:  # it now waits for a reviewer's decision
        phase.session = session
        events.publish_phase_waiting(phase)
    return phase, created


def import_agent_output(phase: Phase, **fields: Any) -> tuple[AgentOutput, bool]:
    """Store an output read from the agent's files: the same file again updates its row, a new run adds one.

    An output is the same when its content is (the content holds the agent's own execution time); a
    different one is the agent's next attempt, so the attempt a reviewer rejected stays beside the redo.
    Returns the output and whether it is new.
    """
    fields = {name: value for name, value in fields.items() if not (name == "created_at" and value is None)}
    mine = AgentOutput.objects.filter(phase=phase, agent_name=fields["agent_name"])
    same = mine.filter(content=fields.get("content", "")).order_by("-attempt", "-pk").first()
    if same is not None:
        mine.filter(pk=same.pk).update(**fields)
        return same, False
    attempt = (mine.aggregate(last=Max("attempt"))["last"] or 0) + 1
    return AgentOutput.objects.create(phase=phase, attempt=attempt, **fields), True


@transaction.atomic
def add_agent_output(phase: Phase, *, actor: Actor, **fields: Any) -> AgentOutput:
    output = AgentOutput.objects.create(phase=phase, **fields)
    record_audit(
        actor,
        "phase_output_added",
        session=phase.session,
        target=f"{phase}: {output.agent_name}",
        details={"phase": phase.number, "output": output.pk, "status": output.status},
    )
    return output


def _refusal(phase: Phase, action: str, requested_changes: Sequence[str]) -> str | None:
    if action not in FeedbackAction.values:
        return f"unknown action {action!r}"
    if action == FeedbackAction.RETRY_WITH_CHANGES and not requested_changes:
        return "requesting changes needs at least one requested change"
    if action == FeedbackAction.APPROVED:
        approval = standing_approval(phase)
        if approval is not None:
            by = approval.reviewer_name or "a reviewer"
            return f"phase {phase.number} is already approved (by {by}); it cannot be approved again"
        if phase.status != PhaseStatus.COMPLETED:
            return f"phase {phase.number} has not completed (status {phase.status}); it cannot be approved yet"
        failing = [check.label for check in validate_phase(phase, list(phase.outputs.all())) if not check.ok]
        if failing:
            return f"phase {phase.number} fails validation ({'; '.join(failing)}); it cannot be approved"
    return None


@transaction.atomic
def record_feedback(
    phase: Phase,
    *,
    actor: Actor,
    action: str,
    comments: str = "",
    requested_changes: Sequence[str] = (),
    now: datetime | None = None,
) -> PhaseFeedback:
    """Record a reviewer's decision on a phase.

    1. Lock the phase and refuse what the rules forbid (FeedbackRefused).
    2. "retry_with_changes" counts a retry and marks the phase requires_retry; "skip_phase" marks it skipped.
    3. Keep the decision (history) with the phase's retry count, and audit it.
    4. After commit, write it to the phase's user_feedback.md when the session writes back to Haytham.
    """
    now = now or timezone.now()
    phase = Phase.objects.select_for_update().select_related("session__project").get(pk=phase.pk)
    changes = [change.strip() for change in requested_changes if change.strip()]
    refusal = _refusal(phase, action, changes)
    if refusal:
        raise FeedbackRefused(refusal)
    if action == FeedbackAction.RETRY_WITH_CHANGES:
        phase.retry_count += 1
        phase.status = PhaseStatus.REQUIRES_RETRY
        phase.save(update_fields=["retry_count", "status"])
    elif action == FeedbackAction.SKIP_PHASE:
        phase.status = PhaseStatus.SKIPPED
        phase.save(update_fields=["status"])
    feedback = PhaseFeedback.objects.create(
        phase=phase,
        reviewed=True,
        approved=action == FeedbackAction.APPROVED,
        comments=comments.strip(),
        requested_changes=changes,
        action=action,
        retry_count=phase.retry_count,
        reviewer=actor.user,
        reviewer_name=actor.label,
        created_at=now,
    )
    record_audit(
        actor,
        "phase_feedback",
        session=phase.session,
        target=str(phase),
        reason=comments.strip()[:500],
        details={"phase": phase.number, "action": action, "requested_changes": changes, "feedback": feedback.pk},
        now=now,
    )
    events.publish_phase_feedback(feedback)
    session = phase.session
    if session.write_back and session.source_format == SourceFormat.HAYTHAM and session.source_path:
        transaction.on_commit(lambda: write_feedback_back(feedback.pk))
    return feedback


def write_feedback_back(feedback_id: int) -> list[Path]:
    """Write a decision to its phase's user_feedback.md, atomically, the previous file kept in history first.

    Called after the decision commits. Failure is audited, never raised: the decision itself stands.
    """
    feedback = PhaseFeedback.objects.select_related("phase__session__project").get(pk=feedback_id)
    phase, session = feedback.phase, feedback.phase.session
    actor = Actor.system("write-back")
    try:
        written = haytham.write_feedback(session, phase, feedback, Path(session.source_path), now=timezone.now())
    except Exception as exc:  # a full disk or a vanished folder must not undo the decision
        log.exception("write-back of phase feedback %s failed", feedback_id)
        record_audit(actor, "write_back_failed", session=session, target=str(phase), details={"error": str(exc)})
        return []
    record_audit(
        actor,
        "write_back",
        session=session,
        target=str(phase),
        details={"files": [str(path) for path in written], "format": session.source_format},
    )
    return written
