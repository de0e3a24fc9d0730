"""The agent API (`/api/v1/`): sessions, checkpoints, diff, restore, fork, resume, live state.

Every endpoint needs a project-scoped bearer token holding the scope the endpoint names (`x-required-scope` in the
OpenAPI schema; models.Scope): `read`, or `write` for what changes data.
Bad input gets a 4xx with {"detail": …} and writes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, Literal

import orjson
from django.conf import settings
from django.db import InterfaceError, OperationalError, connection
from django.db.models import Q
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import Resolver404, resolve
from ninja import Field, NinjaAPI, Path, Query, Schema
from ninja.errors import HttpError, ValidationError
from ninja.operation import Operation, PathView
from ninja.parser import Parser
from ninja.renderers import BaseRenderer
from ninja.security import HttpBearer
from ninja.throttling import BaseThrottle, SimpleRateThrottle
from pydantic import AfterValidator, ConfigDict, model_validator

from . import limits, services, store
from .humanize import short_value
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
    Scope,
)
from .outbox.wanted import CACHE_ERRORS
from .services import phases as phase_services
from .store import jsoncodec, tallies

logger = logging.getLogger(__name__)


class StrictJSONParser(Parser):
    """orjson, with NaN/Infinity refused, big integers kept exact; `read_api_body` has capped the size."""

    def parse_body(self, request: HttpRequest) -> Any:
        data = jsoncodec.loads(request.body)
        if not isinstance(data, dict):
            raise jsoncodec.InvalidJSON("the request body must be a JSON object")
        return data


def read_api_body(get_response: Callable[[HttpRequest], HttpResponse]) -> Callable[[HttpRequest], HttpResponse]:
    """Middleware: API bodies are read here, within CHECKPOINT_MAX_BODY_BYTES (RequestBodyLimitMiddleware
    refused larger ones), not through `request.body`, which holds them to the console forms' smaller
    DATA_UPLOAD_MAX_MEMORY_SIZE: agents' states are larger than forms. What is read is kept where
    `request.body` finds it.
    """

    def middleware(request: HttpRequest) -> HttpResponse:
        if request.path_info.startswith(API_PATH) and request.method in ("POST", "PUT", "PATCH"):
            length = request.META.get("CONTENT_LENGTH") or "0"
            if not (length.isascii() and length.isdigit()):
                return _error(400, "the Content-Length header is not a number")
            request._body = request.read(settings.CHECKPOINT_MAX_BODY_BYTES)  # noqa: SLF001 - HttpRequest.body's own slot
        return get_response(request)

    return middleware


API_PATH = "/api/"


def _error(status: int, detail: str) -> HttpResponse:
    return HttpResponse(orjson.dumps({"detail": detail}), status=status, content_type="application/json")


class ORJSONRenderer(BaseRenderer):
    media_type = "application/json"

    def render(self, request: HttpRequest, data: Any, *, response_status: int) -> bytes:
        return jsoncodec.dumps(data, default=_json_default)


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes | memoryview):
        return bytes(value).hex()
    return str(value)


class TokenAuth(HttpBearer):
    """A usable (not revoked, not expired) token of the project holding `scope`. `require_scope` has checked the
    scope before the body was read, and its lookup is used again here."""

    def __init__(self, scope: Scope = Scope.READ) -> None:
        super().__init__()
        self.scope = scope

    def authenticate(self, request: HttpRequest, token: str) -> ApiToken | None:
        found = _looked_up(request, token)
        if found is not None and not found.has_scope(self.scope):
            raise HttpError(403, lacks_scope(self.scope))
        return found


WRITE = TokenAuth(Scope.WRITE)
SCOPE_EXTENSION = "x-required-scope"


def lacks_scope(scope: Scope) -> str:
    return f"this token lacks the {scope.value!r} scope"


def require_scope(get_response: Callable[[HttpRequest], HttpResponse]) -> Callable[[HttpRequest], HttpResponse]:
    """Middleware, before the body limit and the body's reading: a usable token without the scope its operation
    needs gets 403 at once, whatever body it sent (a read token posting 16 MiB to a write endpoint is not read,
    and is not told about the body). No token, an unknown one or an unknown route pass on: the API answers
    them (401, 404, 405) as before."""

    def middleware(request: HttpRequest) -> HttpResponse:
        if request.path_info.startswith(API_PATH):
            scope = required_scope(request)
            secret = _bearer(request)
            if scope is not None and secret:
                found = _looked_up(request, secret)
                if found is not None and not found.has_scope(scope):
                    return _error(403, lacks_scope(scope))
        return get_response(request)

    return middleware


def _bearer(request: HttpRequest) -> str | None:
    header = request.headers.get("Authorization", "")
    kind, _, secret = header.partition(" ")
    return secret.strip() if kind.lower() == "bearer" and secret.strip() else None


def _looked_up(request: HttpRequest, secret: str) -> ApiToken | None:
    """The token of `secret`, looked up once a request: the middleware's lookup serves the operation's auth too."""
    cached = getattr(request, "_api_token", None)
    if cached is not None and cached[0] == secret:
        return cached[1]
    found = _checked_lookup(secret)
    request._api_token = (secret, found)  # type: ignore[attr-defined]  # the request's own cache slot
    return found


def required_scope(request: HttpRequest) -> Scope | None:
    """The scope the API operation this request reaches needs; None when it reaches none."""
    try:
        match = resolve(request.path_info)
    except Resolver404:
        return None
    operations = _operations_of(match.func)
    if operations is None or request.method is None:
        return None
    return next((operation_scope(op) for op in operations if request.method in op.methods), None)


def _operations_of(view: Callable[..., Any]) -> list[Operation] | None:
    """The operations behind a django-ninja view: its URL view is a closure over the PathView that holds them."""
    for cell in getattr(view, "__closure__", None) or ():
        contents = cell.cell_contents
        if isinstance(contents, PathView):
            return contents.operations
    return None


def operation_scope(operation: Operation) -> Scope:
    """The scope an operation's TokenAuth needs (every API operation has one)."""
    (auth,) = [callback for callback in operation.auth_callbacks if isinstance(callback, TokenAuth)]
    return auth.scope


class ScopedNinjaAPI(NinjaAPI):
    """NinjaAPI whose OpenAPI schema names, on every operation, the scope its token needs: `x-required-scope`,
    and the scope in the operation's bearer security requirement."""

    def get_openapi_schema(self, *, path_prefix: str | None = None, path_params: dict[str, Any] | None = None) -> Any:
        for router in self._get_bound_routers():
            for path_view in router.path_operations.values():
                for operation in path_view.operations:
                    extra = operation.openapi_extra or {}
                    operation.openapi_extra = {**extra, SCOPE_EXTENSION: operation_scope(operation).value}
        schema = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
        for methods in schema["paths"].values():
            for details in methods.values():
                scope = details[SCOPE_EXTENSION]
                details["security"] = [{name: [scope]} for requirement in details["security"] for name in requirement]
        return schema


def _checked_lookup(secret: str) -> ApiToken | None:
    """The token's lookup, the request's first query, doubles as the connection's health check (CONN_HEALTH_CHECKS):
    one round trip instead of two on every API call (a LangGraph put makes two calls a step). A connection the
    database dropped fails it; it is then replaced and the lookup run again, as the health check would have."""
    checked = settings.DATABASES["default"].get("CONN_HEALTH_CHECKS", False)
    if not checked or connection.connection is None or connection.in_atomic_block:
        return services.authenticate_token(secret)
    connection.health_check_done = True  # type: ignore[attr-defined]  # Django's own flag; the stubs lack it
    try:
        return services.authenticate_token(secret)
    except (OperationalError, InterfaceError):
        connection.close()
        return services.authenticate_token(secret)


class TokenRateThrottle(BaseThrottle):
    """Requests per token when API_RATE_LIMIT is set (e.g. "600/min"), counted in the shared cache."""

    def allow_request(self, request: HttpRequest) -> bool:
        self.window: _TokenWindow | None = None
        if not settings.API_RATE_LIMIT:
            return True
        self.window = _TokenWindow(settings.API_RATE_LIMIT)
        try:
            return self.window.allow_request(request)
        except CACHE_ERRORS as exc:
            # The counter lives in the shared cache; an agent's writes must not fail with it (they need only
            # the database), so while it is unreachable the limit is not applied.
            logger.warning("shared cache unreachable, API rate limit not applied: %s", exc)
            self.window = None
            return True

    def wait(self) -> float | None:
        return self.window.wait() if self.window else None


class _TokenWindow(SimpleRateThrottle):
    scope = "token"

    def get_cache_key(self, request: HttpRequest) -> str:
        token = getattr(request, "auth", None)
        ident = f"{token.pk}" if isinstance(token, ApiToken) else self.get_ident(request)
        return self.cache_format % {"scope": self.scope, "ident": ident}


api = ScopedNinjaAPI(
    title="Checkpoint Console API",
    version="1",
    description="Store, browse, diff, restore and fork the checkpoints of long-running agents.",
    auth=TokenAuth(),
    throttle=TokenRateThrottle(),
    parser=StrictJSONParser(),
    renderer=ORJSONRenderer(),
    urls_namespace="api",
)

MAX_ERRORS = 20
RETRY_AFTER_SECONDS = 5  # how long a client waits before retrying a request the database could not serve


def database_unavailable() -> HttpResponse:
    """503 JSON with Retry-After: the database dropped the connection or refused a new one. A write may have
    been committed before the fault (an after-commit step failed), so a retry must carry the same idempotency
    key, which CheckpointClient does."""
    detail = f"the database is unavailable; retry in {RETRY_AFTER_SECONDS} s with the same idempotency key"
    response = JsonResponse({"detail": detail}, status=503)
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


@api.exception_handler(OperationalError)
@api.exception_handler(InterfaceError)
def _database_error(request: HttpRequest, exc: Exception) -> HttpResponse:
    logger.warning("database unavailable during %s %s: %s", request.method, request.path, exc)
    return database_unavailable()


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    cause = exc.__cause__
    if isinstance(cause, jsoncodec.InvalidJSON):
        return _invalid_json(request, cause)
    return api.create_response(request, {"detail": exc.message}, status=exc.status_code)


def _invalid_json(request: HttpRequest, exc: jsoncodec.InvalidJSON) -> HttpResponse:
    if exc.path is None:
        return api.create_response(request, {"detail": str(exc)}, status=400)
    error = {"type": "value_error", "loc": ["body", *exc.path], "msg": str(exc)}
    return api.create_response(request, {"detail": [error]}, status=422)


@api.exception_handler(ValidationError)
def _validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    """Field errors without the values sent (they may be huge), the first MAX_ERRORS of them and a count."""
    errors = [
        {key: _short(value) for key, value in error.items() if key in ("type", "loc", "msg")}
        for error in exc.errors[:MAX_ERRORS]
    ]
    body: dict[str, Any] = {"detail": errors}
    if len(exc.errors) > MAX_ERRORS:
        body["error_count"] = len(exc.errors)
    return api.create_response(request, body, status=422)


def _short(value: Any) -> Any:
    if isinstance(value, str):
        return short_value(value, 300)
    if isinstance(value, list | tuple):
        return [_short(part) for part in value[:20]]
    return value


@api.exception_handler(services.InvalidState)
def _invalid_state(request: HttpRequest, exc: services.InvalidState) -> HttpResponse:
    return api.create_response(request, {"detail": f"invalid state: {exc}"}, status=422)


@api.exception_handler(services.InvalidInput)
def _invalid_input(request: HttpRequest, exc: services.InvalidInput) -> HttpResponse:
    error = {"type": "value_error", "loc": ["body", exc.field], "msg": str(exc)}
    return api.create_response(request, {"detail": [error]}, status=422)


@api.exception_handler(services.CheckpointError)
def _domain_error(request: HttpRequest, exc: services.CheckpointError) -> HttpResponse:
    return api.create_response(request, {"detail": str(exc)}, status=409)


# ---- schemas ---------------------------------------------------------------------------------


class Strict(Schema):
    """Unknown fields are refused, with one error for all of them (not one each: a body may hold millions)."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _known_fields(cls, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = [key for key in data if key not in cls.model_fields]
            if unknown:
                named = ", ".join(repr(key[:50]) for key in unknown[:10])
                more = f" and {len(unknown) - 10} more" if len(unknown) > 10 else ""
                raise ValueError(f"unknown field(s): {named}{more}")
        return data


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL characters (U+0000): identifiers are used in URLs and file names")
    return value


def _in_time_range(value: datetime) -> datetime:
    try:
        return limits.as_utc(value)
    except limits.OutOfRange as exc:
        raise ValueError(str(exc)) from None


def _json_value(value: Any) -> Any:
    try:
        jsoncodec.check_value(value, max_depth=settings.CHECKPOINT_MAX_DEPTH)
    except jsoncodec.InvalidJSON as exc:
        raise ValueError(str(exc)) from None
    return value


# A session id is one URL path segment: "/" would make it unreachable.
Identifier = Annotated[str, AfterValidator(_no_nul)]
ExternalId = Annotated[Identifier, Field(min_length=1, max_length=200, pattern=r"^[^/]+$")]
Timestamp = Annotated[datetime, AfterValidator(_in_time_range), Field(description=f"ISO 8601, {limits.TIME_RANGE}.")]
Int32 = Annotated[int, Field(ge=limits.INT32_MIN, le=limits.INT32_MAX)]
Count32 = Annotated[int, Field(ge=0, le=limits.INT32_MAX)]
Count64 = Annotated[int, Field(ge=0, le=limits.INT64_MAX)]
JSONObject = Annotated[dict[str, Any], AfterValidator(_json_value)]
JSONList = Annotated[list[Any], AfterValidator(_json_value)]
Reason = Annotated[str, Field(max_length=500)]  # the console's restore and resolve forms take as much
LongText = Annotated[str, Field(max_length=100_000)]


class SessionIn(Strict):
    external_id: ExternalId
    agent: Identifier = Field(min_length=1, max_length=200)
    title: str | None = Field(default=None, max_length=300)
    execution_mode: Identifier | None = Field(default=None, max_length=50)
    metadata: JSONObject | None = None


class CheckpointIn(Strict):
    name: str = Field(default="", max_length=200)
    kind: CheckpointKind = CheckpointKind.STEP
    state: Any = Field(description="Any JSON document: the agent's state at this point.")
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

    def to_input(self) -> services.CheckpointInput:
        return services.CheckpointInput(**self.model_dump(exclude={"session"}))


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


ERRORS = {400: Detail, 401: Detail, 403: Detail, 404: Detail, 409: Detail, 413: Detail, 422: Detail, 429: Detail}
CheckpointId = Annotated[int, Path(ge=1, le=limits.INT64_MAX)]
PhaseNumber = Annotated[int, Path(ge=0, le=limits.INT32_MAX)]

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
        **tallies.session_totals(session),
        "created_at": session.created_at,
        "updated_at": session.updated_at,
        "last_seen_at": session.last_seen_at,
        "metadata": session.metadata,
    }


def _token(request: HttpRequest) -> ApiToken:
    # django-ninja sets `auth` on the request once a token authenticates it: HttpRequest's stub cannot know it
    return request.auth  # type: ignore[attr-defined]


def _actor(request: HttpRequest) -> services.Actor:
    return services.Actor.for_token(_token(request))


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
    return HttpResponse(jsoncodec.dumps(data, default=_json_default), status=status, content_type="application/json")


def _with_state(data: dict[str, Any], root: bytes | memoryview) -> HttpResponse:
    """Embed the stored canonical JSON as is: a 2 MB state is not parsed and re-encoded."""
    data["state"] = orjson.Fragment(store.load_state_json(bytes(root)))
    return _json(data)


# ---- sessions --------------------------------------------------------------------------------


@api.post("/sessions", response={200: SessionOut, 201: SessionOut, **ERRORS}, tags=["sessions"], auth=WRITE)
def create_or_update_session(request: HttpRequest, payload: SessionIn) -> Any:
    """Create a session, or update the given fields of an existing one (200)."""
    session, created = services.upsert_session(_token(request).project, **payload.model_dump())
    session = AgentSession.objects.select_related("project", "head").get(pk=session.pk)
    return _json(session_dict(session), status=201 if created else 200)


@api.get("/sessions/{external_id}", response={200: SessionOut, **ERRORS}, tags=["sessions"])
def get_session(request: HttpRequest, external_id: str) -> Any:
    return session_dict(_session(request, external_id))


@api.get("/sessions/{external_id}/summary", response={200: SummaryOut, **ERRORS}, tags=["sessions"])
def get_summary(request: HttpRequest, external_id: str) -> Any:
    session = _session(request, external_id)
    summary = tallies.session_summary(session)
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


@api.put("/sessions/{external_id}/live-state", response={200: LiveStateOut, **ERRORS}, tags=["sessions"], auth=WRITE)
def put_live_state(request: HttpRequest, external_id: str, payload: LiveStateIn) -> Any:
    """Heartbeat with the agent's current state; routine checkpoints are taken from it."""
    session = services.record_live_state(_session(request, external_id), state=payload.state)
    live_root = session.live_root or b""  # just recorded: never empty
    return {"session": external_id, "received_at": session.live_state_at, "live_root": bytes(live_root).hex()}


# ---- checkpoints -----------------------------------------------------------------------------


@api.post(
    "/sessions/{external_id}/checkpoints",
    response={200: CheckpointOut, 201: CheckpointOut, **ERRORS},
    tags=["checkpoints"],
    auth=WRITE,
)
def create_checkpoint(request: HttpRequest, external_id: str, payload: CheckpointIn) -> Any:
    """201 with the new checkpoint; 200 with the original when the idempotency key was seen before."""
    session = _session(request, external_id)
    checkpoint, created = services.create_checkpoint(session, payload.to_input())
    return _json(checkpoint_dict(checkpoint, external_id), status=201 if created else 200)


@api.post("/checkpoints/batch", response={201: BatchOut, **ERRORS}, tags=["checkpoints"], auth=WRITE)
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


@api.get("/sessions/{external_id}/checkpoints", response={200: CheckpointPage, **ERRORS}, tags=["checkpoints"])
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
    items = [checkpoint_dict(row, external_id) for row in rows[:limit]]
    return _json({"items": items, "next_cursor": next_cursor})


@api.get("/checkpoints/{checkpoint_id}", response={200: CheckpointDetailOut, **ERRORS}, tags=["checkpoints"])
def get_checkpoint(request: HttpRequest, checkpoint_id: CheckpointId) -> Any:
    checkpoint = _checkpoint(request, checkpoint_id)
    return _with_state(checkpoint_dict(checkpoint, checkpoint.session.external_id), checkpoint.root)


@api.get(
    "/checkpoints/{checkpoint_id}/diff/{other_id}",
    response={200: dict[str, Any], **ERRORS},
    tags=["checkpoints"],
)
def diff_checkpoints(request: HttpRequest, checkpoint_id: CheckpointId, other_id: CheckpointId) -> Any:
    """Structural diff from the first checkpoint to the second (they may be in different sessions)."""
    a, b = _checkpoint(request, checkpoint_id), _checkpoint(request, other_id)
    return _json({"from": a.pk, "to": b.pk, **store.diff_checkpoints(a, b).as_dict()})


@api.post(
    "/checkpoints/{checkpoint_id}/restore", response={201: CheckpointOut, **ERRORS}, tags=["checkpoints"], auth=WRITE
)
def restore(request: HttpRequest, checkpoint_id: CheckpointId, payload: RestoreIn | None = None) -> Any:
    """Restore: a new head sharing this checkpoint's state; nothing is deleted."""
    checkpoint = _checkpoint(request, checkpoint_id)
    reason = payload.reason if payload else ""
    restored = services.restore_checkpoint(checkpoint, actor=_actor(request), reason=reason)
    return _json(checkpoint_dict(restored, checkpoint.session.external_id), status=201)


@api.post("/checkpoints/{checkpoint_id}/fork", response={201: SessionOut, **ERRORS}, tags=["checkpoints"], auth=WRITE)
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


@api.put(
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


@api.post(
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


@api.get("/sessions/{external_id}/phases/{number}/feedback", response={200: FeedbackOut, **ERRORS}, tags=["phases"])
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


@api.get("/alerts", response={200: list[AlertOut], **ERRORS}, tags=["alerts"])
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
            "message": alert.message,
            "evidence": alert.evidence,
            "opened_at": alert.opened_at,
            "acknowledged_at": alert.acknowledged_at,
            "resolved_at": alert.resolved_at,
            "last_good": alert.last_good_id,
        }
        for alert in qs.filter(condition).order_by("-opened_at", "-pk")[:500]
    ]


# they mount /langgraph/ and /webhooks on `api` (and import this module's parts)
from . import api_langgraph, api_webhooks  # noqa: E402, F401

__all__ = ["api"]
