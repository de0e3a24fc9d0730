"""The agent API (`/api/v1/`): sessions, checkpoints, diff, restore, fork, resume, live state.

Every endpoint needs a project-scoped bearer token; write endpoints need the `write` scope.
Bad input gets a 4xx with {"detail": …} and writes nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

import orjson
from django.conf import settings
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from ninja import Field, NinjaAPI, Query, Schema
from ninja.errors import HttpError
from ninja.parser import Parser
from ninja.renderers import BaseRenderer
from ninja.security import HttpBearer
from pydantic import ConfigDict

from . import jsoncodec, phases, services, store
from .models import (
    AgentSession,
    AlertKind,
    AlertState,
    ApiToken,
    Checkpoint,
    CheckpointKind,
    CheckpointStatus,
    DriftAlert,
    Phase,
    PhaseStatus,
)


class PayloadTooLarge(Exception):
    pass


class StrictJSONParser(Parser):
    """orjson, with NaN/Infinity refused, big integers kept exact, and the body size capped."""

    def parse_body(self, request: HttpRequest) -> Any:
        limit = settings.CHECKPOINT_MAX_BODY_BYTES
        if int(request.META.get("CONTENT_LENGTH") or 0) > limit or len(request.body) > limit:
            raise PayloadTooLarge(f"request body is larger than {limit} bytes")
        data = jsoncodec.loads(request.body)
        if not isinstance(data, dict):
            raise jsoncodec.InvalidJSON("the request body must be a JSON object")
        return data


class ORJSONRenderer(BaseRenderer):
    media_type = "application/json"

    def render(self, request: HttpRequest, data: Any, *, response_status: int) -> bytes:
        return orjson.dumps(data, default=_json_default)


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes | memoryview):
        return bytes(value).hex()
    return str(value)


class TokenAuth(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> ApiToken | None:
        return services.authenticate_token(token)


api = NinjaAPI(
    title="Checkpoint Console API",
    version="1",
    description="Store, browse, diff, restore and fork the checkpoints of long-running agents.",
    auth=TokenAuth(),
    parser=StrictJSONParser(),
    renderer=ORJSONRenderer(),
    urls_namespace="api",
)


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    cause = exc.__cause__
    if isinstance(cause, PayloadTooLarge):
        return api.create_response(request, {"detail": str(cause)}, status=413)
    if isinstance(cause, jsoncodec.InvalidJSON):
        return api.create_response(request, {"detail": str(cause)}, status=400)
    return api.create_response(request, {"detail": exc.message}, status=exc.status_code)


@api.exception_handler(services.InvalidState)
def _invalid_state(request: HttpRequest, exc: services.InvalidState) -> HttpResponse:
    return api.create_response(request, {"detail": f"invalid state: {exc}"}, status=422)


@api.exception_handler(services.CheckpointError)
def _domain_error(request: HttpRequest, exc: services.CheckpointError) -> HttpResponse:
    return api.create_response(request, {"detail": str(exc)}, status=409)


# ---- schemas ---------------------------------------------------------------------------------


class Strict(Schema):
    model_config = ConfigDict(extra="forbid")


# A session id is one URL path segment: "/" would make it unreachable.
EXTERNAL_ID = r"^[^/]+$"


class SessionIn(Strict):
    external_id: str = Field(min_length=1, max_length=200, pattern=EXTERNAL_ID)
    agent: str = Field(min_length=1, max_length=200)
    title: str | None = Field(default=None, max_length=300)
    execution_mode: str | None = Field(default=None, max_length=50)
    metadata: dict[str, Any] | None = None


class CheckpointIn(Strict):
    name: str = Field(default="", max_length=200)
    kind: CheckpointKind = CheckpointKind.STEP
    state: Any = Field(description="Any JSON document: the agent's state at this point.")
    status: CheckpointStatus = CheckpointStatus.COMPLETED
    status_reason: str = ""
    step: int | None = None
    phase: int | None = None
    created_at: datetime | None = None
    idempotency_key: str = Field(default="", max_length=200)
    operation_id: str = Field(default="", max_length=200)
    metadata: dict[str, Any] = Field(default_factory=dict)

    def to_input(self) -> services.CheckpointInput:
        fields = self.model_dump(exclude={"session"})
        if fields["created_at"] is not None and fields["created_at"].tzinfo is None:
            fields["created_at"] = fields["created_at"].replace(tzinfo=UTC)  # agents' naive clocks are UTC
        return services.CheckpointInput(**fields)


class BatchCheckpointIn(CheckpointIn):
    session: str = Field(min_length=1, max_length=200, description="The session's external id.")


class BatchIn(Strict):
    checkpoints: list[BatchCheckpointIn] = Field(min_length=1, max_length=10_000)


class RestoreIn(Strict):
    reason: str = ""


class ForkIn(Strict):
    title: str = Field(default="", max_length=300)
    external_id: str = Field(default="", max_length=200, pattern=r"^[^/]*$")


class LiveStateIn(Strict):
    state: Any


class LiveStateOut(Schema):
    session: str
    received_at: datetime
    live_root: str


class CheckpointOut(Schema):
    id: int
    session: str
    seq: int
    parent: int | None
    name: str
    kind: str
    status: str
    status_reason: str
    step: int | None
    phase: int | None
    created_at: datetime
    received_at: datetime
    state_hash: str
    root: str
    raw_bytes: int
    stored_bytes: int
    pinned: bool
    operation_id: str
    idempotency_key: str
    metadata: dict[str, Any]


class CheckpointDetailOut(CheckpointOut):
    state: Any


class CheckpointPage(Schema):
    items: list[CheckpointOut]
    next_cursor: str | None


class SessionOut(Schema):
    id: int
    project: str
    external_id: str
    agent: str
    title: str
    status: str
    execution_mode: str
    head: CheckpointOut | None
    forked_from: int | None
    restore_generation: int
    last_seq: int
    checkpoint_count: int
    raw_bytes: int
    stored_bytes: int
    created_at: datetime
    updated_at: datetime
    last_seen_at: datetime | None
    metadata: dict[str, Any]


class ResumeOut(Schema):
    session: str
    restore_generation: int
    checkpoint: CheckpointOut
    state: Any


class SummaryOut(Schema):
    session: str
    checkpoint_count: int
    raw_bytes: int
    stored_bytes: int
    by_name: dict[str, int]
    by_kind: dict[str, int]
    by_status: dict[str, int]
    first: CheckpointOut | None
    last: CheckpointOut | None
    duration_seconds: float


class BatchOut(Schema):
    created: int
    existing: int
    checkpoints: list[dict[str, Any]]


class AlertOut(Schema):
    id: int
    session: str
    checkpoint: int | None
    kind: str
    severity: str
    state: str
    message: str
    evidence: dict[str, Any]
    opened_at: datetime
    acknowledged_at: datetime | None
    resolved_at: datetime | None
    last_good: int | None


class Detail(Schema):
    detail: Any


ERRORS = {400: Detail, 401: Detail, 403: Detail, 404: Detail, 409: Detail, 413: Detail, 422: Detail}

# ---- helpers ---------------------------------------------------------------------------------

_CHECKPOINT_FIELDS = (
    "id", "seq", "parent_id", "name", "kind", "status", "status_reason", "step", "phase", "created_at",
    "received_at", "state_hash", "root", "raw_bytes", "stored_bytes", "pinned", "operation_id",
    "idempotency_key", "metadata",
)  # fmt: skip


def checkpoint_dict(checkpoint: Checkpoint | dict[str, Any], session_external_id: str) -> dict[str, Any]:
    row = checkpoint if isinstance(checkpoint, dict) else {f: getattr(checkpoint, f) for f in _CHECKPOINT_FIELDS}
    data = {field: row[field] for field in _CHECKPOINT_FIELDS}
    data["parent"] = data.pop("parent_id")
    data["state_hash"] = bytes(row["state_hash"]).hex()
    data["root"] = bytes(row["root"]).hex()
    data["session"] = session_external_id
    return data


def session_dict(session: AgentSession) -> dict[str, Any]:
    head = session.head
    return {
        "id": session.pk,
        "project": session.project.slug,
        "external_id": session.external_id,
        "agent": session.agent,
        "title": session.title,
        "status": session.status,
        "execution_mode": session.execution_mode,
        "head": checkpoint_dict(head, session.external_id) if head else None,
        "forked_from": session.forked_from_id,
        "restore_generation": session.restore_generation,
        "last_seq": session.last_seq,
        **services.session_totals(session),
        "created_at": session.created_at,
        "updated_at": session.updated_at,
        "last_seen_at": session.last_seen_at,
        "metadata": session.metadata,
    }


def _token(request: HttpRequest) -> ApiToken:
    return request.auth  # type: ignore[attr-defined,no-any-return]


def _actor(request: HttpRequest) -> services.Actor:
    return services.Actor.for_token(_token(request))


def _require_write(request: HttpRequest) -> None:
    if not _token(request).has_scope("write"):
        raise HttpError(403, "this token is read-only")


def _session(request: HttpRequest, external_id: str) -> AgentSession:
    project = _token(request).project
    session = (
        AgentSession.objects.select_related("project", "head").filter(project=project, external_id=external_id).first()
    )
    if session is None:
        raise HttpError(404, f"no session {external_id!r} in project {project.slug!r}")
    return session


def _checkpoint(request: HttpRequest, checkpoint_id: int) -> Checkpoint:
    project = _token(request).project
    checkpoint = (
        Checkpoint.objects.select_related("session__project").filter(pk=checkpoint_id, session__project=project).first()
    )
    if checkpoint is None:
        raise HttpError(404, f"no checkpoint {checkpoint_id} in project {project.slug!r}")
    return checkpoint


def _json(data: dict[str, Any], status: int = 200) -> HttpResponse:
    return HttpResponse(orjson.dumps(data, default=_json_default), status=status, content_type="application/json")


def _with_state(data: dict[str, Any], root: bytes) -> HttpResponse:
    """Embed the stored canonical JSON as is: a 2 MB state is not parsed and re-encoded."""
    data["state"] = orjson.Fragment(store.load_state_json(bytes(root)))
    return _json(data)


# ---- sessions --------------------------------------------------------------------------------


@api.post("/sessions", response={200: SessionOut, 201: SessionOut, **ERRORS}, tags=["sessions"])
def create_or_update_session(request: HttpRequest, payload: SessionIn) -> Any:
    """Create a session, or update the given fields of an existing one (200)."""
    _require_write(request)
    session, created = services.upsert_session(_token(request).project, **payload.model_dump())
    session = AgentSession.objects.select_related("project", "head").get(pk=session.pk)
    return _json(session_dict(session), status=201 if created else 200)


@api.get("/sessions/{external_id}", response={200: SessionOut, **ERRORS}, tags=["sessions"])
def get_session(request: HttpRequest, external_id: str) -> Any:
    return session_dict(_session(request, external_id))


@api.get("/sessions/{external_id}/summary", response={200: SummaryOut, **ERRORS}, tags=["sessions"])
def get_summary(request: HttpRequest, external_id: str) -> Any:
    session = _session(request, external_id)
    summary = services.session_summary(session)
    for end in ("first", "last"):
        summary[end] = checkpoint_dict(summary[end], external_id) if summary[end] else None
    return {"session": external_id, **summary}


@api.get("/sessions/{external_id}/resume", response={200: ResumeOut, **ERRORS}, tags=["sessions"])
def resume(request: HttpRequest, external_id: str) -> Any:
    """The checkpoint to resume from (the head) with its state; `restore_generation` grows on each restore."""
    session = _session(request, external_id)
    if session.head is None:
        raise HttpError(404, f"session {external_id!r} has no checkpoint to resume from")
    data = {
        "session": external_id,
        "restore_generation": session.restore_generation,
        "checkpoint": checkpoint_dict(session.head, external_id),
    }
    return _with_state(data, session.head.root)


@api.put("/sessions/{external_id}/live-state", response={200: LiveStateOut, **ERRORS}, tags=["sessions"])
def put_live_state(request: HttpRequest, external_id: str, payload: LiveStateIn) -> Any:
    """Heartbeat with the agent's current state; routine checkpoints are taken from it."""
    _require_write(request)
    session = services.record_live_state(_session(request, external_id), state=payload.state)
    return {"session": external_id, "received_at": session.live_state_at, "live_root": bytes(session.live_root).hex()}


# ---- checkpoints -----------------------------------------------------------------------------


@api.post(
    "/sessions/{external_id}/checkpoints",
    response={200: CheckpointOut, 201: CheckpointOut, **ERRORS},
    tags=["checkpoints"],
)
def create_checkpoint(request: HttpRequest, external_id: str, payload: CheckpointIn) -> Any:
    """201 with the new checkpoint; 200 with the original when the idempotency key was seen before."""
    _require_write(request)
    session = _session(request, external_id)
    checkpoint, created = services.create_checkpoint(session, payload.to_input())
    return _json(checkpoint_dict(checkpoint, external_id), status=201 if created else 200)


@api.post("/checkpoints/batch", response={201: BatchOut, **ERRORS}, tags=["checkpoints"])
def create_batch(request: HttpRequest, payload: BatchIn) -> Any:
    """Many checkpoints, for one or more existing sessions, in order: all are stored or none."""
    _require_write(request)
    project = _token(request).project
    wanted = list(dict.fromkeys(item.session for item in payload.checkpoints))
    sessions = {s.external_id: s for s in AgentSession.objects.filter(project=project, external_id__in=wanted)}
    missing = [name for name in wanted if name not in sessions]
    if missing:
        raise HttpError(404, f"unknown session(s) in project {project.slug!r}: {', '.join(missing)}")
    grouped: dict[str, list[services.CheckpointInput]] = {name: [] for name in wanted}
    for item in payload.checkpoints:
        grouped[item.session].append(item.to_input())
    results = services.ingest_checkpoints([(sessions[name], items) for name, items in grouped.items()])
    created = sum(1 for _, was_created in results if was_created)
    names = {s.pk: name for name, s in sessions.items()}
    rows = [{"id": c.pk, "session": names[c.session_id], "seq": c.seq, "created": new} for c, new in results]
    return _json({"created": created, "existing": len(results) - created, "checkpoints": rows}, status=201)


@api.get("/sessions/{external_id}/checkpoints", response={200: CheckpointPage, **ERRORS}, tags=["checkpoints"])
def list_checkpoints(
    request: HttpRequest,
    external_id: str,
    name: str | None = None,
    kind: CheckpointKind | None = None,
    status: CheckpointStatus | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    cursor: str | None = Query(None, description="next_cursor of the previous page"),
    limit: int = Query(100, ge=1, le=1000),
    order: Literal["asc", "desc"] = "asc",
) -> Any:
    """Checkpoint metadata in seq order (no states), filtered, with cursor pagination."""
    session = _session(request, external_id)
    qs = Checkpoint.objects.for_session(session).filtered(name=name, kind=kind, status=status, since=since, until=until)
    if cursor:
        if not cursor.isdigit():
            raise HttpError(400, "cursor is not one this API returned")
        qs = qs.filter(seq__gt=int(cursor)) if order == "asc" else qs.filter(seq__lt=int(cursor))
    rows = list(qs.order_by("seq" if order == "asc" else "-seq").values(*_CHECKPOINT_FIELDS)[: limit + 1])
    next_cursor = str(rows[limit - 1]["seq"]) if len(rows) > limit else None
    items = [checkpoint_dict(row, external_id) for row in rows[:limit]]
    return _json({"items": items, "next_cursor": next_cursor})


@api.get("/checkpoints/{checkpoint_id}", response={200: CheckpointDetailOut, **ERRORS}, tags=["checkpoints"])
def get_checkpoint(request: HttpRequest, checkpoint_id: int) -> Any:
    checkpoint = _checkpoint(request, checkpoint_id)
    return _with_state(checkpoint_dict(checkpoint, checkpoint.session.external_id), checkpoint.root)


@api.get(
    "/checkpoints/{checkpoint_id}/diff/{other_id}",
    response={200: dict[str, Any], **ERRORS},
    tags=["checkpoints"],
)
def diff_checkpoints(request: HttpRequest, checkpoint_id: int, other_id: int) -> Any:
    """Structural diff from the first checkpoint to the second (they may be in different sessions)."""
    a, b = _checkpoint(request, checkpoint_id), _checkpoint(request, other_id)
    return _json({"from": a.pk, "to": b.pk, **services.diff_checkpoints(a, b).as_dict()})


@api.post("/checkpoints/{checkpoint_id}/restore", response={201: CheckpointOut, **ERRORS}, tags=["checkpoints"])
def restore(request: HttpRequest, checkpoint_id: int, payload: RestoreIn | None = None) -> Any:
    """Restore: a new head sharing this checkpoint's state; nothing is deleted."""
    _require_write(request)
    checkpoint = _checkpoint(request, checkpoint_id)
    reason = payload.reason if payload else ""
    restored = services.restore_checkpoint(checkpoint, actor=_actor(request), reason=reason)
    return _json(checkpoint_dict(restored, checkpoint.session.external_id), status=201)


@api.post("/checkpoints/{checkpoint_id}/fork", response={201: SessionOut, **ERRORS}, tags=["checkpoints"])
def fork(request: HttpRequest, checkpoint_id: int, payload: ForkIn | None = None) -> Any:
    """A new session whose first checkpoint shares this checkpoint's state."""
    _require_write(request)
    checkpoint = _checkpoint(request, checkpoint_id)
    options = payload or ForkIn()
    session = services.fork_session(
        checkpoint, actor=_actor(request), title=options.title, external_id=options.external_id
    )
    session = AgentSession.objects.select_related("project", "head").get(pk=session.pk)
    return _json(session_dict(session), status=201)


# ---- phases ----------------------------------------------------------------------------------


class PhaseIn(Strict):
    name: str | None = Field(default=None, min_length=1, max_length=200)
    status: PhaseStatus | None = None
    started_at: datetime | None = None
    completed_at: datetime | None = None
    duration: float | None = Field(default=None, ge=0, description="Seconds.")
    retry_count: int | None = Field(default=None, ge=0)
    tokens_in: int | None = Field(default=None, ge=0)
    tokens_out: int | None = Field(default=None, ge=0)
    cost: float | None = Field(default=None, ge=0)
    errors: list[Any] | None = None


class PhaseOut(Schema):
    session: str
    number: int
    name: str
    status: str
    started_at: datetime | None
    completed_at: datetime | None
    duration: float | None
    retry_count: int
    tokens_in: int
    tokens_out: int
    cost: float
    errors: list[Any]


class AgentOutputIn(Strict):
    agent_name: str = Field(min_length=1, max_length=200)
    status: str = Field(default="", max_length=50)
    content: str = Field(default="", description="Markdown.")
    model: str = Field(default="", max_length=200)
    tokens_in: int = Field(default=0, ge=0)
    tokens_out: int = Field(default=0, ge=0)
    tools_used: list[str] = Field(default_factory=list)
    duration: float | None = Field(default=None, ge=0, description="Seconds.")
    error: str = ""


class AgentOutputOut(Schema):
    id: int
    session: str
    phase: int
    agent_name: str
    status: str
    created_at: datetime


class FeedbackOut(Schema):
    session: str
    phase: int
    action: str
    approved: bool
    comments: str
    requested_changes: list[str]
    retry_count: int
    reviewer: str
    created_at: datetime


def _phase(request: HttpRequest, external_id: str, number: int) -> Phase:
    session = _session(request, external_id)
    phase = Phase.objects.filter(session=session, number=number).first()
    if phase is None:
        raise HttpError(404, f"session {external_id!r} has no phase {number}")
    phase.session = session
    return phase


def _aware(moment: datetime | None) -> datetime | None:
    return moment.replace(tzinfo=UTC) if moment is not None and moment.tzinfo is None else moment


def phase_dict(phase: Phase) -> dict[str, Any]:
    fields = ("number", "name", "status", "started_at", "completed_at", "duration", "retry_count", "tokens_in")
    data = {name: getattr(phase, name) for name in (*fields, "tokens_out", "errors")}
    return {"session": phase.session.external_id, **data, "cost": float(phase.cost)}


@api.put("/sessions/{external_id}/phases/{number}", response={200: PhaseOut, 201: PhaseOut, **ERRORS}, tags=["phases"])
def report_phase(request: HttpRequest, external_id: str, number: int, payload: PhaseIn) -> Any:
    """Create (201, `name` required) or update (200) a phase; only the fields sent change."""
    _require_write(request)
    session = _session(request, external_id)
    fields = payload.model_dump(exclude_unset=True)
    for name in ("started_at", "completed_at"):
        if name in fields:
            fields[name] = _aware(fields[name])  # agents' naive clocks are UTC
    if any(value is None for name, value in fields.items() if name not in ("started_at", "completed_at", "duration")):
        raise HttpError(422, "only started_at, completed_at and duration may be null")
    phase, created = phases.report_phase(session, number, actor=_actor(request), **fields)
    phase.session = session
    return _json(phase_dict(phase), status=201 if created else 200)


@api.post("/sessions/{external_id}/phases/{number}/outputs", response={201: AgentOutputOut, **ERRORS}, tags=["phases"])
def add_phase_output(request: HttpRequest, external_id: str, number: int, payload: AgentOutputIn) -> Any:
    """An agent's output for the phase (markdown), shown on the phase page."""
    _require_write(request)
    phase = _phase(request, external_id, number)
    output = phases.add_agent_output(phase, actor=_actor(request), **payload.model_dump())
    data = {"id": output.pk, "session": external_id, "phase": number, "agent_name": output.agent_name}
    return _json({**data, "status": output.status, "created_at": output.created_at}, status=201)


@api.get("/sessions/{external_id}/phases/{number}/feedback", response={200: FeedbackOut, **ERRORS}, tags=["phases"])
def get_phase_feedback(request: HttpRequest, external_id: str, number: int) -> Any:
    """The latest reviewer decision on the phase; 404 while there is none."""
    phase = _phase(request, external_id, number)
    latest = phase.feedback.order_by("-created_at", "-pk").first()
    if latest is None:
        raise HttpError(404, f"phase {number} of {external_id!r} has no feedback yet")
    return {
        "session": external_id,
        "phase": number,
        "action": latest.action,
        "approved": latest.approved,
        "comments": latest.comments,
        "requested_changes": latest.requested_changes,
        "retry_count": latest.retry_count,
        "reviewer": latest.reviewer_name,
        "created_at": latest.created_at,
    }


# ---- alerts ----------------------------------------------------------------------------------


class AlertFilter(Schema):
    session: str | None = None
    kind: AlertKind | None = None
    state: AlertState | None = None


@api.get("/alerts", response={200: list[AlertOut], **ERRORS}, tags=["alerts"])
def list_alerts(request: HttpRequest, filters: Query[AlertFilter]) -> Any:
    qs = DriftAlert.objects.filter(session__project=_token(request).project).select_related("session")
    condition = Q()
    if filters.session:
        condition &= Q(session__external_id=filters.session)
    if filters.kind:
        condition &= Q(kind=filters.kind)
    if filters.state:
        condition &= Q(state=filters.state)
    return [
        {
            "id": alert.pk,
            "session": alert.session.external_id,
            "checkpoint": alert.checkpoint_id,
            "kind": alert.kind,
            "severity": alert.severity,
            "state": alert.state,
            "message": alert.message,
            "evidence": alert.evidence,
            "opened_at": alert.opened_at,
            "acknowledged_at": alert.acknowledged_at,
            "resolved_at": alert.resolved_at,
            "last_good": alert.last_good_id,
        }
        for alert in qs.filter(condition).order_by("-opened_at")[:500]
    ]


__all__ = ["api"]
