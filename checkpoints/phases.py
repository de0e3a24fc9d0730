"""Phased workflows, read side: checking a phase's outputs, rendering them, and what waits for a decision.

The writes (what agents report, reviewers' decisions) are in `services.phases`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import nh3
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt

from .models import (
    AgentOutput,
    AgentSessionQuerySet,
    FeedbackAction,
    Phase,
    PhaseFeedback,
    PhaseStatus,
)

log = logging.getLogger(__name__)


# ---- validation --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    label: str
    ok: bool
    detail: str = ""


def latest_attempts(outputs: Sequence[AgentOutput]) -> list[AgentOutput]:
    """Each agent's latest output (its highest attempt), in the order given: earlier runs are history."""
    latest: dict[str, AgentOutput] = {}
    for output in outputs:
        seen = latest.get(output.agent_name)
        if seen is None or (output.attempt, output.created_at, output.pk or 0) > (
            seen.attempt,
            seen.created_at,
            seen.pk or 0,
        ):
            latest[output.agent_name] = output
    return [output for output in outputs if latest[output.agent_name] is output]


def validate_phase(phase: Phase, outputs: Sequence[AgentOutput]) -> list[Check]:
    """The checklist of a phase checkpoint, like the source system's: required fields and sections present.

    Only each agent's latest attempt counts: a first run that failed and was redone is not a failure now.
    """
    outputs = latest_attempts(outputs)
    empty = [output.agent_name for output in outputs if not output.content.strip()]
    failed = [output.agent_name for output in outputs if output.error]
    return [
        Check("Phase has a name", bool(phase.name.strip())),
        Check("Status is completed", phase.status == PhaseStatus.COMPLETED, f"status is {phase.status}"),
        Check(
            "Start and completion times recorded",
            phase.started_at is not None and phase.completed_at is not None,
            "missing " + " and ".join(n for n, v in (("start", phase.started_at), ("end", phase.completed_at)) if not v)
            if phase.started_at is None or phase.completed_at is None
            else "",
        ),
        Check("Has agent outputs", bool(outputs), "no agent reported an output"),
        Check("Every output has content", bool(outputs) and not empty, "empty: " + ", ".join(empty) if empty else ""),
        Check("No agent errors", not failed, "failed: " + ", ".join(failed) if failed else ""),
        Check("No phase errors", not phase.errors, f"{len(phase.errors)} error(s)" if phase.errors else ""),
    ]


def is_valid(checks: Sequence[Check]) -> bool:
    return all(check.ok for check in checks)


# ---- markdown ----------------------------------------------------------------------------------

_markdown = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable(["table", "strikethrough"])
_ATTRIBUTES = {"a": {"href", "title"}, "code": {"class"}, "th": {"align", "style"}, "td": {"align", "style"}}


def render_markdown(text: str) -> SafeString:
    """Agent output as HTML: raw HTML in the markdown is escaped, and the result is sanitised again."""
    html = _markdown.render(text or "")
    return mark_safe(nh3.clean(html, attributes=_ATTRIBUTES, link_rel="noopener noreferrer nofollow"))  # noqa: S308 - nh3 cleaned it


# ---- reads -------------------------------------------------------------------------------------


def waiting_for_approval(phases: QuerySet[Phase]) -> QuerySet[Phase]:
    """Completed phases without a decision made since they completed."""
    later = PhaseFeedback.objects.filter(phase=OuterRef("pk")).filter(
        Q(created_at__gte=OuterRef("completed_at")) | Q(phase__completed_at__isnull=True)
    )
    return phases.filter(status=PhaseStatus.COMPLETED).filter(~Exists(later))


def sessions_waiting_for_approval(sessions: AgentSessionQuerySet) -> AgentSessionQuerySet:
    waiting = waiting_for_approval(Phase.objects.filter(session=OuterRef("pk")))
    return sessions.filter(Exists(waiting))


def standing_approval(phase: Phase, decisions: Sequence[PhaseFeedback] | None = None) -> PhaseFeedback | None:
    """The approval of the phase's current run: its latest decision, when that approved it after it completed.

    Once the agent completes the phase again (a later `completed_at`), the run is new and can be approved.
    `decisions`, newest first, saves the query when the caller has them already.
    """
    newest = phase.feedback.order_by("-created_at", "-pk")[:1] if decisions is None else decisions
    latest = next(iter(newest), None)
    if latest is None or latest.action != FeedbackAction.APPROVED:
        return None
    if phase.completed_at is not None and latest.created_at < phase.completed_at:
        return None
    return latest
