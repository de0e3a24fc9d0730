"""LangGraph history in and out, against files and databases written by LangGraph's own checkpointers.

A real StateGraph (add_messages, a tool-calling loop, a subgraph that interrupts, a branch made with
update_state) runs with SqliteSaver (and PostgresSaver); what those savers return, in typed JSON, is what
the import must hold and what the export must give back.
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import sqlite3
import zipfile
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Annotated, Any, TypedDict

import ormsgpack
import psycopg
import pytest
from django.core.management import CommandError
from django.db import connection
from django.urls import reverse
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, interrupt

from checkpoint_console import typedjson
from checkpoints.models import AgentSession, AuditEvent, Checkpoint, ImportJob, Project, default_type_allowlist
from checkpoints.services import Actor, CheckpointInput, create_checkpoint, restore_checkpoint, upsert_session
from checkpoints.services.langgraph import delete_thread, iter_tuples
from checkpoints.sources import formats
from checkpoints.sources.formats import langgraph
from checkpoints.sources.formats.base import Problem
from checkpoints.store import load_state
from checkpoints.tasks import import_archive
from tests.helpers import command, import_folder, within
from tests.kits.langgraph_kit import ext_record

# ---- the graph ---------------------------------------------------------------------------------


class State(TypedDict):
    messages: Annotated[list[Any], add_messages]
    approved: bool


def agent(state: State) -> dict[str, Any]:
    """A fake chat model: asks the tool once, then answers with its result."""
    if not any(isinstance(message, ToolMessage) for message in state["messages"]):
        call = {"name": "add", "args": {"a": 2, "b": 3}, "id": "call-1"}
        return {"messages": [AIMessage("", tool_calls=[call], id="ai-1")]}
    return {"messages": [AIMessage(f"2 + 3 = {state['messages'][-1].content}", id="ai-2")]}


def tools(state: State) -> dict[str, Any]:
    call = state["messages"][-1].tool_calls[0]
    result = str(call["args"]["a"] + call["args"]["b"])
    return {"messages": [ToolMessage(result, tool_call_id=call["id"], id="tool-1")]}


def route(state: State) -> str:
    return "tools" if state["messages"][-1].tool_calls else "review"


def ask(state: State) -> dict[str, Any]:
    answer = interrupt({"question": "approve?"})
    return {"approved": answer == "yes", "messages": [AIMessage(f"review: {answer}", id="ai-3")]}


def build(saver: BaseCheckpointSaver[Any]) -> Any:
    review = StateGraph(State)
    review.add_node("ask", ask)
    review.add_edge(START, "ask")
    review.add_edge("ask", END)
    graph = StateGraph(State)
    graph.add_node("agent", agent)
    graph.add_node("tools", tools)
    graph.add_node("review", review.compile())  # its checkpoints live in namespace "review:<task id>"
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", route, ["tools", "review"])
    graph.add_edge("tools", "agent")
    graph.add_edge("review", END)
    return graph.compile(checkpointer=saver)


def run(saver: BaseCheckpointSaver[Any]) -> None:
    """Thread t-1 stops at the interrupt (pending writes); t-2 is resumed to the end, then branched."""
    app = build(saver)
    question = {"messages": [HumanMessage("what is 2+3?", id="h-1")], "approved": False}
    app.invoke(question, {"configurable": {"thread_id": "t-1"}})
    done = {"configurable": {"thread_id": "t-2"}}
    app.invoke(question, done)
    app.invoke(Command(resume="yes"), done)
    first_answer = next(s for s in app.get_state_history(done) if s.metadata and s.metadata.get("step") == 1)
    app.update_state(first_answer.config, {"messages": [HumanMessage("and 3+4?", id="h-2")]}, as_node="tools")


@pytest.fixture
def sqlite_file(tmp_path: Path) -> Path:
    path = tmp_path / "checkpoints.sqlite"
    with SqliteSaver.from_conn_string(str(path)) as saver:
        run(saver)
    return path


# ---- what LangGraph itself returns, in typed JSON ----------------------------------------------


def typed(saver: BaseCheckpointSaver[Any], value: Any) -> Any:
    return typedjson.from_typed(*saver.serde.dumps_typed(value))


def saved(saver: BaseCheckpointSaver[Any]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Every checkpoint the saver lists, by (thread, ns, id): its header, values, metadata, parent, writes."""
    found = {}
    for item in saver.list(None):
        config = item.config["configurable"]
        header = {key: typed(saver, value) for key, value in item.checkpoint.items() if key != "channel_values"}
        found[(config["thread_id"], config["checkpoint_ns"], config["checkpoint_id"])] = {
            "header": header,
            "values": {key: typed(saver, value) for key, value in item.checkpoint["channel_values"].items()},
            "metadata": typed(saver, item.metadata),
            "parent": item.parent_config["configurable"]["checkpoint_id"] if item.parent_config else None,
            "writes": [[task, channel, typed(saver, value)] for task, channel, value in item.pending_writes or []],
        }
    return found


def sqlite_saved(path: Path) -> dict[tuple[str, str, str], dict[str, Any]]:
    with SqliteSaver.from_conn_string(str(path)) as saver:
        return saved(saver)


def read(source: str | Path) -> dict[tuple[str, str, str], dict[str, Any]]:
    """What the reader finds, in the same shape (pending writes in LangGraph's order)."""
    found = {}
    for thread in langgraph.threads(source):
        assert isinstance(thread, langgraph.Thread), thread
        checkpoints = list(thread.checkpoints)
        assert all(isinstance(item, langgraph.Saved) for item in checkpoints), checkpoints
        thread_writes = list(thread.writes)
        for item in checkpoints:
            writes = sorted(
                (
                    w
                    for w in thread_writes
                    if (w.checkpoint_ns, w.checkpoint_id) == (item.checkpoint_ns, item.checkpoint_id)
                ),
                key=lambda w: (w.task_path, w.task_id, w.idx),
            )
            found[(item.thread_id, item.checkpoint_ns, item.checkpoint_id)] = {
                "header": item.header,
                "values": item.values,
                "metadata": item.metadata,
                "parent": item.parent_checkpoint_id,
                "writes": [[w.task_id, w.channel, w.value] for w in writes],
            }
    return found


def console(project: Any, **where: Any) -> dict[tuple[str, str, str], dict[str, Any]]:
    """What the console gives LangGraph back (services.langgraph.iter_tuples), in the same shape."""
    found = {}
    for item in iter_tuples(project, **where):
        checkpoint = dict(item["checkpoint"])
        found[(item["thread_id"], item["checkpoint_ns"], item["checkpoint_id"])] = {
            "values": checkpoint.pop("channel_values"),
            "header": checkpoint,
            "metadata": item["metadata"],
            "parent": item["parent_checkpoint_id"],
            "writes": item["pending_writes"],
        }
    return found


# ---- reading -----------------------------------------------------------------------------------


def test_detects_a_sqlite_saver_file_but_not_another_sqlite_file_or_a_folder(sqlite_file, tmp_path):
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE checkpoints (id INTEGER)")
    conn.close()
    assert langgraph.detect(sqlite_file)
    assert formats.detect(sqlite_file) == "langgraph"
    assert not langgraph.detect(other)
    assert not langgraph.detect(tmp_path)
    assert not langgraph.detect(Path(__file__))


def test_the_reader_finds_what_sqlite_saver_returns_namespaces_branches_and_pending_writes(sqlite_file):
    expected = sqlite_saved(sqlite_file)
    found = read(sqlite_file)
    assert found == expected
    assert {thread for thread, _, _ in found} == {"t-1", "t-2"}
    assert any(ns.startswith("review:") for _, ns, _ in found)
    assert any(item["metadata"]["source"] == "update" for item in found.values())
    interrupts = [write for item in found.values() for write in item["writes"] if write[1] == "__interrupt__"]
    assert interrupts
    tool_call = next(
        message for item in found.values() for message in item["values"].get("messages", []) if message["type"] == "ai"
    )
    assert tool_call["tool_calls"] == [{"name": "add", "args": {"a": 2, "b": 3}, "id": "call-1", "type": "tool_call"}]


def test_the_file_is_only_read(sqlite_file):
    before = sqlite_file.read_bytes()
    sqlite_file.chmod(0o444)
    list(langgraph.threads(sqlite_file))
    assert sqlite_file.read_bytes() == before


class _SideEffect:
    """Unpickling this would create the file named: proof that nothing was unpickled."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.path,))


def add_pickles(path: Path, marker: Path) -> bytes:
    """A pending write and a whole checkpoint stored as pickle blobs (SqliteSaver's pickle fallback)."""
    blob = pickle.dumps(_SideEffect(marker))
    with sqlite3.connect(path) as conn:
        thread, ns, checkpoint_id = conn.execute(
            "SELECT thread_id, checkpoint_ns, checkpoint_id FROM checkpoints WHERE thread_id = 't-1' "
            "AND checkpoint_ns = '' ORDER BY checkpoint_id DESC LIMIT 1"
        ).fetchone()
        conn.execute(
            "INSERT INTO writes VALUES (?, ?, ?, 'task-p', '', 0, 'custom', 'pickle', ?)",
            (thread, ns, checkpoint_id, blob),
        )
        conn.execute(
            "INSERT INTO checkpoints VALUES ('t-3', '', '1f000000-0000-6000-8000-000000000000', NULL, 'pickle', ?, '{}')",
            (blob,),
        )
    conn.close()
    return blob


def read_threads(source: str | Path) -> dict[str, tuple[list[Any], list[langgraph.Write]]]:
    """Each thread's checkpoints (and problems) and writes, consumed in turn as the reader wants them."""
    found = {}
    for thread in langgraph.threads(source):
        assert isinstance(thread, langgraph.Thread), thread
        found[thread.thread_id] = (list(thread.checkpoints), list(thread.writes))
    return found


def test_pickle_blobs_stay_opaque_and_nothing_is_unpickled(sqlite_file, tmp_path):
    marker = tmp_path / "unpickled"
    blob = add_pickles(sqlite_file, marker)
    found = read_threads(sqlite_file)
    assert not marker.exists()
    (write,) = [w for w in found["t-1"][1] if w.task_id == "task-p"]
    assert write.value == {"__lg__": ["typed", "pickle"], "b64": base64.b64encode(blob).decode()}
    (problem,) = found["t-3"][0]
    assert isinstance(problem, Problem) and "'pickle' blob, which is not decoded" in problem.error


def test_an_unreadable_checkpoint_is_a_problem_and_the_others_are_read(sqlite_file):
    with sqlite3.connect(sqlite_file) as conn:
        (broken,) = conn.execute("SELECT checkpoint_id FROM checkpoints WHERE thread_id = 't-2' LIMIT 1").fetchone()
        conn.execute("UPDATE checkpoints SET checkpoint = x'c1' WHERE checkpoint_id = ?", (broken,))
    conn.close()
    checkpoints, _ = read_threads(sqlite_file)["t-2"]
    (problem,) = [item for item in checkpoints if isinstance(item, Problem)]
    assert broken in problem.path and "not msgpack" in problem.error
    read = [item.checkpoint_id for item in checkpoints if isinstance(item, langgraph.Saved)]
    assert broken not in read and len(read) == len([k for k in sqlite_saved_ids(sqlite_file) if k[0] == "t-2"]) - 1


def sqlite_saved_ids(path: Path) -> list[tuple[str, str, str]]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT thread_id, checkpoint_ns, checkpoint_id FROM checkpoints").fetchall()
    conn.close()
    return rows


def test_a_file_that_is_no_sqlite_saver_file_is_one_problem(tmp_path):
    path = tmp_path / "not.sqlite"
    path.write_bytes(b"hello")
    (problem,) = langgraph.threads(path)
    assert isinstance(problem, Problem)
    assert problem.path == str(path) and "not readable as LangGraph checkpoints" in problem.error


# ---- files that are not what they look like: read-only, plain tables only, a time budget -------

ENDLESS_VIEW = """CREATE VIEW checkpoints AS WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n)
    SELECT 't' AS thread_id, '' AS checkpoint_ns, printf('%08d', i) AS checkpoint_id,
    NULL AS parent_checkpoint_id, 'msgpack' AS type, x'80' AS checkpoint, '{}' AS metadata FROM n"""


def reshaped(sqlite_file: Path, name: str, *statements: str) -> Path:
    """A copy of the SqliteSaver file with its schema changed by `statements`."""
    path = sqlite_file.with_name(name)
    path.write_bytes(sqlite_file.read_bytes())
    with closing(sqlite3.connect(path)) as conn, conn:
        for statement in statements:
            conn.execute(statement)
    return path


HOSTILE = {
    "view": (
        ["ALTER TABLE checkpoints RENAME TO kept", "CREATE VIEW checkpoints AS SELECT * FROM kept"],
        "checkpoints is a view",
    ),
    "trigger": (
        ["CREATE TRIGGER spy AFTER INSERT ON writes BEGIN SELECT 1; END"],
        "the file has triggers (spy)",
    ),
    "virtual table": (
        [
            "DROP TABLE writes",
            "CREATE VIRTUAL TABLE writes USING fts5(thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx,"
            " channel, type, value)",
        ],
        "writes is a virtual table",
    ),
    "missing column": (["ALTER TABLE writes DROP COLUMN channel"], "writes lacks the column channel"),
    "generated column": (
        ["ALTER TABLE checkpoints ADD COLUMN heavy TEXT GENERATED ALWAYS AS (hex(checkpoint))"],
        "checkpoints has generated or hidden columns (heavy)",
    ),
}


def test_a_sqlite_saver_file_whose_checkpoints_is_an_endless_recursive_view_is_refused_at_once(sqlite_file):
    path = reshaped(sqlite_file, "endless.sqlite", "DROP TABLE checkpoints", ENDLESS_VIEW)
    assert langgraph.detect(path)
    (problem,) = within(30, lambda: list(langgraph.threads(path)))
    assert isinstance(problem, Problem) and problem.path == str(path)
    assert problem.error == "checkpoints is a view, not a plain table; not read"


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_sqlite_saver_file_with_a_view_trigger_virtual_table_or_odd_columns_is_one_problem_naming_it(
    sqlite_file, kind
):
    statements, named = HOSTILE[kind]
    path = reshaped(sqlite_file, f"{kind.replace(' ', '-')}.sqlite", *statements)
    (problem,) = within(30, lambda: list(langgraph.threads(path)))
    assert isinstance(problem, Problem) and named in problem.error, problem


def test_an_import_reports_each_refused_file_and_imports_the_good_one_next_to_them(sqlite_file, project):
    for kind, (statements, _) in HOSTILE.items():
        reshaped(sqlite_file, f"{kind.replace(' ', '-')}.sqlite", *statements)
    expected = sqlite_saved(sqlite_file)
    report = import_folder(sqlite_file.parent, project)
    assert sorted(Path(error["path"]).name for error in report.errors) == sorted(
        f"{kind.replace(' ', '-')}.sqlite" for kind in HOSTILE
    )
    assert all(error["error"].endswith("; not read") for error in report.errors), report.errors
    assert console(project) == expected and report.imported == len(expected)


def test_a_query_running_past_the_time_budget_is_interrupted(sqlite_file):
    endless = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n"

    def run_twice() -> list[str]:
        refusals = []
        with closing(langgraph.SqliteReader(sqlite_file, 0.2)) as reader:
            for sql in (endless, "SELECT 1"):  # the budget is the file's: the next statement does not start
                with pytest.raises(langgraph.TooSlow) as refused:
                    reader.all(sql)
                refusals.append(str(refused.value))
        return refusals

    assert within(30, run_twice) == ["reading took longer than IMPORT_SQLITE_SECONDS (0.2 s); not read further"] * 2


def test_a_file_that_runs_past_import_sqlite_seconds_is_one_report_line_and_stores_nothing(
    sqlite_file, project, settings
):
    settings.IMPORT_SQLITE_SECONDS = 0
    report = import_folder(sqlite_file, project)
    assert report.errors, "a budget of 0 s stops every file"
    assert "reading took longer than IMPORT_SQLITE_SECONDS (0 s); not read further" in report.errors[0]["error"]
    assert report.imported == 0 and not Checkpoint.objects.exists()


def test_the_file_is_opened_read_only_and_refuses_writes(sqlite_file):
    before = sqlite_file.read_bytes()
    reader = langgraph.SqliteReader(sqlite_file, 10)
    for statement in ("DELETE FROM writes", "CREATE TABLE spill (x)", "PRAGMA user_version = 7"):
        with pytest.raises(sqlite3.OperationalError, match="readonly|read-only|query_only"):
            reader.all(statement)
    reader.close()
    assert sqlite_file.read_bytes() == before


# ---- PostgresSaver -----------------------------------------------------------------------------


@pytest.fixture
def postgres_url(db) -> Iterator[str]:
    """A scratch database written by PostgresSaver, dropped afterwards."""
    settings = connection.settings_dict
    name = f"lg_scratch_{os.getpid()}"
    server = psycopg.conninfo.make_conninfo(
        host=settings["HOST"] or "",
        port=settings["PORT"] or "",
        user=settings["USER"] or "",
        password=settings["PASSWORD"] or "",
        dbname="postgres",
    )
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.execute(f"CREATE DATABASE {name}")
    url = f"postgres://{settings['USER']}@{settings['HOST']}:{settings['PORT'] or 5432}/{name}"
    try:
        with PostgresSaver.from_conn_string(url) as saver:
            saver.setup()
            run(saver)
        yield url
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def postgres_saved(url: str) -> dict[tuple[str, str, str], dict[str, Any]]:
    with PostgresSaver.from_conn_string(url) as saver:
        return saved(saver)


@pytest.mark.postgres
@pytest.mark.parametrize("batch", [langgraph.READ_BATCH, 3], ids=["one batch", "batches of 3"])
def test_the_reader_finds_what_postgres_saver_returns(postgres_url, batch, monkeypatch):
    monkeypatch.setattr(langgraph, "READ_BATCH", batch)
    expected = postgres_saved(postgres_url)
    assert len(expected) > 10
    assert read(postgres_url) == expected


# ---- importing ---------------------------------------------------------------------------------


def test_an_import_holds_what_sqlite_saver_returns_one_session_per_thread(sqlite_file, project):
    expected = sqlite_saved(sqlite_file)
    report = import_folder(sqlite_file, project)
    assert report.errors == []
    assert (report.imported, report.skipped, report.sessions) == (len(expected), 0, ["t-1", "t-2"])
    assert console(project) == expected
    for thread_id in ("t-1", "t-2"):
        session = AgentSession.objects.get(project=project, external_id=thread_id)
        assert (session.agent, session.source_format, session.metadata["thread_id"]) == (
            "langgraph",
            "langgraph",
            thread_id,
        )
        rows = {c.metadata["checkpoint_id"]: c for c in Checkpoint.objects.filter(session=session)}
        assert len(rows) == len([key for key in expected if key[0] == thread_id])
        for (thread, ns, checkpoint_id), item in expected.items():
            if thread != thread_id:
                continue
            row = rows[checkpoint_id]
            assert (row.name, row.step, row.metadata["checkpoint_ns"]) == (
                item["metadata"]["source"],
                item["metadata"]["step"],
                ns,
            )
            assert row.parent == (rows[item["parent"]] if item["parent"] else None)
        root = max(key[2] for key in expected if key[0] == thread_id and key[1] == "")
        assert session.head == rows[root]
    assert AuditEvent.objects.filter(action="import", project=project).count() == 1


def test_a_thread_goes_in_a_chunk_per_transaction_and_one_that_breaks_off_keeps_what_went_in(
    sqlite_file, project, monkeypatch
):
    from checkpoints.services import langgraph as lg_service
    from checkpoints.services import langgraph_import

    monkeypatch.setattr(langgraph_import, "CHUNK", 4)
    expected = sqlite_saved(sqlite_file)
    put = lg_service.put_checkpoint
    calls = []

    def breaks_at_the_sixth(*args, **kwargs):
        calls.append(1)
        if len(calls) == 6:
            raise RuntimeError("the database went away")
        return put(*args, **kwargs)

    monkeypatch.setattr(lg_service, "put_checkpoint", breaks_at_the_sixth)
    broken = import_folder(sqlite_file, project)
    assert broken.failed_sessions == ["t-1"] and "the database went away" in broken.errors[0]["error"]
    assert broken.imported == 4 + len([key for key in expected if key[0] == "t-2"])
    assert Checkpoint.objects.filter(session__external_id="t-1").count() == 4  # the first chunk stayed

    monkeypatch.setattr(lg_service, "put_checkpoint", put)
    again = import_folder(sqlite_file, project)
    assert (again.errors, again.imported) == ([], len([key for key in expected if key[0] == "t-1"]) - 4)
    assert console(project) == expected


def test_importing_again_stores_nothing_and_reports_every_checkpoint_skipped(sqlite_file, project):
    first = import_folder(sqlite_file, project)
    before = (Checkpoint.objects.count(), console(project))
    again = import_folder(sqlite_file, project)
    assert (again.imported, again.skipped, again.errors) == (0, first.imported, [])
    assert (Checkpoint.objects.count(), console(project)) == before


def test_a_dry_run_of_the_folder_finds_the_file_reads_everything_and_stores_nothing(sqlite_file, project):
    report = import_folder(sqlite_file.parent, project, dry_run=True, write_back=True)
    assert report.imported == len(sqlite_saved(sqlite_file)) and report.errors == []
    assert report.notes == [
        f"{sqlite_file}: LangGraph threads are not written back (export them with --format langgraph)"
    ]
    assert not AgentSession.objects.exists()


def test_a_folder_holding_a_saver_file_still_open_reads_its_write_ahead_log_and_reports_no_companion_file(
    tmp_path, project
):
    path = tmp_path / "live.sqlite"
    with SqliteSaver.from_conn_string(str(path)) as saver:
        run(saver)
        assert {p.name for p in tmp_path.iterdir()} == {"live.sqlite", "live.sqlite-wal", "live.sqlite-shm"}
        report = import_folder(tmp_path, project)
        expected = len(sqlite_saved(path))
    assert (report.imported, report.errors) == (expected, [])
    assert expected == Checkpoint.objects.count() > 0


def test_a_lone_write_ahead_log_is_reported_not_dropped(tmp_path, project):
    (tmp_path / "gone.sqlite-wal").write_bytes(b"\x00" * 32)
    report = import_folder(tmp_path, project)
    assert [e["error"] for e in report.errors] == ["not a checkpoint file of any known format; skipped"]


def test_an_import_stores_pickles_opaque_unpickles_nothing_and_reports_an_undecodable_checkpoint(
    sqlite_file, tmp_path, project
):
    marker = tmp_path / "unpickled"
    blob = add_pickles(sqlite_file, marker)
    allow_only(project, "pickle")  # refused otherwise: a reader with a pickle-capable serde would unpickle it
    report = import_folder(sqlite_file, project)
    assert not marker.exists()
    assert report.sessions == ["t-1", "t-2"]
    (error,) = report.errors
    assert "'t-3'" in error["path"] and "'pickle' blob" in error["error"]
    latest = next(iter(console(project, thread_id="t-1", checkpoint_ns="").values()))
    assert ["task-p", "custom", {"__lg__": ["typed", "pickle"], "b64": base64.b64encode(blob).decode()}] in latest[
        "writes"
    ]


def test_the_command_imports_a_sqlite_saver_file_as_json(sqlite_file, project):
    out, _ = command("import_checkpoints", str(sqlite_file), "--format", "langgraph", "--project", "acme", "--json")
    assert '"sessions": ["t-1", "t-2"]' in out
    assert console(project) == sqlite_saved(sqlite_file)


def test_an_uploaded_archive_holding_a_sqlite_saver_file_imports_its_threads(
    client, alice, project, sqlite_file, tmp_path, settings
):
    settings.VAR_DIR = tmp_path / "var"
    settings.VAR_DIR.mkdir()
    archive = tmp_path / "threads.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.write(sqlite_file, "agent/checkpoints.sqlite")
    client.force_login(alice)
    with archive.open("rb") as file:
        assert client.post(reverse("dashboard:import_upload"), {"project": "acme", "archive": file}).status_code == 302
    result = import_archive(ImportJob.objects.get().pk)
    assert (result["errors"], result["sessions"]) == ([], ["t-1", "t-2"])
    assert console(project) == sqlite_saved(sqlite_file)


@pytest.mark.postgres
def test_a_postgres_saver_database_imports_from_its_url(postgres_url, project):
    out, _ = command("import_checkpoints", postgres_url, "--project", "acme", "--json")
    report = json.loads(out)
    assert report["errors"] == [] and report["sessions"] == ["t-1", "t-2"]
    assert console(project) == postgres_saved(postgres_url)
    assert "lg_scratch_" in AuditEvent.objects.get(action="import").target


@pytest.mark.postgres
def test_a_postgres_saver_database_whose_statements_run_past_the_timeout_is_one_report_line(
    postgres_url, project, settings
):
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("ALTER TABLE checkpoints RENAME TO kept")
        conn.execute("CREATE VIEW checkpoints AS SELECT kept.* FROM kept, pg_sleep(600)")
    settings.IMPORT_POSTGRES_STATEMENT_SECONDS = 1
    report = within(30, lambda: import_folder(postgres_url, project))
    (error,) = report.errors
    assert error["path"] == langgraph.database_name(postgres_url)
    assert error["error"] == "a statement ran past IMPORT_POSTGRES_STATEMENT_SECONDS (1 s); not read further"
    assert not Checkpoint.objects.exists()


def test_a_database_that_cannot_be_reached_is_one_error_line_naming_it_without_its_password(db):
    report = import_folder("postgres://agent:secret@127.0.0.1:1/nowhere", "fresh")
    (error,) = report.errors
    assert error["path"] == "postgres://agent@127.0.0.1/nowhere"
    assert "not readable as LangGraph checkpoints" in error["error"] and "secret" not in str(report.as_dict())
    assert not Project.objects.filter(slug="fresh").exists()


def test_the_command_refuses_a_database_url_in_another_format(db):
    with pytest.raises(CommandError, match="use --format langgraph"):
        command("import_checkpoints", "postgres://agent@127.0.0.1:1/nowhere", "--format", "kaizen")


def test_a_thread_deleted_in_the_console_comes_back_whole_when_its_file_is_imported_again(sqlite_file, project):
    import_folder(sqlite_file, project)
    delete_thread(project, actor=Actor.system("test"), thread_id="t-2")
    report = import_folder(sqlite_file, project)
    assert report.errors == []
    assert console(project) == sqlite_saved(sqlite_file)


# ---- exporting ---------------------------------------------------------------------------------


def test_an_export_is_a_sqlite_saver_file_that_reads_back_as_the_thread(sqlite_file, project, tmp_path):
    import_folder(sqlite_file, project)
    session = AgentSession.objects.get(project=project, external_id="t-2")
    out = tmp_path / "out" / "t-2.sqlite"
    assert langgraph.export(session, out) == [out]
    expected = {key: item for key, item in sqlite_saved(sqlite_file).items() if key[0] == "t-2"}
    assert sqlite_saved(out) == expected
    with pytest.raises(FileExistsError):
        langgraph.export(session, out)


def test_the_export_command_writes_the_file_named(sqlite_file, project, tmp_path):
    import_folder(sqlite_file, project)
    out = tmp_path / "t-1.db"
    printed, _ = command("export_checkpoints", "t-1", "--format", "langgraph", "--out", str(out))
    assert "wrote 1 file(s)" in printed
    assert sqlite_saved(out) == {key: item for key, item in sqlite_saved(sqlite_file).items() if key[0] == "t-1"}


def test_a_session_of_another_format_exports_as_a_thread_of_its_states(project, tmp_path):
    session, _ = upsert_session(project, external_id="kaizen-7", agent="kaizen")
    first, _ = create_checkpoint(session, CheckpointInput(state={"task": "plan", "n": 1}, step=1))
    second, _ = create_checkpoint(session, CheckpointInput(state=["not", "an", "object"], step=2))
    (path,) = langgraph.export(session, tmp_path)
    assert path == tmp_path / "kaizen-7.sqlite"
    with SqliteSaver.from_conn_string(str(path)) as saver:
        latest = saver.get_tuple({"configurable": {"thread_id": "kaizen-7", "checkpoint_ns": ""}})
        history = list(saver.list({"configurable": {"thread_id": "kaizen-7"}}))
    assert latest is not None and latest.checkpoint["channel_values"] == {"state": ["not", "an", "object"]}
    assert latest.metadata == {"source": "update", "step": 2}
    assert [item.checkpoint["channel_values"] for item in history] == [
        {"state": ["not", "an", "object"]},
        {"task": "plan", "n": 1},
    ]
    assert latest.parent_config is not None
    assert latest.parent_config["configurable"]["checkpoint_id"] == history[1].config["configurable"]["checkpoint_id"]


def test_a_console_restore_exports_as_the_newest_checkpoint_so_the_graph_resumes_from_it(
    sqlite_file, project, tmp_path
):
    import_folder(sqlite_file, project)
    session = AgentSession.objects.get(project=project, external_id="t-1")
    earlier = Checkpoint.objects.get(session=session, name="loop", step=1, metadata__checkpoint_ns="")
    restore_checkpoint(earlier, actor=Actor.system("test"))
    (path,) = langgraph.export(session, tmp_path)
    with SqliteSaver.from_conn_string(str(path)) as saver:
        latest = saver.get_tuple({"configurable": {"thread_id": "t-1", "checkpoint_ns": ""}})
        app = build(saver)
        resumed = app.invoke(None, {"configurable": {"thread_id": "t-1"}})
    assert latest is not None
    assert (latest.metadata["source"], latest.metadata["restored_from"]) == ("fork", earlier.metadata["checkpoint_id"])
    assert typed(saver, latest.checkpoint["channel_values"]) == load_state(earlier.root)
    assert [message.id for message in resumed["messages"]] == ["h-1", "ai-1", "tool-1", "ai-2"]


# ---- types a LangGraph reader would rebuild --------------------------------------------------------------


def shell_record(marker: Path) -> ormsgpack.Ext:
    """subprocess.getoutput as a dataclass-shaped record: a LangGraph reader rebuilding it runs `touch marker`."""
    return ext_record(2, "subprocess", "getoutput", {"cmd": f"touch {marker}"})


def add_hostile_rows(path: Path, marker: Path) -> None:
    """A thread whose checkpoint names subprocess.getoutput, and such a pending write in thread t-1."""
    checkpoint = {
        "v": 4,
        "id": "1f000000-0000-6000-8000-000000000001",
        "ts": "2026-11-27T10:00:00+00:00",
        "channel_values": {"plan": shell_record(marker)},
        "channel_versions": {"plan": 1},
        "versions_seen": {},
    }
    blob = ormsgpack.packb(checkpoint)
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(
            "INSERT INTO checkpoints VALUES ('t-evil', '', ?, NULL, 'msgpack', ?, '{}')", (checkpoint["id"], blob)
        )
        thread, ns, checkpoint_id = conn.execute(
            "SELECT thread_id, checkpoint_ns, checkpoint_id FROM checkpoints WHERE thread_id = 't-1' "
            "AND checkpoint_ns = '' ORDER BY checkpoint_id DESC LIMIT 1"
        ).fetchone()
        conn.execute(
            "INSERT INTO writes VALUES (?, ?, ?, 'task-evil', '', 0, 'plan', 'msgpack', ?)",
            (thread, ns, checkpoint_id, ormsgpack.packb([shell_record(marker)])),
        )


def test_an_import_refuses_values_naming_types_the_project_does_not_allow_and_imports_the_rest(
    sqlite_file, project, tmp_path
):
    marker = tmp_path / "pwned"
    expected = sqlite_saved(sqlite_file)
    add_hostile_rows(sqlite_file, marker)

    report = import_folder(sqlite_file, project)

    assert sorted((line["path"].split()[2], line["error"][:41]) for line in report.errors) == [
        ("'t-1'", "pending writes of task task-evil not impo"),
        ("'t-evil'", "not imported: values.plan: names the type"),
    ], report.errors
    assert all(
        "subprocess.getoutput" in line["error"] and "Project settings" in line["error"] for line in report.errors
    )
    assert not AgentSession.objects.filter(external_id="t-evil").exists()
    assert console(project) == expected
    assert not marker.exists()


def allow_only(project: Project, *extra: str) -> None:
    project.type_allowlist = [*default_type_allowlist(), *extra]
    project.save(update_fields=["type_allowlist"])


def test_an_export_refuses_a_thread_naming_a_type_its_project_no_longer_allows(
    sqlite_file, project, tmp_path, client, alice
):
    allow_only(project, "subprocess.getoutput")
    add_hostile_rows(sqlite_file, tmp_path / "pwned")
    assert import_folder(sqlite_file, project).errors == []
    allow_only(project)
    session = AgentSession.objects.get(project=project, external_id="t-evil")

    with pytest.raises(langgraph.ExportRefused, match=r"holds a subprocess.getoutput at checkpoint.channel_values"):
        langgraph.export(session, tmp_path / "out")
    with pytest.raises(CommandError, match="subprocess.getoutput"):
        command("export_checkpoints", "t-evil", "--format", "langgraph", "--out", str(tmp_path / "out"))
    client.force_login(alice)
    response = client.get(reverse("dashboard:session_export", args=[session.pk]), {"format": "langgraph"})

    assert response.status_code == 409 and b"subprocess.getoutput" in response.content
    assert not any((tmp_path / "out").glob("*"))
    assert not AuditEvent.objects.filter(action="export").exists()


def test_a_plain_state_holding_an_lg_key_exports_as_data_that_sqlite_saver_reads_back_unchanged(project, tmp_path):
    marker = tmp_path / "pwned"
    state = {
        "plan": {"__lg__": [5, "subprocess", "getoutput", "model_validate_json"], "cmd": f"touch {marker}"},
        "raw": {"__lg__": ["ext", 2], "v": ["subprocess", "getoutput", {"cmd": f"touch {marker}"}]},
    }
    session, _ = upsert_session(project, external_id="plain-api", agent="kaizen")
    create_checkpoint(session, CheckpointInput(state=state, step=1))
    create_checkpoint(session, CheckpointInput(state={"__lg__": ["bytes"], "b64": "AA=="}, step=2))

    (path,) = langgraph.export(session, tmp_path)
    with SqliteSaver.from_conn_string(str(path)) as saver:  # LangGraph's permissive default serde
        history = [
            item.checkpoint["channel_values"] for item in saver.list({"configurable": {"thread_id": "plain-api"}})
        ]

    assert history == [{"state": {"__lg__": ["bytes"], "b64": "AA=="}}, state]
    assert not marker.exists()
