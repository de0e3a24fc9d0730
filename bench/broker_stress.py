"""The embedded stack under load: the real `manage.py serve` (web, worker, beat on SQLite and the filesystem
broker, as `make run` starts them) takes --tasks tasks while every core is kept busy.

    python bench/broker_stress.py [--tasks 2000] [--burners N] [--port 8791]

Half the tasks are `send_due_deliveries` (the "deliveries" queue, a database query each), half Celery's built-in
`celery.accumulate` (the default queue). They are sent as fast as this process can, while --burners processes
(default: one per core) spin. A task is done when the worker logs it succeeded (serve --verbose: info level);
lost = sent - done after the queue has been empty for 10 s; crashes = children serve had to restart ("exited with
code"). kombu's own filesystem transport lost messages and crashed the worker with `JSONDecodeError` in such a run
(3 times in 2,733 messages); the target is 0 and 0. Uses a fresh VAR_DIR under /tmp; prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
SUCCEEDED = re.compile(r"Task [\w.]+\[([0-9a-f-]{36})\] succeeded")


def environment(var_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "CELERY_BROKER_URL", "CACHE_URL"}}
    return {**env, "VAR_DIR": str(var_dir), "DEBUG": "1", "PYTHONUNBUFFERED": "1"}


def wait_for(log: Path, text: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if text in log.read_text(errors="replace"):
            return
        time.sleep(0.5)
    raise SystemExit(f"serve did not print {text!r} within {seconds:g} s; see {log}")


def send(tasks: int, env: dict[str, str]) -> list[str]:
    """The task ids, sent by a client of the same broker (a fresh interpreter with serve's settings)."""
    code = (
        "import sys, django; django.setup()\n"
        "from config.celery import app\n"
        f"for i in range({tasks}):\n"
        "    name = 'checkpoints.tasks.send_due_deliveries' if i % 2 else 'celery.accumulate'\n"
        "    print(app.send_task(name, args=() if i % 2 else (i,)).id)\n"
    )
    env = {**env, "DJANGO_SETTINGS_MODULE": "config.settings"}
    out = subprocess.run([PYTHON, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)  # noqa: S603
    return out.stdout.split()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--burners", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--port", type=int, default=8791)
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args(argv)

    var_dir = Path(tempfile.mkdtemp(prefix="cc-stress-"))
    env = environment(var_dir)
    log = var_dir / "serve.log"
    subprocess.run([PYTHON, "manage.py", "migrate", "--no-input", "-v", "0"], cwd=ROOT, env=env, check=True)  # noqa: S603
    with log.open("w") as out:
        serve = subprocess.Popen(  # noqa: S603
            [PYTHON, "manage.py", "serve", "--verbose", "--port", str(args.port)],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    burners: list[subprocess.Popen[bytes]] = []
    try:
        wait_for(log, "Ctrl-C stops it.", 180)
        burners = [subprocess.Popen([PYTHON, "-c", "while True: pass"]) for _ in range(args.burners)]  # noqa: S603
        started = time.monotonic()
        ids = send(args.tasks, env)
        sent_seconds = time.monotonic() - started
        queue = var_dir / "broker" / "queue"
        idle_since = None
        while time.monotonic() - started < args.timeout:
            done = set(SUCCEEDED.findall(log.read_text(errors="replace")))
            if done >= set(ids):
                break
            waiting = any(p.name.endswith(".msg") for p in queue.iterdir())
            idle_since = None if waiting else idle_since or time.monotonic()
            if idle_since and time.monotonic() - idle_since > 10:
                break
            time.sleep(1)
        seconds = time.monotonic() - started
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
        serve.send_signal(signal.SIGINT)
        serve.wait(timeout=60)
    text = log.read_text(errors="replace")
    done = set(SUCCEEDED.findall(text)) & set(ids)
    result = {
        "tasks": len(ids),
        "done": len(done),
        "lost": len(ids) - len(done),
        "crashes": text.count(" exited with code "),
        "decode_errors": text.count("JSONDecodeError"),
        "burners": args.burners,
        "send_seconds": round(sent_seconds, 1),
        "all_done_seconds": round(seconds, 1),
        "serve_exit": serve.returncode,
        "stopped": text.rstrip().endswith("stopped"),
        "log": str(log),
    }
    print(json.dumps(result))
    return 0 if result["lost"] == 0 and result["crashes"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
