from __future__ import annotations

import json
import shutil
import tracemalloc
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

from checkpoints import services, store
from checkpoints.importing import import_path
from checkpoints.models import AgentSession, AuditEvent, Checkpoint, DriftAlert, Phase, WatchedSource
from checkpoints.tasks import scan_watched_sources
from checkpoints.watching import scan_source

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SYSTEM = services.Actor.system("test")


@pytest.fixture
def tree(tmp_path) -> Path:
    """All five sample sets in one tree, as an operator would point the importer at them.

    Without the fixtures' READMEs: they say where the files came from and are no checkpoints.
    """
    target = tmp_path / "checkpoints"
    shutil.copytree(FIXTURES, target, ignore=shutil.ignore_patterns("README.md"))
    return target


def run_import(*args: str) -> dict:
    out = StringIO()
    call_command("import_checkpoints", *args, "--json", stdout=out)
    return json.loads(out.getvalue())


def test_auto_detection_imports_every_format_in_a_tree(db, tree):
    report = run_import(str(tree), "--project", "ops")
    assert set(report) == {"imported", "skipped", "errors", "sessions"}
    assert report["errors"] == []
    assert report["imported"] == Checkpoint.objects.count() > 100
    assert {"agent-3", "agent-7", "bp-session-42", "sess-a", "session-789"} <= set(report["sessions"])
    assert Phase.objects.exists()
    assert AuditEvent.objects.filter(action="import").count() == 1


def test_importing_the_same_tree_twice_adds_nothing(db, tree):
    first = run_import(str(tree))
    again = run_import(str(tree))
    assert again["imported"] == 0 and again["skipped"] == first["imported"]
    assert Checkpoint.objects.count() == first["imported"]


def test_a_dry_run_reports_and_stores_nothing(db, tree):
    report = run_import(str(tree), "--dry-run")
    assert report["imported"] > 100
    assert Checkpoint.objects.count() == 0 and AgentSession.objects.count() == 0


def test_bad_files_are_reported_and_the_rest_imports(db, tree):
    ares = tree / "ares"
    (ares / "sess-a_3.json").write_text((ares / "sess-a_3.json").read_text()[:40])
    (ares / "notes.txt").write_text("not a checkpoint")
    (
        tree / "dreamos" / "runtime" / "agent_comms" / "checkpoints" / "agent-3_20260302080000_routine.checkpoint"
    ).write_bytes(b'{"agent_id": "agent-3", "state": "\xff\xfe"}')
    report = run_import(str(tree))
    failed = {Path(error["path"]).name for error in report["errors"]}
    assert {"sess-a_3.json", "notes.txt", "agent-3_20260302080000_routine.checkpoint"} <= failed
    assert Checkpoint.objects.filter(session__external_id="sess-a").count() == 8  # 9 files, 1 broken
    assert Checkpoint.objects.filter(session__external_id="agent-7").count() == 15


def test_the_command_refuses_a_missing_path(db):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="does not exist"):
        call_command("import_checkpoints", "/nonexistent/folder")


def make_ares_tree(folder: Path, sessions: int, steps: int) -> None:
    folder.mkdir(parents=True)
    for s in range(sessions):
        for step in range(steps):
            document = {
                "id": f"s{s}-{step}",
                "agent_name": "bulk",
                "session_id": f"s{s}",
                "step": step,
                "messages": [{"role": "assistant", "content": f"step {step} of session {s}"}],
                "tool_calls": [],
                "partial_results": {},
                "timestamp": 1_770_000_000 + step,
                "status": "Completed" if step == steps - 1 else "InProgress",
            }
            (folder / f"s{s}_{step}.json").write_text(json.dumps(document))


def test_a_ten_thousand_file_tree_imports_with_flat_memory(db, tmp_path):
    make_ares_tree(tmp_path / "bulk", sessions=20, steps=500)
    tracemalloc.start()
    report = import_path(tmp_path / "bulk", fmt="ares", project=services.get_or_create_project("bulk"), actor=SYSTEM)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert report.imported == 10_000 and not report.errors
    assert peak < 64 * 1024 * 1024, f"peak {peak / 1e6:.1f} MB"
    assert Checkpoint.objects.filter(session__external_id="s7").count() == 500


def test_a_restore_is_written_back_to_the_source_folder(db, tree, django_capture_on_commit_callbacks):
    ares = tree / "ares"
    import_path(ares, fmt="ares", project=services.get_or_create_project("p"), actor=SYSTEM, write_back=True)
    session = AgentSession.objects.get(external_id="sess-a")
    assert (session.source_format, session.write_back) == ("ares", True)
    target = Checkpoint.objects.get(session=session, step=2)
    before = set(ares.iterdir())
    with django_capture_on_commit_callbacks(execute=True):
        services.restore_checkpoint(target, actor=SYSTEM, reason="back to step 2")
    new_files = set(ares.iterdir()) - before
    assert [path.name for path in new_files] == ["sess-a_9.json"]
    written = json.loads((ares / "sess-a_9.json").read_text())
    assert written["messages"] == store.load_state(target.root)["messages"]
    assert (ares / "sess-a_latest.json").read_text().strip().strip('"') == "sess-a_9.json"
    assert AuditEvent.objects.filter(action="write_back", session=session).exists()


def test_without_write_back_a_restore_leaves_the_folder_alone(db, tree, django_capture_on_commit_callbacks):
    ares = tree / "ares"
    import_path(ares, fmt="ares", project=services.get_or_create_project("p"), actor=SYSTEM)
    before = sorted(ares.iterdir())
    with django_capture_on_commit_callbacks(execute=True):
        services.restore_checkpoint(Checkpoint.objects.filter(session__external_id="sess-a").first(), actor=SYSTEM)
    assert sorted(ares.iterdir()) == before


def test_watched_folder_imports_only_when_something_changed(db, tree):
    source = WatchedSource.objects.create(
        project=services.get_or_create_project("watch"), path=str(tree / "ares"), format="ares"
    )
    first = scan_source(source)
    assert first.imported == Checkpoint.objects.count() > 0
    source.refresh_from_db()
    assert scan_source(source) is None  # nothing changed: not even read
    shutil.copy(tree / "ares" / "sess-c_4.json", tree / "ares" / "sess-c_5.json")
    document = json.loads((tree / "ares" / "sess-c_5.json").read_text())
    document.update(id="sess-c-5", step=5)
    (tree / "ares" / "sess-c_5.json").write_text(json.dumps(document))
    source.refresh_from_db()
    assert scan_source(source).imported == 1


def test_a_vanished_watched_folder_raises_an_alert_and_clears_it_when_back(db, tree):
    folder = tree / "ares"
    source = WatchedSource.objects.create(
        project=services.get_or_create_project("watch"), path=str(folder), format="ares"
    )
    scan_watched_sources()
    folder.rename(tree / "ares-moved")
    assert scan_watched_sources() == {"scanned": 1, "imported": 0, "sources_done": 1, "errors": [], "error_count": 0}
    alerts = DriftAlert.objects.filter(kind="source_missing", state="open")
    assert alerts.count() == AgentSession.objects.filter(project=source.project).count() == 3
    source.refresh_from_db()
    assert "is gone" in source.last_error
    scan_watched_sources()
    assert alerts.count() == 3  # one alert per session, not one per scan
    (tree / "ares-moved").rename(folder)
    scan_watched_sources()
    assert DriftAlert.objects.filter(kind="source_missing", state="open").count() == 0
    audited = AuditEvent.objects.filter(actor="system:watch", details__kind="source_missing")
    assert sorted(audited.values_list("action", flat=True)) == ["alert_opened"] * 3 + ["alert_resolved"] * 3
    assert audited.filter(action="alert_resolved", reason__contains="is back").count() == 3
