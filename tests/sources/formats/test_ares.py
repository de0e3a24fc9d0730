from __future__ import annotations

import json
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import pytest

from checkpoints import services
from checkpoints.models import AgentSession, Checkpoint
from checkpoints.sources import formats
from checkpoints.sources.formats import ares
from checkpoints.store import load_state
from tests.helpers import import_folder, writable_copy

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
FOLDER = FIXTURES / "ares"
WHEN = datetime(2026, 5, 1, 9, 30, tzinfo=UTC)


import_ares = partial(import_folder, fmt="ares")


def source(name: str) -> dict:
    return json.loads((FOLDER / name).read_text(encoding="utf-8"))


def session_named(project, external_id: str) -> AgentSession:
    return AgentSession.objects.select_related("head").get(project=project, external_id=external_id)


def snapshot(project) -> dict:
    found = {}
    for session in AgentSession.objects.filter(project=project).select_related("head").order_by("external_id"):
        checkpoints = [
            (c.name, c.kind, c.status, c.status_reason, c.step, c.created_at, c.metadata, load_state(c.root))
            for c in session.checkpoints.order_by("seq")
        ]
        found[session.external_id] = {
            "agent": session.agent,
            "status": session.status,
            "head": session.head.seq if session.head else None,
            "checkpoints": checkpoints,
        }
    return found


def test_detects_step_files_pointers_and_their_folder_but_not_other_formats():
    assert ares.detect(FOLDER)
    assert ares.detect(FOLDER / "sess-a_3.json")
    assert ares.detect(FOLDER / "sess-a_latest.json")
    assert not ares.detect(FIXTURES / "breakpilot")
    assert not ares.detect(FIXTURES / "breakpilot" / "bp-session-42.json")
    assert not ares.detect(FIXTURES / "dreamos")
    assert formats.detect(FOLDER) == "ares"


def test_the_folder_imports_step_checkpoints_with_statuses_reasons_times_and_heads(project):
    report = import_folder(FOLDER, project)
    assert report.errors == []
    assert (report.imported, report.skipped) == (21, 0)
    assert sorted(report.sessions) == ["sess-a", "sess-b", "sess-c"]
    expected = {
        "sess-a": (9, "completed", "", "completed"),
        "sess-b": (7, "failed", "OOM", "failed"),
        "sess-c": (5, "halted", "loop detector: same tool call 4x", "halted"),
    }
    for external_id, (count, last_status, reason, session_status) in expected.items():
        session = session_named(project, external_id)
        assert (session.agent, session.status) == ("ares-coder", session_status)
        checkpoints = list(session.checkpoints.order_by("seq"))
        assert [c.step for c in checkpoints] == list(range(count))
        assert [c.name for c in checkpoints] == [f"step {n}" for n in range(count)]
        assert {c.kind for c in checkpoints} == {"step"}
        assert [c.status for c in checkpoints] == ["in_progress"] * (count - 1) + [last_status]
        assert [c.status_reason for c in checkpoints] == [""] * (count - 1) + [reason]
        assert checkpoints[0].created_at == datetime.fromtimestamp(1767225600, tz=UTC)
        assert checkpoints[3].created_at == datetime(2026, 1, 1, 0, 3, tzinfo=UTC)
        assert session.head == checkpoints[-1]  # what <session>_latest.json names
        assert checkpoints[2].metadata == {
            "file": f"{external_id}_2.json",
            "id": f"{external_id}-2",
            "agent_name": "ares-coder",
            "source_format": "ares",
            "source_id": f"{external_id}-2",
        }


def test_states_hold_messages_tool_calls_and_partial_results_of_the_files(project):
    import_ares(FOLDER, project)
    for checkpoint in Checkpoint.objects.all():
        doc = source(checkpoint.metadata["file"])
        assert load_state(checkpoint.root) == {
            "messages": doc["messages"],
            "tool_calls": doc["tool_calls"],
            "partial_results": doc["partial_results"],
        }
    tool_call = load_state(Checkpoint.objects.get(session__external_id="sess-a", step=3).root)["tool_calls"][0]
    assert tool_call == {"tool_name": "run", "arguments": "vector budget naïve", "result": None, "success": False}


def test_the_latest_pointer_makes_the_file_it_names_the_head(project, tmp_path):
    folder = writable_copy(FOLDER, tmp_path / "steps")
    (folder / "sess-a_latest.json").write_text("sess-a_5.json\n")
    (folder / "sess-b_latest.json").write_text('"sess-b_4.json"')  # a JSON string works too
    import_ares(folder, project)
    assert session_named(project, "sess-a").head.step == 5
    assert session_named(project, "sess-b").head.step == 4


def test_damaged_files_stray_files_and_a_pointer_to_a_missing_file_are_reported(project, tmp_path):
    folder = writable_copy(FOLDER, tmp_path / "steps")
    truncated = folder / "sess-a_3.json"
    truncated.write_bytes(truncated.read_bytes()[:-40])
    latin = folder / "sess-b_2.json"
    latin.write_bytes(latin.read_bytes().replace("naïve".encode(), "naïve".encode("latin-1")))
    wrong_shape = folder / "sess-a_9.json"
    wrong_shape.write_text('{"hello": "world"}')
    bad_step = folder / "sess-c_5.json"
    bad_step.write_text('{"step": "five", "messages": []}')
    pointer = folder / "sess-c_latest.json"
    pointer.write_text("sess-c_12.json")
    orphan_pointer = folder / "sess-z_latest.json"
    orphan_pointer.write_text("sess-z_0.json")
    stray = folder / "run.log"
    stray.write_text("INFO started")
    (folder / ".sess-a_latest.json.tmp").write_text("half written")  # hidden: ignored

    report = import_ares(folder, project)

    errors = {error["path"]: error["error"] for error in report.errors}
    assert set(errors) == set(map(str, [truncated, latin, wrong_shape, bad_step, pointer, orphan_pointer, stray]))
    assert "truncated" in errors[str(truncated)]
    assert "not UTF-8" in errors[str(latin)]
    assert "wrong shape" in errors[str(wrong_shape)] and "wrong shape" in errors[str(bad_step)]
    assert "points to sess-c_12.json" in errors[str(pointer)]
    assert "points to sess-z_0.json" in errors[str(orphan_pointer)]
    assert "not an Ares checkpoint file" in errors[str(stray)]
    assert report.imported == 21 - 2
    assert sorted(report.sessions) == ["sess-a", "sess-b", "sess-c"]
    assert session_named(project, "sess-a").head.step == 8  # its pointer still works
    assert session_named(project, "sess-c").head.step == 4  # no head from a broken pointer: the newest


def test_importing_the_same_folder_twice_adds_nothing(project):
    import_ares(FOLDER, project)
    again = import_ares(FOLDER, project)
    assert (again.imported, again.skipped, again.errors) == (0, 21, [])
    assert Checkpoint.objects.count() == 21


def test_a_dry_run_reports_but_stores_nothing(project):
    report = import_ares(FOLDER, project, dry_run=True)
    assert report.imported == 21
    assert Checkpoint.objects.count() == 0 and AgentSession.objects.count() == 0


def test_export_then_import_into_another_project_gives_the_same_sessions(project, other_project, tmp_path):
    import_ares(FOLDER, project)
    out = tmp_path / "export"
    for session in AgentSession.objects.filter(project=project).select_related("head"):
        ares.export(session, out)
    assert sorted(path.name for path in out.iterdir()) == sorted(path.name for path in FOLDER.iterdir())
    for path in out.iterdir():  # Ares' own files, as they were
        if path.name.endswith("_latest.json"):
            assert path.read_bytes() == (FOLDER / path.name).read_bytes()
        else:
            assert json.loads(path.read_text(encoding="utf-8")) == source(path.name)
    report = import_ares(out, other_project)
    assert report.errors == []
    assert snapshot(other_project) == snapshot(project)


def test_a_restored_session_exports_with_distinct_step_files(project, other_project, tmp_path):
    import_ares(FOLDER, project)
    session = session_named(project, "sess-b")
    services.restore_checkpoint(session.checkpoints.get(step=3), actor=services.Actor.system("test"))
    session = session_named(project, "sess-b")
    written = ares.export(session, tmp_path)
    assert [path.name for path in written] == [f"sess-b_{n}.json" for n in range(8)] + ["sess-b_latest.json"]
    assert (tmp_path / "sess-b_latest.json").read_text() == "sess-b_7.json"  # the restore is the head
    import_ares(tmp_path, other_project)
    mine, theirs = snapshot(project)["sess-b"], snapshot(other_project)["sess-b"]
    assert theirs["head"] == mine["head"] == 8
    assert [row[:6] + row[7:] for row in theirs["checkpoints"]] == [row[:6] + row[7:] for row in mine["checkpoints"]]
    assert theirs["checkpoints"][-1][1:5] == ("restore", "completed", "", 3)
    # the restore's metadata (ids of the console it came from) rides along in the file
    assert theirs["checkpoints"][-1][6]["restored_from_seq"] == 4


def test_a_session_made_elsewhere_exports_with_its_own_fields_kept(
    other_project, make_session, make_checkpoint, tmp_path
):
    session = make_session("run-1", agent="agent-7")
    make_checkpoint(session, {"notes": ["x"]}, name="boot", kind="manual", step=None, created_at=WHEN)
    make_checkpoint(session, {"messages": []}, step=4, status="failed", status_reason="OOM", metadata={"k": 2})
    ares.export(session, tmp_path)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["run-1_0.json", "run-1_4.json", "run-1_latest.json"]
    assert json.loads((tmp_path / "run-1_4.json").read_text())["status"] == {"Failed": "OOM"}
    import_ares(tmp_path, other_project)
    again = AgentSession.objects.get(project=other_project, external_id="run-1")
    assert (again.agent, again.status) == ("agent-7", "failed")
    rows = [
        (c.name, c.kind, c.status, c.status_reason, c.step, c.metadata.get("k"), load_state(c.root))
        for c in again.checkpoints.order_by("seq")
    ]
    assert rows == [
        ("boot", "manual", "completed", "", None, None, {"notes": ["x"]}),
        ("", "step", "failed", "OOM", 4, 2, {"messages": []}),
    ]
    assert again.checkpoints.order_by("seq").first().created_at == WHEN


def test_write_back_adds_the_next_step_file_and_moves_the_latest_pointer(project, tmp_path):
    import_ares(FOLDER, project)
    session = session_named(project, "sess-b")
    target = session.checkpoints.get(step=3)
    restored = services.restore_checkpoint(target, actor=services.Actor.system("test"), reason="OOM at 6")
    folder = writable_copy(FOLDER, tmp_path / "steps")
    before = {path.name: path.read_bytes() for path in folder.iterdir()}

    written = ares.write_back(session, restored, folder, now=WHEN)

    assert [path.name for path in written] == ["sess-b_7.json", "sess-b_latest.json"]
    doc = json.loads((folder / "sess-b_7.json").read_text(encoding="utf-8"))
    restored_from = source("sess-b_3.json")
    assert doc == {
        "id": "sess-b-7",
        "agent_name": "ares-coder",
        "session_id": "sess-b",
        "step": 7,
        "messages": restored_from["messages"],
        "tool_calls": restored_from["tool_calls"],
        "partial_results": restored_from["partial_results"],
        "timestamp": int(WHEN.timestamp()),
        "status": "InProgress",
    }
    assert (folder / "sess-b_latest.json").read_text() == "sess-b_7.json"
    after = {path.name: path.read_bytes() for path in folder.iterdir()}
    assert set(after) == set(before) | {"sess-b_7.json"}  # no temporary file left behind
    assert all(after[name] == data for name, data in before.items() if name != "sess-b_latest.json")

    report = import_ares(folder, project)  # the agent's folder now resumes from the restored state
    assert (report.imported, report.skipped) == (1, 21)
    session = session_named(project, "sess-b")
    assert (session.head.step, session.head.status, session.status) == (7, "in_progress", "active")
    assert load_state(session.head.root) == load_state(target.root)


def test_a_restore_is_written_back_to_the_folder_the_session_came_from(
    project, tmp_path, django_capture_on_commit_callbacks
):
    folder = writable_copy(FOLDER, tmp_path / "steps")
    import_ares(folder, project, write_back=True)
    session = session_named(project, "sess-c")
    with django_capture_on_commit_callbacks(execute=True):
        services.restore_checkpoint(session.checkpoints.get(step=2), actor=services.Actor.system("test"))
    assert (folder / "sess-c_latest.json").read_text() == "sess-c_5.json"
    doc = json.loads((folder / "sess-c_5.json").read_text(encoding="utf-8"))
    assert (doc["step"], doc["status"], doc["messages"]) == (5, "InProgress", source("sess-c_2.json")["messages"])


def test_write_back_never_overwrites_a_step_file(project, tmp_path, monkeypatch):
    import_ares(FOLDER, project)
    session = session_named(project, "sess-a")
    folder = writable_copy(FOLDER, tmp_path / "steps")
    monkeypatch.setattr(ares, "_step_files", lambda folder, prefix: [])  # as if another writer raced us
    with pytest.raises(FileExistsError):
        ares.write_back(session, session.checkpoints.get(step=2), folder, now=WHEN)  # step 3 exists
    assert (folder / "sess-a_3.json").read_bytes() == (FOLDER / "sess-a_3.json").read_bytes()
    assert (folder / "sess-a_latest.json").read_text() == "sess-a_8.json"  # the pointer did not move


def test_a_pointer_read_on_its_own_sets_the_head(project, tmp_path):
    folder = writable_copy(FOLDER, tmp_path / "steps")
    import_ares(folder, project)
    (folder / "sess-a_latest.json").write_text("sess-a_6.json")
    report = import_folder(folder / "sess-a_latest.json", project)
    assert (report.imported, report.skipped, report.errors) == (0, 1, [])
    assert session_named(project, "sess-a").head.step == 6
