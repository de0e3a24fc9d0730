"""The purge job: claim the purge, keep its heartbeat while it runs (`services.purges.run_purge`).

Its rewrite is one transaction, so a worker killed midway leaves history as it was and the purge `running` with
its value waiting; its heartbeat stops, and the every-minute sweep calls `requeue_stalled`, which queues it again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..services import purges
from . import Pulse, new_holder


def run(purge_id: int) -> dict[str, Any]:
    """Run a purge if this worker can claim it; a message for one another worker runs (or that ended) changes
    nothing."""
    holder, progress = new_holder(), purges.Progress()
    with Pulse(lambda: purges.beat_purge(purge_id, holder=holder, progress=progress), f"purge {purge_id}"):
        return purges.run_purge(purge_id, holder=holder, progress=progress)


def requeue_stalled(start: Callable[[int], object]) -> int:
    return purges.requeue_stalled(start)
