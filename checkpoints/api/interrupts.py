"""A LangGraph thread's interrupts (`/sessions/{id}/interrupts`) and their answers: what a person decides for
the graph, read back by the runner through `/langgraph/resume` (`ConsoleSaver.pending_resume`).

Answering needs the `answer` scope, which no token holds unless created with it: an agent's write token cannot
approve the risky call its own graph stopped to ask about."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from django.http import HttpRequest
from ninja import Field, Router, Schema
from ninja.errors import HttpError

from ..models import Scope
from ..services import lginterrupts
from .common import ERRORS, Strict, TokenAuth, _actor, _json, _reader, _session

router = Router(tags=["interrupts"])
ANSWER = TokenAuth(Scope.ANSWER)
InterruptId = Field(min_length=1, max_length=200)


class AnswerOut(Schema):
    value: Any
    comment: str
    answered_by: str
    answered_at: datetime
    consumed: bool


class InterruptOut(Schema):
    id: str
    node: str = Field(description="The node that asked; for an interrupt in a subgraph, the parent graph's node.")
    value: Any = Field(description="The interrupt's value as typed JSON.")
    state: Literal["open", "answered"]
    answer: AnswerOut | None = None


class AnswerIn(Strict):
    value: Any = Field(description="The answer, as typed JSON (plain JSON is typed JSON).")
    comment: str = Field(default="", max_length=lginterrupts.COMMENT_MAX)


def answer_dict(answer: Any) -> dict[str, Any]:
    return {
        "value": answer.value,
        "comment": answer.comment,
        "answered_by": answer.answered_by_name,
        "answered_at": answer.answered_at,
        "consumed": answer.consumed_at is not None,
    }


def interrupt_dict(item: lginterrupts.PendingInterrupt) -> dict[str, Any]:
    return {
        "id": item.id,
        "node": item.node,
        "value": item.value,
        "state": item.state,
        "answer": answer_dict(item.answer) if item.answer is not None else None,
    }


@router.get("/sessions/{external_id}/interrupts", response={200: list[InterruptOut], **ERRORS})
def list_interrupts(request: HttpRequest, external_id: str) -> Any:
    """The interrupts the thread's latest root checkpoint waits on (empty when it waits on none)."""
    pending = [interrupt_dict(item) for item in lginterrupts.pending_interrupts(_session(request, external_id))]
    return _reader(request).json(pending)  # an interrupt's value quotes the state: masked for read-only tokens


@router.post(
    "/sessions/{external_id}/interrupts/{interrupt_id}/answer",
    response={201: InterruptOut, **ERRORS},
    auth=ANSWER,
)
def answer_interrupt(request: HttpRequest, external_id: str, interrupt_id: str, payload: AnswerIn) -> Any:
    """Answer an open interrupt; the runner resumes with it (`ConsoleSaver.pending_resume`). 409 when it has an
    answer already, 404 when the thread does not wait on it."""
    session = _session(request, external_id)
    try:
        lginterrupts.answer_interrupt(
            session, interrupt_id, actor=_actor(request), value=payload.value, comment=payload.comment
        )
    except lginterrupts.NoSuchInterrupt as exc:
        raise HttpError(404, str(exc)) from None
    item = next(item for item in lginterrupts.pending_interrupts(session) if item.id == interrupt_id)
    return _json(interrupt_dict(item), status=201)
