from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import pytest

from checkpoints import services
from checkpoints.models import AgentSession, Checkpoint
from checkpoints.sources import formats
from checkpoints.sources.formats import dreamos
from checkpoints.store import load_state
from tests.helpers import import_folder, writable_copy

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
ROOT = FIXTURES / "dreamos" / "runtime"  # a hand-made sample set (3 agents x 15 files)
FOLDER = ROOT / "agent_comms" / "checkpoints"
# Written by Dream.OS's own CheckpointManager (victor-os/README.md): 3 agents, 7 files each after its retention.
VICTOR_OS = FIXTURES / "dreamos" / "victor-os" / "runtime" / "agent_comms" / "checkpoints"
AGENTS = ["agent-3", "agent-7", "captain.1"]
WHEN = datetime(2026, 4, 1, 12, 0, tzinfo=UTC)


import_dreamos = partial(import_folder, fmt="dreamos")


def snapshot(project) -> dict:
    """Everything an import should reproduce, per session external id."""
    found = {}
    for session in AgentSession.objects.filter(project=project).order_by("external_id"):
        checkpoints = [
            (c.name, c.kind, c.status, c.status_reason, c.step, c.created_at, c.metadata, load_state(c.root))
            for c in session.checkpoints.order_by("seq")
        ]
        found[session.external_id] = {"agent": session.agent, "status": session.status, "checkpoints": checkpoints}
    return found


def test_detects_a_folder_of_checkpoint_files_and_the_files_but_not_other_formats():
    assert dreamos.detect(FOLDER)
    assert dreamos.detect(FOLDER / "agent-7_20260302100100_recovery.checkpoint")
    assert not dreamos.detect(ROOT)  # holds only a folder: the import walks into it
    assert not dreamos.detect(FIXTURES / "ares")
    assert not dreamos.detect(FIXTURES / "breakpilot" / "bp-session-42.json")
    assert formats.detect(FOLDER) == "dreamos"


def test_the_tree_imports_as_one_session_per_agent_with_kinds_names_and_times(project):
    report = import_dreamos(ROOT, project)
    assert report.errors == []
    assert (report.imported, report.skipped) == (45, 0)
    assert sorted(report.sessions) == AGENTS
    for agent in AGENTS:
        session = AgentSession.objects.get(project=project, external_id=agent)
        assert session.agent == agent
        checkpoints = list(session.checkpoints.order_by("seq"))
        assert len(checkpoints) == 15
        assert Counter(c.kind for c in checkpoints) == {"routine": 12, "pre_operation": 1, "recovery": 2}
        assert [c.name for c in checkpoints] == [c.kind for c in checkpoints]
        times = [c.created_at for c in checkpoints]
        assert times == sorted(times)  # oldest first, by the time in the file names
        assert times[0] == datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
        assert times[-1] == datetime(2026, 3, 2, 13, 30, tzinfo=UTC)
        assert all(c.status == "completed" and c.step is None for c in checkpoints)
        first = checkpoints[0]
        assert first.metadata == {
            "file": f"{agent}_20260302080000_routine.checkpoint",
            "version": "1.0",
            "source_format": "dreamos",
            "source_id": f"{agent}_20260302080000_routine.checkpoint",
        }
        assert session.head == checkpoints[-1]


def test_states_load_back_equal_to_the_state_objects_of_the_files(project):
    import_folder(FOLDER, project)  # the folder is recognised by its file names
    for checkpoint in Checkpoint.objects.all():
        source = json.loads((FOLDER / checkpoint.metadata["file"]).read_text(encoding="utf-8"))
        assert load_state(checkpoint.root) == source["state"]
        assert checkpoint.session.external_id == source["agent_id"]


def test_an_unknown_checkpoint_type_is_imported_with_the_type_kept(project, tmp_path):
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    doc = {"agent_id": "agent-9", "timestamp": "2026-03-02T14:00:00Z", "checkpoint_type": "nightly", "version": "2"}
    doc |= {"state": {"memory": {}}, "host": "box-1"}
    (folder / "agent-9_20260302140000_nightly.checkpoint").write_text(json.dumps(doc))
    report = import_dreamos(folder, project)
    assert report.imported == 1 and report.errors == []
    checkpoint = Checkpoint.objects.get()
    assert (checkpoint.kind, checkpoint.name) == ("imported", "nightly")
    assert checkpoint.metadata["checkpoint_type"] == "nightly"
    assert checkpoint.metadata["version"] == "2"
    assert checkpoint.metadata["source_extra"] == {"host": "box-1"}  # nothing is lost


def test_damaged_and_stray_files_are_reported_and_the_rest_imports(project, tmp_path):
    folder = writable_copy(FOLDER, tmp_path / "checkpoints")
    truncated = folder / "agent-7_20260302100100_recovery.checkpoint"
    truncated.write_bytes(truncated.read_bytes()[:300])  # cut inside a character, as a crash leaves it
    latin = folder / "agent-3_20260302110000_routine.checkpoint"
    latin.write_bytes(latin.read_bytes().replace("résumé".encode(), "résumé".encode("latin-1"), 1))
    wrong_shape = folder / "captain.1_20260302140000_routine.checkpoint"
    wrong_shape.write_text('[{"state": {}}]')
    no_state = folder / "captain.1_20260302140500_routine.checkpoint"
    no_state.write_text('{"agent_id": "captain.1"}')
    stray = folder / "notes.txt"
    stray.write_text("remember to rotate logs")
    (folder / ".DS_Store").write_bytes(b"\x00\x01")  # hidden files are neither read nor reported

    report = import_dreamos(folder, project)

    errors = {error["path"]: error["error"] for error in report.errors}
    assert set(errors) == {str(truncated), str(latin), str(wrong_shape), str(no_state), str(stray)}
    assert "truncated" in errors[str(truncated)]
    assert "not UTF-8" in errors[str(latin)]
    assert "wrong shape" in errors[str(wrong_shape)] and "wrong shape" in errors[str(no_state)]
    assert "not a Dream.OS checkpoint file" in errors[str(stray)]
    assert report.imported == 43
    assert sorted(report.sessions) == AGENTS


def test_importing_the_same_tree_twice_adds_nothing(project):
    import_dreamos(ROOT, project)
    again = import_dreamos(ROOT, project)
    assert (again.imported, again.skipped, again.errors) == (0, 45, [])
    assert Checkpoint.objects.count() == 45


def test_a_dry_run_reports_but_stores_nothing(project):
    report = import_dreamos(ROOT, project, dry_run=True)
    assert report.imported == 45
    assert Checkpoint.objects.count() == 0
    assert AgentSession.objects.count() == 0


def test_export_then_import_into_another_project_gives_the_same_sessions(project, other_project, tmp_path):
    import_dreamos(ROOT, project)
    out = tmp_path / "export"
    for session in AgentSession.objects.filter(project=project):
        written = dreamos.export(session, out)
        assert len(written) == 15
    assert sorted(path.name for path in out.iterdir()) == sorted(path.name for path in FOLDER.iterdir())
    for path in out.iterdir():  # the files are exactly Dream.OS' shape
        assert list(json.loads(path.read_text(encoding="utf-8"))) == [
            "agent_id",
            "timestamp",
            "checkpoint_type",
            "version",
            "state",
        ]
    report = import_dreamos(out, other_project)
    assert report.errors == []
    assert snapshot(other_project) == snapshot(project)


def test_a_session_made_elsewhere_exports_with_its_own_fields_kept(
    project, other_project, make_session, make_checkpoint, tmp_path
):
    session = make_session("run/1", agent="agent-7")
    make_checkpoint(session, {"step": 1}, name="boot", kind="step", step=1, created_at=WHEN, metadata={"x": 1})
    make_checkpoint(session, [1, 2], name="boot", kind="step", status="failed", status_reason="OOM", created_at=WHEN)
    make_checkpoint(session, None, kind="manual", created_at=WHEN)
    written = dreamos.export(session, tmp_path)
    assert [path.name for path in written] == [
        "run_1_20260401120000_step.checkpoint",
        "run_1_20260401120001_step.checkpoint",  # same second: the name moves on, the JSON keeps the time
        "run_1_20260401120002_manual.checkpoint",  # and sorts after the ones before it
    ]
    import_dreamos(tmp_path, other_project)
    again = AgentSession.objects.get(project=other_project)
    assert again.external_id == "run/1"
    rows = [
        (c.name, c.kind, c.status, c.status_reason, c.step, c.created_at, load_state(c.root))
        for c in again.checkpoints.order_by("seq")
    ]
    assert rows == [
        ("boot", "step", "completed", "", 1, WHEN, {"step": 1}),
        ("boot", "step", "failed", "OOM", None, WHEN, [1, 2]),
        ("", "manual", "completed", "", None, WHEN, {}),
    ]
    assert again.checkpoints.order_by("seq").first().metadata["x"] == 1


def test_write_back_adds_a_recovery_checkpoint_file_and_never_overwrites(project, tmp_path):
    import_dreamos(FOLDER, project)
    session = AgentSession.objects.get(project=project, external_id="agent-7")
    target = session.checkpoints.get(seq=3)
    restored = services.restore_checkpoint(target, actor=services.Actor.system("test"), reason="drift")
    folder = writable_copy(FOLDER, tmp_path / "checkpoints")
    before = {path.name: path.read_bytes() for path in folder.iterdir()}

    written = dreamos.write_back(session, restored, folder, now=WHEN)

    assert [path.name for path in written] == ["agent-7_20260401120000_recovery.checkpoint"]
    doc = json.loads(written[0].read_text(encoding="utf-8"))
    assert doc == {
        "agent_id": "agent-7",
        "timestamp": "2026-04-01T12:00:00+00:00",
        "checkpoint_type": "recovery",
        "version": "1.0",
        "state": load_state(target.root),
    }
    after = {path.name: path.read_bytes() for path in folder.iterdir()}
    assert set(after) == set(before) | {written[0].name}  # one new file, no temporary left behind
    assert all(after[name] == data for name, data in before.items())
    with pytest.raises(FileExistsError):
        dreamos.write_back(session, restored, folder, now=WHEN)
    assert written[0].read_bytes() == after[written[0].name]
    report = import_dreamos(folder, project)  # the agent's folder now holds the recovery checkpoint
    assert (report.imported, report.skipped) == (1, 45)


def test_a_restore_of_a_tree_imported_from_its_root_is_written_beside_the_agents_files(
    project, tmp_path, django_capture_on_commit_callbacks
):
    root = writable_copy(ROOT, tmp_path / "dreamos" / "runtime").parent
    folder = root / "runtime" / "agent_comms" / "checkpoints"
    before = {path.name for path in folder.iterdir()}
    import_dreamos(root, project, write_back=True)  # the session remembers the root it was imported from
    session = AgentSession.objects.get(project=project, external_id="agent-3")
    target = session.checkpoints.get(seq=5)
    with django_capture_on_commit_callbacks(execute=True):
        services.restore_checkpoint(target, actor=services.Actor.system("test"))
    added = {path.name for path in folder.iterdir()} - before
    assert len(added) == 1 and added.pop().startswith("agent-3_")
    assert [path.name for path in root.iterdir()] == ["runtime"]  # nothing written where no agent looks
    written = next(path for path in folder.iterdir() if path.name not in before)
    assert json.loads(written.read_text(encoding="utf-8"))["state"] == load_state(target.root)


def test_write_back_needs_an_existing_folder(project, tmp_path):
    import_dreamos(FOLDER, project)
    session = AgentSession.objects.get(project=project, external_id="agent-3")
    with pytest.raises(FileNotFoundError):
        dreamos.write_back(session, session.head, tmp_path / "gone")


# ---- files written by Dream.OS's own CheckpointManager (victor-os/README.md) ----------------------------

# What its own functions said of the run: len(_list_checkpoints()) and get_latest_checkpoint(type) per agent.
MANAGER = {
    "agent-2": (
        7,
        "agent-2_20260304120009_routine",
        "agent-2_20260304104007_pre_operation",
        "agent-2_20260304120011_recovery",
    ),
    "agent-5": (
        7,
        "agent-5_20260304120020_routine",
        "agent-5_20260304100518_pre_operation",
        "agent-5_20260304120022_recovery",
    ),
    "agent-8": (
        7,
        "agent-8_20260304120032_routine",
        "agent-8_20260304111030_pre_operation",
        "agent-8_20260304120034_recovery",
    ),
}
TYPES = ("routine", "pre_operation", "recovery")


def canonical(value) -> str:
    """JSON text that tells -0.0 from 0.0 and keeps 1e300 and 19-digit integers, as json.load reads them."""
    return json.dumps(value, sort_keys=True)


def test_files_written_by_dream_os_import_with_the_counts_heads_and_states_it_reports(project):
    report = import_dreamos(VICTOR_OS, project)

    assert (report.imported, report.skipped, report.errors) == (21, 0, [])
    for agent, (count, *latest) in MANAGER.items():
        session = AgentSession.objects.get(project=project, external_id=agent)
        checkpoints = list(session.checkpoints.order_by("seq"))
        assert len(checkpoints) == count
        for checkpoint_type, name in zip(TYPES, latest, strict=True):
            newest = [c for c in checkpoints if c.kind == checkpoint_type][-1]
            assert newest.metadata["file"] == f"{name}.checkpoint"
        assert session.head.metadata["file"] == max(f"{name}.checkpoint" for name in latest)  # its sorted listing
        for checkpoint in checkpoints:
            doc = json.loads((VICTOR_OS / checkpoint.metadata["file"]).read_text(encoding="utf-8"))
            assert canonical(load_state(checkpoint.root)) == canonical(doc["state"])
            assert checkpoint.created_at.isoformat() == doc["timestamp"]
    ledger = load_state(AgentSession.objects.get(external_id="agent-2").head.root)["memory"]["ledger"]
    assert str(ledger["balance_delta"]) == "-0.0" and ledger["ceiling"] == 1e300
    assert ledger["trace_id"] == 9223372036854775807


def test_our_export_is_the_tree_dream_os_reads_back_with_the_same_listing_latest_and_states(project, tmp_path):
    """Dream.OS lists `<agent>*.checkpoint` files in runtime/agent_comms/checkpoints, takes the latest of a
    type by sorted name and restores with json.load: same names and equal JSON are what it reads (its own
    functions ran on this export: victor-os/README.md)."""
    import_dreamos(VICTOR_OS, project)
    out = tmp_path / "runtime" / "agent_comms" / "checkpoints"
    for agent in MANAGER:
        dreamos.export(AgentSession.objects.get(project=project, external_id=agent), out)

    assert sorted(path.name for path in out.iterdir()) == sorted(path.name for path in VICTOR_OS.iterdir())
    for path in out.iterdir():
        ours, theirs = (json.loads(p.read_text(encoding="utf-8")) for p in (path, VICTOR_OS / path.name))
        assert canonical(ours) == canonical(theirs)
