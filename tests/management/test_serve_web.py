"""The web server `manage.py serve` (what `make run` runs) starts, for real, on SQLite under a fresh VAR_DIR:
gunicorn, one process whose threads keep their database connections. LangGraph sends a step's put and put_writes
at once, and several agents write beside each other; none of that may end in "database is locked" or a 500, and
what `make run` serves besides the API (static files under DEBUG, the debug 404 page) still comes."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph.checkpoint.base import empty_checkpoint

from checkpoint_console.langgraph import ConsoleSaver
from checkpoints.management.commands.serve import Command
from tests.kits.servers import free_port, wait_until_answers

ROOT = Path(__file__).resolve().parents[2]
AGENTS = 6
STEPS = 8


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Path]]:
    """(url, token, log) of serve's web command on a migrated SQLite file, as `make run` starts it."""
    var_dir = tmp_path_factory.mktemp("serve-web")
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "CELERY_BROKER_URL", "CACHE_URL"}}
    env.update(VAR_DIR=str(var_dir), DEBUG="1", PYTHONUNBUFFERED="1")
    manage = [sys.executable, "manage.py"]
    subprocess.run([*manage, "migrate", "--no-input", "-v", "0"], cwd=ROOT, env=env, check=True, timeout=300)
    token = subprocess.run(
        [*manage, "create_api_token", "--project", "served", "--name", "agents"],
        cwd=ROOT, env=env, check=True, capture_output=True, text=True, timeout=120,
    ).stdout.strip()  # fmt: skip
    port = free_port()
    command = Command().web_command("gunicorn", "127.0.0.1", port, verbose=False)
    log = var_dir / "web.log"
    with log.open("wb") as output:  # a file, not a pipe no one reads while the server runs
        server = subprocess.Popen(command, cwd=ROOT, env=env, stdout=output, stderr=output)  # noqa: S603
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_answers(server, f"{url}/health/live", log, seconds=120)
        yield url, token, log, var_dir
    finally:
        server.terminate()
        server.wait(timeout=30)


def put(saver: ConsoleSaver, thread_id: str, n: int, parent: str | None) -> dict[str, Any]:
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"n": n, "log": list(range(n))}
    checkpoint["channel_versions"] = {"n": str(n), "log": str(n)}
    config: dict[str, Any] = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    if parent:
        config["configurable"]["checkpoint_id"] = parent
    metadata: Any = {"source": "loop", "step": n, "parents": {}}
    return saver.put(config, checkpoint, metadata, checkpoint["channel_versions"])


def agent(url: str, token: str, thread_id: str) -> None:
    """A step's put and the previous checkpoint's put_writes sent at once, as LangGraph's executor does."""
    with ConsoleSaver(url, token, timeout=60) as saver, ThreadPoolExecutor(2) as pool:
        parent: str | None = None
        for n in range(1, STEPS + 1):
            writes = None
            if parent is not None:
                config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": parent}}
                writes = pool.submit(saver.put_writes, config, [("n", -n)], f"task-{n}")
            stored = pool.submit(put, saver, thread_id, n, parent).result()
            if writes is not None:
                writes.result()
            parent = stored["configurable"]["checkpoint_id"]


def test_concurrent_puts_and_writes_from_several_agents_all_land_without_a_locked_database(served):
    url, token, log, _ = served
    with ThreadPoolExecutor(AGENTS) as pool:
        for done in [pool.submit(agent, url, token, f"agent-{i}") for i in range(AGENTS)]:
            done.result()  # ConsoleSaver raises on any answer but success

    with ConsoleSaver(url, token, timeout=60) as saver:
        for i in range(AGENTS):
            config: Any = {"configurable": {"thread_id": f"agent-{i}", "checkpoint_ns": ""}}
            history = list(saver.list(config))
            assert [t.checkpoint["channel_values"]["n"] for t in history] == list(range(STEPS, 0, -1))
            for older in history[1:]:  # every checkpoint but the head got the next step's writes
                n = older.checkpoint["channel_values"]["n"] + 1
                assert older.pending_writes == [(f"task-{n}", "n", -n)]
    output = log.read_text()
    assert "database is locked" not in output and "Traceback" not in output, output


def test_make_runs_web_server_serves_static_files_and_debug_pages(served):
    url, _, _, _ = served
    css = httpx.get(f"{url}/static/console/console.css", timeout=30)
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    missing = httpx.get(f"{url}/no-such-page/", timeout=30)
    assert missing.status_code == 404 and "DEBUG = True" in missing.text  # Django's debug 404, as under runserver


def test_a_langgraph_threads_timeline_with_a_subgraph_run_opens_on_the_embedded_database(served):
    # The timeline compares each checkpoint's namespace as text; a JSON key's own lookups failed on SQLite
    # ("malformed JSON"), so every LangGraph thread's page answered 500 under `make run` while CI (PostgreSQL) passed.
    url, token, log, var_dir = served
    with ConsoleSaver(url, token, timeout=60) as saver:
        root = put(saver, "graph-with-subgraph", 1, None)["configurable"]["checkpoint_id"]
        inner = empty_checkpoint()
        inner["channel_values"] = {"answer": "from the subgraph"}
        saver.put(
            {"configurable": {"thread_id": "graph-with-subgraph", "checkpoint_ns": "tools:1"}},
            inner, {"source": "loop", "step": 0, "parents": {"": root}}, {},
        )  # fmt: skip
        put(saver, "graph-with-subgraph", 2, root)
    with sqlite3.connect(var_dir / "db.sqlite3") as db:
        (pk,) = db.execute(
            "SELECT id FROM checkpoints_agentsession WHERE external_id = 'graph-with-subgraph'"
        ).fetchone()
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "CELERY_BROKER_URL", "CACHE_URL"}}
    env.update(VAR_DIR=str(var_dir), DJANGO_SUPERUSER_PASSWORD="a-long-test-password-1")
    subprocess.run(
        [sys.executable, "manage.py", "createsuperuser", "--no-input", "--username", "op", "--email", "op@example.com"],
        cwd=ROOT, env=env, check=True, timeout=120, capture_output=True,
    )  # fmt: skip
    with httpx.Client(base_url=url, timeout=30) as browser:
        login = browser.get("/accounts/login/")
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login.text)
        assert csrf is not None
        signed_in = browser.post(
            "/accounts/login/",
            data={"username": "op", "password": "a-long-test-password-1", "csrfmiddlewaretoken": csrf[1]},
        )
        assert signed_in.status_code == 302, signed_in.text[:500]
        page = browser.get(f"/sessions/{pk}/")
    assert page.status_code == 200, page.text[:2000]
    assert "tools" in page.text  # the subgraph run, folded under the root row it ran under
    assert "malformed JSON" not in log.read_text()
