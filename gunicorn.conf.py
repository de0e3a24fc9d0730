"""gunicorn reads this file from its working directory (a checkout's root, the image's /app) before it starts.

/metrics must add up what every gunicorn worker counted: prometheus-client does that through files in
PROMETHEUS_MULTIPROC_DIR, and it reads the variable when it is first imported, in each worker. Unset, a scrape
silently showed one worker's share. So it defaults here, in the master before any worker is forked, to a folder
under VAR_DIR, and the counts of an earlier run are removed at start."""

from __future__ import annotations

import gc
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


def post_worker_init(worker: Any) -> None:
    """Load what every request uses (the URLconf: the views, the API and its schemas), then put everything the
    worker holds so far out of the garbage collector's reach. Its full collections walk every object a process
    tracks; Django's ~180,000 made at start are never garbage, and walking them took 105–132 ms once in every few
    hundred API requests (a request that met it waited that long). Frozen, they are skipped; what requests create
    afterwards (the state cache included) is collected as before."""
    from django.urls import get_resolver  # here: gunicorn reads this file before the worker sets Django up

    get_resolver().url_patterns  # noqa: B018 - imported and built now, not by the first request
    gc.collect()  # the start's own garbage is freed first, not kept for good
    gc.freeze()
