"""What a LangGraph step costs the database: the statements of a put and of its put_writes, counted. A change that
adds one to the path every step of every agent takes fails here (docs/benchmarks.md, "A LangGraph put on `make
run`'s stack"); bench/put_cost.py counts the same on `make run`'s SQLite. The token comes from what the process
remembers, as on SQLite; a PostgreSQL server outside a test looks it up on each request (its connection's health
check), one statement more."""

from __future__ import annotations

import re
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from checkpoints.models import ApiToken, LangGraphWrites
from checkpoints.services import tokens
from tests.kits.langgraph_kit import lg_id, messages, put_body, typed

PUT = "/langgraph/checkpoints"
WRITES = "/langgraph/writes"
THREAD = "thread-q"
TABLE = re.compile(r'(?:FROM|INTO|UPDATE) "(\w+)"')


def step_put(api, n: int):
    """Step n's put as ConsoleSaver sends it: the message appended to the parent's, nothing else resent."""
    body = put_body(
        THREAD,
        n,
        parent=n - 1,
        values={},
        appends={"messages": {"base_len": n, "items": messages(n + 1)[n:]}},
        channels=["messages"],
        base_checkpoint_id=lg_id(n - 1),
    )
    return api.post(PUT, body)


def step_writes(api, n: int, task: str = "task"):
    body = {"thread_id": THREAD, "checkpoint_id": lg_id(n), "task_id": f"{task}-{n}", "writes": []}
    body["writes"] = [["messages", [messages(n + 2)[n + 1]]], ["branch:to:agent", typed(None)]]
    return api.post(WRITES, body)


def statements(captured: CaptureQueriesContext) -> list[str]:
    """The statements a request ran, less the test's transaction control (each test runs in a transaction, so
    the service's own becomes a savepoint; under `make run` it is SQLite's BEGIN IMMEDIATE and a commit)."""
    control = ("SAVEPOINT", "RELEASE SAVEPOINT", "ROLLBACK TO SAVEPOINT")
    return [query["sql"] for query in captured.captured_queries if not query["sql"].startswith(control)]


def tables(sql: list[str]) -> list[str]:
    """The table each statement reads or writes first."""
    return [(match.group(1) if (match := TABLE.search(s)) else s[:30]) for s in sql]


@pytest.fixture
def running(api, monkeypatch):
    """A thread some steps in, its token looked up a moment ago: what every later step of a run finds (here
    remembered for a minute, so that a slow machine does not make the counts flicker)."""
    monkeypatch.setattr(tokens, "REMEMBER_SECONDS", 60.0)
    assert api.post(PUT, put_body(THREAD, 0)).status_code == 201
    for n in range(1, 3):
        assert step_writes(api, n - 1).status_code == 200
        assert step_put(api, n).status_code == 201
    assert step_writes(api, 2).status_code == 200
    return api


def test_a_steps_put_and_its_writes_cost_these_statements_and_no_more(running):
    with CaptureQueriesContext(connection) as put:
        assert step_put(running, 3).status_code == 201
    with CaptureQueriesContext(connection) as writes:
        assert step_writes(running, 3).status_code == 200  # after step 3's put, as LangGraph sends them
    assert tables(statements(put)) == [
        "checkpoints_agentsession",  # the thread's session, locked
        "checkpoints_langgraphcheckpoint",  # the parent, the base and the head, in one read
        "checkpoints_chunk",  # the state's new chunk
        "checkpoints_checkpoint",
        "checkpoints_agentsession",  # head, counts, sizes; and the session's tallies (on PostgreSQL in the same)
        *([] if connection.vendor == "postgresql" else ["checkpoints_sessionrollup", "checkpoints_sessioncount"]),
        "checkpoints_langgraphcheckpoint",
        "checkpoints_langgraphwrites",  # writes that came before the put (durability="async")?
    ]
    assert tables(statements(writes)) == [
        "checkpoints_agentsession",  # the thread's session (KEY SHARE)
        "checkpoints_langgraphcheckpoint",  # the checkpoint written against, locked; its child, parent, task's row
        "checkpoints_langgraphwrites",  # the task's row, inserted
        "checkpoints_langgraphwrites",  # the parent's writes, named in this checkpoint's state
        "checkpoints_langgraphwrites",
    ]


def test_a_tasks_second_writes_read_its_row_first(running):
    assert step_writes(running, 2, task="again").status_code == 200
    body = {"thread_id": THREAD, "checkpoint_id": lg_id(2), "task_id": "again-2", "writes": [["__error__", "x"]]}
    with CaptureQueriesContext(connection) as writes:
        assert running.post(WRITES, body).status_code == 200
    read = statements(writes)[2]
    assert read.startswith("SELECT") and tables([read]) == ["checkpoints_langgraphwrites"]
    assert LangGraphWrites.objects.get(task_id="again-2").failed


def test_the_token_is_looked_up_once_a_second_and_revoking_it_is_seen_at_once(running, project):
    with CaptureQueriesContext(connection) as first:
        assert running.get("/langgraph/checkpoint", {"thread_id": THREAD}).status_code == 200
    assert "checkpoints_apitoken" not in tables(statements(first))  # the fixture's steps looked it up
    tokens.forget_tokens()
    with CaptureQueriesContext(connection) as fresh:
        assert running.get("/langgraph/checkpoint", {"thread_id": THREAD}).status_code == 200
    assert tables(statements(fresh))[0] == "checkpoints_apitoken"

    tokens.revoke_token(ApiToken.objects.get(), actor=tokens.UNNAMED)
    assert running.get("/langgraph/checkpoint", {"thread_id": THREAD}).status_code == 401


def test_a_token_revoked_in_another_process_is_refused_within_a_second(running, monkeypatch):
    # The process's monotonic clock, moved by the test: a loaded machine taking longer than the remembering
    # between two requests made this fail when it slept instead.
    clock = [1_000.0]
    monkeypatch.setattr(tokens, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    monkeypatch.setattr(tokens, "REMEMBER_SECONDS", 1.0)  # the bound docs/security.md names (`running` sets 60)
    tokens.forget_tokens()
    assert running.get("/langgraph/checkpoint", {"thread_id": THREAD}).status_code == 200
    with connection.cursor() as cursor:  # as another process would: nothing tells this one
        cursor.execute("UPDATE checkpoints_apitoken SET revoked_at = %s", [timezone.now()])
    clock[0] += tokens.REMEMBER_SECONDS / 2
    assert running.get("/langgraph/checkpoint", {"thread_id": THREAD}).status_code == 200  # remembered
    clock[0] += tokens.REMEMBER_SECONDS / 2
    assert running.get("/langgraph/checkpoint", {"thread_id": THREAD}).status_code == 401


def test_a_remembered_token_is_refused_the_moment_it_expires(project, django_assert_num_queries):
    token, secret = tokens.create_api_token(project, name="short", expires_in=timedelta(seconds=30))
    assert tokens.authenticate_token(secret) is not None
    with django_assert_num_queries(0):
        assert tokens.authenticate_token(secret, now=token.expires_at - timedelta(seconds=1)) is not None
        assert tokens.authenticate_token(secret, now=token.expires_at) is None


def test_a_token_revoked_by_an_update_in_this_process_is_refused_at_once(running):
    assert running.get("/langgraph/checkpoint", {"thread_id": THREAD}).status_code == 200
    ApiToken.objects.update(revoked_at=timezone.now())
    assert running.get("/langgraph/checkpoint", {"thread_id": THREAD}).status_code == 401


def test_saving_a_token_or_its_project_forgets_what_was_remembered(project, api):
    assert api.get("/alerts").status_code == 200
    token = ApiToken.objects.get()
    token.scopes = ["write"]
    token.save()
    assert api.get("/alerts").status_code == 403  # read scope gone: seen on the next request
    project.save()
    assert not tokens.token_remembered(api.token)
