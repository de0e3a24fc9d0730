"""The API (`/api/v1/`): the NinjaAPI object, the error answers every route shares, and its routers mounted on it:
`agent` (sessions, checkpoints, diff, restore, fork, resume, live state, phases, alerts), `langgraph` (the saver's,
under `/langgraph/`) and `webhooks`. What the routers share is in `common`, which imports none of them.

Every endpoint needs a project-scoped bearer token holding the scope the endpoint names (`x-required-scope` in the
OpenAPI schema; models.Scope): `read`, `write` for what changes data, `answer` to answer a LangGraph
thread's interrupts (`interrupts`), `recover` to run and undo a fleet recovery (`recoveries`).
Bad input gets a 4xx with {"detail": …} and writes nothing.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse
from ninja.errors import HttpError, ValidationError

from .. import services
from ..humanize import short_value
from ..services import langgraph as langgraph_services
from ..store import jsoncodec
from . import agent, interrupts, langgraph, purges, recoveries, webhooks
from .common import (
    ORJSONRenderer,
    ScopedNinjaAPI,
    StrictJSONParser,
    TokenAuth,
    TokenRateThrottle,
    database_unavailable,
)

logger = logging.getLogger(__name__)

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


@api.exception_handler(services.BaseMoved)
def _base_moved(request: HttpRequest, exc: services.BaseMoved) -> HttpResponse:
    """409 with `code` (a reused idempotency key's 409 has none) and the head to resume from."""
    head = {"id": exc.head_id, "seq": exc.head_seq} if exc.head_id is not None else None
    body = {"detail": str(exc), "code": "base_moved", "head": head, "restore_generation": exc.restore_generation}
    return api.create_response(request, body, status=409)


@api.exception_handler(services.CheckpointError)
def _domain_error(request: HttpRequest, exc: services.CheckpointError) -> HttpResponse:
    return api.create_response(request, {"detail": str(exc)}, status=409)


@api.exception_handler(langgraph_services.ResendNeeded)
def _resend(request: HttpRequest, exc: langgraph_services.ResendNeeded) -> HttpResponse:
    return api.create_response(request, {"detail": str(exc), "resend": True}, status=409)


@api.exception_handler(langgraph_services.HistoryDeleted)
def _history_deleted(request: HttpRequest, exc: langgraph_services.HistoryDeleted) -> HttpResponse:
    return api.create_response(request, {"detail": str(exc)}, status=410)


# The agent's routes first, as when they were declared on `api` itself: the schema lists paths in this order.
api.add_router("", agent.router)
api.add_router("", interrupts.router)
api.add_router("", recoveries.router)
api.add_router("", purges.router)
api.add_router("/langgraph/", langgraph.router)
api.add_router("/webhooks", webhooks.router)

__all__ = ["api"]
