"""An alert's evidence, or a job run's figures, as `key: value` pairs short enough for a table cell."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from checkpoints.humanize import plain_duration, short_value

CELL_WIDTH = 60  # characters of one value
LIST_HEAD = 6  # a longer list shows this many items and its length
TRIGGERED = "checkpoints"  # the evidence key listing the checkpoints that showed the drift: [{"id", "seq"}, …]


@dataclass(frozen=True)
class Triggered:
    pk: int
    seq: int


def evidence_checkpoints(evidence: Any) -> list[Triggered]:
    """The checkpoints an alert's evidence names as the ones that showed the drift, oldest first."""
    listed = evidence.get(TRIGGERED) if isinstance(evidence, dict) else None
    items = listed if isinstance(listed, list) else []
    return [
        Triggered(item["id"], item["seq"])
        for item in items
        if isinstance(item, dict) and isinstance(item.get("id"), int) and isinstance(item.get("seq"), int)
    ]


def evidence_summary(evidence: Any, *, limit: int = 4) -> str:
    """`key: value` pairs of an alert's evidence, short enough for a table cell (the checkpoints it names are
    links of their own: `evidence_checkpoints`)."""
    if not isinstance(evidence, dict):
        return _short(evidence)
    # an empty value ("reason" of a checkpoint that gave none) would read as "reason: ·"
    evidence = {key: value for key, value in evidence.items() if key != TRIGGERED and value not in ("", None)}
    # sorted: PostgreSQL's jsonb does not keep the order keys were written in
    parts = [f"{key.replace('_', ' ')}: {_value(key, value)}" for key, value in sorted(evidence.items())[:limit]]
    if len(evidence) > limit:
        parts.append(f"+{len(evidence) - limit} more")
    return " · ".join(parts)


def _value(key: str, value: Any) -> str:
    """Times counted in minutes or seconds read as durations ('minutes: 2 h 5 min')."""
    for suffix, size in (("minutes", 60), ("seconds", 1)):
        if key.endswith(suffix) and isinstance(value, int | float) and not isinstance(value, bool):
            return plain_duration(value * size)
    return _short(value)


def _short(value: Any) -> str:
    if isinstance(value, list) and len(value) > LIST_HEAD:
        head = json.dumps(value[:LIST_HEAD], ensure_ascii=False, default=str)[:-1]
        return short_value(f"{head}, … {len(value)} items]", CELL_WIDTH)
    return short_value(value, CELL_WIDTH)
