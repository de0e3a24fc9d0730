"""Where a checkpoint's CPU goes, whole state against patch: bench/load.py's agents, in one process.

    python bench/load_cpu.py [--sessions 8] [--steps 15] [--start-step 100] [--profile full|patch] [--database-url URL]

Each agent (bench/workload.py's AgentSessionWorkload, grown to `--start-step`) writes through CheckpointClient's own
code with Django's test client for the transport, so the three shares of a checkpoint are measured apart, in CPU
time (load does not change it much, unlike bench/load.py's wall figures): the client's (building the body, its
patch and its JSON, and bringing its copy up to date from the answer), the web process's (`time.process_time`
around the request) and its PostgreSQL backend's (/proc/<pg_backend_pid()>/stat). The modes alternate step by step,
so both meet the same machine. `--profile MODE` prints cProfile (CPU time) of that mode's checkpoints, biggest
first.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import sys
import time
from typing import Any

from procfs import backend_pid, process_cpu
from run import ROOT, say, setup_django
from workload import AgentSessionWorkload

sys.path.insert(0, str(ROOT / "clients" / "python"))
from checkpoint_console import client as cc  # noqa: E402 - after the path that holds it


def backend_cpu() -> float:
    """CPU seconds of this process's PostgreSQL backend so far."""
    return process_cpu(backend_pid()) or 0.0


class Agent:
    """One session written as CheckpointClient.create writes it, through Django's test client."""

    def __init__(self, web: Any, token: str, number: int, mode: str, start_step: int) -> None:
        self.web, self.mode = web, mode
        self.client = cc.CheckpointClient("http://127.0.0.1", token, patches=mode == "patch")
        self.session = f"cpu-{mode}-{number}-{time.time_ns()}"
        self.workload = AgentSessionWorkload(seed=number)
        for _ in range(start_step):
            self.workload.advance()
        body = {"external_id": self.session, "agent": "load-cpu"}
        created = web.post("/api/v1/sessions", body, content_type="application/json")
        if created.status_code != 201:
            raise RuntimeError(f"session not created: {created.status_code} {created.content[:500]!r}")
        self.write()

    def write(self) -> tuple[float, float, float]:
        """Client, web and database CPU seconds of one checkpoint of the agent's current state."""
        client, session, state = self.client, self.session, self.workload.state
        started = time.process_time()
        written = client._written.get(session) if client.patches else None
        body = cc._checkpoint_body(state, name="step", kind="step", idempotency_key=cc._new_key())
        patch = cc._as_patch(body, written) if written is not None else None
        copy = cc._copy(state) if client.patches and patch is None else None
        data = json.dumps(patch or body, ensure_ascii=False, allow_nan=False).encode()
        sent = time.process_time()
        database = backend_cpu()
        response = self.web.post(f"/api/v1/sessions/{session}/checkpoints", data, content_type="application/json")
        answered = time.process_time()
        database = backend_cpu() - database
        if response.status_code != 201:
            raise RuntimeError(f"checkpoint not created: {response.status_code} {response.content[:500]!r}")
        stored = json.loads(response.content)
        if client.patches:
            if patch is not None and written is not None:
                copy = cc._apply_own(written.state, cc._copied(patch["state_patch"]))
            client._written[session] = cc._Written(stored["id"], stored.get("restore_generation"), copy)
        done = time.process_time()
        return (sent - started) + (done - answered), answered - sent, database


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=8, help="agents per mode")
    parser.add_argument("--steps", type=int, default=15, help="checkpoints each agent writes, measured")
    parser.add_argument("--start-step", type=int, default=100)
    parser.add_argument("--profile", choices=["full", "patch"], default=None)
    parser.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/bench_cc")
    args = parser.parse_args(argv)
    setup_django(args.database_url)
    from django.test import Client

    from checkpoints import services

    project = services.get_or_create_project("bench-load-cpu")
    _, token = services.create_api_token(project, name=f"load-cpu-{time.time_ns()}")
    web = Client(HTTP_AUTHORIZATION=f"Bearer {token}", HTTP_HOST="127.0.0.1")
    agents = {
        mode: [Agent(web, token, n, mode, args.start_step) for n in range(args.sessions)] for mode in ("full", "patch")
    }
    totals = {mode: [0.0, 0.0, 0.0] for mode in agents}
    profiler = cProfile.Profile(time.process_time) if args.profile else None
    load_before = os.getloadavg()
    for step in range(args.steps):
        for mode in ("full", "patch") if step % 2 else ("patch", "full"):
            for agent in agents[mode]:
                agent.workload.advance()
                if profiler is not None and mode == args.profile:
                    profiler.enable()
                shares = agent.write()
                if profiler is not None and mode == args.profile:
                    profiler.disable()
                totals[mode] = [total + share for total, share in zip(totals[mode], shares, strict=True)]
    count = args.sessions * args.steps
    say(f"CPU per checkpoint, ms ({count} a mode, load {load_before[0]:.2f} → {os.getloadavg()[0]:.2f})")
    say(f"{'mode':<6} {'client':>7} {'web':>7} {'db':>7} {'total':>7}")
    for mode, (client, web_cpu, database) in totals.items():
        shares = [client, web_cpu, database, client + web_cpu + database]
        say(f"{mode:<6} " + " ".join(f"{share * 1000 / count:>7.2f}" for share in shares))
    ratio = sum(totals["full"]) / sum(totals["patch"])
    say(f"whole ÷ patch, all CPU of a checkpoint: {ratio:.2f}×")
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(40)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
