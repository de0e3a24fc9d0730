"""A LangGraph thread stopped at interrupt(), made through the saver's service calls as ConsoleSaver makes it."""

from __future__ import annotations

from typing import Any

from checkpoints.models import AgentSession, Project
from checkpoints.services import langgraph as lg

CHECKPOINT_ID = "1f0c0000-0000-6000-8000-000000000001"
NEXT_ID = "1f0c0000-0000-6000-8000-000000000002"


def interrupt_record(value: Any, interrupt_id: str) -> dict[str, Any]:
    """LangGraph's Interrupt as typed JSON (what ConsoleSaver sends in an `__interrupt__` write)."""
    return {
        "__lg__": ["ext", 2],
        "v": ["langgraph.types", "Interrupt", {"value": value, "id": interrupt_id, "response_schema": None}],
    }


def put(project: Project, thread_id: str, checkpoint_id: str, parent: str | None = None) -> None:
    lg.put_checkpoint(
        project,
        lg.PutInput(
            thread_id=thread_id,
            checkpoint_ns="",
            checkpoint={"v": 4, "id": checkpoint_id, "ts": "2026-11-27T10:00:00+00:00"},
            metadata={"source": "loop", "step": 1},
            values={"messages": []},
            parent_checkpoint_id=parent,
        ),
    )


def waiting_thread(
    project: Project, thread_id: str = "chat-1", *, asks: dict[str, Any] | None = None, node: str = "ask"
) -> AgentSession:
    """A thread whose latest checkpoint has one task per interrupt id in `asks` (id → value) waiting."""
    put(project, thread_id, CHECKPOINT_ID)
    for n, (interrupt_id, value) in enumerate((asks or {"i-1": "Send the email?"}).items()):
        lg.put_writes(
            project,
            thread_id=thread_id,
            checkpoint_ns="",
            checkpoint_id=CHECKPOINT_ID,
            task_id=f"task-{n}",
            task_path=f"~__pregel_pull, {node}{n or ''}",
            writes=[("__interrupt__", [interrupt_record(value, interrupt_id)])],
        )
    session = lg.find_thread(project, thread_id)
    assert session is not None
    return session
