from __future__ import annotations

import json
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import pytest

from checkpoints import services
from checkpoints.models import AgentSession, Checkpoint
from checkpoints.sources import formats
from checkpoints.sources.formats import breakpilot
from checkpoints.store import load_state
from tests.helpers import import_folder

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
FOLDER = FIXTURES / "breakpilot"
EXPORT = FOLDER / "bp-session-42.json"
ENTRIES = json.loads(EXPORT.read_text(encoding="utf-8"))
WHEN = datetime(2026, 5, 1, 9, 30, tzinfo=UTC)
# Written by Breakpilot's CheckpointManager across a restart (restart/README.md): ids 1…10 come twice.
RESTART = FOLDER / "restart" / "exports"
BEFORE = RESTART / "bp-session-47_1_before_restart.json"
AFTER = RESTART / "bp-session-47_2_after_restart.json"
AFTER_ENTRIES = json.loads(AFTER.read_text(encoding="utf-8"))
MANAGER_LEN = 45  # len(manager) after the restart
MANAGER_LATEST = ("bp-session-47:10", "2026-04-02T10:49:19.187642+00:00")  # manager.get_latest(): id, timestamp


import_breakpilot = partial(import_folder, fmt="breakpilot")


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
    report = import_folder(EXPORT, project)
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


def test_entries_keep_the_export_order_per_session_and_extra_keys_are_kept(project, tmp_path):
    mixed = tmp_path / "mixed.json"
    mixed.write_text(
        entries(
            {"id": "a:10", "name": "ten", "timestamp": "2026-04-01T10:00:00Z", "data": 10, "metadata": None},
            {"id": "b:1", "name": "b-one", "timestamp": "2026-04-01T09:00:00Z", "data": {"b": 1}},
            {"id": "a:2", "name": "two", "timestamp": "2026-04-01T09:00:00Z", "data": 2, "origin": "laptop"},
        )
    )
    report = import_breakpilot(mixed, project)
    assert report.errors == [] and report.sessions == ["a", "b"]
    a = AgentSession.objects.get(external_id="a").checkpoints.order_by("seq")
    assert [(c.step, c.name, load_state(c.root)) for c in a] == [(10, "ten", 10), (2, "two", 2)]
    assert a[0].metadata == {"source_format": "breakpilot", "source_id": "a:10"}
    assert a[1].metadata["source_extra"] == {"origin": "laptop"}
    assert AgentSession.objects.get(external_id="a").head == a[1]  # the last entry, as get_latest() says


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

    report = import_breakpilot(folder, project)

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
    import_breakpilot(EXPORT, project)
    again = import_breakpilot(EXPORT, project)
    assert (again.imported, again.skipped, again.errors) == (0, 60, [])
    assert Checkpoint.objects.count() == 60


def test_a_dry_run_reports_but_stores_nothing(project):
    report = import_breakpilot(EXPORT, project, dry_run=True)
    assert report.imported == 60
    assert Checkpoint.objects.count() == 0 and AgentSession.objects.count() == 0


def test_export_then_import_into_another_project_gives_the_same_session(project, other_project, tmp_path):
    import_breakpilot(EXPORT, project)
    session = AgentSession.objects.get(project=project)
    written = breakpilot.export(session, tmp_path)
    assert [path.name for path in written] == ["bp-session-42.json"]
    assert json.loads(written[0].read_text(encoding="utf-8")) == ENTRIES  # Breakpilot's own export, as it was
    report = import_breakpilot(tmp_path, other_project)
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
    import_breakpilot(tmp_path, other_project)
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
    import_breakpilot(EXPORT, project)
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
    report = import_breakpilot(folder, project)
    assert (report.imported, report.skipped, report.errors) == (1, 60, [])


# ---- a restart: the manager issues ids 1…10 again (fixtures written by Breakpilot's manager) ----------


def canonical(value) -> str:
    """JSON text that tells -0.0 from 0.0 and keeps 19-digit integers, as Breakpilot's json reads them."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def source_rows(session) -> list[tuple[str, str]]:
    return [
        (c.metadata["source_id"], c.created_at.isoformat())
        for c in session.checkpoints.order_by("seq").only("metadata", "created_at")
    ]


def test_a_restart_that_reissues_ids_imports_every_checkpoint_in_the_managers_order_and_head(project):
    report = import_breakpilot(AFTER, project)

    assert (report.imported, report.skipped, report.errors) == (MANAGER_LEN, 0, [])
    session = AgentSession.objects.get(project=project, external_id="bp-session-47")
    assert session.checkpoints.count() == MANAGER_LEN
    assert source_rows(session) == [(entry["id"], entry["timestamp"]) for entry in AFTER_ENTRIES]
    assert (session.head.metadata["source_id"], session.head.created_at.isoformat()) == MANAGER_LATEST
    assert canonical(load_state(session.head.root)) == canonical(AFTER_ENTRIES[-1]["data"])
    assert (session.head.name, session.head.step) == (AFTER_ENTRIES[-1]["name"], 10)


def test_both_exports_of_the_run_import_once_and_the_older_file_counts_as_already_stored(project):
    report = import_breakpilot(RESTART, project)

    on_disk = len(json.loads(BEFORE.read_text())) + len(AFTER_ENTRIES)
    assert (report.imported, report.skipped, report.errors) == (MANAGER_LEN, on_disk - MANAGER_LEN, [])
    session = AgentSession.objects.get(project=project, external_id="bp-session-47")
    assert (session.head.metadata["source_id"], session.head.created_at.isoformat()) == MANAGER_LATEST
    again = import_breakpilot(RESTART, project)
    assert (again.imported, again.skipped, again.errors) == (0, on_disk, [])
    assert session.checkpoints.count() == MANAGER_LEN


def store_as_the_previous_version_did(path: Path, project) -> None:
    """What the importer before ids were known to repeat stored: keyed on the id alone, the first of each id."""
    session, _ = services.upsert_session(project, external_id="bp-session-47", agent="bp-session-47")
    seen: set[str] = set()
    inputs = []
    for entry in json.loads(path.read_text(encoding="utf-8")):
        if entry["id"] in seen:
            continue
        seen.add(entry["id"])
        inputs.append(
            services.CheckpointInput(
                state=entry["data"],
                name=entry["name"],
                kind="imported",
                step=int(entry["id"].rpartition(":")[2]),
                created_at=datetime.fromisoformat(entry["timestamp"]),
                idempotency_key=f"breakpilot:{entry['id']}",
                metadata={"source_format": "breakpilot", "source_id": entry["id"], **entry["metadata"]},
            )
        )
    services.ingest_checkpoints([(session, inputs)])


def test_a_file_imported_by_the_previous_version_adds_nothing_and_the_newer_run_still_comes_in(project):
    store_as_the_previous_version_did(BEFORE, project)

    again = import_breakpilot(BEFORE, project)
    assert (again.imported, again.skipped, again.errors) == (0, 35, [])
    after = import_breakpilot(AFTER, project)
    assert (after.imported, after.skipped, after.errors) == (10, 35, [])
    session = AgentSession.objects.get(project=project, external_id="bp-session-47")
    assert source_rows(session) == [(entry["id"], entry["timestamp"]) for entry in AFTER_ENTRIES]
    assert (session.head.metadata["source_id"], session.head.created_at.isoformat()) == MANAGER_LATEST


def test_a_differing_checkpoint_under_a_used_identity_is_an_error_never_skipped(project, tmp_path):
    first = {"id": "s:1", "name": "start", "timestamp": "2026-04-01T12:00:00+00:00", "data": {"v": 1}, "metadata": {}}
    (tmp_path / "a.json").write_text(entries(first))
    import_breakpilot(tmp_path / "a.json", project)
    edited = tmp_path / "edited"
    edited.mkdir()
    (edited / "a.json").write_text(entries({**first, "data": {"v": 2}}, {**first, "id": "s:2"}))

    report = import_breakpilot(edited, project)

    assert (report.imported, report.skipped) == (1, 0)
    assert report.errors == [
        {
            "path": f"{edited / 'a.json'} (entry 0)",
            "error": "not imported: s:1@2026-04-01T12:00:00+00:00 is already stored as checkpoint #1, "
            "with a different state",
        }
    ]
    assert load_state(Checkpoint.objects.get(seq=1).root) == {"v": 1}


def test_an_empty_export_is_reported(project, tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    report = import_breakpilot(empty, project)
    assert report.errors == [{"path": str(empty), "error": "an empty export: it holds no checkpoints"}]


def test_the_export_of_a_restarted_session_is_what_breakpilots_import_reads_back(project, other_project, tmp_path):
    """Breakpilot's import_checkpoints() appends Checkpoint.from_dict(entry) for each entry: equal entries in
    the same order give it len() 45 and the same get_latest() (checked with its code: restart/README.md)."""
    import_breakpilot(AFTER, project)
    session = AgentSession.objects.get(project=project, external_id="bp-session-47")

    written = breakpilot.export(session, tmp_path / "out")

    exported = json.loads(written[0].read_text(encoding="utf-8"))
    assert canonical(exported) == canonical(AFTER_ENTRIES)
    assert len(exported) == MANAGER_LEN and (exported[-1]["id"], exported[-1]["timestamp"]) == MANAGER_LATEST
    for entry in exported:
        assert datetime.fromisoformat(entry["timestamp"]).tzinfo is not None  # from_dict reads it back as is
    report = import_breakpilot(tmp_path / "out", project)
    assert (report.imported, report.skipped, report.errors) == (0, MANAGER_LEN, [])
    assert import_breakpilot(tmp_path / "out", other_project).imported == MANAGER_LEN
