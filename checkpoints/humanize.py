"""What an operator reads at a glance: durations in words ("2 h 5 min", not "7500 seconds"), values cut to a line."""

from __future__ import annotations

import json
from typing import Any

UNITS = (("d", 86400), ("h", 3600), ("min", 60), ("s", 1))


def plain_duration(seconds: float) -> str:
    """The two largest units that matter: '42 s', '3 min 7 s', '2 h 5 min', '3 d 4 h'; 'under 1 s' below that."""
    whole = int(seconds)
    if whole < 1:
        return "under 1 s"
    for index, (unit, size) in enumerate(UNITS):
        if whole >= size:
            big, rest = divmod(whole, size)
            if unit == "s":
                return f"{big} s"
            small_unit, small_size = UNITS[index + 1]
            small = rest // small_size
            return f"{big} {unit} {small} {small_unit}" if small else f"{big} {unit}"
    return f"{whole} s"


def short_value(value: Any, width: int) -> str:
    """A JSON value in at most `width` characters: a string as it is, anything else as JSON, the cut marked '…'
    (spaces before the mark dropped, so a cut never reads as a finished word followed by a gap)."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= width else text[: width - 1].rstrip() + "…"
