"""LangGraph values as the saver sends them: typed JSON made by LangGraph's own serializer, real messages."""

from __future__ import annotations

from typing import Any

import ormsgpack
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from checkpoint_console import typedjson

SERDE = JsonPlusSerializer()


def typed(value: Any) -> Any:
    return typedjson.from_typed(*SERDE.dumps_typed(value))


def untyped(value: Any) -> Any:
    return SERDE.loads_typed(typedjson.to_typed(value))


def lg_id(n: int) -> str:
    """uuid6-like ids that sort by n, as LangGraph's do by time."""
    return f"1f0c{n:04x}-0000-6000-8000-000000000000"


def messages(count: int) -> list[Any]:
    made: list[Any] = []
    for n in range(count):
        made.append(
            HumanMessage(content=f"question {n}", id=f"h{n}")
            if n % 2 == 0
            else AIMessage(
                content=f"answer {n}", id=f"a{n}", tool_calls=[{"name": "search", "args": {"q": n}, "id": f"c{n}"}]
            )
        )
    return [typed(message) for message in made]


def put_body(
    thread_id: str,
    n: int,
    *,
    parent: int | None = None,
    values: dict[str, Any] | None = None,
    ns: str = "",
    metadata: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "thread_id": thread_id,
        "checkpoint_ns": ns,
        "parent_checkpoint_id": lg_id(parent) if parent is not None else None,
        "checkpoint": {
            "v": 4,
            "id": lg_id(n),
            "ts": f"2026-11-26T10:{n % 60:02d}:00+00:00",
            "channel_versions": {"messages": f"{n:032}.0.5"},
            "versions_seen": {"agent": {"messages": f"{max(n - 1, 0):032}.0.5"}},
            "updated_channels": ["messages"],
        },
        "metadata": metadata if metadata is not None else {"source": "loop", "step": n, "parents": {}},
        "values": values if values is not None else {"messages": messages(n + 1)},
    }
    body.update(extra)
    return body


def ext_record(code: int, module: str, name: str, arg: Any, method: str | None = None) -> ormsgpack.Ext:
    """A msgpack extension record naming `module.name` as LangGraph's serializer writes one (code 0-5), built
    by hand as an attacker holding a write token would."""
    payload = [module, name, arg] if method is None else [module, name, arg, method]
    return ormsgpack.Ext(code, ormsgpack.packb(payload, option=ormsgpack.OPT_NON_STR_KEYS))


def hostile(value: Any) -> Any:
    """Any msgpack-level value (ext records inside) as the typed JSON the API takes."""
    return typedjson.from_msgpack(ormsgpack.packb(value, option=ormsgpack.OPT_NON_STR_KEYS))


def shell_command(marker: str) -> Any:
    """A dataclass-shaped value whose class is subprocess.getoutput: reviving it runs `touch marker`."""
    return hostile(ext_record(2, "subprocess", "getoutput", {"cmd": f"touch {marker}"}))


def open_for_writing(marker: str) -> Any:
    """builtins.open(file=marker, mode="w"): reviving it creates (or empties) the file."""
    return hostile(ext_record(2, "builtins", "open", {"file": marker, "mode": "w"}))
