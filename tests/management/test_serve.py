"""`manage.py serve` (what `make run` runs): a child that dies is restarted and named, one that keeps dying makes
serve give up with a non-zero exit, and Ctrl-C says "stopped". Real processes: small Python children stand in for
web, worker and beat."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from checkpoints.management.commands.serve import Command

ROOT = Path(__file__).resolve().parents[2]

SUPERVISOR = """
import sys
from pathlib import Path
from checkpoints.management.commands.serve import supervise
children = {name: [sys.executable, "-c", code] for name, code in CHILDREN.items()}
sys.exit(supervise(children, cwd=Path.cwd(), say=print, warn=print, restarts=RESTARTS, window=30))
"""
STEADY = "import os, time; open('steady.pid', 'w').write(str(os.getpid())); time.sleep(120)"
# Dies with code 3 on its first run, stays up on the next.
FLAKY = (
    "import os, sys, time\n"
    "if not os.path.exists('flaky.ran'):\n"
    "    open('flaky.ran', 'w').close(); sys.exit(3)\n"
    "open('flaky.pid', 'w').write(str(os.getpid())); time.sleep(120)"
)


def supervisor(tmp_path: Path, children: dict[str, str], restarts: int) -> subprocess.Popen[str]:
    code = f"CHILDREN = {children!r}\nRESTARTS = {restarts}\n{SUPERVISOR}"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def wait_for(path: Path, seconds: float = 30) -> int:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return int(path.read_text())
        time.sleep(0.05)
    raise AssertionError(f"{path.name} never appeared")


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_child_that_dies_is_restarted_and_named_and_ctrl_c_says_stopped(tmp_path):
    process = supervisor(tmp_path, {"steady": STEADY, "flaky": FLAKY}, restarts=5)
    flaky = wait_for(tmp_path / "flaky.pid")  # its second run
    steady = wait_for(tmp_path / "steady.pid")
    process.send_signal(signal.SIGINT)  # Ctrl-C
    output, _ = process.communicate(timeout=30)
    assert process.returncode == 0
    assert "flaky exited with code 3; restarting it (1 of 5 in 30 s)." in output
    assert output.rstrip().endswith("stopped") and "exited; stopping the others" not in output
    assert "steady exited" not in output
    assert gone(flaky) and gone(steady)


def test_a_child_that_keeps_dying_makes_serve_give_up_and_exit_non_zero(tmp_path):
    process = supervisor(tmp_path, {"steady": STEADY, "broken": "import sys; sys.exit(7)"}, restarts=2)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 1
    assert output.count("broken exited with code 7; restarting it") == 2
    assert "broken exited with code 7, 3 times in 30 s: giving up." in output
    assert "stopped" not in output
    assert gone(wait_for(tmp_path / "steady.pid"))


@pytest.mark.parametrize("verbose", [False, True])
def test_serve_runs_the_worker_on_every_routed_queue_and_quiets_celery_unless_verbose(verbose):
    commands = Command().commands("127.0.0.1", 8000, verbose)
    assert "-Q" not in commands["worker"]  # settings.CELERY_TASK_QUEUES: every queue a task is routed to
    assert ("--quiet" in commands["worker"]) is not verbose and ("--quiet" in commands["beat"]) is not verbose


@pytest.mark.parametrize("web", ["gunicorn", "runserver"])
def test_serve_binds_its_web_server_to_loopback_by_default(web):
    """DEBUG is on under `make run`: its debug pages and open /metrics must not reach the network unasked."""
    command = Command()
    parser = command.create_parser("manage.py", "serve")
    options = parser.parse_args(["--web", web])
    assert options.host == "127.0.0.1"
    web_command = command.commands(options.host, options.port, False, options.web)["web"]
    assert "127.0.0.1:8000" in web_command
    assert ("gunicorn" in web_command) is (web == "gunicorn")


def test_serve_runs_gunicorn_by_default_in_one_process_whose_threads_keep_their_connections():
    options = Command().create_parser("manage.py", "serve").parse_args([])
    web = Command().commands(options.host, options.port, False, options.web)["web"]
    assert web[1:4] == ["-m", "gunicorn", "config.wsgi"]
    assert web[web.index("--workers") + 1] == "1" and web[web.index("--worker-class") + 1] == "gthread"
    assert "--access-logfile" not in web  # ACCESS_LOG is off: one line a minute of counts instead
