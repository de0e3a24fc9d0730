from __future__ import annotations

import gzip
import json
import shutil
import tracemalloc
from pathlib import Path

import pytest
from django.apps import apps
from django.core.management import call_command

from checkpoints import services, store
from checkpoints.jobs.watching import scan_source
from checkpoints.models import AgentSession, AuditEvent, Checkpoint, DriftAlert, Phase, Project, WatchedSource
from checkpoints.services.file_import import BATCH, import_path
from checkpoints.tasks import scan_watched_sources
from tests.helpers import command

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
    return json.loads(command("import_checkpoints", *args, "--json")[0])


def test_auto_detection_imports_every_format_in_a_tree(db, tree):
    report = run_import(str(tree), "--project", "ops")
    assert set(report) == {"imported", "skipped", "errors", "sessions", "notes"}
    assert report["errors"] == []
    assert report["notes"] == [
        f"the files name project '{slug}' (projects/{slug}/): its sessions go there, not into 'ops'"
        for slug in ("founder-42", "project-123")  # haytham/generated/…, haytham/handwritten/…
    ]
    assert report["imported"] == Checkpoint.objects.count() > 100
    assert {"agent-3", "agent-7", "bp-session-42", "sess-a", "session-789"} <= set(report["sessions"])
    assert Phase.objects.exists()
    assert AuditEvent.objects.filter(action="import").count() == 1


def test_an_interrupted_import_is_audited_with_what_it_stored(db, tree):
    def stop(report):
        raise KeyboardInterrupt  # the worker killed after the first batch committed

    with pytest.raises(KeyboardInterrupt):
        import_path(tree, project="ops", actor=SYSTEM, progress=stop)
    stored = Checkpoint.objects.count()
    assert stored > 0
    assert AuditEvent.objects.get(action="import").details["imported"] == stored


def test_importing_the_same_tree_twice_adds_nothing(db, tree):
    first = run_import(str(tree))
    again = run_import(str(tree))
    assert again["imported"] == 0 and again["skipped"] == first["imported"] + first["skipped"]
    assert Checkpoint.objects.count() == first["imported"]


def test_a_dry_run_reports_and_stores_nothing(db, tree):
    report = run_import(str(tree), "--dry-run")
    assert report["imported"] > 100
    assert Checkpoint.objects.count() == 0 and AgentSession.objects.count() == 0


def rows_of_every_model() -> dict[str, int]:
    return {model._meta.label: model.objects.count() for model in apps.get_models()}


def test_a_dry_run_writes_nothing_at_all_not_even_its_project_or_an_audit_row(db, tree):
    before = rows_of_every_model()
    report = run_import(str(tree), "--dry-run", "--project", "ops")
    assert report["imported"] > 100 and report["errors"] == []
    assert rows_of_every_model() == before


def test_a_haytham_tree_goes_into_the_projects_it_names_and_says_so_without_creating_the_other(db, tree):
    out, _ = command("import_checkpoints", str(tree / "haytham" / "handwritten"), "--project", "ops")
    note = "the files name project 'project-123' (projects/project-123/): its sessions go there, not into 'ops'"
    assert f"note: {note}" in out.splitlines()
    assert list(Project.objects.values_list("slug", flat=True)) == ["project-123"]
    assert set(AgentSession.objects.values_list("project__slug", flat=True)) == {"project-123"}
    assert AuditEvent.objects.get(action="import").project.slug == "project-123"


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


def _kaizen_lines(path: Path) -> int:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as lines:
        return sum(1 for line in lines if line.strip())


# Checkpoints on disk, counted the way each system counts its own: Dream.OS lists `*.checkpoint` files;
# Breakpilot's len() counts the entries of an export; Ares has one file per step (`_latest.json` only
# points at one); Kaizen writes one AgentState per line; Haytham has one checkpoint.md per phase folder.
ON_DISK = {
    "dreamos": lambda path: len(list(path.rglob("*.checkpoint"))),
    "breakpilot": lambda path: sum(
        len(json.loads(file.read_text(encoding="utf-8")))
        for file in ([path] if path.is_file() else path.rglob("*.json"))
    ),
    "ares": lambda path: sum(1 for file in path.rglob("*.json") if not file.name.endswith("_latest.json")),
    "kaizen": lambda path: sum(_kaizen_lines(file) for file in path.rglob("*.jsonl*")),
    "haytham": lambda path: len(list(path.glob("projects/*/sessions/*/phase_*/checkpoint.md"))),
}
SOURCES = [
    ("dreamos", "dreamos/runtime/agent_comms/checkpoints"),
    ("dreamos", "dreamos/victor-os/runtime/agent_comms/checkpoints"),
    ("breakpilot", "breakpilot/bp-session-42.json"),
    ("breakpilot", "breakpilot/restart/exports"),
    ("ares", "ares"),
    ("kaizen", "kaizen"),
    ("haytham", "haytham/handwritten"),
    ("haytham", "haytham/generated/moment-1"),
    ("haytham", "haytham/generated/moment-2"),
]


@pytest.mark.parametrize(("fmt", "where"), SOURCES, ids=[where for _, where in SOURCES])
def test_every_checkpoint_on_disk_is_imported_skipped_or_an_error_and_a_second_import_skips_them_all(
    project, fmt, where
):
    path = FIXTURES / where
    on_disk = ON_DISK[fmt](path)

    first = import_path(path, fmt=fmt, project=project, actor=SYSTEM)
    again = import_path(path, fmt=fmt, project=project, actor=SYSTEM)

    assert first.errors == [] and first.imported + first.skipped == on_disk > 0
    assert (again.imported, again.skipped, again.errors) == (0, on_disk, [])
    assert Checkpoint.objects.count() == first.imported


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


def import_peak(folder: Path, *, sessions: int, steps: int) -> int:
    """The peak of Python memory while the importer reads a generated ares tree of `sessions` × `steps` files."""
    make_ares_tree(folder, sessions=sessions, steps=steps)
    tracemalloc.start()
    try:
        report = import_path(folder, fmt="ares", project=services.get_or_create_project(folder.name), actor=SYSTEM)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report.imported == sessions * steps and not report.errors
    assert (
        Checkpoint.objects.filter(session__project__slug=folder.name, session__external_id=f"s{sessions - 1}").count()
        == steps
    )
    return peak


def test_import_memory_stays_flat_as_the_tree_grows(db, tmp_path):
    """Records stream (one batch per session in memory): what a longer tree adds to the peak is its file
    list, about 0.6 kB a file here, never the records read.

    Measured at two sizes and compared, rather than once on 10,000 files (a minute): an importer that kept
    every record it read adds about 2 kB a file at any size (measured by keeping them in `_Importer.take`),
    which the old 64 MB bound let through even at 10,000 files."""
    import_peak(tmp_path / "warm", sessions=1, steps=5)  # one-off allocations (caches, compiled queries) first
    small = import_peak(tmp_path / "small", sessions=1, steps=BATCH)
    large = import_peak(tmp_path / "large", sessions=1, steps=3 * BATCH)
    per_file = (large - small) / (2 * BATCH)
    # 0.6 kB a file alone, 1.3 kB once in a full parallel run (what other tests left cached grows with the tree);
    # keeping every record read would add ~2 kB on top: 1.6 kB tells the two apart
    assert per_file < 1600, (
        f"{per_file:.0f} bytes a file more: {small / 1e6:.2f} MB at {BATCH}, {large / 1e6:.2f} MB at {3 * BATCH}"
    )


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


def test_a_changed_file_under_an_imported_name_is_an_error_saying_what_differs_never_skipped(project, tmp_path):
    folder = tmp_path / "checkpoints"
    shutil.copytree(FIXTURES / "dreamos" / "runtime" / "agent_comms" / "checkpoints", folder)
    import_path(folder, fmt="dreamos", project=project, actor=SYSTEM)
    changed = folder / "agent-7_20260302120100_recovery.checkpoint"
    doc = json.loads(changed.read_text(encoding="utf-8"))
    doc["state"]["memory"] = {"rewritten": True}
    changed.write_text(json.dumps(doc), encoding="utf-8")
    stored = Checkpoint.objects.get(idempotency_key=f"dreamos:{changed.name}")

    report = import_path(folder, fmt="dreamos", project=project, actor=SYSTEM)

    assert report.errors == [
        {
            "path": str(changed),
            "error": f"not imported: {changed.name} is already stored as checkpoint #{stored.seq}, "
            "with a different state",
        }
    ]
    assert (report.imported, report.skipped) == (0, ON_DISK["dreamos"](folder) - 1)
    assert store.load_state(bytes(Checkpoint.objects.get(pk=stored.pk).root))["memory"] != {"rewritten": True}


def test_importing_again_keeps_an_operators_restore_until_the_files_bring_a_newer_checkpoint(tmp_path, project):
    folder = tmp_path / "ares"
    shutil.copytree(FIXTURES / "ares", folder)
    import_path(folder, project=project, actor=SYSTEM)
    session = AgentSession.objects.get(external_id="sess-a")
    restored = services.restore_checkpoint(Checkpoint.objects.get(session=session, seq=3), actor=SYSTEM)

    report = import_path(folder, project=project, actor=SYSTEM)
    session.refresh_from_db()
    assert session.head_id == restored.pk and report.imported == 0
    assert report.errors == []
    assert f"session sess-a: kept #{restored.seq}, restored in the console, as the head" in report.notes[0]

    newer = json.loads((folder / "sess-a_8.json").read_text()) | {"id": "sess-a-9", "step": 9}
    (folder / "sess-a_9.json").write_text(json.dumps(newer))
    (folder / "sess-a_latest.json").write_text("sess-a_9.json")
    import_path(folder, project=project, actor=SYSTEM)
    session.refresh_from_db()
    assert session.head.step == 9  # the agent went on after the restore: the files lead again
