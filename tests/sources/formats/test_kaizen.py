from __future__ import annotations

import asyncio
import gzip
import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import time_machine

from checkpoints import services
from checkpoints.models import AgentSession, Checkpoint
from checkpoints.sources import formats
from checkpoints.sources.formats import kaizen
from checkpoints.sources.formats.base import CheckpointRecord, Problem, SessionRecord
from checkpoints.store import load_state
from tests.helpers import import_folder, writable_copy

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
    report = import_folder(FOLDER, project)

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
    import_folder(FOLDER, project)

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
    import_folder(FOLDER, project)

    main, fork = session_named(project, MAIN), session_named(project, FORK)
    assert [c.status for c in main.checkpoints.order_by("seq")] == ["in_progress"] * 9 + ["completed"]
    assert [c.status for c in fork.checkpoints.order_by("seq")] == ["in_progress", "in_progress", "halted"]
    assert fork.checkpoints.order_by("seq").last().metadata["kaizen_status"] == "interrupted"
    assert main.status == "completed"
    assert fork.status == "halted"


def test_state_is_the_agent_state_without_the_fields_that_have_columns(project):
    import_folder(FOLDER, project)

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
    first = import_folder(FOLDER, project)
    before = snapshot(project)
    second = import_folder(FOLDER, project)

    assert (first.imported, second.imported, second.skipped) == (13, 0, 13)
    assert snapshot(project) == before
    assert Checkpoint.objects.filter(session__project=project).count() == 13


def test_broken_files_are_reported_with_their_path_while_the_rest_imports(project, tmp_path):
    folder = writable_copy(FOLDER, tmp_path / "kaizen")
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

    report = import_folder(folder, project)

    errors = {Path(error["path"]).name: error["error"] for error in report.errors}
    assert set(errors) == {
        "ckpt_truncated.jsonl",
        "ckpt_latin1.jsonl",
        "ckpt_corrupt.jsonl.gz",
        "ckpt_cut.jsonl.gz",
        "notes.txt",
        "ckpt_empty.jsonl",
        "ckpt_two.jsonl",
    }  # not ckpt_orphan.jsonl: Kaizen's retention deletes the oldest parents all the time
    assert "malformed JSON" in errors["ckpt_truncated.jsonl"]
    assert "UTF-8" in errors["ckpt_latin1.jsonl"]
    assert "gzip" in errors["ckpt_corrupt.jsonl.gz"]
    assert "gzip" in errors["ckpt_cut.jsonl.gz"]
    assert "line 2" in errors["ckpt_two.jsonl"]
    assert all(str(folder) in error["path"] for error in report.errors)
    assert report.imported == 13 + 2  # the orphan starts its own branch; the good line of ckpt_two.jsonl
    orphaned = session_named(project, "project_agent_orphan")
    orphan, twin = orphaned.checkpoints.order_by("seq")
    assert [c.metadata["source_id"] for c in (orphan, twin)] == ["ckpt_orphan", "ckpt_twin"]
    assert (orphan.parent, orphan.metadata["parent_checkpoint_id"], twin.parent) == (None, "ckpt_gone", orphan)
    assert orphaned.forked_from is None


def test_a_single_new_file_finds_its_parent_next_to_it(project):
    import_folder(FOLDER / "ckpt_4c1f1215242c.jsonl.gz", project)
    report = import_folder(FOLDER / "ckpt_b7ba550a0f4a.jsonl", project)

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
    import_folder(FOLDER, project)
    out = tmp_path / "out"
    written = []
    for external_id in (MAIN, FORK):
        written += kaizen.export(session_named(project, external_id), out)

    assert sorted(path.name for path in written) == sorted(path.name for path in FOLDER.iterdir())  # gzip kept
    for path in written:
        line, source = line_of(path), original(path.name.split(".")[0])
        assert line == source
        assert list(line) == list(source)  # the field order too
    report = import_folder(out, other_project)
    assert report.errors == []
    assert report.imported == 13
    assert snapshot(other_project) == snapshot(project)


def test_export_can_gzip(project, tmp_path):
    import_folder(FOLDER, project)

    written = kaizen.export(session_named(project, FORK), tmp_path, compress=True)

    assert sorted(path.name for path in written) == sorted(f"{i}.jsonl.gz" for i in FORK_IDS)
    assert line_of(written[0]) == original(FORK_IDS[0])


def test_export_of_a_console_made_fork_links_to_its_source(project, tmp_path):
    import_folder(FOLDER, project)
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
    folder = writable_copy(FOLDER, tmp_path / "kaizen")
    import_folder(folder, project)
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
    report = import_folder(folder, project)  # the agent's folder, read again, gains exactly that checkpoint
    assert (report.imported, report.errors) == (1, [])


def test_write_back_never_overwrites_an_existing_file(project, tmp_path, monkeypatch):
    folder = writable_copy(FOLDER, tmp_path / "kaizen")
    import_folder(folder, project)
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


# ---- files written by Kaizen's own StateManager (kailash-kaizen; tests/fixtures/kaizen_runs/README.md) --------

RUNS = FIXTURES / "kaizen_runs" / "checkpoints"


def runs_lines() -> dict[str, dict]:
    return {path.name.split(".")[0]: line_of(path) for path in RUNS.iterdir()}


def by_source_id(session: AgentSession) -> dict[str, Checkpoint]:
    return {c.metadata["source_id"]: c for c in session.checkpoints.select_related("parent")}


def newest(lines: dict[str, dict], agent: str) -> str:
    """What Kaizen's resume_from_latest() picks: the newest timestamp of the agent."""
    return max((line["timestamp"], key) for key, line in lines.items() if line["agent_id"] == agent)[1]


def test_a_reused_agent_id_is_two_roots_and_the_head_is_what_kaizen_resumes_from(project):
    """support_agent ran twice; the second run's step counter restarted at 0 and its step 29 failed."""
    report = import_folder(RUNS, project)

    assert report.errors == []
    session = session_named(project, "support_agent")
    checkpoints = list(session.checkpoints.order_by("seq"))
    lines = runs_lines()
    assert [c.created_at for c in checkpoints] == sorted(c.created_at for c in checkpoints)  # Kaizen's order
    roots = [c for c in checkpoints if c.parent_id is None]
    assert [(c.step, c.seq, c.starts_branch) for c in roots] == [(10, 1, False), (0, 7, True)]
    assert [c.step for c in checkpoints] == [10, 20, 30, 40, 50, 59, 0, 10, 20, 29]
    assert all(c.parent.metadata["source_id"] == c.metadata["parent_checkpoint_id"] for c in checkpoints if c.parent)
    assert session.head.metadata["source_id"] == newest(lines, "support_agent")
    assert (session.head.step, session.head.status, session.status) == (29, "failed", "failed")


def test_forks_and_a_run_resumed_from_an_older_checkpoint_are_branches_of_the_agents_session(project):
    """coder_agent: interrupted at step 40, resumed from step 25 with fork_from_checkpoint; a fork at 15 left."""
    import_folder(RUNS, project)

    session = session_named(project, "coder_agent")
    found = by_source_id(session)
    lines = runs_lines()
    for key, checkpoint in found.items():
        assert (checkpoint.parent.metadata["source_id"] if checkpoint.parent else None) == lines[key][
            "parent_checkpoint_id"
        ]
    forks = {c.step: sorted(child.step for child in c.children.all()) for c in found.values() if c.children.count() > 1}
    assert forks == {15: [15, 20], 25: [25, 30]}  # each fork_from_checkpoint copy beside the run that went on
    starts = {seq for seq, _, _ in Checkpoint.objects.for_session(session).branch_points()}
    assert starts == {c.seq for c in found.values() if c.parent and c.parent.seq != c.seq - 1}
    assert len(starts) == 4  # the mainline after each copy, the abandoned fork, the resumed run
    interrupted = next(c for c in found.values() if c.status == "halted")
    assert interrupted.step == 40 and not interrupted.children.exists()  # the run resumed from step 25 instead
    assert session.head.metadata["source_id"] == newest(lines, "coder_agent")
    assert (session.head.step, session.head.status, session.status) == (45, "completed", "completed")
    assert session.forked_from is None


def test_a_parent_deleted_by_kaizens_retention_leaves_a_root_without_an_error(project):
    report = import_folder(RUNS, project)

    session = session_named(project, "research_agent")
    first, *rest = session.checkpoints.order_by("seq")
    assert report.errors == [] and len(rest) == 7  # retention_count=8 deleted the first five of thirteen
    assert (first.parent, first.step) == (None, 30)
    assert first.metadata["parent_checkpoint_id"] not in runs_lines()
    assert [c.parent_id for c in rest] == [first.pk, *(c.pk for c in rest[:-1])]


def test_reimporting_kaizens_files_adds_nothing(project):
    first = import_folder(RUNS, project)
    second = import_folder(RUNS, project)

    assert (first.imported, second.imported, second.skipped, second.errors) == (35, 0, 35, [])


def test_export_keeps_each_checkpoints_compression_and_size(project, tmp_path):
    import_folder(RUNS, project)
    out = tmp_path / "out"
    for agent in ("research_agent", "support_agent", "coder_agent"):
        kaizen.export(session_named(project, agent), out)

    assert sorted(path.name for path in out.iterdir()) == sorted(path.name for path in RUNS.iterdir())
    assert all(path.read_bytes()[:2] == b"\x1f\x8b" for path in out.glob("*.gz"))
    original_size = sum(path.stat().st_size for path in RUNS.iterdir())
    assert sum(path.stat().st_size for path in out.iterdir()) <= original_size * 1.05
    assert {path.name.split(".")[0]: line_of(path) for path in out.iterdir()} == runs_lines()


def test_a_parentless_checkpoint_continues_the_one_before_unless_its_step_counter_went_back(project, tmp_path):
    """Kaizen's own agent loop (BaseAutonomousAgent._capture_state) never sets parent_checkpoint_id."""
    for key, step, minute in (("ckpt_a1", 5, 1), ("ckpt_a2", 10, 2), ("ckpt_a3", 10, 3), ("ckpt_b1", 5, 4)):
        line = {"checkpoint_id": key, "agent_id": "loop", "timestamp": f"2026-05-04T08:{minute:02}:00+00:00"}
        line |= {"step_number": step, "parent_checkpoint_id": None, "status": "running"}
        (tmp_path / f"{key}.jsonl").write_text(json.dumps(line) + "\n")

    import_folder(tmp_path, project)

    found = by_source_id(session_named(project, "loop"))
    parents = {key: c.parent.metadata["source_id"] if c.parent else None for key, c in found.items()}
    assert parents == {"ckpt_a1": None, "ckpt_a2": "ckpt_a1", "ckpt_a3": "ckpt_a2", "ckpt_b1": None}
    assert found["ckpt_b1"].starts_branch


def test_a_refused_state_keeps_its_children_in_the_tree_under_its_parent(project, tmp_path):
    too_deep: list = []
    for _ in range(300):
        too_deep = [too_deep]
    for key, parent, step in (("ckpt_a", None, 1), ("ckpt_b", "ckpt_a", 2), ("ckpt_c", "ckpt_b", 3)):
        line = {"checkpoint_id": key, "agent_id": "deep", "timestamp": f"2026-05-04T08:0{step}:00+00:00"}
        line |= {"step_number": step, "parent_checkpoint_id": parent, "memory_contents": {"n": step}}
        if key == "ckpt_b":
            line["memory_contents"] = {"nested": too_deep}
        (tmp_path / f"{key}.jsonl").write_text(json.dumps(line) + "\n")

    report = import_folder(tmp_path, project)

    assert report.imported == 2
    assert [(error["path"], "invalid state" in error["error"]) for error in report.errors] == [
        (str(tmp_path / "ckpt_b.jsonl"), True)
    ]
    found = by_source_id(session_named(project, "deep"))
    assert found["ckpt_c"].parent == found["ckpt_a"]


# ---- round trips through Kaizen's own code --------------------------------------------------------------------


@pytest.fixture
def kaizen_state():
    """Kaizen's state package (kailash-kaizen, in the test extras); CI installs it, so there it must run."""
    try:
        import kaizen.core.autonomy.state as state
    except ImportError as exc:
        if os.environ.get("REQUIRE_SERVICES") == "1":
            pytest.fail(f"kailash-kaizen is not importable ({exc}): pip install -e '.[test]'", pytrace=False)
        pytest.skip(f"needs kailash-kaizen (pip install -e '.[test]'): {exc}")
    return state


def kaizen_view(state, folder: Path) -> dict[str, dict]:
    """Per agent, what Kaizen's StateManager reports: the count, what resume_from_latest() returns, every state."""
    manager = state.StateManager(storage=state.FilesystemStorage(base_dir=folder))
    view = {}
    for agent in sorted({c.agent_id for c in asyncio.run(manager.list_checkpoints())}):
        listed = asyncio.run(manager.list_checkpoints(agent))
        view[agent] = {
            "count": len(listed),
            "latest": vars(asyncio.run(manager.resume_from_latest(agent))),
            "states": {c.checkpoint_id: vars(asyncio.run(manager.load_checkpoint(c.checkpoint_id))) for c in listed},
        }
    return view


def export_all(project, out: Path) -> Path:
    for session in AgentSession.objects.filter(project=project):
        kaizen.export(session, out)
    return out


def drive(state, folder: Path) -> None:
    """Realistic runs through Kaizen's own StateManager: retention, gzip and plain files, a reused agent id,
    an interrupted run resumed from an older checkpoint, an abandoned fork."""
    gzipped = state.StateManager(storage=state.FilesystemStorage(base_dir=folder, compress=True), retention_count=6)
    plain = state.StateManager(storage=state.FilesystemStorage(base_dir=folder))
    coder = state.StateManager(storage=state.FilesystemStorage(base_dir=folder, compress=True))

    def save(manager, agent: str, step: int, parent: str | None, status: str = "running", note: str = "") -> str:
        traveller.shift(timedelta(minutes=7))
        history = [{"role": "assistant", "content": f"{agent} step {n} {note} ✓"} for n in range(step + 1)]
        memory = {"note": note, "big": 1234567890123456789, "tiny": -0.0, "huge": 1e300, "nul": "a\x00b"}
        agent_state = state.AgentState(
            agent_id=agent, step_number=step, conversation_history=history, memory_contents=memory,
            budget_spent_usd=step * 0.01, parent_checkpoint_id=parent, status=status,
        )  # fmt: skip
        return asyncio.run(manager.save_checkpoint(agent_state))

    with time_machine.travel(datetime.now(UTC) - timedelta(days=3), tick=True) as traveller:
        last = None
        for step in range(0, 50, 5):  # 10 saves, retention keeps 6
            last = save(gzipped, "research_agent", step, last, "completed" if step == 45 else "running")
        for run_number, steps, status in ((1, 60, "completed"), (2, 30, "failed")):
            last = None
            for step in range(0, steps, 10):
                last = save(plain, "support_agent", step, last, note=f"run {run_number}")
            save(plain, "support_agent", steps - 1, last, status, note=f"run {run_number}")
        ids = {}
        last = None
        for step in range(0, 45, 5):
            ids[step] = last = save(coder, "coder_agent", step, last)
        save(coder, "coder_agent", 40, last, "interrupted")
        side = asyncio.run(coder.fork_from_checkpoint(ids[15]))
        save(coder, "coder_agent", 20, side.checkpoint_id, note="abandoned")
        last = asyncio.run(coder.fork_from_checkpoint(ids[25])).checkpoint_id
        for step in (30, 35):
            last = save(coder, "coder_agent", step, last, note="resumed")


@pytest.mark.parametrize("source", ["fixture", "live"])
def test_kaizen_reads_our_export_with_the_same_count_head_and_states(kaizen_state, project, tmp_path, source):
    folder = RUNS if source == "fixture" else tmp_path / "kaizen"
    if source == "live":
        drive(kaizen_state, folder)
    before = kaizen_view(kaizen_state, folder)

    report = import_folder(folder, project)
    after = kaizen_view(kaizen_state, export_all(project, tmp_path / "exported"))

    assert report.errors == []
    assert after == before
    assert set(before) == {"research_agent", "support_agent", "coder_agent"}
    for agent, seen in before.items():
        session = session_named(project, agent)
        assert session.checkpoints.count() == seen["count"]
        assert session.head.metadata["source_id"] == seen["latest"]["checkpoint_id"]
        assert session.status == {"running": "active", "interrupted": "halted"}.get(
            seen["latest"]["status"], seen["latest"]["status"]
        )
    support = session_named(project, "support_agent")
    assert support.checkpoints.filter(parent=None).count() == 2


def test_kaizen_resumes_from_our_write_back(kaizen_state, project, tmp_path):
    folder = tmp_path / "kaizen"
    drive(kaizen_state, folder)
    import_folder(folder, project)
    target = Checkpoint.objects.get(
        session__project=project, session__external_id="coder_agent", step=15, parent__step=10
    )
    restored = services.restore_checkpoint(target, actor=services.Actor.system("test"), reason="before the flaky fix")

    (path,) = kaizen.write_back(restored.session, restored, folder)

    manager = kaizen_state.StateManager(storage=kaizen_state.FilesystemStorage(base_dir=folder))
    resumed = vars(asyncio.run(manager.resume_from_latest("coder_agent")))
    written = vars(asyncio.run(manager.load_checkpoint(target.metadata["source_id"])))
    assert resumed["checkpoint_id"] == path.name.removesuffix(".jsonl.gz")
    assert resumed["parent_checkpoint_id"] == target.metadata["source_id"]
    unchanged = {"checkpoint_id", "parent_checkpoint_id", "timestamp"}
    assert {k: v for k, v in resumed.items() if k not in unchanged} == {
        k: v for k, v in written.items() if k not in unchanged
    }


def test_migrating_gives_checkpoints_imported_before_their_kaizen_parents(migrated_back, project):
    """Until 0014 an import chained each agent's checkpoints in step order: two runs interleaved, forks flattened."""
    old, forward = migrated_back("0013_tree_parents")
    OldSession, OldCheckpoint = old.get_model("checkpoints", "AgentSession"), old.get_model("checkpoints", "Checkpoint")
    session = OldSession.objects.create(project_id=project.pk, external_id="support_agent", agent="support_agent")
    made: list = []

    def add(key: str | None, parent: str | None, step: int, minute: int, kind: str = "step") -> None:
        metadata = {"source_format": "kaizen", "source_id": key, "parent_checkpoint_id": parent} if key else {}
        made.append(
            OldCheckpoint.objects.create(
                session=session,
                seq=len(made) + 1,
                parent=made[-1] if made else None,
                kind=kind,
                step=step,
                created_at=datetime(2026, 5, 4, 8, minute, tzinfo=UTC),
                metadata=metadata,
                root=b"r",
                state_hash=b"h",
            )
        )

    # the old order: parents first, then by step: run 2's step 0 came first
    add("r2-0", None, 0, 40)
    add("r1-10", None, 10, 10)
    add("r2-10", "r2-0", 10, 50)
    add("r1-20", "r1-10", 20, 20)
    add("r1-20-copy", "r1-20", 20, 20)  # fork_from_checkpoint: same step and time
    add("r1-25", "r1-20-copy", 25, 25)
    add(None, None, 25, 55, "restore")  # made in the console: left as it is
    add("r2-29", "r2-10", 29, 58)
    add("r1-59", "r1-20", 59, 30)
    forward()

    rows = Checkpoint.objects.filter(session_id=session.pk).select_related("parent")
    tree = {c.seq: (c.parent.seq if c.parent else None, c.starts_branch) for c in rows}
    assert tree == {
        1: (None, False),  # run 2's first, a root
        2: (None, True),  # run 1's first: its own root
        3: (1, True),
        4: (2, True),
        5: (4, False),
        6: (5, False),
        7: (6, False),  # the console's restore keeps its parent
        8: (3, True),
        9: (4, True),
    }
