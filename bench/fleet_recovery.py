"""Fleet recovery at scale: preview, run and undo a batch that restores every session of a broken fleet.

    python bench/fleet_recovery.py --database-url postgres://…/cc_bench [--sessions 1000] [--steps 1000] [--reuse]

Builds (in project `fleet-bench`, recreated on each run) `--sessions` sessions of `--steps` healthy checkpoints
followed by three failed ones (a shared tool went down), a page of sessions at a time: the first `--ingested`
healthy checkpoints and the failed ones through ingest (the failed detector opens an alert on each, as in
production), the rest of the history, on PostgreSQL, copied in bulk (`build`). Then, as an operator would:

1. the preview of the whole fleet (`fleet.preview_recovery`, every row kept, as the API answers it);
2. the run: `start_recovery` (the plan stored) and the job (`jobs.recoveries.run`) in this process;
3. the undo of the batch, which leaves the fleet broken again: `--reuse` measures it again without a build.

Prints and writes to var/bench-fleet-recovery.json, for each: wall time, queries, the process's resident
high-water mark before and after (or, with `--trace-memory`, the peak of Python allocations, which tracemalloc
slows down) — bounded by a page of sessions (fleet.PAGE), not by the fleet — and the machine's load average. Issue #25's targets: a preview of 1,000 sessions over 1M checkpoints in ≤ 3 s, the run in ≤ 60 s
(`--sessions 1000 --steps 1000`, the defaults). The machine is shared: report the load with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import tracemalloc
from pathlib import Path
from typing import Any

from run import say, setup_django

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "var" / "bench-fleet-recovery.json"
PROJECT = "fleet-bench"


def build(sessions: int, steps: int, *, ingested: int) -> Any:
    """The fleet, a page of sessions at a time: each session's first `ingested` healthy checkpoints and its three
    failed ones go through `ingest_checkpoints` (states, chunks, tallies, the failed detector's alert, as in
    production); on PostgreSQL the rest of its history is copied from its last healthy checkpoint in one
    INSERT … SELECT per page (same state, parents chained), which is what makes 1M checkpoints buildable here in
    minutes rather than hours. The tallies of a page are recounted after the copy."""
    from django.db import connection, transaction

    from checkpoints import services
    from checkpoints.models import Project
    from checkpoints.store import tallies

    Project.objects.filter(slug=PROJECT).delete()
    project = services.get_or_create_project(PROJECT)
    bulk = connection.vendor == "postgresql" and steps > ingested
    real = min(ingested, steps) if bulk else steps
    page = max(1, 20_000 // (real + 3), 100_000 // steps if bulk else 0)  # sessions per ingest call (and copy)
    page = min(page, max(1, 100_000 // steps)) if bulk else page
    made = 0
    started = time.perf_counter()
    while made < sessions:
        batch = []
        for number in range(made, min(made + page, sessions)):
            session, _ = services.upsert_session(project, external_id=f"crawler-{number:05d}", agent="crawler")
            items = [
                services.CheckpointInput(state={"step": step, "notes": f"step {step} of run {number}"}, name="step")
                for step in range(real)
            ]
            batch.append((session, items))
        services.ingest_checkpoints(batch)
        ids = [session.pk for session, _ in batch]
        if bulk:
            with transaction.atomic():
                _copy_history(ids, steps - real)
                tallies.recount(ids)
        failures = [
            services.CheckpointInput(state={"step": steps + k, "error": "search API: 503"}, status="failed")
            for k in range(3)
        ]
        sessions_now = type(batch[0][0]).objects.filter(pk__in=ids).order_by("pk")
        services.ingest_checkpoints([(session, failures) for session in sessions_now])
        made += len(batch)
        say(f"  {made:,} sessions, {made * (steps + 3):,} checkpoints ({time.perf_counter() - started:.0f} s)")
    if connection.vendor == "postgresql":
        # A database that grew to this size has its planner statistics (autovacuum analyzes as rows arrive); one
        # filled in minutes has not yet, and the planner would scan 1M rows for an index probe (20 s previews).
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    return project


def _copy_history(session_ids: list[int], copies: int) -> None:
    """`copies` more healthy checkpoints after each session's head, sharing its state; parents chained, head moved."""
    from django.db import connection

    from checkpoints.models import AgentSession, Checkpoint

    table, sessions = Checkpoint._meta.db_table, AgentSession._meta.db_table
    copied = [
        f.column
        for f in Checkpoint._meta.concrete_fields
        if f.column not in ("id", "seq", "parent_id", "created_at", "received_at", "starts_branch")
    ]
    columns = ", ".join(copied)
    picked = ", ".join(f"c.{column}" for column in copied)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({columns}, seq, created_at, received_at, starts_branch) "  # noqa: S608 - bench, model names
            f"SELECT {picked}, c.seq + g, c.created_at + g * interval '1 millisecond', c.received_at, false "
            f"FROM {table} c JOIN {sessions} s ON s.head_id = c.id, generate_series(1, %s) g WHERE s.id = ANY(%s)",
            [copies, session_ids],
        )
        cursor.execute(
            f"UPDATE {table} c SET parent_id = p.id FROM {table} p "  # noqa: S608 - bench, model names
            "WHERE c.session_id = ANY(%s) AND c.parent_id IS NULL AND c.seq > 1 "
            "AND p.session_id = c.session_id AND p.seq = c.seq - 1",
            [session_ids],
        )
        cursor.execute(
            f"UPDATE {sessions} s SET last_seq = c.seq, head_id = c.id FROM {table} c "  # noqa: S608 - bench, model names
            f"WHERE s.id = ANY(%s) AND c.session_id = s.id AND c.seq = (SELECT max(seq) FROM {table} WHERE session_id = s.id)",
            [session_ids],
        )


def _estimated_rows() -> int:
    """The checkpoints table's row count (an exact count of 1M rows is a query of its own on a loaded machine)."""
    from django.db import connection

    from checkpoints.models import Checkpoint

    if connection.vendor != "postgresql":
        return Checkpoint.objects.count()
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM " + Checkpoint._meta.db_table)  # noqa: S608 - the model's table
        return int(cursor.fetchone()[0])


def measured(work: Any, *, trace: bool = False) -> tuple[Any, dict[str, Any]]:
    """Wall time, queries and memory of `work`. Memory is the process's resident high-water mark before and after
    (it only grows when `work` holds more than anything before it did); with `trace`, the peak of Python
    allocations by tracemalloc instead, which slows Python down: its times are not the figures to quote."""
    import resource

    from django.db import connection

    count = 0

    def counted(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        nonlocal count
        count += 1
        return execute(sql, params, many, context)

    if trace:
        tracemalloc.start()
    high_water = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    with connection.execute_wrapper(counted):  # a count, not a log: a run makes more than Django's log keeps
        result = work()
    seconds = time.perf_counter() - started
    figures: dict[str, Any] = {"seconds": round(seconds, 2), "queries": count}
    if trace:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        figures["peak_python_mb"] = round(peak / 2**20, 1)
    else:
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        figures["max_rss_mb"] = {"before": round(high_water / 1024, 1), "after": round(after / 1024, 1)}
    return result, figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument(
        "--ingested",
        type=int,
        default=20,
        help="healthy checkpoints per session stored through ingest; the rest are copies (PostgreSQL)",
    )
    parser.add_argument("--reuse", action="store_true", help="measure the fleet an earlier run built (no build)")
    parser.add_argument(
        "--trace-memory",
        action="store_true",
        help="the peak of Python allocations, and what the run still holds after each page (tracemalloc; slows it)",
    )
    parser.add_argument(
        "--take", type=int, help="recover only the fleet's first N sessions (the same fleet, N sessions)"
    )
    args = parser.parse_args()
    setup_django(args.database_url)

    from django.conf import settings

    from checkpoints.audit import Actor
    from checkpoints.jobs import recoveries
    from checkpoints.models import Recovery
    from checkpoints.services import fleet
    from checkpoints.services.targets import TargetRule

    settings.RECOVERY_MAX_SESSIONS = max(args.sessions, 5000)
    from checkpoints.models import ApiToken, Project

    if args.reuse:  # the last run's undo left the fleet broken again
        project = Project.objects.get(slug=PROJECT)
        say(f"reusing the fleet of project {PROJECT}")
    else:
        say(f"building {args.sessions:,} sessions of {args.steps + 3:,} checkpoints")
        project = build(args.sessions, args.steps, ingested=args.ingested)
    token = ApiToken(project=project, name="bench")
    reach = fleet.Reach.for_token(token)
    selection = fleet.Selection("restore", TargetRule())
    if args.take:
        from checkpoints.models import AgentSession

        taken = AgentSession.objects.filter(project=project).order_by("pk").values_list("pk", flat=True)[: args.take]
        selection = fleet.Selection("restore", TargetRule(), session_ids=tuple(taken))
    retained: list[float] = []  # with --trace-memory: Python memory still allocated as each page ends
    if args.trace_memory:
        page_ends = fleet.detect_after_restores  # the run's last step of a page

        def tracked(session_ids: list[int]) -> None:
            page_ends(session_ids)
            retained.append(round(tracemalloc.get_traced_memory()[0] / 2**20, 2))

        fleet.detect_after_restores = tracked  # type: ignore[assignment]
    preview, preview_figures = measured(lambda: fleet.preview_recovery(selection, reach), trace=args.trace_memory)
    say(f"preview: {preview_figures} — {preview.totals.recover} to restore, {preview.totals.skipped} skipped")

    def run() -> Recovery:
        recovery = fleet.start_recovery(
            selection, reach, actor=Actor.system("bench"), reason="bench", start=lambda pk: None
        )
        recoveries.run(recovery.pk)
        recovery.refresh_from_db()
        return recovery

    load_before = os.getloadavg()
    recovery, run_figures = measured(run, trace=args.trace_memory)
    if retained:
        run_figures["retained_after_each_page_mb"] = retained
    say(
        f"run: {run_figures} — {recovery.state}: {recovery.done} restored, {recovery.skipped} skipped, {recovery.failed} failed"
    )
    # the undo leaves the fleet broken again (each head back to its failed one, the alerts reopened): --reuse
    undone, undo_figures = measured(
        lambda: fleet.undo_recovery(recovery, actor=Actor.system("bench")), trace=args.trace_memory
    )
    say(f"undo: {undo_figures} — {undone.undone} undone, {len(undone.kept)} kept")
    figures = {
        "sessions": recovery.total,
        "checkpoints_in_database": _estimated_rows(),
        "preview": {**preview_figures, "to_restore": preview.totals.recover, "skipped": preview.totals.skipped},
        "run": {**run_figures, "restored": recovery.done, "skipped": recovery.skipped, "failed": recovery.failed},
        "undo": {**undo_figures, "undone": undone.undone, "kept": len(undone.kept)},
        "load_average_1_5_15": {
            "before_run": [round(x, 2) for x in load_before],
            "after": [round(x, 2) for x in os.getloadavg()],
        },
        "targets": {"preview_seconds": 3, "run_seconds": 60, "at": "1,000 sessions over 1M checkpoints"},
    }
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
