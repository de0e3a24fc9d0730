"""Fleet recovery over the API (`/recoveries`): preview a batch (read scope, changes nothing), run it, read its
progress and undo it (the `recover` scope, which no token holds unless created with it: an agent's write token
cannot restore its whole fleet). A token reaches the sessions and recoveries of its own project only; another
project's recovery is a 404, as if it did not exist."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from django.http import HttpRequest
from ninja import Field, Router, Schema
from ninja.errors import HttpError

from ..models import Recovery, Scope
from ..services import fleet
from ..services.targets import TargetRule
from ..tasks import run_recovery
from .common import ERRORS, ExternalId, Reason, Strict, Timestamp, TokenAuth, _actor, _json, _token

router = Router(tags=["recoveries"])
RECOVER = TokenAuth(Scope.RECOVER)
MAX_LISTED = 5000  # sessions named in one request: the batch's own cap (RECOVERY_MAX_SESSIONS) applies after


class FilterIn(Strict):
    """The console's filters, the same set: sessions of this agent, status, search; with an alert of this kind,
    severity and state, opened in the window (which also bounds the failures the last good rule reads)."""

    agent: str = Field(default="", max_length=200)
    alert_kind: str = Field(default="", max_length=40)
    severity: Literal["", "info", "warning", "critical"] = ""
    alert_state: Literal["", "open", "acknowledged", "resolved", "unresolved"] = ""
    status: Literal["", "active", "waiting", "completed", "failed", "halted", "archived"] = ""
    opened_since: Timestamp | None = None
    opened_until: Timestamp | None = None
    search: str = Field(default="", max_length=200)


class TargetIn(Strict):
    rule: Literal["last_good", "before", "named"]
    at: Timestamp | None = Field(default=None, description="The 'before' rule: the time to go back before.")
    name: str = Field(default="", max_length=200, description="The 'named' rule: the checkpoint name.")


class RecoveryIn(Strict):
    action: Literal["restore", "fork"]
    sessions: list[ExternalId] | None = Field(default=None, max_length=MAX_LISTED)
    filter: FilterIn | None = None
    target: TargetIn
    reason: Reason = Field(default="", description="Required to run; recorded on every restore and on the batch.")


class TargetOut(Schema):
    id: int
    seq: int
    name: str = ""
    created_at: datetime | None = None


class PreviewRowOut(Schema):
    session: str
    target: TargetOut | None
    discarded_checkpoints: int
    discarded_tool_calls: int | None
    result: Literal["restore", "fork", "skipped"]
    reason: str | None = None


class TotalsOut(Schema):
    sessions: int
    recover: int
    skipped: int
    discarded_checkpoints: int
    discarded_tool_calls: int


class PreviewOut(Schema):
    preview: list[PreviewRowOut]
    totals: TotalsOut


class StartedOut(Schema):
    id: int
    state: str


class ItemOut(Schema):
    session: str
    target: TargetOut | None
    discarded_checkpoints: int
    discarded_tool_calls: int | None
    result: Literal["pending", "restored", "forked", "skipped", "failed"]
    reason: str | None = None
    new_head: TargetOut | None = None
    undo: str | None = None


class CountsOut(Schema):
    total: int
    done: int
    skipped: int
    failed: int


class RecoveryOut(Schema):
    id: int
    action: str
    rule: str
    state: Literal["queued", "running", "finished", "failed"]
    reason: str
    counts: CountsOut
    created_at: datetime
    finished_at: datetime | None
    undone_at: datetime | None
    sessions: list[ItemOut]


class UndoIn(Strict):
    reason: Reason = ""


class UndoOut(Schema):
    undone: int
    archived: int
    kept: list[str]


def _selection(payload: RecoveryIn) -> fleet.Selection:
    chosen = payload.filter or FilterIn()
    rule = TargetRule(
        payload.target.rule,
        at=payload.target.at,
        name=payload.target.name,
        since=chosen.opened_since,
        until=chosen.opened_until,
        alert_kind=chosen.alert_kind,
    )
    filters = fleet.FleetFilter(**chosen.model_dump())
    return fleet.Selection(payload.action, rule, filters, external_ids=fleet.as_sequence(payload.sessions))


def _target(checkpoint: Any) -> dict[str, Any] | None:
    if checkpoint is None:
        return None
    return {"id": checkpoint.pk, "seq": checkpoint.seq, "name": checkpoint.name, "created_at": checkpoint.created_at}


@router.post("/recoveries/preview", response={200: PreviewOut, **ERRORS})
def preview_recovery(request: HttpRequest, payload: RecoveryIn) -> Any:
    """What the batch would do to each session of the token's project, and why a session is skipped; writes
    nothing. The run (`POST /recoveries`) stores exactly this plan."""
    preview = fleet.preview_recovery(_selection(payload), fleet.Reach.for_token(_token(request)))
    rows = [
        {
            "session": row.session.external_id,
            "target": _target(row.target),
            "discarded_checkpoints": row.discarded_checkpoints,
            "discarded_tool_calls": row.discarded_tool_calls,
            "result": "skipped" if row.skip else payload.action,
            "reason": f"{row.skip}: {row.reason}" if row.skip else None,
        }
        for row in preview.rows
    ]
    totals = preview.totals
    return _json(
        {
            "preview": rows,
            "totals": {
                "sessions": totals.sessions,
                "recover": totals.recover,
                "skipped": totals.skipped,
                "discarded_checkpoints": totals.discarded_checkpoints,
                "discarded_tool_calls": totals.discarded_tool_calls,
            },
        }
    )


@router.post("/recoveries", response={202: StartedOut, **ERRORS}, auth=RECOVER)
def start_recovery(request: HttpRequest, payload: RecoveryIn) -> Any:
    """Queue the batch (a reason is required); follow it with `GET /recoveries/{id}`."""
    recovery = fleet.start_recovery(
        _selection(payload),
        fleet.Reach.for_token(_token(request)),
        actor=_actor(request),
        reason=payload.reason,
        start=run_recovery.delay,
    )
    return _json({"id": recovery.pk, "state": recovery.state}, status=202)


def _recovery(request: HttpRequest, recovery_id: int) -> Recovery:
    project = _token(request).project
    recovery = Recovery.objects.filter(pk=recovery_id, project=project).first()
    if recovery is None:
        raise HttpError(404, f"no recovery {recovery_id} in project {project.slug!r}")
    return recovery


@router.get("/recoveries/{recovery_id}", response={200: RecoveryOut, **ERRORS})
def get_recovery(request: HttpRequest, recovery_id: int) -> Any:
    """Its state and counts, and each session: target, what it discarded, result, reason, new head."""
    recovery = _recovery(request, recovery_id)
    rows = fleet.recovery_rows(recovery, fleet.Reach.for_token(_token(request)).visible)
    items = [
        {
            "session": item.session.external_id,
            "target": _target(item.target) if item.target else None,
            "discarded_checkpoints": item.discarded_checkpoints,
            "discarded_tool_calls": item.discarded_tool_calls,
            "result": item.result,
            "reason": item.reason or None,
            "new_head": _target(item.new_head),
            "undo": item.undo or None,
        }
        for item in rows
    ]
    return _json(
        {
            "id": recovery.pk,
            "action": recovery.action,
            "rule": recovery.rule,
            "state": recovery.state,
            "reason": recovery.reason,
            "counts": {
                "total": recovery.total,
                "done": recovery.done,
                "skipped": recovery.skipped,
                "failed": recovery.failed,
            },
            "created_at": recovery.created_at,
            "finished_at": recovery.finished_at,
            "undone_at": recovery.undone_at,
            "sessions": items,
        }
    )


@router.post("/recoveries/{recovery_id}/undo", response={200: UndoOut, **ERRORS}, auth=RECOVER)
def undo_recovery(request: HttpRequest, recovery_id: int, payload: UndoIn) -> Any:
    """Return each restored session to the head it had before the batch (a new head); sessions the agent wrote
    to since are listed in `kept`, not forced. Forks made by the batch are archived. 409 before it finishes or
    once undone."""
    recovery = _recovery(request, recovery_id)
    report = fleet.undo_recovery(recovery, actor=_actor(request), reason=payload.reason)
    return _json({"undone": report.undone, "archived": report.archived, "kept": report.kept})
