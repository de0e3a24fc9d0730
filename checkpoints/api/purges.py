"""Purges over the API (`/purges`, docs/purges.md): remove a value (pasted, or a finding's) from every checkpoint
of the token's project that holds it, and from every other project's checkpoint that shares the stored content,
then follow the job. Only the `purge` scope reaches these routes, and it reaches nothing else. A token sees its own
project's purges and counts only: how many checkpoints of other projects a purge rewrote is never answered here."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from django.http import HttpRequest
from ninja import Field, Router, Schema
from ninja.errors import HttpError

from ..models import Purge, Scope, SecretFinding
from ..services import purges
from ..tasks import run_purge
from .common import ERRORS, ExternalId, Reason, Strict, TokenAuth, _actor, _json, _token

router = Router(tags=["purges"])
PURGE = TokenAuth(Scope.PURGE)


class PurgeIn(Strict):
    value: str | None = Field(
        default=None,
        min_length=purges.MIN_LENGTH,
        max_length=purges.MAX_LENGTH,
        description="The value to purge (never stored: only its keyed fingerprint is).",
    )
    finding: int | None = Field(default=None, description="A finding of this project: its value is purged.")
    sessions: list[ExternalId] | None = Field(
        default=None, max_length=purges.MAX_SESSIONS, description="Only these sessions (and what shares their content)."
    )
    reason: Reason = Field(default="", description="Required unless dry_run; kept with the purge and audited.")
    dry_run: bool = Field(default=False, description="Only count what holds it (read the result with GET).")


class PurgeStartedOut(Schema):
    id: int
    state: str


class PurgeSessionOut(Schema):
    session: str
    count: int
    seqs: list[int]


class PurgeOut(Schema):
    id: int
    state: Literal["queued", "running", "finished", "failed"]
    dry_run: bool
    detector: str
    placeholder: str
    reason: str
    phase: str = Field(description="What the job is doing now (no fraction: its total counts other projects).")
    checkpoints: int = Field(description="Checkpoints of this project holding it (a dry run) or rewritten.")
    sessions: int
    preview: list[PurgeSessionOut]
    created_at: datetime
    finished_at: datetime | None
    error: str


@router.post("/purges", response={202: PurgeStartedOut, **ERRORS}, auth=PURGE)
def start_purge(request: HttpRequest, payload: PurgeIn) -> Any:
    """Queue a purge (or its dry run) of a value or of a finding's value; follow it with `GET /purges/{id}`."""
    token = _token(request)
    finding = None
    if payload.finding is not None:
        finding = SecretFinding.objects.filter(pk=payload.finding, project=token.project).first()
        if finding is None:
            raise HttpError(404, f"no finding {payload.finding} in project {token.project.slug!r}")
    purge = purges.start_purge(
        token.project,
        actor=_actor(request),
        reason=payload.reason,
        value=payload.value,
        finding=finding,
        sessions=payload.sessions or (),
        dry_run=payload.dry_run,
        start=run_purge.delay,
    )
    return _json({"id": purge.pk, "state": purge.state}, status=202)


@router.get("/purges/{purge_id}", response={200: PurgeOut, **ERRORS}, auth=PURGE)
def get_purge(request: HttpRequest, purge_id: int) -> Any:
    """The purge's state and progress, and this project's sessions that hold (or held) the value."""
    project = _token(request).project
    purge = Purge.objects.filter(pk=purge_id, project=project).first()
    if purge is None:
        raise HttpError(404, f"no purge {purge_id} in project {project.slug!r}")
    return _json(
        {
            "id": purge.pk,
            "state": purge.state,
            "dry_run": purge.dry_run,
            "detector": purge.detector,
            "placeholder": purge.placeholder,
            "reason": purge.reason,
            "phase": purge.phase,
            "checkpoints": purge.checkpoints,
            "sessions": purge.session_count,
            "preview": purge.preview,
            "created_at": purge.created_at,
            "finished_at": purge.finished_at,
            "error": purge.error,
        }
    )
