"""What the restore dialog shows before an operator confirms: the tool calls the agent forgets, and the state diff."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from checkpoints.services import RestorePreview
from checkpoints.store.previews import call_name

from .branches import is_langgraph
from .diff import DiffView, present_diff


@dataclass(frozen=True)
class ForgottenCall:
    """A tool call the restore takes out of the agent's memory; the template cuts the texts to a cell."""

    name: str
    arguments: str
    result: str
    error: str
    success: Any
    step: Any
    node: str = ""  # a LangGraph thread's: the node that ran the tool


def forgotten_calls(calls: list[Any]) -> list[ForgottenCall]:
    records = [call if isinstance(call, dict) else {"value": call} for call in calls]
    return [
        ForgottenCall(
            name=call_name(record) or "tool call",
            arguments=_as_text(record.get("arguments", record.get("args"))),
            result=_as_text(record.get("result")),
            error=_as_text(record.get("error")),
            success=record.get("success"),
            step=record.get("step"),
            node=str(record.get("node") or ""),
        )
        for record in records
    ]


def _as_text(value: Any) -> str:
    """Whole, keys sorted: the call as the agent made it, for an operator to recognise."""
    if value is None or isinstance(value, str):
        return value or ""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def preview_diff(preview: RestorePreview, *, internal: bool = False) -> DiffView:
    """The head-to-target diff; its "show more" links open the same direct diff on the compare page. A
    LangGraph thread's internal channels are left out unless `internal`."""
    hide = not internal and is_langgraph(preview.target.session)
    if preview.head is None:
        return present_diff(preview.diff, query={}, hide_internal=hide)
    query: dict[str, Any] = {"a": preview.head.pk, "b": preview.target.pk, "base": "a"}
    if internal:
        query["internal"] = 1
    return present_diff(preview.diff, query=query, old_pk=preview.head.pk, new_pk=preview.target.pk, hide_internal=hide)
