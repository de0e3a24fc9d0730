"""The agent API's own routes (`/api/v1/`): sessions, checkpoints, diff, restore, fork, resume, live state,
phases, alerts."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import orjson
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from ninja import Field, Path, Query, Router, Schema
from ninja.errors import HttpError
from pydantic import model_validator

from .. import limits, services, store
from ..models import (
    AgentSession,
    AlertKind,
    AlertState,
    Checkpoint,
    CheckpointKind,
    CheckpointStatus,
    DriftAlert,
    Phase,
    PhaseStatus,
)
from ..services import phases as phase_services
from ..store import relative, tallies
from ..store.masking import AS_IT_IS, Masker
from .common import (
    ERRORS,
    WRITE,
    Count32,
    Count64,
    ExternalId,
    Identifier,
    Int32,
    JSONList,
    JSONObject,
    LongText,
    Reason,
    Strict,
    Timestamp,
    _actor,
    _json,
    _reader,
    _session,
    _session_to_write,
    _token,
)

router = Router()


class SessionIn(Strict):
    external_id: ExternalId
    agent: Identifier = Field(min_length=1, max_length=200)
    title: str | None = Field(default=None, max_length=300)
    execution_mode: Identifier | None = Field(default=None, max_length=50)
    metadata: JSONObject | None = None


class PatchOperation(Strict):
    """One RFC 6902 operation; `value` for add, replace and test, `from` for move and copy."""

    op: Literal["add", "remove", "replace", "move", "copy", "test"]
    path: str = Field(max_length=10_000, description='A JSON Pointer (RFC 6901) into the state; "" is the whole state.')
    value: Any = None
    from_: str | None = Field(default=None, alias="from", max_length=10_000)

    def as_operation(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_unset=True)


class Base(Strict):
    """The checkpoint a patch was made against, by id or by seq: it must be the session's head."""

    id: Annotated[int, Field(ge=1, le=limits.INT64_MAX)] | None = None
    seq: Annotated[int, Field(ge=1, le=limits.INT64_MAX)] | None = None

    @model_validator(mode="after")
    def _one(self) -> Base:
        if (self.id is None) == (self.seq is None):
            raise ValueError("name the base by id or by seq (one of them)")
        return self


class CheckpointIn(Strict):
    name: str = Field(default="", max_length=200)
    kind: CheckpointKind = CheckpointKind.STEP
    state: Any = Field(
        default=None,
        description="Any JSON document: the agent's state at this point. Give it or `state_patch`, not both.",
    )
    state_patch: list[PatchOperation] | None = Field(
        default=None,
        max_length=100_000,
        description="Instead of `state`: an RFC 6902 JSON Patch turning the state of `base` (by default the head) "
        "into this checkpoint's. 409 `base_moved` (nothing stored) when `base` or `restore_generation` is no "
        "longer the session's; 422 naming the operation when the patch does not apply.",
    )
    base: Base | None = Field(
        default=None,
        description="With `state_patch`: the checkpoint the patch was made against; it must be the session's head.",
    )
    restore_generation: Count64 | None = Field(
        default=None,
        description="With `state_patch`: the session's restore generation the agent last saw (from resume or the "
        "last create); a restore or undo since makes it 409 `base_moved`.",
    )
    status: CheckpointStatus = CheckpointStatus.COMPLETED
    status_reason: LongText = ""
    step: Int32 | None = Field(default=None, description="May be negative (LangGraph's input checkpoint is -1).")
    phase: Int32 | None = None
    created_at: Timestamp | None = Field(default=None, description="Without an offset, UTC.")
    idempotency_key: Identifier = Field(default="", max_length=200)
    operation_id: Identifier = Field(default="", max_length=200)
    metadata: JSONObject = Field(default_factory=dict)
    parent: Annotated[int, Field(ge=1, le=limits.INT64_MAX)] | None = Field(
        default=None,
        description="The id of an earlier checkpoint of the session to branch from (time travel); "
        "by default the session's head.",
    )

    @model_validator(mode="before")
    @classmethod
    def _state_or_patch(cls, data: Any) -> Any:
        if isinstance(data, dict):
            if ("state" in data) == ("state_patch" in data):
                raise ValueError("give `state` (a whole state) or `state_patch` (a JSON Patch), exactly one of them")
            if "state" in data and ("base" in data or "restore_generation" in data):
                raise ValueError("`base` and `restore_generation` go with a `state_patch`")
        return data

    def to_input(self) -> services.CheckpointInput:
        # the state as parsed, not through model_dump: that rebuilds every dict and list of it (~10 ms at 2 MB)
        fields = self.model_dump(exclude={"session", "state", "state_patch", "base"})
        patch = [operation.as_operation() for operation in self.state_patch] if self.state_patch is not None else None
        base_id, base_seq = (self.base.id, self.base.seq) if self.base else (None, None)
        return services.CheckpointInput(**fields, state=self.state, state_patch=patch, base=base_id, base_seq=base_seq)


class BatchCheckpointIn(CheckpointIn):
    session: ExternalId = Field(description="The session's external id.")


class BatchIn(Strict):
    checkpoints: list[BatchCheckpointIn] = Field(min_length=1, max_length=10_000)


class RestoreIn(Strict):
    reason: Reason = ""


class ForkIn(Strict):
    title: str = Field(default="", max_length=300)
    external_id: Identifier = Field(default="", max_length=200, pattern=r"^[^/]*$")


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
    state_hash: str | None = Field(description="null for a read-only token in a project where secrets were found")
    root: str | None = Field(description="null for a read-only token in a project where secrets were found")
    raw_bytes: int
    stored_bytes: int | None = Field(description="null for a read-only token in a project where secrets were found")
    pinned: bool
    operation_id: str
    idempotency_key: str
    metadata: dict[str, Any]


class CheckpointCreatedOut(CheckpointOut):
    restore_generation: int = Field(description="The session's, when this was stored: send it with the next patch.")


class CheckpointDetailOut(CheckpointOut):
    state: Any = Field(None, description="The whole state; absent when `state_patch` is sent instead.")
    state_tag: str = Field(description="Names exactly this state as this token reads it: send it as `base_tag`.")
    state_patch: list[dict[str, Any]] | None = Field(
        None, description="With `base`: RFC 6902 operations (add, remove, replace) turning the base's state into this."
    )
    base: dict[str, Any] | None = Field(None, description="`{id, tag}` of the state `state_patch` applies to.")


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
    stored_bytes: int | None = Field(description="null for a read-only token in a project where secrets were found")
    created_at: datetime
    updated_at: datetime
    last_seen_at: datetime | None
    metadata: dict[str, Any]


class ResumeOut(Schema):
    session: str
    restore_generation: int
    checkpoint: CheckpointOut
    state: Any
    state_tag: str = Field(description="Names exactly this state as this token reads it: a `base_tag`.")


class SummaryOut(Schema):
    session: str
    checkpoint_count: int
    raw_bytes: int
    stored_bytes: int | None = Field(description="null for a read-only token in a project where secrets were found")
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


CheckpointId = Annotated[int, Path(ge=1, le=limits.INT64_MAX)]
PhaseNumber = Annotated[int, Path(ge=0, le=limits.INT32_MAX)]


# ---- helpers ---------------------------------------------------------------------------------

_CHECKPOINT_FIELDS = (
    "id", "seq", "parent_id", "name", "kind", "status", "status_reason", "step", "phase", "created_at",
    "received_at", "state_hash", "root", "raw_bytes", "stored_bytes", "pinned", "operation_id",
    "idempotency_key", "metadata",
)  # fmt: skip


def checkpoint_dict(
    checkpoint: Checkpoint | dict[str, Any], session_external_id: str, shown: Masker = AS_IT_IS
) -> dict[str, Any]:
    """The checkpoint as the API shows it; with `shown` active (a read-only token in a project where secrets were
    found), its texts masked and no digests or stored size: they would let a reader confirm a guess of the state,
    or learn that the same content is stored in another project."""
    row = checkpoint if isinstance(checkpoint, dict) else {f: getattr(checkpoint, f) for f in _CHECKPOINT_FIELDS}
    data = {field: row[field] for field in _CHECKPOINT_FIELDS}
    data["parent"] = data.pop("parent_id")
    data["state_hash"] = bytes(row["state_hash"]).hex()
    data["root"] = bytes(row["root"]).hex()
    data["session"] = session_external_id
    if shown.active:
        data.update(state_hash=None, root=None, stored_bytes=None)
        data.update({field: shown.json(data[field]) for field in ("name", "status_reason", "metadata")})
    return data


def session_dict(session: AgentSession, shown: Masker = AS_IT_IS) -> dict[str, Any]:
    head = session.head
    return {
        "id": session.pk,
        "project": session.project.slug,
        "external_id": session.external_id,
        "agent": session.agent,
        "title": session.title,
        "status": session.status,
        "execution_mode": session.execution_mode,
        "head": checkpoint_dict(head, session.external_id, shown) if head else None,
        "forked_from": session.forked_from_id,
        "restore_generation": session.restore_generation,
        "last_seq": session.last_seq,
        **_sizes(tallies.session_totals(session), shown),
        "created_at": session.created_at,
        "updated_at": session.updated_at,
        "last_seen_at": session.last_seen_at,
        "metadata": shown.json(session.metadata),
    }


def _sizes(totals: dict[str, Any], shown: Masker) -> dict[str, Any]:
    """A session's totals; with `shown` active, no stored size: how little a session stored tells that its content
    is stored already, in another project too (as a checkpoint's `stored_bytes` would)."""
    return {**totals, "stored_bytes": None} if shown.active else totals


def _checkpoint(request: HttpRequest, checkpoint_id: int) -> Checkpoint:
    project = _token(request).project
    checkpoint = (
        Checkpoint.objects.select_related("session__project").filter(pk=checkpoint_id, session__project=project).first()
    )
    if checkpoint is None:
        raise HttpError(404, f"no checkpoint {checkpoint_id} in project {project.slug!r}")
    return checkpoint


def _with_state(data: dict[str, Any], root: bytes | memoryview, shown: Masker = AS_IT_IS) -> HttpResponse:
    """Embed the stored canonical JSON as is: a 2 MB state is not parsed and re-encoded (but when it is masked)."""
    if shown.active:
        data["state"] = shown(store.load_shared(bytes(root)))
        data["state_tag"] = relative.tag(bytes(root), data["state"], shown)
    else:
        data["state"] = orjson.Fragment(store.load_state_json(bytes(root)))
        data["state_tag"] = relative.tag(bytes(root), None, shown)
    return _json(data)


# ---- sessions --------------------------------------------------------------------------------


@router.post("/sessions", response={200: SessionOut, 201: SessionOut, **ERRORS}, tags=["sessions"], auth=WRITE)
def create_or_update_session(request: HttpRequest, payload: SessionIn) -> Any:
    """Create a session, or update the given fields of an existing one (200)."""
    session, created = services.upsert_session(_token(request).project, **payload.model_dump())
    session = AgentSession.objects.select_related("project", "head").get(pk=session.pk)
    return _json(session_dict(session), status=201 if created else 200)


@router.get("/sessions/{external_id}", response={200: SessionOut, **ERRORS}, tags=["sessions"])
def get_session(request: HttpRequest, external_id: str) -> Any:
    return session_dict(_session(request, external_id), _reader(request))


@router.get("/sessions/{external_id}/summary", response={200: SummaryOut, **ERRORS}, tags=["sessions"])
def get_summary(request: HttpRequest, external_id: str) -> Any:
    session, shown = _session(request, external_id), _reader(request)
    summary = _sizes(tallies.session_summary(session), shown)
    for end in ("first", "last"):
        summary[end] = checkpoint_dict(summary[end], external_id, shown) if summary[end] else None
    return {"session": external_id, **summary}


@router.get("/sessions/{external_id}/resume", response={200: ResumeOut, **ERRORS}, tags=["sessions"])
def resume(request: HttpRequest, external_id: str) -> Any:
    """The checkpoint to resume from (the head) with its state; `restore_generation` grows on each restore."""
    session = _session(request, external_id)
    if session.head is None:
        raise HttpError(404, f"session {external_id!r} has no checkpoint to resume from")
    data = {
        "session": external_id,
        "restore_generation": session.restore_generation,
        "checkpoint": checkpoint_dict(session.head, external_id, _reader(request)),
    }
    return _with_state(data, session.head.root, _reader(request))


@router.put("/sessions/{external_id}/live-state", response={200: LiveStateOut, **ERRORS}, tags=["sessions"], auth=WRITE)
def put_live_state(request: HttpRequest, external_id: str, payload: LiveStateIn) -> Any:
    """Heartbeat with the agent's current state; routine checkpoints are taken from it."""
    session = services.record_live_state(_session(request, external_id), state=payload.state)
    live_root = session.live_root or b""  # just recorded: never empty
    return {"session": external_id, "received_at": session.live_state_at, "live_root": bytes(live_root).hex()}


# ---- checkpoints -----------------------------------------------------------------------------


@router.post(
    "/sessions/{external_id}/checkpoints",
    response={200: CheckpointCreatedOut, 201: CheckpointCreatedOut, **ERRORS},
    tags=["checkpoints"],
    auth=WRITE,
)
def create_checkpoint(request: HttpRequest, external_id: str, payload: CheckpointIn) -> Any:
    """201 with the new checkpoint; 200 with the original when the idempotency key was seen before (matched
    before a patch's base is looked at: a retried patch returns what it stored). With `state_patch`: 409
    `base_moved` naming the head when the base is not the head any more, 422 naming the operation that does not
    apply; nothing is stored on either."""
    session = _session_to_write(request, external_id)
    checkpoint, created = services.create_checkpoint(session, payload.to_input())
    data = checkpoint_dict(checkpoint, external_id)
    return _json({**data, "restore_generation": session.restore_generation}, status=201 if created else 200)


@router.post("/checkpoints/batch", response={201: BatchOut, **ERRORS}, tags=["checkpoints"], auth=WRITE)
def create_batch(request: HttpRequest, payload: BatchIn) -> Any:
    """Many checkpoints, for one or more existing sessions, in order: all are stored or none."""
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


@router.get("/sessions/{external_id}/checkpoints", response={200: CheckpointPage, **ERRORS}, tags=["checkpoints"])
def list_checkpoints(
    request: HttpRequest,
    external_id: str,
    name: str | None = None,
    kind: CheckpointKind | None = None,
    status: CheckpointStatus | None = None,
    since: Timestamp | None = None,
    until: Timestamp | None = None,
    cursor: str | None = Query(None, description="next_cursor of the previous page"),
    limit: int = Query(100, ge=1, le=1000),
    order: Literal["asc", "desc"] = "asc",
) -> Any:
    """Checkpoint metadata in seq order (no states), filtered, with cursor pagination."""
    session = _session(request, external_id)
    qs = Checkpoint.objects.for_session(session).filtered(name=name, kind=kind, status=status, since=since, until=until)
    if cursor:
        if not (cursor.isascii() and cursor.isdigit() and len(cursor) <= 10):
            raise HttpError(400, "cursor is not one this API returned")
        qs = qs.filter(seq__gt=int(cursor)) if order == "asc" else qs.filter(seq__lt=int(cursor))
    rows = list(qs.order_by("seq" if order == "asc" else "-seq").values(*_CHECKPOINT_FIELDS)[: limit + 1])
    next_cursor = str(rows[limit - 1]["seq"]) if len(rows) > limit else None
    items = [checkpoint_dict(row, external_id, _reader(request)) for row in rows[:limit]]
    return _json({"items": items, "next_cursor": next_cursor})


@router.get("/checkpoints/{checkpoint_id}", response={200: CheckpointDetailOut, **ERRORS}, tags=["checkpoints"])
def get_checkpoint(
    request: HttpRequest,
    checkpoint_id: CheckpointId,
    base: int | None = Query(
        None,
        ge=1,
        le=limits.INT64_MAX,
        description="A checkpoint of the project whose state the reader holds: with `base_tag`, the state may come "
        "as `state_patch` (RFC 6902) against it. 404 when it is no checkpoint of the token's project.",
    ),
    base_tag: str | None = Query(
        None,
        max_length=64,
        description="The `state_tag` the base was read with: a patch is sent only against exactly that state "
        "(another tag, e.g. after a purge or with another token, gets the whole `state`).",
    ),
) -> Any:
    """The checkpoint with its `state` and `state_tag`; with `base` and `base_tag`, `state_patch` against the base
    when that is smaller (the reader applies it to its own copy: see Reading only what changed)."""
    checkpoint = _checkpoint(request, checkpoint_id)
    shown = _reader(request)
    data = checkpoint_dict(checkpoint, checkpoint.session.external_id, shown)
    if base is None:
        return _with_state(data, checkpoint.root, shown)
    base_root = Checkpoint.objects.filter(pk=base, session__project=_token(request).project).values_list(
        "root", flat=True
    )
    found = base_root.first()
    if found is None:  # unknown and another project's alike: nothing told apart
        raise HttpError(404, f"no base checkpoint {base} in project {_token(request).project.slug!r}")
    return _json(relative.relative_read(data, bytes(checkpoint.root), (base, bytes(found)), base_tag, shown))


@router.get(
    "/checkpoints/{checkpoint_id}/diff/{other_id}",
    response={200: dict[str, Any], **ERRORS},
    tags=["checkpoints"],
)
def diff_checkpoints(request: HttpRequest, checkpoint_id: CheckpointId, other_id: CheckpointId) -> Any:
    """Structural diff from the first checkpoint to the second (they may be in different sessions)."""
    a, b = _checkpoint(request, checkpoint_id), _checkpoint(request, other_id)
    return _json({"from": a.pk, "to": b.pk, **_reader(request).diff(store.diff_checkpoints(a, b)).as_dict()})


@router.post(
    "/checkpoints/{checkpoint_id}/restore", response={201: CheckpointOut, **ERRORS}, tags=["checkpoints"], auth=WRITE
)
def restore(request: HttpRequest, checkpoint_id: CheckpointId, payload: RestoreIn | None = None) -> Any:
    """Restore: a new head sharing this checkpoint's state; nothing is deleted."""
    checkpoint = _checkpoint(request, checkpoint_id)
    reason = payload.reason if payload else ""
    restored = services.restore_checkpoint(checkpoint, actor=_actor(request), reason=reason)
    return _json(checkpoint_dict(restored, checkpoint.session.external_id), status=201)


@router.post(
    "/checkpoints/{checkpoint_id}/fork", response={201: SessionOut, **ERRORS}, tags=["checkpoints"], auth=WRITE
)
def fork(request: HttpRequest, checkpoint_id: CheckpointId, payload: ForkIn | None = None) -> Any:
    """A new session whose first checkpoint shares this checkpoint's state."""
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
    started_at: Timestamp | None = None
    completed_at: Timestamp | None = None
    duration: float | None = Field(default=None, ge=0, description="Seconds.")
    retry_count: Count32 | None = None
    tokens_in: Count64 | None = None
    tokens_out: Count64 | None = None
    cost: float | None = Field(default=None, ge=0, le=limits.COST_MAX)
    errors: JSONList | None = None


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
    agent_name: Identifier = Field(min_length=1, max_length=200)
    status: str = Field(default="", max_length=50)
    content: str = Field(default="", max_length=1_000_000, description="Markdown.")
    model: str = Field(default="", max_length=200)
    tokens_in: Count64 = 0
    tokens_out: Count64 = 0
    tools_used: list[Annotated[str, Field(max_length=200)]] = Field(default_factory=list, max_length=1000)
    duration: float | None = Field(default=None, ge=0, description="Seconds.")
    error: LongText = ""


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


def phase_dict(phase: Phase) -> dict[str, Any]:
    fields = ("number", "name", "status", "started_at", "completed_at", "duration", "retry_count", "tokens_in")
    data = {name: getattr(phase, name) for name in (*fields, "tokens_out", "errors")}
    return {"session": phase.session.external_id, **data, "cost": float(phase.cost)}


@router.put(
    "/sessions/{external_id}/phases/{number}",
    response={200: PhaseOut, 201: PhaseOut, **ERRORS},
    tags=["phases"],
    auth=WRITE,
)
def report_phase(request: HttpRequest, external_id: str, number: PhaseNumber, payload: PhaseIn) -> Any:
    """Create (201, `name` required) or update (200) a phase; only the fields sent change."""
    session = _session(request, external_id)
    fields = payload.model_dump(exclude_unset=True)
    if any(value is None for name, value in fields.items() if name not in ("started_at", "completed_at", "duration")):
        raise HttpError(422, "only started_at, completed_at and duration may be null")
    phase, created = phase_services.report_phase(session, number, actor=_actor(request), **fields)
    phase.session = session
    return _json(phase_dict(phase), status=201 if created else 200)


@router.post(
    "/sessions/{external_id}/phases/{number}/outputs",
    response={201: AgentOutputOut, **ERRORS},
    tags=["phases"],
    auth=WRITE,
)
def add_phase_output(request: HttpRequest, external_id: str, number: PhaseNumber, payload: AgentOutputIn) -> Any:
    """An agent's output for the phase (markdown), shown on the phase page."""
    phase = _phase(request, external_id, number)
    output = phase_services.add_agent_output(phase, actor=_actor(request), **payload.model_dump())
    data = {"id": output.pk, "session": external_id, "phase": number, "agent_name": output.agent_name}
    return _json({**data, "status": output.status, "created_at": output.created_at}, status=201)


@router.get("/sessions/{external_id}/phases/{number}/feedback", response={200: FeedbackOut, **ERRORS}, tags=["phases"])
def get_phase_feedback(request: HttpRequest, external_id: str, number: PhaseNumber) -> Any:
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


ALERT_FIELDS = [
    "id", "session_id", "checkpoint_id", "kind", "severity", "state", "message", "evidence", "opened_at",
    "acknowledged_at", "resolved_at", "last_good_id",
]  # fmt: skip


@router.get("/alerts", response={200: list[AlertOut], **ERRORS}, tags=["alerts"])
def list_alerts(request: HttpRequest, filters: Query[AlertFilter]) -> Any:
    qs = (
        DriftAlert.objects.filter(session__project=_token(request).project)
        .select_related("session")
        .only(*ALERT_FIELDS, "session__external_id")
    )
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
            "message": _reader(request).text(alert.message),
            "evidence": _reader(request).json(alert.evidence),
            "opened_at": alert.opened_at,
            "acknowledged_at": alert.acknowledged_at,
            "resolved_at": alert.resolved_at,
            "last_good": alert.last_good_id,
        }
        for alert in qs.filter(condition).order_by("-opened_at", "-pk")[:500]
    ]
