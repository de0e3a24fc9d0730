"""Subgraph benchmark: a timeline page of a LangGraph thread of 100,000 checkpoints that ran 25,000 subgraph runs.

    python bench/subgraphs.py [--reuse] [--baseline DIR] [--repeat 9] [--database-url URL]

1. Load (once; `--reuse` keeps a loaded database): one LangGraph thread of 25,000 turns, each one root-graph step
   and a subgraph run of three checkpoints in a namespace of its own, as LangGraph stores them (the run's first
   checkpoint a new root, the root's next step's parent the root's previous one) and as the ingest service marks
   them (branch starts, subgraph hops). States are stored by the store's own `save_state`, rows bulk-inserted with
   ids reserved as the ingest reserves them, tallies counted by `tallies.count_in`: 100,000 checkpoints in about a
   minute, where the service path takes ~15 minutes on a loaded two-core machine.
2. Measure this checkout's timeline pages (newest, one in the middle, its htmx fragment) in this process: median and
   max server time (Django's test client: the view, its queries and the template, no network) over `--repeat`
   requests after one warm-up, query count and HTML size.
3. With `--baseline DIR` (a worktree of an earlier commit, e.g. `git worktree add --detach ../base main`), the
   same measurements by that code, in a subprocess on the same database, printed side by side with load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import scale  # bench/ is sys.path[0] when this script runs

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/bench_subgraphs"
TURNS = 25_000
RUN_SIZE = 3  # a subgraph run's checkpoints: with the root's step, four per turn
BATCH = 2_000
THREAD = "bench-subgraphs"


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def setup_django(url: str, code: Path) -> None:
    sys.path.insert(0, str(code))  # before this checkout and the editable install: `--baseline` measures that code
    os.chdir(code)
    scale.setup_django(url)


def ensure_database(url: str) -> None:
    import psycopg
    from psycopg import sql

    server, name = url.rsplit("/", 1)
    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is None:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def reserve_ids(count: int) -> list[int]:
    from django.db import connection

    from checkpoints.models import Checkpoint

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT nextval(pg_get_serial_sequence(%s, 'id')) FROM generate_series(1, %s) ORDER BY 1",
            [Checkpoint._meta.db_table, count],
        )
        return [pk for (pk,) in cursor.fetchall()]


def turn_rows(session: Any, turn: int, ids: list[int], saved: dict[str, Any], at: datetime) -> list[Any]:
    """One turn's rows as `services.ingest_checkpoints` writes a LangGraph thread's (tests prove that path): the
    root graph's step, its parent the previous turn's step (a branch start, a hop: it continues its parent), and a
    subgraph run whose first checkpoint is a new root in its namespace (a hop too)."""
    from checkpoints.models import Checkpoint

    seq = turn * (RUN_SIZE + 1) + 1
    namespace = f"child:{turn:08x}-4f1c-8a2e-run"

    def row(offset: int, parent: int | None, ns: str, step: int, state: str, checkpoint_id: str) -> Any:
        starts = seq + offset > 1 and (parent is None or offset == 0)
        return Checkpoint(
            pk=ids[offset],
            session=session,
            seq=seq + offset,
            parent_id=parent,
            starts_branch=starts,
            subgraph_hop=starts,
            name="loop",
            step=step,
            created_at=at + timedelta(seconds=offset),
            received_at=at,
            root=saved[state].root,
            state_hash=saved[state].state_hash,
            raw_bytes=saved[state].raw_bytes,
            stored_bytes=saved[state].stored_bytes if turn == 0 else 0,
            calls_made=0,
            preview=f"turn {turn}" if not ns else f"summarised, step {step}",
            metadata={"source": "loop", "step": step, "checkpoint_id": checkpoint_id, "checkpoint_ns": ns},
        )

    previous_root = ids[0] - (RUN_SIZE + 1) if turn else None  # ids are reserved a whole batch at a time
    rows = [row(0, previous_root, "", turn, "root", f"root-{turn:06}")]
    for step in range(RUN_SIZE):
        rows.append(row(1 + step, ids[step] if step else None, namespace, step, "sub", f"{turn}-{step}"))
    return rows


def load(reuse: bool) -> Any:
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import transaction

    from checkpoints import services, store
    from checkpoints.models import AgentSession, Checkpoint
    from checkpoints.store import tallies

    call_command("migrate", verbosity=0, interactive=False)
    get_user_model().objects.get_or_create(username="bench-admin", defaults={"is_staff": True, "is_superuser": True})
    project = services.get_or_create_project("bench-subgraphs")
    session, _ = services.upsert_session(project, external_id=THREAD, agent="langgraph")
    if reuse and session.last_seq >= TURNS * (RUN_SIZE + 1):
        return analysed(session)
    if session.last_seq:
        session.delete()
        session, _ = services.upsert_session(project, external_id=THREAD, agent="langgraph")
    AgentSession.objects.filter(pk=session.pk).update(source_format="langgraph", metadata={"thread_id": THREAD})
    session.refresh_from_db()
    saved = {
        "root": store.save_state({"messages": ["what the agent said"], "plan": ["search", "answer"]}),
        "sub": store.save_state({"summary": "what the subgraph made of it", "notes": [1, 2, 3]}),
    }
    start = time.perf_counter()
    began = datetime(2026, 11, 1, tzinfo=UTC)
    per_batch = BATCH // (RUN_SIZE + 1)
    for first in range(0, TURNS, per_batch):
        turns = range(first, min(first + per_batch, TURNS))
        ids = reserve_ids(len(turns) * (RUN_SIZE + 1))
        rows = []
        for n, turn in enumerate(turns):
            at = began + timedelta(seconds=30 * turn)
            turn_ids = ids[n * (RUN_SIZE + 1) : (n + 1) * (RUN_SIZE + 1)]
            made = turn_rows(session, turn, turn_ids, saved, at)
            if n == 0 and turn:  # the previous batch's last root: found by seq, not by a reserved id
                made[0].parent_id = Checkpoint.objects.get(session=session, seq=made[0].seq - RUN_SIZE - 1).pk
            rows += made
        with transaction.atomic():
            Checkpoint.objects.bulk_create(rows, batch_size=1_000)
            tallies.count_in(rows, last_seq=rows[-1].seq, head=rows[-4], updated_at=rows[-1].created_at)
        if (first // per_batch) % 10 == 9:
            say(f"  loaded {rows[-1].seq:,} checkpoints, {time.perf_counter() - start:.0f} s")
    session.refresh_from_db()
    say(f"loaded {session.last_seq:,} checkpoints in {time.perf_counter() - start:.0f} s")
    return analysed(session)


def analysed(session: Any) -> Any:
    """Statistics as autovacuum would have gathered them after such a load: without them the planner takes the
    freshly loaded table for empty and reads every branch start to find the few near a page."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE checkpoints_checkpoint")
    return session


class SqlTimer:
    """Wall time a request spends waiting on its statements (PostgreSQL's share of the server time)."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        start = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self.seconds += time.perf_counter() - start


def measure(repeat: int) -> dict[str, Any]:
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.urls import reverse

    from checkpoints.models import AgentSession

    session = AgentSession.objects.get(external_id=THREAD)
    client = Client()
    client.force_login(get_user_model().objects.get(username="bench-admin"))
    here = reverse("dashboard:session_detail", args=[session.pk])
    pages = {
        "newest page": (here, {}),
        "middle page": (f"{here}?before={session.last_seq // 2}", {}),
        "newest, htmx": (here, {"HX-Request": "true"}),
    }
    out: dict[str, Any] = {}
    for name, (url, headers) in pages.items():
        times: list[float] = []
        cpu: list[float] = []
        sql: list[float] = []
        counter = scale.QueryCounter()
        size = status = 0
        for attempt in range(repeat + 1):
            counter, timer = scale.QueryCounter(), SqlTimer()
            with connection.execute_wrapper(counter), connection.execute_wrapper(timer):
                start, start_cpu = time.perf_counter(), time.process_time()
                response = client.get(url, headers=headers)
                elapsed, used = time.perf_counter() - start, time.process_time() - start_cpu
            if attempt:  # the first request warms the connection, templates and caches
                times.append(elapsed)
                cpu.append(used)
                sql.append(timer.seconds)
            size, status = len(response.content), response.status_code
        out[name] = {
            "median_ms": round(1000 * statistics.median(times), 1),
            "max_ms": round(1000 * max(times), 1),
            "cpu_ms": round(1000 * statistics.median(cpu), 1),
            "sql_ms": round(1000 * statistics.median(sql), 1),
            "queries": counter.count,
            "bytes": size,
            "status": status,
        }
    return out


def cells(page: dict[str, Any]) -> str:
    return (
        f"{page['median_ms']:>8.0f} ({page['max_ms']:>8.0f}) {page['cpu_ms']:>6.0f} {page['sql_ms']:>6.0f}"
        f" {page['queries']:>3} {page['bytes'] / 1000:>6.1f}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", default=DEFAULT_URL)
    parser.add_argument("--reuse", action="store_true", help="keep a thread loaded by an earlier run")
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--baseline", type=Path, help="a worktree of the code to compare with (measured alike)")
    parser.add_argument("--measure-only", action="store_true", help=argparse.SUPPRESS)  # the baseline's subprocess
    args = parser.parse_args(argv)
    if args.measure_only:
        setup_django(args.database_url, Path.cwd())
        print(json.dumps(measure(args.repeat)))
        return 0
    ensure_database(args.database_url)
    setup_django(args.database_url, ROOT)
    load(args.reuse)
    results = {}
    if args.baseline:
        say(f"measuring the baseline in {args.baseline}")
        again = [sys.executable, str(ROOT / "bench" / "subgraphs.py"), "--measure-only", "--repeat", str(args.repeat)]
        again += ["--database-url", args.database_url]
        done = subprocess.run(again, cwd=args.baseline, capture_output=True, text=True, check=True)  # noqa: S603 - this script again
        results["before"] = json.loads(done.stdout.strip().splitlines()[-1])
    say("measuring this checkout")
    results["after"] = measure(args.repeat)
    load_avg = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"LangGraph thread: {TURNS * (RUN_SIZE + 1):,} checkpoints, {TURNS:,} subgraph runs; load average {load_avg}")
    print("server time: median (max) ms; cpu: the web process's CPU ms; sql: ms waiting on PostgreSQL (medians)")
    print(f"{'page':<13} {'before ms (max)':>19} {'cpu':>6} {'sql':>6} {'q':>3} {'kB':>6} |", end="")
    print(f" {'after ms (max)':>19} {'cpu':>6} {'sql':>6} {'q':>3} {'kB':>6}")
    for name, after in results["after"].items():
        before = results.get("before", {}).get(name)
        print(f"{name:<13} {cells(before) if before else '—':>45} | {cells(after)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
