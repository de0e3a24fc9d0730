"""Retention beside writers: does a throttled retention run slow an agent writing meanwhile more than any process
burning as much CPU would?

    python bench/retention.py [--reuse] [--sessions 150] [--per-session 700] [--rounds 3] [--window 20]
                              [--setting ROWS:PAUSE_MS ...]

One run, on one database (its own `bench_retention`, copied afresh for each setting; `bench/scale.py` calls
`compare` on its 1M-checkpoint store instead). One writer process creates a checkpoint every 50 ms through the
service layer for the whole run, while the windows alternate around it, `--rounds` times, each round's order rotated
by one (retention · control · alone · shaped · reader, then reader · retention · control · alone · shaped, …) so
that the machine's drift (six other engineers share it) falls on every column alike:

- retention: `apply_retention` in another process at the setting's `RETENTION_BATCH_ROWS` and
  `RETENTION_BATCH_PAUSE_MS` for `--window` seconds, then asked to stop (SIGTERM: it ends between two batches, as a
  run that loses its lock does); the CPU seconds it used are its own process's (getrusage) plus its PostgreSQL
  backend's (`/proc/<pg_backend_pid()>/stat`);
- control (even): a process burning the CPU seconds of the latest retention window over the same wall time, in 10 ms
  slices (busy a share, asleep the rest);
- control (retention's timing, "shaped"): a process burning the same CPU seconds on that window's own timeline:
  asleep during each of retention's pauses (the job's process records when its throttle slept), busy in between,
  so that it loads the machine when retention did and only its database work differs;
- a database reader (retention's timing): a process spending the same CPU seconds (its own and its backend's) on
  that timeline doing PostgreSQL work that changes nothing: retention's own reads, a session's plan and the
  protection check of what it would delete. Set beside the shaped control, it shows what any PostgreSQL work of
  retention's volume costs the writer beyond the CPU it uses, deleting or not;
- alone: nothing beside the writer.

The writer is judged on the checkpoints it created inside each window (p50 / p95 per column, all rounds pooled,
and each round's p95). Before the windows, the sustained ingest rates: the same writer unpaced (one agent), and one
process ingesting batches of 100 checkpoints back to back (`ingest_checkpoints`, as `POST /checkpoints/batch`
does); retention's delete rate (what its windows deleted over their wall time, pauses included) is set against
both. The processes compare times on the monotonic clock, which is one clock for the whole machine and which
time-machine (scale.py's travelling clock) leaves alone.
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
import tempfile
import time
from collections.abc import Callable, Iterator
from itertools import cycle
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from procfs import backend_pid, process_cpu  # noqa: E402 - after the path is set
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


def run_writer(seconds: float, samples: list[tuple[float, float]], *, paced: bool, batch: int = 1) -> None:
    """(start time, latency) of each create into `samples`, one every 50 ms (or back to back when not `paced`);
    prints "ready" once the first is stored, so the measurement starts with the writer at work. With `batch` > 1
    each create is one `ingest_checkpoints` call of that many checkpoints (the batch endpoint's path)."""
    from checkpoints import services
    from checkpoints.services import CheckpointInput

    project = services.get_or_create_project("research")
    session, _ = services.upsert_session(project, external_id=f"writer-{os.getpid()}", agent="writer")
    maker = StateMaker(5)
    state = maker.first("writer")
    deadline = time.perf_counter() + seconds
    step = 0
    while time.perf_counter() < deadline:
        items = []
        for _ in range(batch):
            step += 1
            state = maker.advance(state, step, failing=False)
            items.append(CheckpointInput(state=state, name="tool_called", step=step))
        at, start = time.monotonic(), time.perf_counter()
        if batch == 1:
            services.create_checkpoint(session, items[0])
        else:
            services.ingest_checkpoints([(session, items)])
        took = time.perf_counter() - start
        samples.append((at, took))
        if len(samples) == 1:
            print("ready", flush=True)
        if paced:
            time.sleep(max(0.0, WRITER_PERIOD - took))


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_retention() -> dict[str, Any]:
    """One retention run, until it is done or SIGTERM asks it to stop (between two batches)."""
    import signal

    from django.conf import settings

    from checkpoints.jobs import StopRequest
    from checkpoints.jobs.retention import apply_retention

    stop = StopRequest()
    signal.signal(signal.SIGTERM, lambda *_: stop.set("the window ended"))
    backend = backend_pid()
    pauses: list[tuple[float, float]] = []  # (offset from the start, seconds): when the throttle slept
    sleep = time.sleep

    def timed_sleep(seconds: float) -> None:
        pauses.append((time.perf_counter() - clock, seconds))
        sleep(seconds)

    time.sleep = timed_sleep  # this process runs retention only: its throttle's sleeps are the only ones
    cpu, server = own_cpu(), process_cpu(backend)
    start, clock = time.monotonic(), time.perf_counter()
    print("ready", flush=True)
    result = apply_retention(stop=stop)
    seconds = time.perf_counter() - clock
    server_after = process_cpu(backend)
    return {
        "start": start,
        "end": time.monotonic(),
        "seconds": seconds,
        "deleted": result["deleted"],
        "errors": result["error_count"],
        "stopped": result.get("stopped", ""),
        "cpu_worker": own_cpu() - cpu,
        "cpu_backend": None if server is None or server_after is None else server_after - server,
        "batch_rows": settings.RETENTION_BATCH_ROWS,
        "pause_ms": settings.RETENTION_BATCH_PAUSE_MS,
        "pauses": [(round(at, 4), round(seconds, 4)) for at, seconds in pauses],
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


def run_shaped(cpu: float, wall: float, pauses: list[tuple[float, float]]) -> dict[str, Any]:
    """Burn `cpu` seconds over `wall` seconds as retention's window used them: asleep during each of its pauses
    (`pauses`: offset from the start, seconds), busy in between (at the share of each busy stretch that adds up to
    `cpu`: retention's process and its backend take turns, so its busy wall time is about its CPU time)."""
    return on_timeline(cpu, wall, pauses, used=time.process_time, unit=lambda: None)


def run_reader(cpu: float, wall: float, pauses: list[tuple[float, float]]) -> dict[str, Any]:
    """As `run_shaped`, but busy with PostgreSQL work that changes nothing: retention's own reads (a session's
    plan, then the protection check of what it would delete), one session at a time, round the store. Its CPU is
    its process's and its backend's, as retention's is."""
    from django.utils import timezone

    from checkpoints.jobs.retention import _plan_sessions, _Rules
    from checkpoints.models import AgentSession
    from checkpoints.services.cleanup import protected_among

    backend = backend_pid()
    rules = _Rules(timezone.now())
    sessions = list(AgentSession.objects.order_by("pk").values_list("pk", "project_id", "head_id", "source_format"))

    def reads() -> Iterator[None]:
        """A unit at a time, each ~8 ms here (a whole session's plan and check, ~16 ms, overshot the CPU asked by
        8–11 %, the last unit of each busy stretch running into retention's pause)."""
        for session in cycle(sessions):
            (plan,) = _plan_sessions(rules, [session])
            yield
            protected_among(plan.delete[:500])
            yield

    steps = reads()
    return on_timeline(
        cpu, wall, pauses, used=lambda: own_cpu() + (process_cpu(backend) or 0.0), unit=lambda: next(steps)
    )


def on_timeline(
    cpu: float,
    wall: float,
    pauses: list[tuple[float, float]],
    *,
    used: Callable[[], float],
    unit: Callable[[], None],
) -> dict[str, Any]:
    """Spend `cpu` seconds (as `used` counts them) over `wall` seconds on retention's timeline: asleep during its
    pauses; in between, `unit` after `unit` while the CPU used lags the stretch's share, 1 ms naps otherwise."""
    asleep = sum(seconds for _, seconds in pauses)
    share = min(1.0, cpu / (wall - asleep)) if wall > asleep else 1.0
    start, spent, busy = time.monotonic(), used(), 0.0
    began = time.perf_counter()
    for at, seconds in [*pauses, (wall, 0.0)]:
        stretch = time.perf_counter()
        while (now := time.perf_counter()) < began + at:
            if used() - spent >= share * (busy + now - stretch):
                time.sleep(min(SLICE / 10, began + at - now))
            else:
                unit()
        busy += time.perf_counter() - stretch
        time.sleep(max(0.0, began + at + seconds - time.perf_counter()))
    return {"start": start, "end": time.monotonic(), "cpu": used() - spent}


def role_main(args: argparse.Namespace) -> int:
    import signal

    def on_term(*_: object) -> None:
        raise KeyboardInterrupt

    if args.role != "retention":  # retention's own handler stops it between two batches
        signal.signal(signal.SIGTERM, on_term)
    if args.role == "control":
        print(json.dumps(run_control(args.cpu, args.wall)))
        return 0
    pauses = json.loads(Path(args.pauses).read_text()) if args.pauses else []  # the timed controls' timeline
    if args.role == "shaped":
        print(json.dumps(run_shaped(args.cpu, args.wall, pauses)))
        return 0
    setup_django(args.database_url)
    with travel(args.clock) if args.clock else _nothing():
        if args.role == "reader":
            print(json.dumps(run_reader(args.cpu, args.wall, pauses)))
        elif args.role == "writer":
            samples: list[tuple[float, float]] = []
            with contextlib.suppress(KeyboardInterrupt):
                run_writer(args.seconds, samples, paced=not args.unpaced, batch=args.batch)
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


def ingest_rate(url: str, clock: str | None, seconds: float, *, batch: int = 1) -> float:
    """Checkpoints a second one process stores writing back to back (`batch` per call)."""
    samples = finish(spawn("writer", url, clock, "--seconds", str(seconds), "--unpaced", "--batch", str(batch)))
    busy = sum(took for _, took in samples["samples"])
    return len(samples["samples"]) * batch / busy if busy else 0.0


def retention_window(url: str, clock: str | None, seconds: float) -> dict[str, Any]:
    """Retention in its own process for `seconds`, then asked to stop: it ends between two batches."""
    proc = spawn("retention", url, clock)
    proc.stdout.readline()  # "ready": set up, its run starts now
    deadline = time.monotonic() + seconds
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    if proc.poll() is None:
        proc.terminate()
    return finish(proc)


def control_window(url: str, cpu: float, wall: float) -> dict[str, Any]:
    """Processes (one per core's worth) burning `cpu` seconds evenly over `wall` seconds."""
    parts = max(1, math.ceil(cpu / wall)) if wall else 1
    procs = [spawn("control", url, None, "--cpu", str(cpu / parts), "--wall", str(wall)) for _ in range(parts)]
    results = [finish(proc) for proc in procs]
    return {
        "start": min(result["start"] for result in results),
        "end": max(result["end"] for result in results),
        "cpu": sum(result["cpu"] for result in results),
    }


def timed_window(url: str, run: dict[str, Any], role: str) -> dict[str, Any]:
    """One process (`role`: the shaped control or the database reader) spending retention's CPU seconds on the
    timeline of its window: busy when it was, asleep during its pauses."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as file:
        json.dump(run["pauses"], file)
    try:
        proc = spawn(role, url, None, "--cpu", str(cpu_of(run)), "--wall", str(run["seconds"]), "--pauses", file.name)
        return finish(proc)
    finally:
        os.unlink(file.name)


# Each round rotates the order by one, so every column follows each of the others in some round; the first starts
# with retention (the controls burn the CPU of the latest retention window).
_FIRST = ("retention", "control", "alone", "shaped", "reader")
ORDERS = tuple(_FIRST[len(_FIRST) - shift :] + _FIRST[: len(_FIRST) - shift] for shift in range(len(_FIRST)))


def compare(
    url: str,
    clock: str | None = None,
    *,
    rounds: int = 3,
    window: float = 20,
    ingest_seconds: float = 10,
    finish_run: bool = False,
) -> dict[str, Any]:
    """The module docstring's run on the database at `url` (retention deletes there); the settings are the
    environment's RETENTION_BATCH_ROWS and RETENTION_BATCH_PAUSE_MS (this process's, passed on). `finish_run`:
    let retention delete the rest afterwards (scale.py measures the store after a whole run)."""
    say(f"sustained ingest, {ingest_seconds:.0f} s each: one agent unpaced, then batches of {INGEST_BATCH}")
    agent_rate = ingest_rate(url, clock, ingest_seconds)
    batch_rate = ingest_rate(url, clock, ingest_seconds, batch=INGEST_BATCH)
    say(f"  {agent_rate:.1f}/s one agent, {batch_rate:.0f}/s in batches")

    writer = spawn("writer", url, clock, "--seconds", "36000")
    writer.stdout.readline()  # "ready": set up and writing
    time.sleep(1.0)
    windows: list[tuple[str, int, float, float]] = []  # (column, round, start, end)
    runs: list[dict[str, Any]] = []
    controls: list[dict[str, Any]] = []
    shapes: list[dict[str, Any]] = []
    readers: list[dict[str, Any]] = []
    for index in range(rounds):
        for column in ORDERS[index % len(ORDERS)]:  # the first round starts with retention: controls burn its CPU
            say(f"round {index + 1}: {column}")
            if column == "retention":
                run = retention_window(url, clock, window)
                runs.append(run)
                windows.append((column, index, run["start"], run["end"]))
                say(
                    f"  {run['deleted']:,} deleted in {run['seconds']:.1f} s, CPU {cpu_of(run):.1f} s ({run['stopped']})"
                )
            elif column == "control":
                last = runs[-1]
                control = control_window(url, cpu_of(last), last["seconds"])
                controls.append(control)
                windows.append((column, index, control["start"], control["end"]))
            elif column in ("shaped", "reader"):
                timed = timed_window(url, runs[-1], column)
                (shapes if column == "shaped" else readers).append(timed)
                windows.append((column, index, timed["start"], timed["end"]))
            else:
                start = time.monotonic()
                time.sleep(window)
                windows.append((column, index, start, time.monotonic()))
    writer.terminate()
    samples = finish(writer)

    if finish_run:
        say("retention: the rest of the run, unmeasured")
        rest = finish(spawn("retention", url, clock))
        say(f"  {rest['deleted']:,} more deleted in {rest['seconds']:.1f} s")

    columns = tuple(COLUMNS)
    pooled: dict[str, list[float]] = {c: [] for c in columns}
    per_round: dict[str, list[Any]] = {c: [] for c in columns}
    for column, _, start, end in windows:
        values = latencies(samples, (start, end))
        pooled[column].extend(values)
        per_round[column].append(figures(values)["p95_ms"])
    deleted = sum(run["deleted"] for run in runs)
    seconds = sum(run["seconds"] for run in runs)
    rate = deleted / seconds if seconds else 0.0
    cpu_worker = sum(run["cpu_worker"] for run in runs)
    backends = [run["cpu_backend"] for run in runs]
    cpu_backend = None if None in backends else sum(backends)
    return {
        "settings": {"RETENTION_BATCH_ROWS": runs[0]["batch_rows"], "RETENTION_BATCH_PAUSE_MS": runs[0]["pause_ms"]},
        "rounds": rounds,
        "window_s": window,
        **{COLUMNS[column]: figures(pooled[column]) for column in columns},
        "p95_per_round_ms": per_round,
        "retention": {
            "deleted": deleted,
            "errors": sum(run["errors"] for run in runs),
            "seconds": round(seconds, 1),
            "per_second": round(rate),
            "cpu_worker_s": round(cpu_worker, 1),
            "cpu_backend_s": None if cpu_backend is None else round(cpu_backend, 1),
            "control_cpu_s": round(sum(control["cpu"] for control in controls), 1),
            "asked_cpu_s": round(sum(cpu_of(run) for run in runs[: len(controls)]), 1),
            "shaped_cpu_s": round(sum(shaped["cpu"] for shaped in shapes), 1),
            "shaped_asked_cpu_s": round(sum(cpu_of(run) for run in runs[: len(shapes)]), 1),
            "reader_cpu_s": round(sum(reader["cpu"] for reader in readers), 1),
            "reader_asked_cpu_s": round(sum(cpu_of(run) for run in runs[: len(readers)]), 1),
        },
        "ingest_per_second": {"one_agent": round(agent_rate, 1), f"batches_of_{INGEST_BATCH}": round(batch_rate)},
        "delete_vs_ingest": {
            "one_agent": round(rate / agent_rate, 1) if agent_rate else None,
            f"batches_of_{INGEST_BATCH}": round(rate / batch_rate, 2) if batch_rate else None,
        },
        "load_average": [round(value, 2) for value in os.getloadavg()],
    }


INGEST_BATCH = 100
COLUMNS = {
    "alone": "alone",
    "retention": "beside_retention",
    "control": "beside_control",
    "shaped": "beside_shaped",
    "reader": "beside_reader",
}


def cpu_of(run: dict[str, Any]) -> float:
    return run["cpu_worker"] + (run["cpu_backend"] or 0.0)


def table(report: dict[str, Any]) -> str:
    """The columns side by side: the writer's p50 / p95 pooled over the rounds, then each round's p95."""
    base = report["alone"]["p95_ms"] or 0
    # runs recorded before a control was added lack its column (three columns before the shaped one, four before the reader)
    columns = [column for column, key in COLUMNS.items() if key in report]

    def rise(value: float | None) -> str:
        return f"{(value / base - 1) * 100:+.0f} %" if base and value else "—"

    def cell(key: str) -> str:
        f = report[key]
        return f"{f['p50_ms']} / **{f['p95_ms']}** ({f['samples']})"

    def verdict(control: str) -> str:
        during, other = report["beside_retention"]["p95_ms"], report[COLUMNS[control]]["p95_ms"]
        pooled = "✓" if during is not None and other is not None and during <= other else "✗"
        pairs = zip(rounds["retention"], rounds[control], strict=False)
        wins = sum(1 for a, b in pairs if a and b and a <= b)
        return f"{pooled} (pooled); {wins} of {report['rounds']} rounds"

    r, rounds = report["retention"], report["p95_per_round_ms"]
    cpu = f"{r['cpu_worker_s']} + {r['cpu_backend_s']} (backend) = {r['cpu_worker_s'] + (r['cpu_backend_s'] or 0):.1f}"
    rates, ratios = report["ingest_per_second"], report["delete_vs_ingest"]
    enough = "✓" if all((ratio or 0) >= 2 for ratio in ratios.values()) else "✗"
    s = report["settings"]
    heads = {
        "alone": "alone",
        "retention": "beside retention",
        "control": "beside the control (even)",
        "shaped": "beside the control (retention's timing)",
        "reader": "beside a database reader (retention's timing)",
    }
    lines = [
        f"settings: RETENTION_BATCH_ROWS={s['RETENTION_BATCH_ROWS']}, "
        f"RETENTION_BATCH_PAUSE_MS={s['RETENTION_BATCH_PAUSE_MS']}; {report['rounds']} rounds of "
        f"{report['window_s']:.0f} s windows; load average {report['load_average']}",
        "| the writer (1 checkpoint / 50 ms), p50 / p95 ms (samples) | "
        + " | ".join(heads[column] for column in columns)
        + " |",
        "|---|" + "---:|" * len(columns),
        "| all rounds | " + " | ".join(cell(COLUMNS[column]) for column in columns) + " |",
        "| p95 vs alone | — | " + " | ".join(rise(report[COLUMNS[column]]["p95_ms"]) for column in columns[1:]) + " |",
    ]
    for index in range(report["rounds"]):
        row = [str(rounds[column][index]) if index < len(rounds[column]) else "—" for column in columns]
        lines.append(f"| round {index + 1}, p95 | " + " | ".join(row) + " |")
    burned = f"the controls burned {r['control_cpu_s']} of the {r['asked_cpu_s']} CPU-s asked"
    if "shaped" in columns:
        burned += f" (even), {r['shaped_cpu_s']} of {r['shaped_asked_cpu_s']} (retention's timing)"
    if "reader" in columns:
        burned += f"; the reader {r['reader_cpu_s']} of {r['reader_asked_cpu_s']}"
    lines += [
        "",
        f"retention: {r['deleted']:,} deleted in {r['seconds']} s of windows = {r['per_second']:,}/s, CPU {cpu} s, "
        f"{r['errors']} errors; {burned}",
        "sustained ingest: "
        + ", ".join(f"{key.replace('_', ' ')} {value:,}/s" for key, value in rates.items())
        + "; deletes "
        + ", ".join(f"{ratio}×" for ratio in ratios.values())
        + f" of those {enough} (≥ 2×)",
        f"p95 beside retention ≤ beside the control (even): {verdict('control')}",
    ]
    if "shaped" in columns:
        lines.append(f"p95 beside retention ≤ beside the control (retention's timing): {verdict('shaped')}")
    if "reader" in columns:
        lines.append(f"p95 beside retention ≤ beside the database reader: {verdict('reader')}")
    return "\n".join(lines)


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
    parser.add_argument("--rounds", type=int, default=3, help="rounds of alternating windows")
    parser.add_argument("--window", type=float, default=20, help="seconds per window")
    parser.add_argument("--out", default=str(ROOT / "var" / "retention-results.json"))
    parser.add_argument(
        "--role", choices=["writer", "retention", "control", "shaped", "reader"], help=argparse.SUPPRESS
    )
    parser.add_argument("--pauses", help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--unpaced", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=1, help=argparse.SUPPRESS)
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
        report = compare(f"{PG_SERVER}/{copy}", rounds=args.rounds, window=args.window)
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
