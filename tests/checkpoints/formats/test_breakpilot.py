from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from checkpoints import formats, services
from checkpoints.formats import breakpilot
from checkpoints.importing import import_path
from checkpoints.models import AgentSession, Checkpoint
from checkpoints.store import load_state

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
FOLDER = FIXTURES / "breakpilot"
EXPORT = FOLDER / "bp-session-42.json"
ENTRIES = json.loads(EXPORT.read_text(encoding="utf-8"))
WHEN = datetime(2026, 5, 1, 9, 30, tzinfo=UTC)


def run(path: Path, project, **options):
    options.setdefault("fmt", "breakpilot")
    return import_path(path, project=project, actor=services.Actor.system("test"), **options)


def snapshot(project) -> dict:
    found = {}
    for session in AgentSession.objects.filter(project=project).order_by("external_id"):
        checkpoints = [
            (c.name, c.kind, c.status, c.status_reason, c.step, c.created_at, c.metadata, load_state(c.root))
            for c in session.checkpoints.order_by("seq")
        ]
        found[session.external_id] = {"agent": session.agent, "status": session.status, "checkpoints": checkpoints}
    return found


def entries(*items) -> str:
    return json.dumps(list(items))


def test_detects_an_export_file_and_a_folder_holding_one_but_not_other_formats():
    assert breakpilot.detect(EXPORT)
    assert breakpilot.detect(FOLDER)
    assert not breakpilot.detect(FIXTURES / "ares")
    assert not breakpilot.detect(FIXTURES / "ares" / "sess-a_0.json")
    assert not breakpilot.detect(FIXTURES / "dreamos")
    assert formats.detect(EXPORT) == "breakpilot"
    assert formats.detect(FOLDER) == "breakpilot"


def test_the_export_imports_as_one_session_with_numbers_names_times_and_metadata(project):
    report = run(FOLDER, project, fmt="auto")
    assert report.errors == []
    assert (report.imported, report.skipped, report.sessions) == (60, 0, ["bp-session-42"])
    session = AgentSession.objects.get(project=project, external_id="bp-session-42")
    assert session.agent == "bp-session-42"
    checkpoints = list(session.checkpoints.order_by("seq"))
    assert [c.step for c in checkpoints] == list(range(1, 61))
    assert [c.name for c in checkpoints] == [entry["name"] for entry in ENTRIES]
    assert {c.kind for c in checkpoints} == {"imported"}
    assert {c.status for c in checkpoints} == {"completed"}
    assert checkpoints[0].created_at == datetime(2026, 4, 1, 12, 0, 37, tzinfo=UTC)
    assert checkpoints[-1].created_at == datetime(2026, 4, 1, 12, 37, tzinfo=UTC)
    for checkpoint, entry in zip(checkpoints, ENTRIES, strict=True):
        assert checkpoint.metadata == {**entry["metadata"], "source_format": "breakpilot", "source_id": entry["id"]}
        assert load_state(checkpoint.root) == entry["data"]
    assert session.head == checkpoints[-1]


def test_entries_are_read_in_number_order_per_session_and_extra_keys_are_kept(project, tmp_path):
    shuffled = tmp_path / "mixed.json"
    shuffled.write_text(
        entries(
            {"id": "a:10", "name": "ten", "timestamp": "2026-04-01T10:00:00Z", "data": 10, "metadata": None},
            {"id": "b:1", "name": "b-one", "timestamp": "2026-04-01T09:00:00Z", "data": {"b": 1}},
            {"id": "a:2", "name": "two", "timestamp": "2026-04-01T09:00:00Z", "data": 2, "origin": "laptop"},
        )
    )
    report = run(shuffled, project)
    assert report.errors == [] and report.sessions == ["a", "b"]
    a = AgentSession.objects.get(external_id="a").checkpoints.order_by("seq")
    assert [(c.step, c.name, load_state(c.root)) for c in a] == [(2, "two", 2), (10, "ten", 10)]
    assert a[0].metadata["source_extra"] == {"origin": "laptop"}
    assert a[1].metadata == {"source_format": "breakpilot", "source_id": "a:10"}


def test_damaged_files_stray_files_and_bad_entries_are_reported_and_the_rest_imports(project, tmp_path):
    folder = tmp_path / "exports"
    folder.mkdir()
    (folder / "bp-session-42.json").write_bytes(EXPORT.read_bytes())
    truncated = folder / "cut.json"
    truncated.write_bytes(EXPORT.read_bytes()[:5000])
    latin = folder / "latin.json"
    latin.write_bytes(entries({"id": "l:1", "name": "x", "data": "naïve"}).encode().replace(b"\\u00ef", b"\xef"))
    not_an_array = folder / "settings.json"
    not_an_array.write_text('{"theme": "dark"}')
    stray = folder / "README.txt"
    stray.write_text("exports of the nightly run")
    bad_entries = folder / "partly.json"
    bad_entries.write_text(
        entries(
            {"id": "s2:1", "name": "fine", "timestamp": "2026-04-01T12:00:00+00:00", "data": {}, "metadata": {}},
            {"id": "no-number-here", "data": {}},
            {"id": "s2:2", "name": "no data"},
            "just a string",
        )
    )

    report = run(folder, project)

    problems = [(error["path"], error["error"]) for error in report.errors]
    paths = [path for path, _ in problems]
    assert sorted(set(paths)) == sorted(map(str, [truncated, latin, not_an_array, stray, bad_entries]))
    messages = dict(problems)
    assert "truncated" in messages[str(truncated)]
    assert "not UTF-8" in messages[str(latin)]
    assert "not a Breakpilot export" in messages[str(not_an_array)]
    assert "not a Breakpilot export" in messages[str(stray)]
    entry_problems = sorted(error for path, error in problems if path == str(bad_entries))
    assert entry_problems == [
        "entry 1: id 'no-number-here' is not \"<session>:<n>\"",
        'entry 2 (s2:2): no "data"',
        "entry 3: not an object",
    ]
    assert report.imported == 61
    assert sorted(report.sessions) == ["bp-session-42", "s2"]


def test_importing_the_same_file_twice_adds_nothing(project):
    run(EXPORT, project)
    again = run(EXPORT, project)
    assert (again.imported, again.skipped, again.errors) == (0, 60, [])
    assert Checkpoint.objects.count() == 60


def test_a_dry_run_reports_but_stores_nothing(project):
    report = run(EXPORT, project, dry_run=True)
    assert report.imported == 60
    assert Checkpoint.objects.count() == 0 and AgentSession.objects.count() == 0


def test_export_then_import_into_another_project_gives_the_same_session(project, other_project, tmp_path):
    run(EXPORT, project)
    session = AgentSession.objects.get(project=project)
    written = breakpilot.export(session, tmp_path)
    assert [path.name for path in written] == ["bp-session-42.json"]
    assert json.loads(written[0].read_text(encoding="utf-8")) == ENTRIES  # Breakpilot's own export, as it was
    report = run(tmp_path, other_project)
    assert report.errors == [] and report.imported == 60
    assert snapshot(other_project) == snapshot(project)
    with pytest.raises(FileExistsError):  # an export never replaces a file
        breakpilot.export(session, tmp_path)


def test_a_session_made_elsewhere_exports_with_its_own_fields_kept(
    other_project, make_session, make_checkpoint, tmp_path
):
    session = make_session("run-1")
    make_checkpoint(session, {"a": 1}, name="start", kind="step", step=7, created_at=WHEN, metadata={"x": 1})
    make_checkpoint(session, [1], name="end", kind="manual", status="halted", status_reason="loop", created_at=WHEN)
    breakpilot.export(session, tmp_path)
    run(tmp_path, other_project)
    again = AgentSession.objects.get(project=other_project, external_id="run-1")
    rows = [
        (c.name, c.kind, c.status, c.status_reason, c.step, c.created_at, c.metadata.get("x"), load_state(c.root))
        for c in again.checkpoints.order_by("seq")
    ]
    assert rows == [
        ("start", "step", "completed", "", 7, WHEN, 1, {"a": 1}),
        ("end", "manual", "halted", "loop", None, WHEN, None, [1]),
    ]


def test_an_empty_session_exports_an_empty_array(make_session, tmp_path):
    written = breakpilot.export(make_session("empty"), tmp_path)
    assert json.loads(written[0].read_text()) == []


def test_write_back_adds_an_export_file_with_the_restored_checkpoint_as_newest_entry(project, tmp_path):
    run(EXPORT, project)
    session = AgentSession.objects.get(project=project)
    target = session.checkpoints.get(step=10)
    restored = services.restore_checkpoint(target, actor=services.Actor.system("test"), reason="bad tool call")
    session.refresh_from_db()
    folder = tmp_path / "exports"
    folder.mkdir()
    (folder / "bp-session-42.json").write_bytes(EXPORT.read_bytes())

    written = breakpilot.write_back(session, restored, folder, now=WHEN)

    assert [path.name for path in written] == ["bp-session-42_restored_20260501T093000Z.json"]
    assert json.loads(written[0].read_text(encoding="utf-8")) == [
        {
            "id": "bp-session-42:62",  # after every number the console knows (60 imported, the restore's 61)
            "name": target.name,
            "timestamp": "2026-05-01T09:30:00+00:00",
            "data": ENTRIES[9]["data"],
            "metadata": {"restored_from": "bp-session-42:10", "reason": "bad tool call"},
        }
    ]
    assert sorted(path.name for path in folder.iterdir()) == ["bp-session-42.json", written[0].name]
    assert (folder / "bp-session-42.json").read_bytes() == EXPORT.read_bytes()
    with pytest.raises(FileExistsError):
        breakpilot.write_back(session, restored, folder, now=WHEN)
    report = run(folder, project)
    assert (report.imported, report.skipped, report.errors) == (1, 60, [])
