"""A LangGraph put on the stack `make run` serves: `manage.py serve` (gunicorn, DEBUG=1, SQLite under a fresh
VAR_DIR, the filesystem broker), and ConsoleSaver over HTTP running bench/savers.py's growing graph.

    python bench/firstrun_put.py [--steps 100] [--port 8792] [--web gunicorn|runserver] [--compare [--rounds 3]]

Prints put p50/p95 over the run's puts (the target: p50 ≤ 20 ms at step 100) as one JSON line with the load
average. --compare runs the stack under `serve --web runserver` (the web server `make run` had before) and under
the default, each in its own fresh VAR_DIR, one line each, --rounds times in alternating order, then one line of
each server's median put p50 over the rounds: the machine is shared, so only figures from the same run compare.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from broker_stress import environment, wait_for
from savers import run_graph

from checkpoint_console.langgraph import ConsoleSaver

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--port", type=int, default=8792)
    parser.add_argument("--web", choices=("gunicorn", "runserver"), default="gunicorn")
    parser.add_argument("--compare", action="store_true", help="runserver and gunicorn, alternating")
    parser.add_argument("--rounds", type=int, default=1, help="with --compare: how many times each")
    args = parser.parse_args(argv)
    order = ("runserver", "gunicorn")
    runs = [order if n % 2 == 0 else order[::-1] for n in range(args.rounds)] if args.compare else [(args.web,)]
    p50s: dict[str, list[float]] = {}
    for web in (web for run in runs for web in run):
        result = measure(web, args.steps, args.port)
        p50s.setdefault(web, []).append(float(result["put_p50_ms"]))  # type: ignore[arg-type]
        print(json.dumps({"web": web, "steps": args.steps, "debug": os.environ.get("DEBUG", "1"), **result}))
    if args.compare:
        print(json.dumps({f"{web}_put_p50_ms_median": statistics.median(p50s[web]) for web in order}))
    return 0


def measure(web: str, steps: int, port: int) -> dict[str, object]:
    var_dir = Path(tempfile.mkdtemp(prefix="cc-firstrun-"))
    env = environment(var_dir)
    manage = [sys.executable, "manage.py"]
    subprocess.run([*manage, "migrate", "--no-input", "-v", "0"], cwd=ROOT, env=env, check=True)  # noqa: S603
    token = subprocess.run(  # noqa: S603
        [*manage, "create_api_token", "--project", "bench", "--name", "firstrun"],
        cwd=ROOT, env=env, check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    log = var_dir / "serve.log"
    with log.open("w") as out:
        serve = subprocess.Popen(  # noqa: S603
            [*manage, "serve", "--port", str(port), "--web", web],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(log, "Ctrl-C stops it.", 180)
        database = var_dir / "db.sqlite3"

        def size() -> int:
            return sum(p.stat().st_size for p in var_dir.iterdir() if p.name.startswith(database.name))

        with ConsoleSaver(f"http://127.0.0.1:{port}", token) as saver:
            result = run_graph(f"firstrun-{web}", saver, steps, 1, size)
    finally:
        serve.send_signal(signal.SIGINT)
        serve.wait(timeout=60)
    return {**result, "load_average": [round(load, 1) for load in os.getloadavg()]}


if __name__ == "__main__":
    sys.exit(main())
