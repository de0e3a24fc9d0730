"""gunicorn reads this file from its working directory (a checkout's root, the image's /app) before it starts.

/metrics must add up what every gunicorn worker counted: prometheus-client does that through files in
PROMETHEUS_MULTIPROC_DIR, and it reads the variable when it is first imported, in each worker. Unset, a scrape
silently showed one worker's share. So it defaults here, in the master before any worker is forked, to a folder
under VAR_DIR, and the counts of an earlier run are removed at start."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

VAR_DIR = Path(os.environ.get("VAR_DIR", Path(__file__).resolve().parent / "var"))
METRICS_DIR = Path(os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", str(VAR_DIR / "prometheus")))


def on_starting(server: Any) -> None:
    """Only prometheus-client's own files go: the folder may be one an operator named."""
    METRICS_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
    for stale in METRICS_DIR.glob("*.db"):
        stale.unlink()


def child_exit(server: Any, worker: Any) -> None:
    """A worker that exited keeps its counters in the sum; its live gauges go (prometheus-client's advice)."""
    # Imported here, not above: prometheus-client picks its in-process or multi-process values when first
    # imported, which must come after the variable is set.
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)  # type: ignore[no-untyped-call]
