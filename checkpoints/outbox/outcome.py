"""What one attempt to send a delivery came to; every channel's sender returns one (outbox/channels/)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Outcome:
    ok: bool
    response_code: int | None = None
    error: str = ""
