"""Concurrent agents through CheckpointClient: whole states against patches (`state_patch`).

    python bench/load.py [--agents 32] [--seconds 60] [--start-step 100] [--workers 2] [--database-url URL]

Each agent is a thread with its own growing session (bench/workload.py's AgentSessionWorkload) writing a
checkpoint per step through a real gunicorn, as fast as it can, for `--seconds`; once with whole states
(`patches=False`), once with patches (the client's default), in one run. Before the clock starts each agent's
state is grown to `--start-step` (about 230 kB at step 100) and written once whole, so both modes start from the
same states and the run measures long-lived agents, not their first minute. Reported per mode: checkpoints/s,
p50/p95 of a create, the mean state size at the end, errors (exceptions the client raised), lost (acknowledged
checkpoints the database does not hold), wrong (sessions whose stored head is not the agent's last state), the
CPU per checkpoint of the client, of gunicorn and of its PostgreSQL backends (from /proc: it does not depend on what
else loads the machine) and the load average before and after; then patches ÷ whole states, in checkpoints/s and in
CPU per checkpoint. Writes
var/bench-load.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import threading
import time
from typing import Any

from procfs import process_cpu
from run import ROOT, RUN, choose_database, gunicorn, pct, say, setup_django
from workload import AgentSessionWorkload

sys.path.insert(0, str(ROOT / "clients" / "python"))
from checkpoint_console.client import CheckpointClient  # noqa: E402 - after the path that holds it

RESULTS = ROOT / "var" / "bench-load.json"
# The control mode: each agent reads its session (GET /sessions/{id}: the token and the session looked up, nothing
# written) as fast as it can. No request that stores a checkpoint can cost less CPU than this one.
FLOOR = "floor"


def agent(base: str, token: str, number: int, mode: str, start_step: int, out: dict[str, Any]) -> None:
    """Grow the state to `start_step`, write it whole, wait for the start (`out["start"]`), then write a step at a
    time until `out["stop"]`."""
    client = CheckpointClient(base, token, patches=mode == "patch", timeout=120)
    session = f"load-{mode}-{number}-{RUN}"
    client.create_session(session, agent="load")
    workload = AgentSessionWorkload(seed=number)
    for _ in range(start_step):
        workload.advance()
    client.create(session, workload.state, name="start", step=start_step)
    latencies: list[float] = []
    acked: list[int] = []
    errors: list[str] = []
    out["ready"].release()
    out["start"].wait()
    while time.monotonic() < out["stop"]:
        step = workload.advance()
        started = time.perf_counter()
        try:
            if mode == FLOOR:  # the control: an authenticated read of the session, no write, no state
                client.get_session(session)
                latencies.append(time.perf_counter() - started)
                continue
            created = client.create(session, step.state, name="step", step=step.number)
        except Exception as exc:  # noqa: BLE001 - counted and reported, the run goes on
            errors.append(f"{type(exc).__name__}: {str(exc)[:200]}")
            continue
        latencies.append(time.perf_counter() - started)
        acked.append(created["id"])
        out["last"] = (created["id"], workload.state)
    out.update(latencies=latencies, acked=acked, errors=errors, session=session, steps=workload.step_number)


class ServerCPU:
    """CPU seconds the gunicorn serving `port` (master and workers) and the PostgreSQL backends of `database` spend
    from `start()` to `stop()`, apart: what the server spent, whatever else loads the machine. Sampled every half
    second: Django closes a connection past CONN_MAX_AGE (60 s) and opens another, and a backend that exited takes
    its CPU with it (a single reading after a 60 s run counted almost none of PostgreSQL's)."""

    def __init__(self, port: str, database: str) -> None:
        self.port, self.database = port, database
        self.first: dict[int, tuple[bool, float]] = {}  # pid → (is gunicorn, CPU at the first reading)
        self.last: dict[int, float] = {}
        self.others: set[int] = set()  # processes that are neither (the sampler's CPU counts as the client's)
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._sample(baseline=True)
        self.thread.start()

    def stop(self) -> tuple[float, float]:
        self.done.set()
        self.thread.join()
        self._sample()
        web = db = 0.0
        for pid, (is_web, first) in self.first.items():
            used = self.last[pid] - first
            web, db = (web + used, db) if is_web else (web, db + used)
        return web, db

    def _run(self) -> None:
        while not self.done.wait(0.5):
            self._sample()

    def _sample(self, *, baseline: bool = False) -> None:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            pid = int(entry)
            if pid in self.others:
                continue
            try:
                if pid not in self.first:
                    with open(f"/proc/{entry}/cmdline", "rb") as file:
                        command = file.read().replace(b"\0", b" ").decode(errors="replace")
                    is_web = "gunicorn" in command and f":{self.port}" in command
                    if not (is_web or f"postgres {self.database} " in command):
                        self.others.add(pid)
                        continue
            except OSError:  # gone meanwhile, or not ours to read
                continue
            used = process_cpu(pid)
            if used is None:  # gone meanwhile
                continue
            if pid not in self.first:  # one that started during the run counts from nothing
                self.first[pid] = (is_web, used if baseline else 0.0)
            self.last[pid] = used


def run_mode(url: str, mode: str, agents: int, seconds: float, start_step: int, workers: int) -> dict[str, Any]:
    from django.db import models

    from checkpoints import services, store
    from checkpoints.models import Checkpoint

    project = services.get_or_create_project("bench-load")
    _, token = services.create_api_token(project, name=f"load-{mode}-{time.time_ns()}")
    with gunicorn(url, workers) as base:
        ready, start = threading.Semaphore(0), threading.Event()
        outs: list[dict[str, Any]] = [{"ready": ready, "start": start} for _ in range(agents)]
        threads = [
            threading.Thread(target=agent, args=(base, token, n, mode, start_step, outs[n]), daemon=True)
            for n in range(agents)
        ]
        for thread in threads:
            thread.start()
        for _ in threads:
            ready.acquire()
        load_before = os.getloadavg()
        cpu_before = resource.getrusage(resource.RUSAGE_SELF)
        port, database = base.rsplit(":", 1)[1], url.rsplit("/", 1)[1]
        server = ServerCPU(port, database)
        server.start()
        started = time.monotonic()
        for out in outs:
            out["stop"] = started + seconds
        start.set()
        for thread in threads:
            thread.join()
        elapsed = time.monotonic() - started
        cpu_after = resource.getrusage(resource.RUSAGE_SELF)
        web_used, db_used = server.stop()
        load_after = os.getloadavg()
    latencies = sorted(value for out in outs for value in out.get("latencies", []))
    acked = {pk for out in outs for pk in out.get("acked", [])}
    stored = set(Checkpoint.objects.filter(pk__in=acked).values_list("pk", flat=True))
    errors = [error for out in outs for error in out.get("errors", [])]
    sessions = [out["session"] for out in outs if "session" in out]
    heads = Checkpoint.objects.filter(session__external_id__in=sessions, session__head_id=models.F("pk"))
    last_sizes = list(heads.values_list("raw_bytes", flat=True))
    hashes = dict(
        Checkpoint.objects.filter(pk__in=[o["last"][0] for o in outs if "last" in o]).values_list("pk", "state_hash")
    )
    wrong = sum(
        1 for o in outs if "last" in o and bytes(hashes.get(o["last"][0], b"")) != store.state_digest(o["last"][1])
    )
    client_cpu = (cpu_after.ru_utime + cpu_after.ru_stime) - (cpu_before.ru_utime + cpu_before.ru_stime)
    return {
        "mode": mode,
        "agents": agents,
        "seconds": round(elapsed, 1),
        "start_step": start_step,
        "checkpoints": len(latencies),
        "per_second": round(len(latencies) / elapsed, 1),
        "p50_ms": round(statistics.median(latencies) * 1000, 1) if latencies else None,
        "p95_ms": round(pct(latencies, 95) * 1000, 1) if latencies else None,
        "final_state_kb_mean": round(statistics.mean(last_sizes) / 1024, 1) if last_sizes else None,
        "errors": len(errors),
        "error_samples": errors[:5],
        "lost": len(acked - stored),
        "wrong": wrong,
        "client_cpu_ms_per_checkpoint": round(client_cpu * 1000 / len(latencies), 1) if latencies else None,
        "server_cpu_ms_per_checkpoint": round((web_used + db_used) * 1000 / len(latencies), 1) if latencies else None,
        "web_cpu_ms_per_checkpoint": round(web_used * 1000 / len(latencies), 1) if latencies else None,
        "db_cpu_ms_per_checkpoint": round(db_used * 1000 / len(latencies), 1) if latencies else None,
        "load_before": [round(v, 2) for v in load_before],
        "load_after": [round(v, 2) for v in load_after],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers (default 2)")
    parser.add_argument("--database-url", default=None, help="default: a fresh PostgreSQL database bench_cc")
    parser.add_argument("--start-step", type=int, default=100, help="each agent's step when the clock starts")
    parser.add_argument("--modes", default="full,patch,floor", help="full, patch and the control, floor")
    args = parser.parse_args(argv)
    url, where = choose_database(args.database_url)
    say(f"database: {where}")
    setup_django(url)
    results = []
    for mode in args.modes.split(","):
        say(f"{mode}: {args.agents} agents from step {args.start_step} for {args.seconds:.0f} s")
        result = run_mode(url, mode, args.agents, args.seconds, args.start_step, args.workers)
        say(json.dumps(result))
        results.append(result)
    say(
        f"{'mode':<6} {'ckpt/s':>8} {'p50 ms':>8} {'p95 ms':>8} {'state KB':>9} {'errors':>7} {'lost':>5} "
        f"{'wrong':>5} {'client ms':>9} {'web ms':>7} {'db ms':>6}  load before → after"
    )
    for r in results:
        say(
            f"{r['mode']:<6} {r['per_second']:>8} {r['p50_ms']:>8} {r['p95_ms']:>8} {r['final_state_kb_mean']:>9} "
            f"{r['errors']:>7} {r['lost']:>5} {r['wrong']:>5} {r['client_cpu_ms_per_checkpoint']:>9} "
            f"{r['web_cpu_ms_per_checkpoint']:>7} {r['db_cpu_ms_per_checkpoint']:>6}  "
            f"{r['load_before'][0]} → {r['load_after'][0]}"
        )
    rates = {r["mode"]: r["per_second"] for r in results}
    if rates.get("full") and rates.get("patch"):
        say(f"patches ÷ whole states, this run: {rates['patch'] / rates['full']:.2f}× checkpoints/s (target ≥ 3)")
        cpu = {r["mode"]: r["server_cpu_ms_per_checkpoint"] for r in results}
        say(f"server CPU per checkpoint, whole ÷ patch: {cpu['full'] / cpu['patch']:.2f}×")
        total = {r["mode"]: r["client_cpu_ms_per_checkpoint"] + r["server_cpu_ms_per_checkpoint"] for r in results}
        say(
            f"CPU per checkpoint, client and server, whole ÷ patch: {total['full'] / total['patch']:.2f}× "
            "(what a machine to itself would give)"
        )
    by_mode = {r["mode"]: r for r in results}
    if {"full", "patch", FLOOR} <= set(by_mode) and by_mode[FLOOR]["checkpoints"]:
        whole, patch, floor = (
            by_mode[m]["client_cpu_ms_per_checkpoint"] + by_mode[m]["server_cpu_ms_per_checkpoint"]
            for m in ("full", "patch", FLOOR)
        )
        # whole = patch + what a whole state adds; cutting the cost both share leaves that difference as it is, so
        # whole ÷ patch ≥ 3 needs a patch checkpoint at ≤ half of it.
        say(
            f"control: an authenticated read costs {floor:.1f} ms CPU a request (client and server); a whole state "
            f"adds {whole - patch:.1f} ms to a checkpoint, so 3× needs a patch checkpoint at ≤ {(whole - patch) / 2:.1f} "
            f"ms: {'within' if floor <= (whole - patch) / 2 else 'below'} the floor"
        )
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
