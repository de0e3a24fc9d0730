"""Retention beside writers: does a throttled retention run slow an agent writing meanwhile more than any process
burning as much CPU would?

    python bench/retention.py [--reuse] [--sessions 150] [--per-session 700] [--setting ROWS:PAUSE_MS ...]

One run, on one database (its own `bench_retention`, copied afresh for each setting; `bench/scale.py` calls
`compare` on its 1M-checkpoint store instead):

a. a writer alone: another process creating one checkpoint every 50 ms through the service layer (p50 / p95), then
   the same writer unpaced for a while: the sustained ingest rate of one agent;
b. the writer beside retention (`apply_retention` in a third process, at the setting's `RETENTION_BATCH_ROWS` and
   `RETENTION_BATCH_PAUSE_MS`): its p50 / p95 while retention runs, and the CPU seconds retention used — its own
   process (getrusage) and its PostgreSQL backend (`/proc/<pg_backend_pid()>/stat`);
c. the writer beside a control: a process burning those same CPU seconds over the same wall time, in 10 ms slices
   (busy a share, asleep the rest), so its load is as even as a throttled run's;
d. retention's delete rate against the sustained ingest rate of (a);

then the writer alone again, to show how much the machine itself drifted during the run. The writer is judged
only on the checkpoints it created inside the window of (b) or (c); the processes compare times on the monotonic
clock, which is one clock for the whole machine and which time-machine (scale.py's travelling clock) leaves alone.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from scale import (  # noqa: E402 - after the path is set
    NAMES,
    PG_SERVER,
    StateMaker,
    admin_sql,
    copy_database,
    database_exists,
    migrate,
    ms,
    pct,
    say,
    setup_django,
    travel,
)

DEFAULT_DB = "bench_retention"
WRITER_PERIOD = 0.05  # one checkpoint every 50 ms, as scale.py's writer always did
SLICE = 0.01  # the control's busy/asleep period


# ---- the processes -------------------------------------------------------------------------------------


def spawn(role: str, url: str, clock: str | None, *extra: str, env: dict[str, str] | None = None) -> Any:
    args = [sys.executable, __file__, "--role", role, "--database-url", url, *extra]
    if clock:
        args += ["--clock", clock]
    return subprocess.Popen(args, stdout=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})  # noqa: S603 - this script again, with its own arguments


def finish(proc: Any) -> dict[str, Any]:
    """A role prints one JSON object when it stops (at its deadline, at its end, or on SIGTERM), after "ready"."""
    out, _ = proc.communicate()
    lines = [line for line in out.splitlines() if line.strip() and line != "ready"]
    return json.loads(lines[-1]) if lines else {}


def run_writer(seconds: float, samples: list[tuple[float, float]], *, paced: bool) -> None:
    """(start time, latency) of each checkpoint created into `samples`, one every 50 ms (or back to back when not
    `paced`); prints "ready" once the first is stored, so the measurement starts with the writer at work."""
    from checkpoints import services
    from checkpoints.services import CheckpointInput

    project = services.get_or_create_project("research")
    session, _ = services.upsert_session(project, external_id=f"writer-{os.getpid()}", agent="writer")
    maker = StateMaker(5)
    state = maker.first("writer")
    deadline = time.perf_counter() + seconds
    step = 0
    while time.perf_counter() < deadline:
        step += 1
        state = maker.advance(state, step, failing=False)
        at, start = time.monotonic(), time.perf_counter()
        services.create_checkpoint(session, CheckpointInput(state=state, name="tool_called", step=step))
        took = time.perf_counter() - start
        samples.append((at, took))
        if step == 1:
            print("ready", flush=True)
        if paced:
            time.sleep(max(0.0, WRITER_PERIOD - took))


def backend_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) a PostgreSQL backend has used: None when its /proc entry is not readable (a
    server on another host)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_retention() -> dict[str, Any]:
    from django.conf import settings
    from django.db import connection

    from checkpoints.jobs.retention import apply_retention

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = cursor.fetchone()[0]
    cpu, server = own_cpu(), backend_cpu(backend)
    start, clock = time.monotonic(), time.perf_counter()
    result = apply_retention()
    seconds = time.perf_counter() - clock
    server_after = backend_cpu(backend)
    return {
        "start": start,
        "end": time.monotonic(),
        "seconds": seconds,
        "deleted": result["deleted"],
        "errors": result["error_count"],
        "cpu_worker": own_cpu() - cpu,
        "cpu_backend": None if server is None or server_after is None else server_after - server,
        "batch_rows": settings.RETENTION_BATCH_ROWS,
        "pause_ms": settings.RETENTION_BATCH_PAUSE_MS,
    }


def run_control(cpu: float, wall: float) -> dict[str, Any]:
    """Burn `cpu` seconds over `wall` seconds, evenly: in each 10 ms slice, busy until its CPU time has caught up
    with its share of the time so far (a slice lost to other processes is made up), asleep for the rest."""
    share = min(1.0, cpu / wall) if wall else 0.0
    start, used = time.monotonic(), time.process_time()
    began = time.perf_counter()
    deadline = began + wall
    while (now := time.perf_counter()) < deadline:
        while time.process_time() - used < share * (time.perf_counter() - began) and time.perf_counter() < deadline:
            pass
        time.sleep(max(0.0, min(deadline, now + SLICE) - time.perf_counter()))
    return {"start": start, "end": time.monotonic(), "cpu": time.process_time() - used}


def role_main(args: argparse.Namespace) -> int:
    import signal

    def on_term(*_: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    if args.role == "control":
        print(json.dumps(run_control(args.cpu, args.wall)))
        return 0
    setup_django(args.database_url)
    with travel(args.clock) if args.clock else _nothing():
        if args.role == "writer":
            samples: list[tuple[float, float]] = []
            with contextlib.suppress(KeyboardInterrupt):
                run_writer(args.seconds, samples, paced=not args.unpaced)
            print(json.dumps({"samples": samples[1:]}))  # the first pays for warming up
        else:
            print(json.dumps(run_retention()))
    return 0


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


# ---- the comparison ------------------------------------------------------------------------------------


def latencies(writer: dict[str, Any], window: tuple[float, float] | None = None) -> list[float]:
    samples = writer.get("samples", [])
    if window is None:
        return [took for _, took in samples]
    return [took for at, took in samples if window[0] <= at <= window[1]]


def figures(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"p50_ms": None, "p95_ms": None, "samples": 0}
    return {"p50_ms": ms(statistics.median(values)), "p95_ms": ms(pct(values, 95)), "samples": len(values)}


def beside(url: str, clock: str | None, other: Any, *, lead: float = 1.0) -> tuple[dict[str, Any], dict[str, Any]]:
    """The writer's samples while `other` (a function starting a process) runs."""
    writer = spawn("writer", url, clock, "--seconds", "36000")
    writer.stdout.readline()  # "ready": set up and writing
    time.sleep(lead)
    proc = other()
    result = finish(proc)
    writer.terminate()
    return finish(writer), result


def compare(
    url: str, clock: str | None = None, *, alone_seconds: float = 20, ingest_seconds: float = 10
) -> dict[str, Any]:
    """(a)–(d) of the module's docstring, on the database at `url` (retention deletes there); the settings are
    the environment's RETENTION_BATCH_ROWS and RETENTION_BATCH_PAUSE_MS (this process's, passed on)."""
    say(f"writer alone, {alone_seconds:.0f} s")
    alone = latencies(finish(spawn("writer", url, clock, "--seconds", str(alone_seconds))))
    say(f"writer unpaced, {ingest_seconds:.0f} s: the sustained ingest rate")
    unpaced = finish(spawn("writer", url, clock, "--seconds", str(ingest_seconds), "--unpaced"))["samples"]
    ingest_rate = len(unpaced) / (unpaced[-1][0] + unpaced[-1][1] - unpaced[0][0]) if len(unpaced) > 1 else 0.0

    say("writer beside retention")
    writer, run = beside(url, clock, lambda: spawn("retention", url, clock))
    during = latencies(writer, (run["start"], run["end"]))
    cpu = run["cpu_worker"] + (run["cpu_backend"] or 0.0)
    say(f"  retention: {run}")

    say(f"writer beside a control burning {cpu:.1f} CPU-s over {run['seconds']:.1f} s")
    parts = max(1, math.ceil(cpu / run["seconds"])) if run["seconds"] else 1
    controls: list[Any] = []

    def start_controls() -> Any:
        for _ in range(parts - 1):
            controls.append(spawn("control", url, None, "--cpu", str(cpu / parts), "--wall", str(run["seconds"])))
        return spawn("control", url, None, "--cpu", str(cpu / parts), "--wall", str(run["seconds"]))

    writer, control = beside(url, clock, start_controls)
    control_cpu = control["cpu"] + sum(finish(proc)["cpu"] for proc in controls)
    control_during = latencies(writer, (control["start"], control["end"]))

    say(f"writer alone again, {alone_seconds:.0f} s")
    again = latencies(finish(spawn("writer", url, clock, "--seconds", str(alone_seconds))))
    rate = run["deleted"] / run["seconds"] if run["seconds"] else 0.0
    report = {
        "settings": {"RETENTION_BATCH_ROWS": run["batch_rows"], "RETENTION_BATCH_PAUSE_MS": run["pause_ms"]},
        "alone": figures(alone),
        "beside_retention": figures(during),
        "beside_control": figures(control_during),
        "alone_again": figures(again),
        "retention": {
            "deleted": run["deleted"],
            "errors": run["errors"],
            "seconds": round(run["seconds"], 1),
            "per_second": round(rate),
            "cpu_worker_s": round(run["cpu_worker"], 1),
            "cpu_backend_s": None if run["cpu_backend"] is None else round(run["cpu_backend"], 1),
            "control_cpu_s": round(control_cpu, 1),
        },
        "ingest_per_second": round(ingest_rate, 1),
        "delete_vs_ingest": round(rate / ingest_rate, 1) if ingest_rate else None,
        "load_average": [round(value, 2) for value in os.getloadavg()],
    }
    return report


def table(report: dict[str, Any]) -> str:
    base = report["alone"]["p95_ms"] or 0

    def row(label: str, key: str) -> str:
        f = report[key]
        rise = f"{(f['p95_ms'] / base - 1) * 100:+.0f} %" if base and f["p95_ms"] else "—"
        return f"| {label} | {f['p50_ms']} | {f['p95_ms']} | {rise} | {f['samples']} |"

    r = report["retention"]
    cpu = f"{r['cpu_worker_s']} + {r['cpu_backend_s']} (backend) = {r['cpu_worker_s'] + (r['cpu_backend_s'] or 0):.1f}"
    during, control = report["beside_retention"]["p95_ms"], report["beside_control"]["p95_ms"]
    verdict = "✓" if during is not None and control is not None and during <= control else "✗"
    enough = "✓" if (report["delete_vs_ingest"] or 0) >= 2 else "✗"
    s = report["settings"]
    return "\n".join(
        [
            f"settings: RETENTION_BATCH_ROWS={s['RETENTION_BATCH_ROWS']}, "
            f"RETENTION_BATCH_PAUSE_MS={s['RETENTION_BATCH_PAUSE_MS']}; load average {report['load_average']}",
            "| the writer (1 checkpoint / 50 ms) | p50 ms | p95 ms | p95 vs alone | samples |",
            "|---|---:|---:|---:|---:|",
            row("alone", "alone"),
            row("beside retention", "beside_retention"),
            row(f"beside a control burning {r['control_cpu_s']} of those CPU-s", "beside_control"),
            row("alone again (the machine's drift)", "alone_again"),
            "",
            f"retention: {r['deleted']:,} deleted in {r['seconds']} s = {r['per_second']:,}/s, CPU {cpu} s, "
            f"{r['errors']} errors; sustained ingest (one agent, unpaced) {report['ingest_per_second']}/s: "
            f"deletes {report['delete_vs_ingest']}× ingest {enough} (≥ 2×); p95 beside retention ≤ beside the "
            f"control {verdict}",
        ]
    )


# ---- the standalone store --------------------------------------------------------------------------------


def load(sessions: int, per_session: int) -> None:
    """`sessions` agent sessions of `per_session` step checkpoints each, through the service layer, with what
    retention must keep: the first, the latest of each name, pins, a restore target, a fork source."""
    from checkpoints import services
    from checkpoints.models import AgentSession, Checkpoint
    from checkpoints.services import CheckpointInput

    project = services.get_or_create_project("research")
    actor = services.Actor.system("bench")
    done = set(AgentSession.objects.filter(project=project).values_list("external_id", flat=True))
    maker = StateMaker(7)
    for index in range(sessions):
        external_id = f"retention-{index}"
        if external_id in done:
            continue
        session, _ = services.upsert_session(project, external_id=external_id, agent=f"agent-{index % 20}")
        state = maker.first(external_id)
        items = []
        for step in range(1, per_session + 1):
            state = maker.advance(state, step, failing=False)
            items.append(CheckpointInput(state=state, name=NAMES[step % len(NAMES)], step=step))
        for start in range(0, len(items), 500):
            services.ingest_checkpoints([(session, items[start : start + 500])])
        ours = Checkpoint.objects.filter(session=session).order_by("seq")
        services.pin_checkpoint(ours[per_session // 3], actor=actor)
        if index % 10 == 0:
            services.fork_session(ours[per_session // 4], actor=actor)
            services.restore_checkpoint(ours[per_session // 2], actor=actor)
        if index % 25 == 0:
            say(f"  loaded {index + 1} of {sessions} sessions")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", help=f"the loaded database (default {PG_SERVER}/{DEFAULT_DB})")
    parser.add_argument("--reuse", action="store_true", help="keep the loaded database")
    parser.add_argument("--sessions", type=int, default=150)
    parser.add_argument("--per-session", type=int, default=700)
    parser.add_argument(
        "--setting",
        action="append",
        help="ROWS:PAUSE_MS to measure (repeatable; default: the settings' defaults)",
    )
    parser.add_argument("--alone-seconds", type=float, default=20)
    parser.add_argument("--out", default=str(ROOT / "var" / "retention-results.json"))
    parser.add_argument("--role", choices=["writer", "retention", "control"], help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--unpaced", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cpu", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--wall", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--clock", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.role:
        return role_main(args)

    name = (args.database_url or f"{PG_SERVER}/{DEFAULT_DB}").rsplit("/", 1)[1]
    if not args.reuse and database_exists(name):
        admin_sql(f'DROP DATABASE "{name}" WITH (FORCE)')
    if not database_exists(name):
        admin_sql(f'CREATE DATABASE "{name}"')
    setup_django(f"{PG_SERVER}/{name}")
    migrate()
    say(f"loading {args.sessions} sessions × {args.per_session} checkpoints (what is missing)")
    load(args.sessions, args.per_session)

    from django.db import connections

    connections.close_all()
    reports = []
    for setting in args.setting or [""]:
        env = {}
        if setting:
            rows, pause = setting.split(":")
            env = {"RETENTION_BATCH_ROWS": rows, "RETENTION_BATCH_PAUSE_MS": pause}
        copy = f"{name}_run"
        copy_database(name, copy)
        admin_sql_in(copy, "VACUUM ANALYZE")
        os.environ.update(env)
        report = compare(f"{PG_SERVER}/{copy}", alone_seconds=args.alone_seconds)
        reports.append(report)
        print(table(report), end="\n\n", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(reports, indent=2))
    return 0


def admin_sql_in(database: str, statement: str) -> None:
    import psycopg

    with psycopg.connect(f"{PG_SERVER}/{database}", autocommit=True) as conn:
        conn.execute(statement)


if __name__ == "__main__":
    raise SystemExit(main())
