"""What one attempt to send a delivery came to; every sender returns one (channels.py and deliveries.py share it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Outcome:
    ok: bool
    response_code: int | None = None
    error: str = ""
