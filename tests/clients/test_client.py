"""The vendorable Python client, against a real running server (pytest-django's live_server)."""

from __future__ import annotations

import ast
import socket
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from checkpoint_console import client as client_module
from checkpoints.client import CheckpointAPIError, CheckpointClient
from checkpoints.models import AuditEvent, Checkpoint
from checkpoints.services import create_api_token
from tests.helpers import QuietHandler, loopback_server

pytestmark = pytest.mark.django_db(transaction=True)

T0 = datetime(2026, 4, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def cp(live_server, token_secret) -> CheckpointClient:
    return CheckpointClient(live_server.url, token_secret, timeout=10)


@pytest.fixture
def run(cp) -> str:
    cp.create_session("run-1", agent="agent-7", title="Nightly run")
    return "run-1"


def state_at(step: int) -> dict[str, Any]:
    return {
        "step": step,
        "messages": [{"role": "assistant", "content": f"message {i} — naïve ✓ 数据"} for i in range(step)],
        "memory": {"goal": "ship", "progress": step / 10},
    }


def add_steps(cp: CheckpointClient, session: str, count: int, *, start: datetime = T0) -> list[dict[str, Any]]:
    """`count` checkpoints one minute apart in one batch request; returns the batch rows."""
    items = [
        {
            "session": session,
            "state": state_at(n),
            "name": "tool_called" if n % 2 else "step_done",
            "step": n,
            "created_at": start + timedelta(minutes=n),
        }
        for n in range(1, count + 1)
    ]
    result = cp.create_batch(items)
    assert result["created"] == count
    return result["checkpoints"]


# ---- sessions and checkpoints ------------------------------------------------------------------


def test_create_session_then_update_it(cp):
    created = cp.create_session("run-1", agent="agent-7", execution_mode="mvp", metadata={"team": "a"})
    updated = cp.create_session("run-1", agent="agent-7", title="Renamed")

    assert created["external_id"] == "run-1"
    assert created["execution_mode"] == "mvp"
    assert updated["id"] == created["id"]
    assert updated["title"] == "Renamed"
    assert updated["metadata"] == {"team": "a"}  # fields not given are left alone
    assert cp.get_session("run-1")["title"] == "Renamed"


def test_created_checkpoint_reads_back_with_the_same_state(cp, run):
    state = {**state_at(3), "big": 2**70, "nested": [[], {}, None, True, 1.5, 'tab\tquote"']}

    created = cp.create(
        run,
        state,
        name="task_started",
        kind="manual",
        status="in_progress",
        status_reason="waiting on a tool",
        step=3,
        phase=1,
        created_at=T0,
        operation_id="op-9",
        metadata={"tokens": 1337},
    )
    read = cp.get(created["id"])

    assert "state" not in created
    assert read["state"] == state
    assert read["seq"] == 1
    assert (read["name"], read["kind"], read["status"]) == ("task_started", "manual", "in_progress")
    assert (read["status_reason"], read["step"], read["phase"]) == ("waiting on a tool", 3, 1)
    assert read["operation_id"] == "op-9"
    assert read["metadata"] == {"tokens": 1337}
    assert datetime.fromisoformat(read["created_at"]) == T0


def test_repeating_an_idempotency_key_returns_the_original(cp, run):
    first = cp.create(run, {"a": 1}, idempotency_key="step-1")
    again = cp.create(run, {"a": 1}, idempotency_key="step-1")

    assert again["id"] == first["id"]
    assert cp.get_session(run)["checkpoint_count"] == 1
    assert cp.get(first["id"])["state"] == {"a": 1}


def test_reusing_an_idempotency_key_for_another_state_raises_409(cp, run):
    cp.create(run, {"a": 1}, idempotency_key="step-1")
    with pytest.raises(CheckpointAPIError) as refused:
        cp.create(run, {"a": 2}, idempotency_key="step-1")

    assert refused.value.status == 409
    assert "different state" in refused.value.detail


def test_session_id_with_a_space_is_one_path_segment(cp):
    cp.create_session("nightly run #1?", agent="a")
    cp.create("nightly run #1?", {"ok": True})

    assert cp.get_session("nightly run #1?")["external_id"] == "nightly run #1?"
    assert cp.get_latest("nightly run #1?")["state"] == {"ok": True}


def test_a_session_id_with_a_slash_is_refused(cp):
    with pytest.raises(CheckpointAPIError) as error:
        cp.create_session("team/run-1", agent="a")

    assert error.value.status == 422


def test_get_latest_and_get_by_name(cp, run):
    assert cp.get_latest(run) is None
    first = cp.create(run, {"n": 1}, name="day1_final")
    cp.create(run, {"n": 2}, name="tool_called")
    named = cp.create(run, {"n": 3}, name="day1_final")
    last = cp.create(run, {"n": 4}, name="tool_called")

    latest = cp.get_latest(run)
    by_name = cp.get_by_name(run, "day1_final")

    assert (latest["id"], latest["state"]) == (last["id"], {"n": 4})
    assert (by_name["id"], by_name["state"]) == (named["id"], {"n": 3})
    assert by_name["id"] != first["id"]
    assert cp.get_by_name(run, "never_used") is None


def test_get_since_and_get_between_follow_every_page(cp, run):
    add_steps(cp, run, 230)  # the list endpoint pages at 100 by default

    since = cp.get_since(run, T0 + timedelta(minutes=11))
    between = cp.get_between(run, (T0 + timedelta(minutes=11)).isoformat(), T0 + timedelta(minutes=215))

    assert [row["step"] for row in since] == list(range(11, 231))
    assert [row["step"] for row in between] == list(range(11, 216))
    assert all("state" not in row for row in since)


def test_naive_datetimes_are_taken_as_utc(cp, run):
    add_steps(cp, run, 5)

    rows = cp.get_since(run, (T0 + timedelta(minutes=4)).replace(tzinfo=None))

    assert [row["step"] for row in rows] == [4, 5]


def test_list_iterates_over_all_pages_with_filters(cp, run):
    add_steps(cp, run, 25)

    every = list(cp.list(run, limit=7))
    newest_first = list(cp.list(run, limit=4, order="desc", name="step_done"))

    assert [row["seq"] for row in every] == list(range(1, 26))
    assert [row["step"] for row in newest_first] == list(range(24, 0, -2))


# ---- operations --------------------------------------------------------------------------------


def test_an_agent_branches_from_an_earlier_checkpoint_and_resumes_on_the_branch(cp, run):
    first = cp.create(run, state_at(1))
    cp.create(run, state_at(2))
    branch = cp.create(run, state_at(3), parent=first["id"])
    assert branch["parent"] == first["id"]
    assert cp.resume(run)["state"] == state_at(3)


def test_rollback_to_then_resume_returns_the_restored_state(cp, run):
    first = cp.create(run, state_at(1))
    cp.create(run, state_at(2))
    before = cp.resume(run)

    restored = cp.rollback_to(first["id"], reason="drifted")
    after = cp.resume(run)

    assert before["state"] == state_at(2)
    assert after["state"] == state_at(1)
    assert after["restore_generation"] == before["restore_generation"] + 1
    assert after["checkpoint"]["id"] == restored["id"]
    assert restored["kind"] == "restore"
    assert restored["parent"] == first["id"]
    assert cp.get_session(run)["head"]["id"] == restored["id"]
    assert cp.get_session(run)["checkpoint_count"] == 3  # nothing deleted
    assert AuditEvent.objects.filter(action="restore", reason="drifted").count() == 1


def test_fork_starts_a_new_session_from_the_checkpoint(cp, run):
    source = cp.create(run, state_at(2))
    cp.create(run, state_at(3))

    forked = cp.fork(source["id"], title="Try again", external_id="run-1-b")

    assert forked["external_id"] == "run-1-b"
    assert forked["title"] == "Try again"
    assert forked["forked_from"] == source["id"]
    assert cp.resume("run-1-b")["state"] == state_at(2)
    assert cp.get_latest(run)["state"] == state_at(3)  # the source session is untouched


def test_fork_to_an_existing_session_is_refused(cp, run):
    source = cp.create(run, {"n": 1})

    with pytest.raises(CheckpointAPIError) as caught:
        cp.fork(source["id"], external_id=run)

    assert caught.value.status == 409
    assert "already exists" in caught.value.detail


def test_diff_summarises_the_changes(cp, run):
    a = cp.create(run, {"messages": ["hi"], "memory": {"goal": "ship", "old": 1}})
    b = cp.create(run, {"messages": ["hi", "there"], "memory": {"goal": "ship it", "new": 2}})

    diff = cp.diff(a["id"], b["id"])

    assert (diff["from"], diff["to"]) == (a["id"], b["id"])
    summary = diff["summary"]
    assert (summary["added"], summary["removed"], summary["changed"]) == (2, 1, 1)
    assert summary["appended"] == 1
    assert summary["text"]
    assert {change["path"] for change in diff["changes"]} >= {"memory.goal", "memory.old", "memory.new"}


def test_put_live_state_is_a_heartbeat(cp, run):
    assert cp.get_session(run)["last_seen_at"] is None

    received = cp.put_live_state(run, state_at(5))

    assert received["received_at"]
    assert len(received["live_root"]) >= 32
    assert cp.get_session(run)["last_seen_at"] is not None
    assert cp.get_session(run)["checkpoint_count"] == 0  # live state is not a checkpoint


def test_get_summary_counts_by_name_kind_and_status(cp, run):
    cp.create(run, {"n": 1}, name="start", created_at=T0)
    cp.create(run, {"n": 2}, name="tool_called", created_at=T0 + timedelta(minutes=1))
    cp.create(
        run, {"n": 3}, name="tool_called", status="failed", status_reason="boom", created_at=T0 + timedelta(minutes=1)
    )
    last = cp.create(run, {"n": 4}, name="recovered", kind="recovery", created_at=T0 + timedelta(minutes=5))

    summary = cp.get_summary(run)

    assert summary["checkpoint_count"] == 4
    assert summary["by_name"] == {"start": 1, "tool_called": 2, "recovered": 1}
    assert summary["by_kind"] == {"step": 3, "recovery": 1}
    assert summary["by_status"] == {"completed": 3, "failed": 1}
    assert summary["last"]["id"] == last["id"]
    assert summary["duration_seconds"] == 300


# ---- export and import -------------------------------------------------------------------------


def test_export_is_breakpilot_style(cp, run):
    cp.create(run, state_at(1), name="session_start", created_at=T0, metadata={"tokens": 10})
    cp.create(run, state_at(2), name="tool_called", created_at=T0 + timedelta(minutes=1))

    exported = cp.export(run)

    assert [set(entry) for entry in exported] == [{"id", "name", "timestamp", "data", "metadata"}] * 2
    assert [entry["id"] for entry in exported] == ["run-1:1", "run-1:2"]
    assert exported[0]["name"] == "session_start"
    assert exported[0]["data"] == state_at(1)
    assert exported[0]["metadata"] == {"tokens": 10}
    assert datetime.fromisoformat(exported[1]["timestamp"]) == T0 + timedelta(minutes=1)


def test_export_then_import_into_a_new_session_keeps_the_states(cp, run):
    add_steps(cp, run, 12)
    exported = cp.export(run)
    cp.create_session("run-copy", agent="agent-7")

    result = cp.import_checkpoints("run-copy", exported)
    copied = cp.export("run-copy")

    assert (result["created"], result["existing"]) == (12, 0)
    assert [entry["data"] for entry in copied] == [entry["data"] for entry in exported]
    assert [entry["name"] for entry in copied] == [entry["name"] for entry in exported]
    assert [entry["timestamp"] for entry in copied] == [entry["timestamp"] for entry in exported]
    assert {row["kind"] for row in cp.list("run-copy")} == {"imported"}


def test_importing_the_same_export_again_adds_nothing(cp, run):
    add_steps(cp, run, 6)
    exported = cp.export(run)
    cp.create_session("run-copy", agent="agent-7")
    cp.import_checkpoints("run-copy", exported)

    again = cp.import_checkpoints("run-copy", exported)

    assert (again["created"], again["existing"]) == (0, 6)
    assert cp.get_session("run-copy")["checkpoint_count"] == 6


def test_import_splits_large_exports_into_several_batches(cp, run, monkeypatch):
    monkeypatch.setattr(client_module, "_BATCH_ITEMS", 4)
    exported = [
        {"id": f"bp:{n}", "name": "step", "timestamp": 1775044800 + n, "data": {"n": n}, "metadata": {}}
        for n in range(1, 11)
    ]

    result = cp.import_checkpoints(run, exported)

    assert (result["created"], len(result["checkpoints"])) == (10, 10)
    assert [entry["data"] for entry in cp.export(run)] == [{"n": n} for n in range(1, 11)]
    assert datetime.fromisoformat(cp.export(run)[0]["timestamp"]) == datetime.fromtimestamp(1775044801, tz=UTC)


def test_an_export_with_a_repeated_id_imports_it_once(cp, run):
    entry = {"id": "bp:1", "name": "start", "timestamp": T0.isoformat(), "data": {"n": 1}, "metadata": {}}

    result = cp.import_checkpoints(run, [entry, {**entry, "data": {"n": 99}}])

    assert result["created"] == 1
    assert [entry["data"] for entry in cp.export(run)] == [{"n": 1}]


def test_a_key_repeated_inside_one_batch_is_stored_once(cp, run):
    item = {"session": run, "state": {"n": 1}, "idempotency_key": "k1"}

    result = cp.create_batch([item, item])

    assert (result["created"], result["existing"]) == (1, 1)


# ---- errors ------------------------------------------------------------------------------------


def test_unknown_session_raises_404_with_the_servers_detail(cp):
    with pytest.raises(CheckpointAPIError) as caught:
        cp.get_latest("no-such-run")

    assert caught.value.status == 404
    assert caught.value.detail == "no session 'no-such-run' in project 'acme'"
    assert "404" in str(caught.value)


def test_unknown_checkpoint_raises_404(cp):
    with pytest.raises(CheckpointAPIError) as caught:
        cp.get(999_999)

    assert caught.value.status == 404
    assert "no checkpoint 999999" in caught.value.detail


def test_read_only_token_can_read_but_not_create(cp, run, live_server, project):
    cp.create(run, {"n": 1})
    viewer = CheckpointClient(live_server.url, create_api_token(project, name="viewer", read_only=True)[1])

    with pytest.raises(CheckpointAPIError) as caught:
        viewer.create(run, {"n": 2})

    assert caught.value.status == 403
    assert caught.value.detail == "this token lacks the 'write' scope"
    assert viewer.get_latest(run)["state"] == {"n": 1}
    assert Checkpoint.objects.count() == 1


def test_bad_token_raises_401(live_server, project):
    stranger = CheckpointClient(live_server.url, "cpk_nope_not-a-token")

    with pytest.raises(CheckpointAPIError) as caught:
        stranger.get_session("run-1")

    assert caught.value.status == 401


def test_invalid_input_raises_422_with_field_errors(cp, run):
    with pytest.raises(CheckpointAPIError) as caught:
        cp.create(run, {"n": 1}, kind="not-a-kind")

    assert caught.value.status == 422
    assert isinstance(caught.value.detail, list)
    assert Checkpoint.objects.count() == 0


def test_nan_is_refused_before_sending(cp, run):
    with pytest.raises(ValueError):
        cp.create(run, {"score": float("nan")})


def test_unreachable_server_raises_status_0():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again when the block ends: nothing listens there

    with pytest.raises(CheckpointAPIError) as caught:
        CheckpointClient(f"http://127.0.0.1:{port}", "cpk_x", timeout=2, retries=0).get_session("run-1")

    assert caught.value.status == 0
    assert "cannot reach" in caught.value.detail


@pytest.mark.parametrize("base_url", ["htps://console.example", "file:///etc", "ftp://console.example", "console:8000"])
def test_a_base_url_that_is_not_http_is_refused_at_once(base_url, monkeypatch):
    """urllib opens file: and ftp: URLs too, and a mistyped scheme failed every call as "cannot reach", retried."""
    monkeypatch.setattr(client_module.time, "sleep", lambda seconds: pytest.fail("a retry"))

    with pytest.raises(ValueError, match="http:// or https://"):
        CheckpointClient(base_url, "cpk_x", retries=2).get_session("run-1")


# ---- vendoring ---------------------------------------------------------------------------------


def test_client_imports_only_the_standard_library():
    tree = ast.parse(Path(client_module.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "a relative import ties the client to the project"
            imported.add(node.module.split(".")[0])

    assert imported
    assert imported - sys.stdlib_module_names - {"__future__"} == set()


def test_client_file_works_on_its_own(tmp_path):
    (tmp_path / "vendored_client.py").write_text(Path(client_module.__file__).read_text())
    script = (
        "import sys; import vendored_client as c; "
        "assert not [m for m in sys.modules if m.split('.')[0] in ('django', 'checkpoints', 'orjson')]; "
        "print(c.CheckpointClient('http://x/', 't').base_url)"
    )

    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, check=False)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "http://x"


# ---- phases and reviewers' feedback ---------------------------------------------------------------


def test_an_agent_reports_a_phase_and_reads_the_reviewers_decision(cp, run):
    from checkpoints.models import Phase
    from checkpoints.services import Actor
    from checkpoints.services.phases import record_feedback

    created = cp.report_phase(run, 1, name="Concept Expansion", status="in_progress", started_at=T0)
    assert (created["number"], created["status"], created["started_at"][:19]) == (
        1,
        "in_progress",
        "2026-04-01T12:00:00",
    )
    output = cp.add_phase_output(
        run, 1, "concept_expansion", "## Idea\n- fridge", status="completed", tools_used=["web"]
    )
    assert output["agent_name"] == "concept_expansion" and output["phase"] == 1
    done = cp.report_phase(run, 1, status="completed", completed_at=T0 + timedelta(minutes=5), cost=0.01)
    assert (done["name"], done["status"], done["cost"]) == ("Concept Expansion", "completed", 0.01)
    assert cp.get_phase_feedback(run, 1) is None

    phase = Phase.objects.get(session__external_id=run, number=1)
    record_feedback(
        phase, actor=Actor.system("reviewer"), action="retry_with_changes", requested_changes=["Name a persona"]
    )
    feedback = cp.get_phase_feedback(run, 1)
    assert (feedback["action"], feedback["approved"], feedback["retry_count"]) == ("retry_with_changes", False, 1)
    assert feedback["requested_changes"] == ["Name a persona"]


def test_phase_calls_raise_for_unknown_phases_and_read_only_tokens(cp, run, live_server, project):
    with pytest.raises(CheckpointAPIError) as missing:
        cp.get_phase_feedback(run, 4)
    assert missing.value.status == 404 and "no phase 4" in str(missing.value.detail)
    with pytest.raises(CheckpointAPIError) as unnamed:
        cp.report_phase(run, 4, status="pending")
    assert unnamed.value.status == 422
    reader = CheckpointClient(live_server.url, create_api_token(project, name="ro", read_only=True)[1], timeout=10)
    with pytest.raises(CheckpointAPIError) as refused:
        reader.report_phase(run, 1, name="Concept")
    assert refused.value.status == 403


def test_a_redirect_is_an_error_naming_it_and_the_token_never_reaches_where_it_points(token_secret):
    """urllib follows redirects with the Authorization header: a redirect would hand the token to another host."""
    seen: list[str | None] = []

    class Elsewhere(QuietHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization"))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b"{}")

    with loopback_server(Elsewhere) as elsewhere:

        class Redirecting(QuietHandler):
            def do_GET(self) -> None:
                self.send_response(302)
                self.send_header("Location", f"http://127.0.0.1:{elsewhere}/api/v1/sessions/run")
                self.send_header("Content-Length", "0")
                self.end_headers()

        with loopback_server(Redirecting) as port:
            client = CheckpointClient(f"http://127.0.0.1:{port}", token_secret, retries=0)
            with pytest.raises(CheckpointAPIError) as raised:
                client.get_session("run")
    assert raised.value.status == 302
    assert f"127.0.0.1:{elsewhere}" in str(raised.value.detail)
    assert seen == []
