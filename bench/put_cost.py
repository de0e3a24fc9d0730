"""What one LangGraph step costs the server of `make run`, counted rather than timed: SQL queries and CPU per
request, in process, with bench/savers.py's growing graph (each step a put and a put_writes).

    python bench/put_cost.py [--steps 100] [--window 20] [--sql] [--profile N]

Settings as `serve` runs them (DEBUG=1, SQLite under a fresh VAR_DIR); ConsoleSaver's requests go through
Django's whole WSGI stack (middleware included) over httpx's WSGI transport, so no socket or server process is
timed. Prints one JSON line: per operation (put, writes), the median SQL statements and server CPU ms over the
last `--window` steps: `cpu_ms` the process's (`time.process_time`: it includes the client's threads, which
LangGraph runs beside the request), `thread_cpu_ms` the request's own thread's (`time.thread_time`). Query counts do not depend on the machine's load; CPU
time does much less than wall time does. --sql prints the statements of the last put and writes; --profile
prints the N costliest functions (cumulative) over the window's requests.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OPERATIONS = {"/api/v1/langgraph/checkpoints": "put", "/api/v1/langgraph/writes": "writes"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--window", type=int, default=20)
    parser.add_argument("--sql", action="store_true", help="print the last put's and writes' statements")
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="print the N costliest functions")
    args = parser.parse_args(argv)
    for name in ("DATABASE_URL", "CELERY_BROKER_URL", "CACHE_URL"):
        os.environ.pop(name, None)
    os.environ.update(
        VAR_DIR=tempfile.mkdtemp(prefix="cc-putcost-"), DEBUG="1", DJANGO_SETTINGS_MODULE="config.settings"
    )
    sys.path.insert(0, str(ROOT))
    import logging

    import django

    django.setup()
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per request
    import httpx
    from django.core.handlers.wsgi import WSGIHandler
    from django.core.management import call_command
    from django.db import connection
    from savers import run_graph

    from checkpoint_console.langgraph import ConsoleSaver

    call_command("migrate", verbosity=0)
    out = io.StringIO()
    call_command("create_api_token", project="bench", name="put-cost", stdout=out)
    token = out.getvalue().strip()

    records: list[dict[str, Any]] = []
    profilers: list[cProfile.Profile] | None = [] if args.profile else None
    app = WSGIHandler()

    def counted(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        statements: list[str] = []

        def record(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
            started = time.perf_counter()
            try:
                return execute(sql, params, many, context)
            finally:
                statements.append((sql, time.perf_counter() - started))

        cpu, thread, wall = time.process_time(), time.thread_time(), time.perf_counter()
        with connection.execute_wrapper(record):
            body = b"".join(app(environ, start_response))
        cpu, thread, wall = time.process_time() - cpu, time.thread_time() - thread, time.perf_counter() - wall
        records.append({"path": environ["PATH_INFO"], "cpu": cpu, "thread": thread, "wall": wall, "sql": statements})
        return [body]

    with ConsoleSaver("http://127.0.0.1", token) as saver:
        saver.client = httpx.Client(
            transport=httpx.WSGITransport(app=profiled(counted, profilers, records, args)),
            base_url="http://127.0.0.1",
            headers=saver._headers,  # noqa: SLF001 - the saver's own headers (its token)
        )
        run_graph("put-cost", saver, args.steps, 1, lambda: 0)
    figures: dict[str, Any] = {"steps": args.steps, "window": args.window}
    for path, name in OPERATIONS.items():
        window = [r for r in records if r["path"] == path][-args.window :]
        figures[f"{name}_queries"] = statistics.median(len(r["sql"]) for r in window)
        figures[f"{name}_cpu_ms"] = round(statistics.median(r["cpu"] for r in window) * 1000, 2)
        figures[f"{name}_thread_cpu_ms"] = round(statistics.median(r["thread"] for r in window) * 1000, 2)
        figures[f"{name}_wall_ms"] = round(statistics.median(r["wall"] for r in window) * 1000, 2)
        figures[f"{name}_sql_ms"] = round(statistics.median(sum(t for _, t in r["sql"]) for r in window) * 1000, 2)
        if args.sql:
            print(f"-- {name}: {len(window[-1]['sql'])} statements (ms each, median over the window)", file=sys.stderr)
            for at, (sql, _) in enumerate(window[-1]["sql"]):
                each = statistics.median(r["sql"][at][1] for r in window if len(r["sql"]) > at) * 1000
                print(f"  {each:6.2f}  {sql[:150]}", file=sys.stderr)
    figures["load_average"] = [round(load, 1) for load in os.getloadavg()]
    print(json.dumps(figures))
    if profilers:
        stats = pstats.Stats(*profilers, stream=sys.stderr)
        if os.environ.get("PROFILE_DUMP"):
            stats.dump_stats(os.environ["PROFILE_DUMP"])
        stats.sort_stats(os.environ.get("PROFILE_SORT", "cumulative")).print_stats(args.profile)
    return 0


def profiled(
    app: Callable[..., Iterable[bytes]], profilers: list[cProfile.Profile] | None, records: list[Any], args: Any
) -> Callable[..., Iterable[bytes]]:
    """The app, under a profiler for the window's steps (each step: two requests after the graph's first). One
    profiler per thread: LangGraph sends a step's writes from another thread than its put, at the same time."""
    if profilers is None:
        return app
    start = 2 * max(0, args.steps - args.window)
    mine = threading.local()

    def wrapped(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ["PATH_INFO"] not in OPERATIONS or len(records) < start:
            return app(environ, start_response)
        if not hasattr(mine, "profiler"):
            mine.profiler = cProfile.Profile(time.thread_time)  # CPU: not the waits for the GIL
            profilers.append(mine.profiler)
        return mine.profiler.runcall(app, environ, start_response)

    return wrapped


if __name__ == "__main__":
    sys.exit(main())
