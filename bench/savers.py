"""LangGraph savers compared in one run: ConsoleSaver (over HTTP) vs PostgresSaver vs SqliteSaver.

    python bench/savers.py [--steps 1000] [--savers console,postgres,sqlite]

One real LangGraph `StateGraph` runs `--steps` supersteps against each saver: its `messages` channel
(`add_messages`) grows by the workload's step (an optional user message, an assistant message of
200–2,000 characters with one tool call, the tool's result: ~2.6 KB of new JSON) and its `memory` (50 keys,
1–3 changing) and `progress` channels are replaced. Every superstep is one `put` plus one `put_writes`
(durability "sync", so each put finishes before the next step). Each saver gets the same content (same
seed). Figures, judged at steps 901–1000 as bench/run.py does:

* disk per checkpoint: growth of the saver's database (`pg_database_size`, or the SQLite file with its
  WAL) from step 900 to the last step, divided by the checkpoints written; pending writes included;
* put p50/p95 over the window (ConsoleSaver: HTTP round trip to a real gunicorn; peers: in-process);
* get_tuple of the latest checkpoint: **cold**, p50 of 7 fresh processes each making a fresh saver and reading once
  (what every graph invocation in a new worker pays), and **warm**, p50 of 20 more reads by the saver that ran
  the graph; list of every checkpoint, once, by that saver.

PostgreSQL and the console use databases `bench_lg_console` and `bench_lg_postgres` (with `$BENCH_DB_SUFFIX`
appended when set), dropped and created anew. Prints a table and writes var/bench-langgraph.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, TypedDict

import psycopg
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from run import RUN, gunicorn, ms, pct, say
from workload import AgentSessionWorkload

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "var" / "bench-langgraph.json"
ADMIN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"
# two runs side by side on one server each need their own databases
DB_SUFFIX = os.environ.get("BENCH_DB_SUFFIX", "")
WINDOW = 100
READS = 20
COLD_READS = 7


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    memory: dict[str, Any]
    progress: dict[str, Any]


def messages_of(change: dict[str, Any]) -> list[AnyMessage]:
    """The workload's step as LangChain messages: what a tool-calling agent appends."""
    call = change["tool_calls"][0]
    out: list[AnyMessage] = []
    for message in change["messages"]:
        if message["role"] == "user":
            out.append(HumanMessage(message["content"], id=message["id"]))
        else:
            tool_call = {"name": call["name"], "args": call["arguments"], "id": call["id"], "type": "tool_call"}
            out.append(AIMessage(message["content"], id=message["id"], tool_calls=[tool_call]))
    status = "success" if call["success"] else "error"
    out.append(ToolMessage(call["result"], tool_call_id=call["id"], id=f"{call['id']}-result", status=status))
    return out


class Probe:
    """What the run records: put latencies, and the disk size when the window starts."""

    def __init__(self, steps: int, size: Callable[[], int]) -> None:
        self.steps = steps
        self.size = size
        self.window_start = max(1, steps - WINDOW + 1)
        self.puts: list[float] = []
        self.size_before = 0
        self.checkpoints_before = 0


def build_graph(workload: AgentSessionWorkload, probe: Probe) -> StateGraph:
    def agent(state: State) -> dict[str, Any]:
        step = workload.advance()
        if step.number == probe.window_start:
            probe.size_before = probe.size()
            probe.checkpoints_before = len(probe.puts)
        return {
            "messages": messages_of(step.change),
            "memory": dict(step.state["memory"]),
            "progress": dict(step.state["progress"]),
        }

    def more(state: State) -> str:
        return "agent" if state["progress"]["step"] < probe.steps else END

    graph = StateGraph(State)
    graph.add_node("agent", agent)
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", more)
    return graph


def timed_puts(saver: BaseCheckpointSaver, probe: Probe) -> None:
    put = saver.put

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return put(*args, **kwargs)
        finally:
            probe.puts.append(time.perf_counter() - start)

    saver.put = timed  # type: ignore[method-assign]


def cold_reads(name: str, target: dict[str, Any]) -> list[float]:
    """get_tuple's latency in fresh processes, each with a fresh saver (`--cold`): nothing decoded or cached."""
    command = [sys.executable, str(Path(__file__).resolve()), "--cold", json.dumps({"saver": name, **target})]
    seconds = []
    for _ in range(COLD_READS):
        done = subprocess.run(command, capture_output=True, text=True, check=True)  # noqa: S603 - this script
        seconds.append(float(done.stdout.strip().splitlines()[-1]))
    return seconds


def cold_read(target: dict[str, Any]) -> float:
    """One get_tuple of the thread's latest checkpoint by a saver made in this (fresh) process, in seconds."""
    import langchain_core.messages  # noqa: F401 - a graph's process has imported it before its first read

    config = {"configurable": {"thread_id": target["thread"], "checkpoint_ns": ""}}
    if target["saver"] == "console":
        from checkpoint_console.langgraph import ConsoleSaver

        with ConsoleSaver(target["base"], target["token"]) as saver:
            return timed_read(saver, config)
    if target["saver"] == "postgres":
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(target["url"]) as saver:
            return timed_read(saver, config)
    from langgraph.checkpoint.sqlite import SqliteSaver

    with sqlite3.connect(target["path"], check_same_thread=False) as conn:
        return timed_read(SqliteSaver(conn), config)


def timed_read(saver: BaseCheckpointSaver, config: Any) -> float:
    start = time.perf_counter()
    found = saver.get_tuple(config)
    elapsed = time.perf_counter() - start
    if found is None:
        raise RuntimeError("the cold read found no checkpoint")
    return elapsed


def run_graph(
    name: str,
    saver: BaseCheckpointSaver,
    steps: int,
    seed: int,
    size: Callable[[], int],
    target: dict[str, Any] | None = None,
) -> dict[str, Any]:
    workload = AgentSessionWorkload(seed)
    probe = Probe(steps, size)
    timed_puts(saver, probe)
    graph = build_graph(workload, probe).compile(checkpointer=saver)
    thread = f"bench-{name}-{RUN}"
    config = {"configurable": {"thread_id": thread}, "recursion_limit": steps + 10}
    first = workload.state["messages"][0]
    say(f"{name}: {steps} supersteps")
    started = time.perf_counter()
    graph.invoke(
        {"messages": [HumanMessage(first["content"], id=first["id"])], "memory": {}, "progress": {"step": 0}},
        config,
        durability="sync",
    )
    elapsed = time.perf_counter() - started
    size_after = size()
    written = len(probe.puts) - probe.checkpoints_before
    window = probe.puts[-WINDOW:]
    read_config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    # a fresh process can make only the savers cold_read knows (not one a caller built, as firstrun_put.py does)
    cold = cold_reads(name, {**target, "thread": thread}) if target is not None else []
    saver.get_tuple(read_config)  # the first read after the puts: the saver holds nothing it read yet
    reads = []
    for _ in range(READS):
        start = time.perf_counter()
        latest = saver.get_tuple(read_config)
        reads.append(time.perf_counter() - start)
    if latest is None or len(latest.checkpoint["channel_values"]["messages"]) <= steps:
        raise RuntimeError("the saver's latest checkpoint lacks the run's messages")
    start, cpu = time.perf_counter(), time.process_time()
    listed = sum(1 for _ in saver.list(read_config))
    list_seconds, list_cpu = time.perf_counter() - start, time.process_time() - cpu
    return {
        "checkpoints": len(probe.puts),
        "run_seconds": round(elapsed, 1),
        "disk_per_checkpoint": round((size_after - probe.size_before) / written),
        "put_p50_ms": ms(statistics.median(window)),
        "put_p95_ms": ms(pct(window, 95)),
        "get_cold_p50_ms": ms(statistics.median(cold)) if cold else None,
        "get_latest_p50_ms": ms(statistics.median(reads)),
        "list_all_seconds": round(list_seconds, 2),
        "list_client_cpu_seconds": round(list_cpu, 2),
        "listed": listed,
        "state_messages": len(latest.checkpoint["channel_values"]["messages"]),
    }


def fresh_database(name: str) -> str:
    with psycopg.connect(ADMIN, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    return f"postgres://postgres@127.0.0.1:5432/{name}"


def database_size(url: str) -> Callable[[], int]:
    def size() -> int:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CHECKPOINT")
            row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
            return int(row[0]) if row else 0

    return size


def run_postgres(steps: int, seed: int) -> dict[str, Any]:
    from langgraph.checkpoint.postgres import PostgresSaver

    url = fresh_database("bench_lg_postgres" + DB_SUFFIX)
    with PostgresSaver.from_conn_string(url) as saver:
        saver.setup()
        return run_graph("postgres", saver, steps, seed, database_size(url), {"url": url})


def run_sqlite(steps: int, seed: int) -> dict[str, Any]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    path = Path(tempfile.mkdtemp(prefix="bench_lg_")) / "checkpoints.sqlite"

    def size() -> int:
        return sum(p.stat().st_size for p in path.parent.iterdir() if p.name.startswith(path.name))

    with sqlite3.connect(path, check_same_thread=False) as conn:
        return run_graph("sqlite", SqliteSaver(conn), steps, seed, size, {"path": str(path)})


@contextmanager
def console(url: str) -> Iterator[tuple[str, str]]:
    """The console on a fresh database behind a real gunicorn; yields its base URL and a write token."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
    os.environ["DATABASE_URL"] = url
    os.environ["DEBUG"] = "0"
    sys.path.insert(0, str(ROOT))
    import django
    from django.core.management import call_command

    django.setup()
    logging.getLogger("httpx").setLevel(logging.WARNING)  # under the console's logging it logs every request
    call_command("migrate", verbosity=0, interactive=False)
    from checkpoints import services

    _, token = services.create_api_token(services.get_or_create_project("bench"), name=f"bench-lg-{RUN}")
    with gunicorn(url) as base:
        yield base, token


def run_console(steps: int, seed: int) -> dict[str, Any]:
    from checkpoint_console.langgraph import ConsoleSaver

    url = fresh_database("bench_lg_console" + DB_SUFFIX)
    with console(url) as (base, token), ConsoleSaver(base, token) as saver:
        return run_graph("console", saver, steps, seed, database_size(url), {"base": base, "token": token})


RUNNERS = {"console": run_console, "postgres": run_postgres, "sqlite": run_sqlite}
LABELS = {"console": "ConsoleSaver (HTTP)", "postgres": "PostgresSaver", "sqlite": "SqliteSaver"}
ROWS = [
    ("disk per checkpoint, supersteps {window} (B)", "disk_per_checkpoint", "{:,}"),
    ("put p50 (ms)", "put_p50_ms", "{}"),
    ("put p95 (ms)", "put_p95_ms", "{}"),
    ("get_tuple latest, cold p50 (ms)", "get_cold_p50_ms", "{}"),
    ("get_tuple latest, warm p50 (ms)", "get_latest_p50_ms", "{}"),
    ("list every checkpoint (s)", "list_all_seconds", "{}"),
    ("  of which the reading process's CPU (s)", "list_client_cpu_seconds", "{}"),
    ("checkpoints listed", "listed", "{:,}"),
    ("whole run (s)", "run_seconds", "{}"),
]


def table(results: dict[str, dict[str, Any]], steps: int) -> str:
    names = list(results)
    window = f"{max(1, steps - WINDOW + 1)}–{steps}"
    lines = ["| | " + " | ".join(LABELS[n] for n in names) + " |", "|---" * (len(names) + 1) + "|"]
    for label, key, fmt in ROWS:
        lines.append(
            f"| {label.format(window=window)} | " + " | ".join(fmt.format(results[n][key]) for n in names) + " |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--savers", default="console,postgres,sqlite", help="comma-separated: console,postgres,sqlite")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--cold", help=argparse.SUPPRESS)  # one cold read in this process (see cold_reads)
    args = parser.parse_args(argv)
    if args.cold:
        print(cold_read(json.loads(args.cold)))
        return 0
    names = [name.strip() for name in args.savers.split(",") if name.strip()]
    unknown = sorted(set(names) - set(RUNNERS))
    if unknown or args.steps < 2:
        parser.error(f"unknown saver(s) {unknown}" if unknown else "--steps must be at least 2")
    results = {name: RUNNERS[name](args.steps, args.seed) for name in names}
    print(f"\nLangGraph savers — {args.steps} supersteps, {os.cpu_count()} CPUs\n")
    print(table(results, args.steps))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"steps": args.steps, "seed": args.seed, "results": results}, indent=2))
    print(f"\nresults written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
