"""The purge job: claim the purge and run it (`services.purges.run_purge`). Its rewrite is one transaction, so a
worker killed midway leaves history as it was; the purge then stays `running` until an operator asks again."""

from __future__ import annotations

from typing import Any

from ..services import purges


def run(purge_id: int) -> dict[str, Any]:
    """Run a purge if this worker can claim it; a message for one that ran already changes nothing."""
    return purges.run_purge(purge_id)
