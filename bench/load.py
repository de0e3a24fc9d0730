"""Concurrent agents through CheckpointClient: whole states against patches (`state_patch`).

    python bench/load.py [--agents 32] [--seconds 60] [--workers 2] [--database-url URL]

Each agent is a thread with its own growing session (bench/workload.py's AgentSessionWorkload) writing a
checkpoint per step through a real gunicorn, as fast as it can, for `--seconds`; once with whole states
(`patches=False`), once with patches (the client's default). Reported per mode: checkpoints/s, p50/p95 of a
create, mean state size at the end, errors (exceptions the client raised) and lost (acknowledged checkpoints the
database does not hold). Writes var/bench-load.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from typing import Any

from run import ROOT, RUN, choose_database, gunicorn, say, setup_django
from workload import AgentSessionWorkload

sys.path.insert(0, str(ROOT / "clients" / "python"))
from checkpoint_console.client import CheckpointClient  # noqa: E402 - after the path that holds it

RESULTS = ROOT / "var" / "bench-load.json"


def agent(base: str, token: str, number: int, mode: str, stop: float, out: dict[str, Any]) -> None:
    client = CheckpointClient(base, token, patches=mode == "patch", timeout=120)
    session = f"load-{mode}-{number}-{RUN}"
    client.create_session(session, agent="load")
    latencies: list[float] = []
    acked: list[int] = []
    errors: list[str] = []
    size = 0
    workload = AgentSessionWorkload(seed=number)
    while time.monotonic() < stop:
        step = workload.advance()
        started = time.perf_counter()
        try:
            created = client.create(session, step.state, name="step", step=step.number)
        except Exception as exc:  # noqa: BLE001 - counted and reported, the run goes on
            errors.append(f"{type(exc).__name__}: {str(exc)[:200]}")
            continue
        latencies.append(time.perf_counter() - started)
        acked.append(created["id"])
        size = step.number
    out.update(latencies=latencies, acked=acked, errors=errors, session=session, steps=size)


def run_mode(url: str, mode: str, agents: int, seconds: float, workers: int) -> dict[str, Any]:
    from django.db import models

    from checkpoints import services
    from checkpoints.models import Checkpoint

    project = services.get_or_create_project("bench-load")
    _, token = services.create_api_token(project, name=f"load-{mode}-{time.time_ns()}")
    with gunicorn(url, workers) as base:
        outs: list[dict[str, Any]] = [{} for _ in range(agents)]
        started = time.monotonic()
        stop = started + seconds
        threads = [
            threading.Thread(target=agent, args=(base, token, n, mode, stop, outs[n]), daemon=True)
            for n in range(agents)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.monotonic() - started
    latencies = sorted(value for out in outs for value in out.get("latencies", []))
    acked = {pk for out in outs for pk in out.get("acked", [])}
    stored = set(Checkpoint.objects.filter(pk__in=acked).values_list("pk", flat=True))
    errors = [error for out in outs for error in out.get("errors", [])]
    sessions = [out["session"] for out in outs if "session" in out]
    heads = Checkpoint.objects.filter(session__external_id__in=sessions, session__head_id=models.F("pk"))
    last_sizes = list(heads.values_list("raw_bytes", flat=True))
    return {
        "mode": mode,
        "agents": agents,
        "seconds": round(elapsed, 1),
        "checkpoints": len(latencies),
        "per_second": round(len(latencies) / elapsed, 1),
        "p50_ms": round(statistics.median(latencies) * 1000, 1) if latencies else None,
        "p95_ms": round(latencies[int(len(latencies) * 0.95) - 1] * 1000, 1) if latencies else None,
        "final_state_kb_mean": round(statistics.mean(last_sizes) / 1024, 1) if last_sizes else None,
        "errors": len(errors),
        "error_samples": errors[:5],
        "lost": len(acked - stored),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers (default 2)")
    parser.add_argument("--database-url", default=None, help="default: a fresh PostgreSQL database bench_cc")
    parser.add_argument("--modes", default="full,patch")
    args = parser.parse_args(argv)
    url, where = choose_database(args.database_url)
    say(f"database: {where}")
    setup_django(url)
    results = []
    for mode in args.modes.split(","):
        say(f"{mode}: {args.agents} agents for {args.seconds:.0f} s")
        result = run_mode(url, mode, args.agents, args.seconds, args.workers)
        say(json.dumps(result))
        results.append(result)
    say(f"{'mode':<6} {'ckpt/s':>8} {'p50 ms':>8} {'p95 ms':>8} {'state KB':>9} {'errors':>7} {'lost':>5}")
    for r in results:
        say(
            f"{r['mode']:<6} {r['per_second']:>8} {r['p50_ms']:>8} {r['p95_ms']:>8} {r['final_state_kb_mean']:>9} "
            f"{r['errors']:>7} {r['lost']:>5}"
        )
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
