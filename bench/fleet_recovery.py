"""Fleet recovery at scale: preview and run a batch that restores every session of a broken fleet.

    python bench/fleet_recovery.py --database-url postgres://…/cc_bench [--sessions 1000] [--steps 1000]

Builds (in project `fleet-bench`, recreated on each run) `--sessions` sessions of `--steps` healthy checkpoints
followed by three failed ones (a shared tool went down), ingested a page of sessions at a time; the failed
detector opens an alert on each, as in production. Then, as an operator would:

1. the preview of the whole fleet (`fleet.preview_recovery`, every row kept, as the API answers it);
2. the run: `start_recovery` (the plan stored) and the job (`jobs.recoveries.run`) in this process.

Prints and writes to var/bench-fleet-recovery.json, for each: wall time, queries, and the peak of Python memory
allocated (tracemalloc) — bounded by a page of sessions (fleet.PAGE), not by the fleet. Issue #25's targets: a
preview of 1,000 sessions over 1M checkpoints in ≤ 3 s, the run in ≤ 60 s (`--sessions 1000 --steps 1000`). On a
shared, loaded machine run it small (`--sessions 100 --steps 20`) to prove it works; say the figures are under load.
"""

from __future__ import annotations

import argparse
import json
import time
import tracemalloc
from pathlib import Path
from typing import Any

from run import say, setup_django

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "var" / "bench-fleet-recovery.json"
PROJECT = "fleet-bench"


def build(sessions: int, steps: int) -> Any:
    from checkpoints import services
    from checkpoints.models import Project

    Project.objects.filter(slug=PROJECT).delete()
    project = services.get_or_create_project(PROJECT)
    page = max(1, 20_000 // (steps + 3))  # sessions ingested per call
    made = 0
    started = time.perf_counter()
    while made < sessions:
        batch = []
        for number in range(made, min(made + page, sessions)):
            session, _ = services.upsert_session(project, external_id=f"crawler-{number:05d}", agent="crawler")
            items = [
                services.CheckpointInput(state={"step": step, "notes": f"step {step} of run {number}"}, name="step")
                for step in range(steps)
            ]
            items += [
                services.CheckpointInput(state={"step": steps + k, "error": "search API: 503"}, status="failed")
                for k in range(3)
            ]
            batch.append((session, items))
        services.ingest_checkpoints(batch)
        made += len(batch)
        say(f"  {made:,} sessions, {made * (steps + 3):,} checkpoints ({time.perf_counter() - started:.0f} s)")
    return project


def measured(work: Any) -> tuple[Any, dict[str, Any]]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    tracemalloc.start()
    started = time.perf_counter()
    with CaptureQueriesContext(connection) as queries:
        result = work()
    seconds = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return result, {"seconds": round(seconds, 2), "queries": len(queries), "peak_python_mb": round(peak / 2**20, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=1000)
    args = parser.parse_args()
    setup_django(args.database_url)

    from django.conf import settings

    from checkpoints.audit import Actor
    from checkpoints.jobs import recoveries
    from checkpoints.models import Checkpoint, Recovery
    from checkpoints.services import fleet
    from checkpoints.services.targets import TargetRule

    settings.RECOVERY_MAX_SESSIONS = max(args.sessions, 5000)
    say(f"building {args.sessions:,} sessions of {args.steps + 3:,} checkpoints")
    project = build(args.sessions, args.steps)
    from checkpoints.models import ApiToken

    token = ApiToken(project=project, name="bench")
    reach = fleet.Reach.for_token(token)
    selection = fleet.Selection("restore", TargetRule())
    preview, preview_figures = measured(lambda: fleet.preview_recovery(selection, reach))
    say(f"preview: {preview_figures} — {preview.totals.recover} to restore, {preview.totals.skipped} skipped")

    def run() -> Recovery:
        recovery = fleet.start_recovery(
            selection, reach, actor=Actor.system("bench"), reason="bench", start=lambda pk: None
        )
        recoveries.run(recovery.pk)
        recovery.refresh_from_db()
        return recovery

    recovery, run_figures = measured(run)
    say(
        f"run: {run_figures} — {recovery.state}: {recovery.done} restored, {recovery.skipped} skipped, {recovery.failed} failed"
    )
    figures = {
        "sessions": args.sessions,
        "checkpoints_in_database": Checkpoint.objects.count(),
        "preview": {**preview_figures, "to_restore": preview.totals.recover, "skipped": preview.totals.skipped},
        "run": {**run_figures, "restored": recovery.done, "skipped": recovery.skipped, "failed": recovery.failed},
        "targets": {"preview_seconds": 3, "run_seconds": 60, "at": "1,000 sessions over 1M checkpoints"},
    }
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
