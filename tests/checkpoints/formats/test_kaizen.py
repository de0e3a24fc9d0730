from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from checkpoints import formats, services
from checkpoints.formats import kaizen
from checkpoints.formats.base import CheckpointRecord, Problem, SessionRecord
from checkpoints.importing import import_path
from checkpoints.models import AgentSession, Checkpoint
from checkpoints.store import load_state

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
FOLDER = FIXTURES / "kaizen"
MAIN = "project_agent_main"
FORK = "project_agent_experiment"
MAIN_IDS = [
    "ckpt_3879ec129704",
    "ckpt_84cea08d047f",
    "ckpt_56a4bce1168c",
    "ckpt_af1d8bba6855",
    "ckpt_96d06aa0288f",
    "ckpt_4c1f1215242c",
    "ckpt_71e41136bf92",
    "ckpt_d4ef1739d176",
    "ckpt_be6438e8b558",
    "ckpt_b862dc10b583",
]
FORK_IDS = ["ckpt_b7ba550a0f4a", "ckpt_3d9b7045ffa8", "ckpt_b1e9b967f789"]


def run(path: Path, project, **options):
    return import_path(path, project=project, actor=services.Actor.system("test"), **options)


def copy_of(source: Path, target: Path) -> Path:
    """A writable copy (the fixtures are read-only)."""
    target.mkdir(parents=True)
    for path in source.iterdir():
        (target / path.name).write_bytes(path.read_bytes())
    return target


def original(checkpoint_id: str) -> dict:
    path = FOLDER / f"{checkpoint_id}.jsonl"
    data = path.read_bytes() if path.exists() else gzip.decompress((FOLDER / f"{checkpoint_id}.jsonl.gz").read_bytes())
    return json.loads(data)


def line_of(path: Path) -> dict:
    data = gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes()
    return json.loads(data)


def session_named(project, external_id: str) -> AgentSession:
    return AgentSession.objects.select_related("forked_from__session").get(project=project, external_id=external_id)


def snapshot(project) -> dict:
    found = {}
    for session in AgentSession.objects.filter(project=project).order_by("external_id"):
        fork = session.forked_from
        found[session.external_id] = {
            "agent": session.agent,
            "status": session.status,
            "metadata": session.metadata,
            "forked_from": (fork.session.external_id, fork.metadata["source_id"]) if fork else None,
            "checkpoints": [
                (
                    c.idempotency_key,
                    c.name,
                    c.kind,
                    c.status,
                    c.step,
                    c.created_at,
                    {key: value for key, value in c.metadata.items() if key != "source_path"},
                    load_state(c.root),
                )
                for c in session.checkpoints.order_by("seq")
            ],
        }
    return found


def test_detects_jsonl_files_and_their_folder_but_not_other_formats():
    assert kaizen.detect(FOLDER)
    assert kaizen.detect(FOLDER / "ckpt_3d9b7045ffa8.jsonl")
    assert kaizen.detect(FOLDER / "ckpt_3879ec129704.jsonl.gz")
    assert not kaizen.detect(FIXTURES / "haytham")
    assert not kaizen.detect(FIXTURES)
    assert formats.detect(FOLDER) == "kaizen"


def test_each_agent_becomes_a_session_with_its_checkpoints_in_parent_order(project):
    report = run(FOLDER, project)

    assert report.errors == []
    assert report.imported == 13
    assert report.sessions == [MAIN, FORK]
    main = session_named(project, MAIN)
    checkpoints = list(main.checkpoints.order_by("seq"))
    assert [c.metadata["source_id"] for c in checkpoints] == MAIN_IDS
    assert [c.step for c in checkpoints] == list(range(5, 55, 5))
    assert {c.kind for c in checkpoints} == {"step"}
    assert checkpoints[0].created_at.isoformat() == "2026-05-05T12:00:00+00:00"
    assert [c.metadata["parent_checkpoint_id"] for c in checkpoints] == [None, *MAIN_IDS[:-1]]
    assert main.agent == MAIN
    assert main.head == checkpoints[-1]


def test_the_plain_jsonl_fork_is_a_session_forked_from_the_right_checkpoint(project):
    run(FOLDER, project)

    fork = session_named(project, FORK)
    assert fork.forked_from.session.external_id == MAIN
    assert fork.forked_from.metadata["source_id"] == "ckpt_4c1f1215242c"
    assert fork.forked_from.step == 30
    assert [c.metadata["source_id"] for c in fork.checkpoints.order_by("seq")] == FORK_IDS
    assert fork.metadata["forked_from_checkpoint_id"] == "ckpt_4c1f1215242c"


def test_the_source_session_is_read_before_its_fork():
    sessions = [record.external_id for record in kaizen.read(FOLDER) if isinstance(record, SessionRecord)]
    forks = [record.forked_from for record in kaizen.read(FOLDER) if isinstance(record, SessionRecord)]

    assert sessions == [MAIN, FORK]
    assert forks == [None, (MAIN, "ckpt_4c1f1215242c")]


def test_statuses_map_and_the_original_stays_in_metadata(project):
    run(FOLDER, project)

    main, fork = session_named(project, MAIN), session_named(project, FORK)
    assert [c.status for c in main.checkpoints.order_by("seq")] == ["in_progress"] * 9 + ["completed"]
    assert [c.status for c in fork.checkpoints.order_by("seq")] == ["in_progress", "in_progress", "halted"]
    assert fork.checkpoints.order_by("seq").last().metadata["kaizen_status"] == "interrupted"
    assert main.status == "completed"
    assert fork.status == "halted"


def test_state_is_the_agent_state_without_the_fields_that_have_columns(project):
    run(FOLDER, project)

    checkpoint = Checkpoint.objects.get(session__project=project, idempotency_key="kaizen:ckpt_4c1f1215242c")
    source = original("ckpt_4c1f1215242c")
    state = load_state(checkpoint.root)
    assert state == {key: value for key, value in source.items() if key not in kaizen.COLUMN_FIELDS}
    assert "conversation_history" in state and state["metadata"] == {"day": 2}
    assert checkpoint.metadata["checkpoint_id"] == "ckpt_4c1f1215242c"
    assert checkpoint.metadata["agent_id"] == MAIN
    assert checkpoint.metadata["timestamp"] == source["timestamp"]
    assert checkpoint.metadata["field_order"] == list(source)


def test_importing_twice_adds_nothing(project):
    first = run(FOLDER, project)
    before = snapshot(project)
    second = run(FOLDER, project)

    assert (first.imported, second.imported, second.skipped) == (13, 0, 13)
    assert snapshot(project) == before
    assert Checkpoint.objects.filter(session__project=project).count() == 13


def test_broken_files_are_reported_with_their_path_while_the_rest_imports(project, tmp_path):
    folder = copy_of(FOLDER, tmp_path / "kaizen")
    good = (FOLDER / "ckpt_3d9b7045ffa8.jsonl").read_bytes()
    (folder / "ckpt_truncated.jsonl").write_bytes(good[: len(good) // 2])
    (folder / "ckpt_latin1.jsonl").write_bytes(
        good.replace(b"ckpt_3d9b7045ffa8", b"ckpt_latin1").replace(b"alt", b"\xe9t\xe9")
    )
    (folder / "ckpt_corrupt.jsonl.gz").write_bytes(b"\x1f\x8bnot really gzip")
    cut = (FOLDER / "ckpt_3879ec129704.jsonl.gz").read_bytes()
    (folder / "ckpt_cut.jsonl.gz").write_bytes(cut[: len(cut) // 2])
    (folder / "notes.txt").write_text("not a checkpoint")
    (folder / "ckpt_empty.jsonl").write_bytes(b"")
    orphan = {**original("ckpt_3d9b7045ffa8"), "checkpoint_id": "ckpt_orphan", "parent_checkpoint_id": "ckpt_gone"}
    orphan["agent_id"] = "project_agent_orphan"
    (folder / "ckpt_orphan.jsonl").write_text(json.dumps(orphan, ensure_ascii=False) + "\n", encoding="utf-8")
    twin = {**orphan, "checkpoint_id": "ckpt_twin", "parent_checkpoint_id": "ckpt_orphan"}
    (folder / "ckpt_two.jsonl").write_text(json.dumps(twin) + "\n{not json\n", encoding="utf-8")

    report = run(folder, project)

    errors = {Path(error["path"]).name: error["error"] for error in report.errors}
    assert set(errors) == {
        "ckpt_truncated.jsonl",
        "ckpt_latin1.jsonl",
        "ckpt_corrupt.jsonl.gz",
        "ckpt_cut.jsonl.gz",
        "notes.txt",
        "ckpt_empty.jsonl",
        "ckpt_orphan.jsonl",
        "ckpt_two.jsonl",
    }
    assert "malformed JSON" in errors["ckpt_truncated.jsonl"]
    assert "UTF-8" in errors["ckpt_latin1.jsonl"]
    assert "gzip" in errors["ckpt_corrupt.jsonl.gz"]
    assert "gzip" in errors["ckpt_cut.jsonl.gz"]
    assert "ckpt_gone not found" in errors["ckpt_orphan.jsonl"]
    assert "line 2" in errors["ckpt_two.jsonl"]
    assert all(str(folder) in error["path"] for error in report.errors)
    assert report.imported == 13 + 2  # the orphan starts its own branch; the good line of ckpt_two.jsonl
    orphaned = session_named(project, "project_agent_orphan")
    assert [c.metadata["source_id"] for c in orphaned.checkpoints.order_by("seq")] == ["ckpt_orphan", "ckpt_twin"]
    assert orphaned.forked_from is None


def test_a_single_new_file_finds_its_parent_next_to_it(project):
    run(FOLDER / "ckpt_4c1f1215242c.jsonl.gz", project)
    report = run(FOLDER / "ckpt_b7ba550a0f4a.jsonl", project)

    assert report.errors == []
    assert session_named(project, FORK).forked_from.metadata["source_id"] == "ckpt_4c1f1215242c"


def test_a_cycle_of_parents_is_reported_and_still_imported(project, tmp_path):
    folder = tmp_path / "cycle"
    folder.mkdir()
    for me, parent in (("ckpt_a", "ckpt_b"), ("ckpt_b", "ckpt_a")):
        line = {"checkpoint_id": me, "agent_id": "loop", "step_number": 1, "parent_checkpoint_id": parent}
        (folder / f"{me}.jsonl").write_text(json.dumps(line) + "\n")

    records = list(kaizen.read(folder))

    assert [type(r).__name__ for r in records] == ["Problem", "Problem", "SessionRecord", *["CheckpointRecord"] * 2]
    assert all("cycle" in r.error for r in records if isinstance(r, Problem))


def test_export_rebuilds_each_line_and_reimports_identically_into_another_project(project, other_project, tmp_path):
    run(FOLDER, project)
    out = tmp_path / "out"
    written = []
    for external_id in (MAIN, FORK):
        written += kaizen.export(session_named(project, external_id), out)

    assert sorted(path.name for path in written) == sorted(f"{i}.jsonl" for i in MAIN_IDS + FORK_IDS)
    for path in written:
        line, source = line_of(path), original(path.name.removesuffix(".jsonl"))
        assert line == source
        assert list(line) == list(source)  # the field order too
    report = run(out, other_project)
    assert report.errors == []
    assert report.imported == 13
    assert snapshot(other_project) == snapshot(project)


def test_export_can_gzip(project, tmp_path):
    run(FOLDER, project)

    written = kaizen.export(session_named(project, FORK), tmp_path, compress=True)

    assert sorted(path.name for path in written) == sorted(f"{i}.jsonl.gz" for i in FORK_IDS)
    assert line_of(written[0]) == original(FORK_IDS[0])


def test_export_of_a_console_made_fork_links_to_its_source(project, tmp_path):
    run(FOLDER, project)
    target = Checkpoint.objects.get(session__project=project, idempotency_key="kaizen:ckpt_d4ef1739d176")
    forked = services.fork_session(target, actor=services.Actor.system("test"), external_id="agent_try")

    (path,) = kaizen.export(forked, tmp_path)

    line = line_of(path)
    assert line["parent_checkpoint_id"] == "ckpt_d4ef1739d176"
    assert line["agent_id"] == "agent_try"
    assert line["step_number"] == 40
    kaizen.export(session_named(project, MAIN), tmp_path)
    records = {r.external_id: r for r in kaizen.read(tmp_path) if isinstance(r, SessionRecord)}
    assert records["agent_try"].forked_from == (MAIN, "ckpt_d4ef1739d176")


def snapshot_folder(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in folder.iterdir()}


def test_write_back_adds_a_new_checkpoint_file_whose_parent_is_the_restored_one(project, tmp_path):
    folder = copy_of(FOLDER, tmp_path / "kaizen")
    run(folder, project)
    before = snapshot_folder(folder)
    target = Checkpoint.objects.get(session__project=project, idempotency_key="kaizen:ckpt_71e41136bf92")
    restored = services.restore_checkpoint(target, actor=services.Actor.system("test"), reason="rewind")

    (path,) = kaizen.write_back(restored.session, restored, folder)

    assert path.parent == folder and path.name.endswith(".jsonl.gz")  # like the restored checkpoint's file
    assert {name: data for name, data in snapshot_folder(folder).items() if name != path.name} == before
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]
    line, source = line_of(path), original("ckpt_71e41136bf92")
    assert line["checkpoint_id"] == path.name.removesuffix(".jsonl.gz") != "ckpt_71e41136bf92"
    assert line["parent_checkpoint_id"] == "ckpt_71e41136bf92"
    assert line["agent_id"] == MAIN and line["step_number"] == 35
    assert {k: v for k, v in line.items() if k not in ("checkpoint_id", "parent_checkpoint_id", "timestamp")} == {
        k: v for k, v in source.items() if k not in ("checkpoint_id", "parent_checkpoint_id", "timestamp")
    }
    assert list(line) == list(source)
    report = run(folder, project)  # the agent's folder, read again, gains exactly that checkpoint
    assert (report.imported, report.errors) == (1, [])


def test_write_back_never_overwrites_an_existing_file(project, tmp_path, monkeypatch):
    folder = copy_of(FOLDER, tmp_path / "kaizen")
    run(folder, project)
    target = Checkpoint.objects.get(session__project=project, idempotency_key="kaizen:ckpt_3d9b7045ffa8")
    taken = folder / "ckpt_000000000001.jsonl"
    taken.write_bytes(b"someone else's\n")
    draws = iter(["000000000001", "000000000002"])
    monkeypatch.setattr(kaizen.secrets, "token_hex", lambda n: next(draws))

    (path,) = kaizen.write_back(target.session, target, folder)

    assert path.name == "ckpt_000000000002.jsonl"
    assert taken.read_bytes() == b"someone else's\n"
    assert line_of(path)["parent_checkpoint_id"] == "ckpt_3d9b7045ffa8"


@pytest.mark.parametrize("name", ["ckpt_3d9b7045ffa8.jsonl", "ckpt_3879ec129704.jsonl.gz"])
def test_read_yields_the_session_before_its_checkpoints(name):
    records = list(kaizen.read(FOLDER / name))

    assert isinstance(records[0], SessionRecord)
    assert isinstance(records[1], CheckpointRecord)
