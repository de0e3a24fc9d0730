"""The fleet recovery job: claim the recovery, keep its heartbeat while the sessions are done, finish it.

The work and its crash safety are `services.fleet` (each session's item changes in its restore's transaction);
this adds the worker's side: the claim (a queued recovery, or one whose worker went silent), the heartbeat
thread, and a bug recorded on the recovery rather than leaving it `running`. The every-minute sweep calls
`requeue_stalled`, which queues again a recovery whose worker stopped beating.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..services import fleet
from . import Pulse, new_holder

logger = logging.getLogger(__name__)


def run(recovery_id: int) -> dict[str, Any]:
    """Run a recovery if this worker can claim it; a message for one another worker runs (or that finished)
    changes nothing."""
    holder = new_holder()
    if not fleet.claim_recovery(recovery_id, holder=holder):
        return {"claimed": False}
    try:
        with Pulse(lambda: fleet.beat_recovery(recovery_id, holder=holder), f"recovery {recovery_id}"):
            return fleet.run_recovery(recovery_id, holder=holder)
    except Exception as exc:
        logger.exception("recovery %s stopped on an internal error", recovery_id)
        fleet.fail_recovery(recovery_id, holder=holder, error=f"stopped on an internal error: {type(exc).__name__}")
        raise


def requeue_stalled(start: Callable[[int], object]) -> int:
    return fleet.requeue_stalled(start)
