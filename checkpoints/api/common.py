"""What every router of the API shares: the body parser and renderer, the two API middlewares (the body's cap,
the token's scope), token auth and its rate limit, the NinjaAPI class that writes scopes into the schema, the
strict input schemas and the error bodies, and the helpers that name the token, its actor and a JSON answer."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any

import orjson
from django.conf import settings
from django.db import InterfaceError, OperationalError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import Resolver404, resolve
from ninja import Field, NinjaAPI, Schema
from ninja.errors import HttpError
from ninja.operation import Operation, PathView
from ninja.parser import Parser
from ninja.renderers import BaseRenderer
from ninja.security import HttpBearer
from ninja.throttling import BaseThrottle, SimpleRateThrottle
from pydantic import AfterValidator, ConfigDict, ModelWrapValidatorHandler, ValidationInfo, model_validator

from .. import limits, services
from ..models import (
    AgentSession,
    ApiToken,
    Project,
    Scope,
)
from ..outbox.wanted import CACHE_ERRORS
from ..services.checkpoints import session_with_head
from ..store import jsoncodec, masking

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
                try:
                    found = _looked_up(request, secret)
                except (OperationalError, InterfaceError):  # the API's answer to a database it cannot reach
                    return database_unavailable()
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

    def get_openapi_operation_id(self, operation: Operation) -> str:
        # The agent's routes were declared in checkpoints/api.py before the API became a package: their ids, which
        # generated clients name methods after, keep that module's prefix (the LangGraph and webhook ids match).
        operation_id = super().get_openapi_operation_id(operation)
        moved = "checkpoints_api_agent_"
        return "checkpoints_api_" + operation_id.removeprefix(moved) if operation_id.startswith(moved) else operation_id


def _checked_lookup(secret: str) -> ApiToken | None:
    """The token's lookup, the request's first query, doubles as the connection's health check (CONN_HEALTH_CHECKS):
    one round trip instead of two on every API call (a LangGraph put makes two calls a step). A connection the
    database dropped fails it; it is then replaced and the lookup run again, as the health check would have."""
    checked = settings.DATABASES["default"].get("CONN_HEALTH_CHECKS", False)
    if not checked or connection.connection is None or connection.in_atomic_block:
        return services.authenticate_token(secret)  # SQLite's: from what the process remembers, within a second
    connection.health_check_done = True  # type: ignore[attr-defined]  # Django's own flag; the stubs lack it
    try:
        return services.authenticate_token(secret, recall=False)
    except (OperationalError, InterfaceError):
        connection.close()
        return services.authenticate_token(secret, recall=False)


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


RETRY_AFTER_SECONDS = 5  # how long a client waits before retrying a request the database could not serve


def database_unavailable() -> HttpResponse:
    """503 JSON with Retry-After: the database dropped the connection or refused a new one. A write may have
    been committed before the fault (an after-commit step failed), so a retry must carry the same idempotency
    key, which CheckpointClient does."""
    detail = f"the database is unavailable; retry in {RETRY_AFTER_SECONDS} s with the same idempotency key"
    response = JsonResponse({"detail": detail}, status=503)
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


# ---- schemas ---------------------------------------------------------------------------------


class Strict(Schema):
    """Unknown fields are refused, with one error for all of them (not one each: a body may hold millions)."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="wrap")
    @classmethod
    def _run_root_validator(cls, values: Any, handler: ModelWrapValidatorHandler[Any], info: ValidationInfo) -> Any:
        """django-ninja's own (same name: it replaces it) validates a model that forbids extra fields twice, once as
        given and once through its `DjangoGetter` (for ORM objects and resolvers), and so a nested model four
        times: a body's JSON object is validated once, as given. Anything else goes ninja's way."""
        if type(values) is dict:
            return handler(values)
        return Schema._run_root_validator.__func__(cls, values, handler, info)

    @model_validator(mode="before")
    @classmethod
    def _known_fields(cls, data: Any) -> Any:
        if isinstance(data, dict):
            known = {field.alias or name for name, field in cls.model_fields.items()}
            unknown = [key for key in data if key not in known]
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


class Detail(Schema):
    detail: Any


ERRORS = {400: Detail, 401: Detail, 403: Detail, 404: Detail, 409: Detail, 413: Detail, 422: Detail, 429: Detail}


def _token(request: HttpRequest) -> ApiToken:
    # django-ninja sets `auth` on the request once a token authenticates it: HttpRequest's stub cannot know it
    return request.auth  # type: ignore[attr-defined]


def _reader(request: HttpRequest) -> masking.Masker:
    """What masks what the token reads (docs/secrets.md#read-only-tokens): nothing for a token with the `write` scope
    (an agent's: its resume, its saver and its exports must be real), the project's found secrets for the rest —
    tokens for people and dashboards. Made once a request."""
    cached = getattr(request, "_reader", None)
    if cached is None:
        token = _token(request)
        cached = masking.AS_IT_IS if token.has_scope(Scope.WRITE) else masking.for_project(token.project)
        request._reader = cached  # type: ignore[attr-defined]
    return cached


def _actor(request: HttpRequest) -> services.Actor:
    return services.Actor.for_token(_token(request))


def _json(data: dict[str, Any], status: int = 200) -> HttpResponse:
    return HttpResponse(jsoncodec.dumps(data, default=_json_default), status=status, content_type="application/json")


def _session(request: HttpRequest, external_id: str) -> AgentSession:
    """The token's project's session of that id; 404 for any other (another project's is not told apart)."""
    project = _token(request).project
    found = AgentSession.objects.select_related("project", "head").filter(project=project, external_id=external_id)
    return _found(found.first(), project, external_id)


def _session_to_write(request: HttpRequest, external_id: str) -> AgentSession:
    """`_session` for a create: only what ingest reads of the head (id, seq, root), in one written-out statement."""
    project = _token(request).project
    return _found(session_with_head(project, external_id), project, external_id)


def _found(session: AgentSession | None, project: Project, external_id: str) -> AgentSession:
    if session is None:
        raise HttpError(404, f"no session {external_id!r} in project {project.slug!r}")
    return session
