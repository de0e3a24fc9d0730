from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

from checkpoints import services
from checkpoints.models import AgentOutput, AgentSession, Checkpoint, Phase, PhaseFeedback, Project
from checkpoints.services.phases import add_agent_output, report_phase
from checkpoints.sources import formats
from checkpoints.sources.formats import haytham
from checkpoints.sources.formats.base import PhaseRecord, SessionRecord
from checkpoints.store import load_state
from tests.helpers import import_folder, writable_copy

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
ROOT = FIXTURES / "haytham" / "handwritten"
SESSIONS = ROOT / "projects" / "project-123" / "sessions"
MVP = "session-456"
FULL = "session-789"
GENERATED = FIXTURES / "haytham" / "generated"  # written by Haytham's own CheckpointManager (see its README)
MOMENTS = [GENERATED / "moment-1", GENERATED / "moment-2"]
FOUNDER = "founder-42"
RETRIED = "session-001"  # mvp: phase 3 rejected at moment 1, redone and approved by moment 2; phase 6 failed
STARTED = "session-002"  # full: phase 1 only started at moment 1 (no agents yet); completed by moment 2


# ---- Haytham's own loaders, as rules ---------------------------------------------------------------
# arslan70/haytham @ 0be4019dbb24a7108188fdbf23288c59c5772e5a, haytham/checkpoint/checkpoint_manager.py

HAYTHAM_PHASE_DIRS = haytham.PHASE_DIRS  # CheckpointManager.PHASE_DIRS, as the format module copies it


def haytham_agent_outputs(session_dir: Path) -> dict[int, dict[str, str]]:
    """`CheckpointManager.get_phase_outputs(phase_nums=[1..7])`: in each PHASE_DIRS folder, every `*.md`
    (`Path.glob`) but checkpoint.md and user_feedback.md is an agent's output, named by its stem (kept
    whole here; Haytham then keeps the part after "## Output")."""
    outputs = {}
    for number, name in HAYTHAM_PHASE_DIRS.items():
        found = {
            path.stem: path.read_text()
            for path in (session_dir / name).glob("*.md")
            if path.name not in ["checkpoint.md", "user_feedback.md"]
        }
        if found:
            outputs[number] = found
    return outputs


def haytham_approved_phases(session_dir: Path) -> list[int]:
    """`CheckpointManager.get_approved_phases`: a PHASE_DIRS folder whose user_feedback.md has "- Approved: true"."""
    return [
        number
        for number, name in HAYTHAM_PHASE_DIRS.items()
        if (session_dir / name / "user_feedback.md").exists()
        and "- Approved: true" in (session_dir / name / "user_feedback.md").read_text()
    ]


def haytham_session(session_dir: Path) -> dict:
    """`CheckpointManager.load_session` (`_parse_session_manifest`): the current phase from "## Current
    Phase", the completed phases from the table rows whose Status cell is "completed"; and the
    "- Can Resume:" line `_update_session_manifest` keeps."""
    lines = (session_dir / "session_manifest.md").read_text().split("\n")
    rows = [[part.strip() for part in line.split("|")] for line in lines if line.startswith("|")]
    current = lines[lines.index("## Current Phase") + 1]
    can_resume = next(line for line in lines if line.startswith("- Can Resume:"))
    return {
        "current_phase": int(current.split(":", 1)[1].strip()),
        "completed_phases": [int(row[1]) for row in rows if row[1].isdigit() and row[3] == "completed"],
        "can_resume": can_resume.split(":", 1)[1].strip() == "true",
    }


def files_haytham_reads(session_dir: Path) -> dict[str, bytes]:
    """What those loaders open: session_manifest.md and the `*.md` of each PHASE_DIRS folder."""
    paths = [session_dir / "session_manifest.md"]
    paths += [path for name in HAYTHAM_PHASE_DIRS.values() for path in (session_dir / name).glob("*.md")]
    return {str(path.relative_to(session_dir)): path.read_bytes() for path in paths if path.is_file()}


def founder_session(tree: Path, session_id: str) -> Path:
    return tree / "projects" / FOUNDER / "sessions" / session_id


def watched_over_time(tmp_path: Path, project, moments: list[Path] = MOMENTS) -> Path:
    """One folder Haytham keeps writing to (it only adds and overwrites files), imported at each moment."""
    folder = tmp_path / "watched"
    for moment in moments:
        for path in sorted(moment.rglob("*")):
            target = folder / path.relative_to(moment)
            if path.is_dir():
                target.mkdir(parents=True, exist_ok=True)
            else:
                target.write_bytes(path.read_bytes())
        assert import_folder(folder, project, write_back=True).errors == []
    return folder


def session_named(external_id: str, slug: str = "project-123") -> AgentSession:
    return AgentSession.objects.get(project__slug=slug, external_id=external_id)


def phases_of(session: AgentSession) -> dict[int, Phase]:
    return {phase.number: phase for phase in session.phases.all()}


def snapshot(slug: str) -> dict:
    found = {}
    for session in AgentSession.objects.filter(project__slug=slug).order_by("external_id"):
        phases = []
        for phase in session.phases.order_by("number"):
            outputs = sorted(  # attempts share an agent name: compared as a set, not in database order
                [
                    (
                        o.agent_name,
                        o.status,
                        o.content,
                        o.model,
                        o.tokens_in,
                        o.tokens_out,
                        o.tools_used,
                        o.duration,
                        o.error,
                    )
                    for o in phase.outputs.all()
                ],
                key=repr,
            )
            feedback = sorted(
                [
                    (f.action, f.reviewed, f.approved, f.comments, f.requested_changes, f.retry_count, f.reviewer_name)
                    + (f.created_at,)
                    for f in phase.feedback.all()
                ],
                key=repr,
            )
            fields = ("number", "name", "status", "started_at", "completed_at", "duration", "retry_count")
            fields += ("tokens_in", "tokens_out", "cost", "errors", "metadata")
            phases.append(({name: getattr(phase, name) for name in fields}, outputs, feedback))
        checkpoints = [
            (c.idempotency_key, c.name, c.kind, c.status, c.status_reason, c.phase, c.created_at)
            + ({key: value for key, value in c.metadata.items() if key != "source_path"}, load_state(c.root))
            for c in session.checkpoints.order_by("seq")
        ]
        found[session.external_id] = {
            "agent": session.agent,
            "status": session.status,
            "execution_mode": session.execution_mode,
            "metadata": session.metadata,
            "phases": phases,
            "checkpoints": checkpoints,
        }
    return found


def test_detects_the_tree_at_every_level_but_not_other_formats():
    for path in (
        ROOT,
        ROOT / "projects",
        SESSIONS.parent,
        SESSIONS,
        SESSIONS / MVP,
        SESSIONS / MVP / "session_manifest.md",
    ):
        assert haytham.detect(path), path
    assert not haytham.detect(FIXTURES / "kaizen")
    assert not haytham.detect(SESSIONS / MVP / "phase_1_concept" / "checkpoint.md")
    assert formats.detect(ROOT) == "haytham"


def test_mvp_and_full_sessions_import_into_their_project(project):
    report = import_folder(ROOT, project)

    assert report.errors == []
    assert report.sessions == [MVP, FULL]
    assert report.imported == 3 + 5  # a checkpoint per phase checkpoint.md
    assert not AgentSession.objects.filter(project=project).exists()  # the tree names its project
    mvp, full = session_named(MVP), session_named(FULL)
    assert (mvp.execution_mode, full.execution_mode) == ("mvp", "full")
    assert (mvp.status, full.status) == ("active", "active")
    assert mvp.agent == "haytham"
    assert mvp.metadata["user_id"] == "user-789"
    assert mvp.metadata["workflow_type"] == "idea_validation"
    assert mvp.metadata["created"] == "2026-06-01T10:00:00Z"
    assert mvp.metadata["last_updated"] == "2026-06-01T11:00:00Z"
    assert mvp.metadata["status"] == "in_progress"
    assert mvp.metadata["metrics"] == {"total_duration": 200.0, "total_tokens": 60000, "total_cost": "0.15"}
    assert full.metadata["current_phase"] == {
        "phase": 5,
        "name": "Business Planning",
        "status": "in_progress",
        "can_resume": True,
    }


def test_phases_with_their_status_times_durations_tokens_and_cost(project):
    import_folder(ROOT, project)

    mvp, full = phases_of(session_named(MVP)), phases_of(session_named(FULL))
    assert {n: p.status for n, p in mvp.items()} == {
        1: "completed",
        2: "completed",
        3: "in_progress",
        6: "pending",  # in the manifest's table only
        7: "pending",
    }
    assert {n: p.status for n, p in full.items()} == {
        **{n: "completed" for n in (1, 2, 3, 4)},
        5: "in_progress",
        6: "pending",
        7: "pending",
    }
    concept = full[1]
    assert concept.name == "Concept Expansion"
    assert concept.started_at == datetime(2026, 6, 1, 10, 1, tzinfo=UTC)
    assert concept.completed_at == datetime(2026, 6, 1, 10, 1, 50, tzinfo=UTC)
    assert concept.duration == 50.0
    assert (concept.tokens_in, concept.tokens_out) == (12000, 3000)
    assert concept.cost == Decimal("0.0375")
    assert concept.metadata["dir"] == "phase_1_concept"
    assert concept.metadata["total_tokens"] == 15000
    assert full[2].retry_count == 1
    assert full[5].completed_at is None
    assert (mvp[6].name, mvp[7].name) == ("Validation", "Final Synthesis")
    assert mvp[6].started_at is None and mvp[6].duration is None


def test_agent_outputs_keep_the_whole_markdown_and_their_details(project):
    import_folder(ROOT, project)

    market = phases_of(session_named(FULL))[2]
    assert sorted(o.agent_name for o in market.outputs.all()) == ["competitor_analysis", "market_intelligence"]
    output = market.outputs.get(agent_name="market_intelligence")
    source = (SESSIONS / FULL / "phase_2_market_research" / "market_intelligence.md").read_text(encoding="utf-8")
    assert output.content == source
    assert output.model == "anthropic.claude-3-sonnet-20240229-v1:0"
    assert (output.tokens_in, output.tokens_out) == (6000, 1500)
    assert output.tools_used == ["file_write"]
    assert output.duration == 25.0
    assert output.status == "completed"


def test_user_feedback_with_action_approval_comments_and_requested_changes(project):
    import_folder(ROOT, project)

    full = phases_of(session_named(FULL))
    niche = full[3].feedback.get()
    assert niche.action == "retry_with_changes"
    assert (niche.reviewed, niche.approved) == (True, False)
    assert niche.comments == "Too shallow; expand the niche list."
    assert niche.requested_changes == ["add 3 more niches", "cite sources"]
    assert niche.retry_count == 1
    assert niche.created_at == datetime(2026, 6, 1, 11, tzinfo=UTC)
    assert niche.reviewer_name == ""  # Haytham's feedback names no reviewer (the session's user is in metadata)
    concept = full[1].feedback.get()
    assert (concept.action, concept.approved, concept.comments) == ("approved", True, "Looks great!")
    assert concept.requested_changes == []  # "No changes requested"
    assert not full[5].feedback.exists()  # still in progress: no review yet


def test_each_phase_checkpoint_is_on_the_timeline(project):
    import_folder(ROOT, project)

    checkpoints = list(session_named(MVP).checkpoints.order_by("seq"))
    assert [c.name for c in checkpoints] == ["phase_1_concept", "phase_2_market_research", "phase_3_niche_selection"]
    assert [c.phase for c in checkpoints] == [1, 2, 3]
    assert {c.kind for c in checkpoints} == {"phase"}
    assert [c.status for c in checkpoints] == ["completed", "completed", "in_progress"]
    assert checkpoints[0].created_at == datetime(2026, 6, 1, 10, 1, 50, tzinfo=UTC)
    state = load_state(checkpoints[1].root)
    assert state["phase_dir"] == "phase_2_market_research"
    assert state["agent_outputs"] == ["market_intelligence", "competitor_analysis"]
    assert state["sections"]["Metadata"]["Retry Count"] == "1"
    assert state["sections"]["Metrics"]["Cost"] == "$0.0375"
    assert state["sections"]["Agents in Phase"] == {
        "market_intelligence": "completed",
        "competitor_analysis": "completed",
    }


def test_importing_twice_adds_nothing(project):
    import_folder(ROOT, project)
    before = snapshot("project-123")
    report = import_folder(ROOT, project)

    assert (report.imported, report.skipped, report.errors) == (0, 8, [])
    assert snapshot("project-123") == before
    assert PhaseFeedback.objects.count() == 6
    assert AgentOutput.objects.count() == 5 + 9


def test_broken_files_are_reported_with_their_path_while_the_rest_imports(project, tmp_path):
    root = writable_copy(ROOT, tmp_path / "haytham")
    full = root / "projects" / "project-123" / "sessions" / FULL
    (full / "phase_1_concept" / "concept_expansion.md").write_bytes(b"# Agent Output: x\n\xff\xfe broken")
    (full / "phase_2_market_research" / "checkpoint.md").write_text("# Phase Checkpoint\n\njust prose, no lists\n")
    (full / "phase_3_niche_selection" / "user_feedback.md").write_text(
        "# User Feedback\n\n## Review Status\n- Reviewed\n"
    )
    (full / "phase_4_product_strategy" / "competitor_analysis.md").unlink()
    (full / "phase_4_product_strategy" / "notes.txt").write_text("scratch")
    (full / "phase_4_product_strategy" / "draft.md").write_text("some notes, not an agent output\n")
    (full / "todo.txt").write_text("stray")
    (root / "projects" / "project-123" / "sessions" / "README.md").write_text("stray")
    broken = root / "projects" / "project-123" / "sessions" / "session-000"
    (broken / "phase_1_concept").mkdir(parents=True)
    (broken / "phase_1_concept" / "checkpoint.md").write_text(
        (SESSIONS / MVP / "phase_1_concept" / "checkpoint.md").read_text(encoding="utf-8")
    )
    (broken / "session_manifest.md").write_text("# Session Manifest\n\nno metadata here\n")

    report = import_folder(root, project)

    errors = {
        str(Path(e["path"]).relative_to(root / "projects" / "project-123" / "sessions")): e for e in report.errors
    }
    assert set(errors) == {
        f"{FULL}/phase_1_concept/concept_expansion.md",
        f"{FULL}/phase_2_market_research/checkpoint.md",
        f"{FULL}/phase_3_niche_selection/user_feedback.md",
        f"{FULL}/phase_4_product_strategy/competitor_analysis.md",
        f"{FULL}/phase_4_product_strategy/notes.txt",
        f"{FULL}/phase_4_product_strategy/draft.md",
        f"{FULL}/todo.txt",
        "README.md",
        "session-000/session_manifest.md",
        "session-000/phase_1_concept/concept_expansion.md",  # listed in its checkpoint.md, missing
    }
    assert "UTF-8" in errors[f"{FULL}/phase_1_concept/concept_expansion.md"]["error"]
    assert "malformed checkpoint.md" in errors[f"{FULL}/phase_2_market_research/checkpoint.md"]["error"]
    assert "malformed user_feedback.md" in errors[f"{FULL}/phase_3_niche_selection/user_feedback.md"]["error"]
    assert "missing" in errors[f"{FULL}/phase_4_product_strategy/competitor_analysis.md"]["error"]
    assert report.sessions == ["session-000", MVP, FULL]
    assert report.imported == 1 + 3 + 4  # phase 2's checkpoint.md of the full session is skipped
    phases = phases_of(session_named(FULL))
    assert phases[2].status == "completed"  # from the manifest's table
    assert not phases[1].outputs.exists()
    assert not phases[3].feedback.exists()
    assert [o.agent_name for o in phases[4].outputs.all()] == ["market_intelligence"]
    assert phases[4].feedback.get().action == "approved"
    assert phases_of(session_named("session-000"))[1].status == "completed"


def test_a_failed_phase_keeps_its_errors_and_the_agent_error(project, tmp_path):
    root = writable_copy(ROOT, tmp_path / "haytham")
    planning = root / "projects" / "project-123" / "sessions" / FULL / "phase_5_business_planning"
    text = (planning / "checkpoint.md").read_text(encoding="utf-8").replace("- Status: in_progress", "- Status: failed")
    (planning / "checkpoint.md").write_text(text + "\n## Errors\n- market_intelligence: timed out\n- budget exceeded\n")
    output = (
        (planning / "market_intelligence.md")
        .read_text(encoding="utf-8")
        .replace("- Status: completed", "- Status: failed")
    )
    (planning / "market_intelligence.md").write_text(
        output + "\n## Error Details\n- Error Type: TimeoutError\n- Error Message: model timed out\n"
    )

    report = import_folder(root, project)

    assert report.errors == []
    phase = phases_of(session_named(FULL))[5]
    assert phase.status == "failed"
    assert phase.errors == ["market_intelligence: timed out", "budget exceeded"]
    checkpoint = session_named(FULL).checkpoints.get(phase=5)
    assert checkpoint.status == "failed"
    assert checkpoint.status_reason == "market_intelligence: timed out; budget exceeded"
    failed = phase.outputs.get(agent_name="market_intelligence")
    assert (failed.status, failed.error) == ("failed", "model timed out")


def test_a_session_folder_without_a_manifest_imports_its_phases(project, tmp_path):
    root = writable_copy(ROOT, tmp_path / "haytham")
    session = root / "projects" / "project-123" / "sessions" / MVP
    (session / "session_manifest.md").unlink()

    report = import_folder(root, project)

    assert [Path(e["path"]).name for e in report.errors] == ["session_manifest.md"]
    assert sorted(phases_of(session_named(MVP))) == [1, 2, 3]  # 6 and 7 were only in the manifest


def test_export_writes_the_layout_back_and_reimports_identically_into_another_project(project, tmp_path):
    import_folder(ROOT, project)
    out = tmp_path / "out"
    written = []
    for external_id in (MVP, FULL):
        written += haytham.export(session_named(external_id), out)

    exported = out / "projects" / "project-123" / "sessions"
    assert sorted(str(p.relative_to(exported)) for p in written) == sorted(
        str(p.relative_to(SESSIONS)) for p in SESSIONS.rglob("*") if p.is_file()
    )
    for path in SESSIONS.rglob("*.md"):  # every phase file comes back byte for byte
        if path.name != "session_manifest.md":
            assert (exported / path.relative_to(SESSIONS)).read_bytes() == path.read_bytes(), path
    (out / "projects" / "project-123").rename(out / "projects" / "copy")
    report = import_folder(out, project)
    assert report.errors == []
    assert report.imported == 8
    assert Project.objects.filter(slug="copy").exists()
    assert snapshot("copy") == snapshot("project-123")


def test_export_keeps_earlier_versions_in_the_history_folder_and_reimports_them(project, tmp_path):
    import_folder(ROOT, project)
    session = session_named(FULL)
    niche = phases_of(session)[3]
    PhaseFeedback.objects.create(
        phase=niche, action="approved", approved=True, comments="Better.", created_at=datetime(2026, 6, 2, tzinfo=UTC)
    )
    before = snapshot("project-123")

    haytham.export(session_named(FULL), tmp_path)

    session_dir = tmp_path / "projects" / "project-123" / "sessions" / FULL
    folder = session_dir / "phase_3_niche_selection"
    assert sorted(p.name for p in folder.iterdir()) == [
        "checkpoint.md",
        "competitor_analysis.md",
        "market_intelligence.md",
        "user_feedback.md",
    ]
    assert "- Action: approved" in (folder / "user_feedback.md").read_text()
    kept = session_dir / haytham.HISTORY / "phase_3_niche_selection" / "user_feedback.20260601T110000Z.md"
    assert "retry_with_changes" in kept.read_text()
    (tmp_path / "projects" / "project-123").rename(tmp_path / "projects" / "copy")
    assert import_folder(tmp_path, project).errors == []
    copy = phases_of(session_named(FULL, "copy"))[3]
    assert [f.action for f in copy.feedback.all()] == ["approved", "retry_with_changes"]
    assert snapshot("project-123") == before


def restored(session_id: str, phase_dir: str, slug: str = "project-123", version: int = -1) -> Checkpoint:
    """A restore of the phase's `version`-th checkpoint (in seq order)."""
    target = list(session_named(session_id, slug).checkpoints.filter(name=phase_dir).order_by("seq"))[version]
    return services.restore_checkpoint(target, actor=services.Actor.system("test"), reason="redo")


def test_write_back_puts_the_restored_phase_back_keeping_what_it_replaces(project, tmp_path):
    root = writable_copy(ROOT, tmp_path / "haytham")
    session_dir = root / "projects" / "project-123" / "sessions" / FULL
    import_folder(root, project)
    niche = session_dir / "phase_3_niche_selection"
    original = (niche / "checkpoint.md").read_text()
    retried = original.replace("- Status: completed", "- Status: in_progress").replace(
        "- Retry Count: 0", "- Retry Count: 1"
    )
    (niche / "checkpoint.md").write_text(retried)  # Haytham went on retrying phase 3
    old_manifest = (session_dir / "session_manifest.md").read_bytes()
    later = {p: p.read_bytes() for n in (4, 5) for p in session_dir.glob(f"phase_{n}_*/*.md")}
    checkpoint = restored(FULL, "phase_3_niche_selection")

    written = haytham.write_back(session_named(FULL), checkpoint, root)

    history = session_dir / haytham.HISTORY
    assert (niche / "checkpoint.md").read_text() == original
    assert [p.read_text() for p in (history / niche.name).glob("checkpoint.*.md")] == [retried]
    assert [p.read_bytes() for p in history.glob("session_manifest.*.md")] == [old_manifest]
    assert not [p for n in (4, 5) for p in session_dir.glob(f"phase_{n}_*/*")]  # phases 4 and 5 are to run again
    assert {p.read_bytes() for p in history.glob("phase_[45]_*/*.md")} == set(later.values())
    assert {p for p in written if p.is_relative_to(history)} == set(history.rglob("*.md"))
    manifest = (session_dir / "session_manifest.md").read_text()
    assert "## Current Phase\n- Phase: 3\n- Name: Niche Selection\n- Status: completed\n- Can Resume: false" in manifest
    assert "| 3 | Niche Selection | completed | 2026-06-01T10:03:00Z | 2026-06-01T10:03:50Z | 50s |" in manifest
    assert "| 4 | Product Strategy | pending | - | - | - |\n| 5 | Business Planning | pending | - | - | - |" in manifest
    assert not [p for p in session_dir.rglob("*.tmp")]  # no temporary files left behind
    report = import_folder(root, project)  # the folder, read again: history is history, not strays
    assert (report.imported, report.errors) == (1, [])  # the retry Haytham wrote since, kept in history
    assert {n: p.status for n, p in phases_of(session_named(FULL)).items()}[4] == "pending"


def test_write_back_leaves_files_that_already_match_alone(project, tmp_path):
    root = writable_copy(ROOT, tmp_path / "haytham")
    session_dir = root / "projects" / "project-123" / "sessions" / MVP
    import_folder(root, project)
    checkpoint = restored(MVP, "phase_2_market_research")
    before = {p: p.read_bytes() for p in session_dir.rglob("*") if p.is_file()}

    written = haytham.write_back(session_named(MVP), checkpoint, session_dir)

    assert [p.name for p in written if p.parent.name == "phase_2_market_research"] == []
    changed = {p for p in before if not p.exists() or p.read_bytes() != before[p]}
    third = {p for p in before if p.parent.name == "phase_3_niche_selection"}  # to run again: moved to history
    assert changed == {session_dir / "session_manifest.md", *third}


def test_write_back_never_overwrites_a_kept_file(project, tmp_path, monkeypatch):
    root = writable_copy(ROOT, tmp_path / "haytham")
    session_dir = root / "projects" / "project-123" / "sessions" / FULL
    niche = session_dir / "phase_3_niche_selection"
    import_folder(root, project)
    (niche / "checkpoint.md").write_text("# Phase Checkpoint: changed on disk\n")
    now = datetime(2026, 7, 1, 12, tzinfo=UTC)

    class Frozen(datetime):
        @classmethod
        def now(cls, tz=None):
            return now

    monkeypatch.setattr(haytham, "datetime", Frozen)
    history = session_dir / haytham.HISTORY / niche.name
    history.mkdir(parents=True)
    (history / "checkpoint.20260701T120000Z.md").write_text("someone else's")
    checkpoint = restored(FULL, "phase_3_niche_selection")

    written = haytham.write_back(session_named(FULL), checkpoint, root)

    assert history / "checkpoint.20260701T120000Z-1.md" in written
    assert (history / "checkpoint.20260701T120000Z.md").read_text() == "someone else's"
    assert (history / "checkpoint.20260701T120000Z-1.md").read_text() == "# Phase Checkpoint: changed on disk\n"


def test_write_back_moves_files_older_write_backs_left_in_phase_folders_to_history(project, tmp_path):
    root = writable_copy(ROOT, tmp_path / "haytham")
    session_dir = root / "projects" / "project-123" / "sessions" / MVP
    concept = session_dir / "phase_1_concept"
    (concept / "user_feedback.20260601T100000Z.md").write_bytes((concept / "user_feedback.md").read_bytes())
    import_folder(root, project)

    haytham.write_back(session_named(MVP), restored(MVP, "phase_3_niche_selection"), root)

    assert haytham_agent_outputs(session_dir)[1] == {
        "concept_expansion": (concept / "concept_expansion.md").read_text()
    }
    assert (session_dir / haytham.HISTORY / concept.name / "user_feedback.20260601T100000Z.md").is_file()


def test_a_session_the_agent_reported_exports_durations_as_haytham_writes_them(project, tmp_path):
    session, _ = services.upsert_session(project, external_id="idea-9", agent="haytham", execution_mode="mvp")
    started = datetime(2026, 6, 1, 10, tzinfo=UTC)
    phase, _ = report_phase(
        session, 1, actor=services.Actor.system("test"), name="Concept Expansion", status="completed",
        started_at=started, completed_at=started + timedelta(seconds=92.9), duration=92.9,
    )  # fmt: skip
    add_agent_output(
        phase, actor=services.Actor.system("test"), agent_name="concept_expansion", content="Idea.", duration=92.9
    )

    haytham.export(session, tmp_path)

    session_dir = tmp_path / "projects" / "acme" / "sessions" / "idea-9"
    manifest = (session_dir / "session_manifest.md").read_text()
    assert (
        "| 1 | Concept Expansion | completed | 2026-06-01T10:00:00Z | 2026-06-01T10:01:32.900000Z | 92s |" in manifest
    )
    assert "\n- Duration: 92.9s\n" in (session_dir / "phase_1_concept" / "concept_expansion.md").read_text()


def test_read_yields_the_session_then_checkpoints_and_phases_in_order():
    records = list(haytham.read(SESSIONS / MVP))

    assert isinstance(records[0], SessionRecord)
    assert [r.number for r in records if isinstance(r, PhaseRecord)] == [1, 2, 3, 6, 7]
    assert records[0].project == "project-123"


# ---- files written by Haytham's own CheckpointManager ------------------------------------------------


def executed(path: Path) -> datetime:
    return datetime.fromisoformat(re.search(r"^- Executed: (\S+)$", path.read_text(), re.M).group(1))


def test_a_redone_phase_keeps_both_attempts_with_their_own_times_beside_the_feedback(project, tmp_path):
    watched_over_time(tmp_path, project)

    phases = phases_of(session_named(RETRIED, FOUNDER))
    niche = phases[3]
    attempts = list(niche.outputs.order_by("attempt"))
    files = [founder_session(moment, RETRIED) / "phase_3_niche_selection" / "niche_selection.md" for moment in MOMENTS]
    assert [(o.agent_name, o.attempt) for o in attempts] == [("niche_selection", 1), ("niche_selection", 2)]
    assert [o.content for o in attempts] == [path.read_text() for path in files]
    assert [o.created_at for o in attempts] == [executed(path) for path in files]  # Haytham's time, not the import's
    rejection, approval = niche.feedback.order_by("created_at")
    assert rejection.action == "retry_with_changes" and approval.action == "approved"
    assert attempts[0].created_at < rejection.created_at < attempts[1].created_at < approval.created_at
    concept = phases[1].outputs.get()
    assert concept.created_at == executed(
        founder_session(MOMENTS[0], RETRIED) / "phase_1_concept" / "concept_expansion.md"
    )


def test_an_agent_error_keeps_its_type_message_and_stack_trace(project, tmp_path):
    watched_over_time(tmp_path, project)

    failed = phases_of(session_named(RETRIED, FOUNDER))[6].outputs.get(agent_name="startup_validator")
    assert (failed.status, failed.error) == ("failed", "Rate exceeded")
    assert failed.error_details == {
        "error_type": "ThrottlingException",
        "error_message": "Rate exceeded",
        "stack_trace": 'Traceback (most recent call last):\n  File "haytham/agents/runner.py", line 88, in run\n'
        "    response = client.converse(**request)\n"
        "botocore.errorfactory.ThrottlingException: An error occurred (ThrottlingException) when calling the "
        "Converse operation: Rate exceeded",
    }


def test_importing_the_watched_folder_again_adds_nothing(project, tmp_path):
    folder = watched_over_time(tmp_path, project)
    before = snapshot(FOUNDER)

    report = import_folder(folder, project)

    assert (report.imported, report.errors) == (0, [])
    assert snapshot(FOUNDER) == before


def test_export_of_phases_imported_at_two_moments_is_byte_identical_to_what_haytham_wrote(project, tmp_path):
    watched_over_time(tmp_path, project)
    out = tmp_path / "out"

    for session_id in (RETRIED, STARTED):
        haytham.export(session_named(session_id, FOUNDER), out)

    for session_id in (RETRIED, STARTED):
        original = files_haytham_reads(founder_session(MOMENTS[1], session_id))
        assert files_haytham_reads(founder_session(out, session_id)) == original
    fresh = founder_session(MOMENTS[1], STARTED) / "phase_2_market_research" / "checkpoint.md"
    assert "\n- Agent Execution Times: \n" in fresh.read_text()  # an in_progress phase without agents yet
    errors = (founder_session(MOMENTS[1], RETRIED) / "phase_6_validation" / "checkpoint.md").read_text()
    assert errors.endswith(
        "## Errors\n- startup_validator: ThrottlingException: Rate exceeded\n- budget: 2 of 3 retries used\n"
    )
    manifest = (founder_session(MOMENTS[1], RETRIED) / "session_manifest.md").read_text()
    assert "| 50s |" in manifest  # 50.987 s: "51.0s" in checkpoint.md, truncated to "50s" in the table


def test_export_of_a_phase_with_two_versions_leaves_only_agent_outputs_where_haytham_reads_them(project, tmp_path):
    watched_over_time(tmp_path, project)

    haytham.export(session_named(RETRIED, FOUNDER), tmp_path / "out")

    session_dir = founder_session(tmp_path / "out", RETRIED)
    outputs = {n: sorted(found) for n, found in haytham_agent_outputs(session_dir).items()}
    assert outputs == {
        1: ["concept_expansion"],
        2: ["competitor_analysis", "market_intelligence"],
        3: ["niche_selection"],
        6: ["risk_assessment", "startup_validator"],
    }
    earlier = session_dir / haytham.HISTORY / "phase_3_niche_selection"
    first = founder_session(MOMENTS[0], RETRIED) / "phase_3_niche_selection"
    kept = {path.name.split(".")[0]: path.read_bytes() for path in earlier.iterdir()}
    assert kept == {
        name: (first / f"{name}.md").read_bytes() for name in ("checkpoint", "niche_selection", "user_feedback")
    }


def test_an_export_reimports_into_another_project_with_every_version_and_attempt(project, tmp_path):
    watched_over_time(tmp_path, project)
    out = tmp_path / "out"
    for session_id in (RETRIED, STARTED):
        haytham.export(session_named(session_id, FOUNDER), out)
    (out / "projects" / FOUNDER).rename(out / "projects" / "copy")

    report = import_folder(out, project)

    assert report.errors == []
    assert report.imported == Checkpoint.objects.filter(session__project__slug=FOUNDER).count()
    assert snapshot("copy") == snapshot(FOUNDER)


def test_write_back_of_a_restore_leaves_only_agent_outputs_where_haytham_reads_them(project, tmp_path):
    folder = watched_over_time(tmp_path, project)
    session_dir = founder_session(folder, RETRIED)
    redone = {path: path.read_bytes() for path in (session_dir / "phase_3_niche_selection").iterdir()}
    checkpoint = restored(RETRIED, "phase_3_niche_selection", FOUNDER, version=0)

    written = haytham.write_back(session_named(RETRIED, FOUNDER), checkpoint, folder)

    assert {n: sorted(found) for n, found in haytham_agent_outputs(session_dir).items()} == {
        1: ["concept_expansion"],
        2: ["competitor_analysis", "market_intelligence"],
        3: ["niche_selection"],
    }
    history = session_dir / haytham.HISTORY / "phase_3_niche_selection"
    assert {path.read_bytes() for path in history.iterdir()} == set(redone.values())  # kept before replaced
    assert set(history.iterdir()) <= set(written)
    assert not [path for path in session_dir.rglob("*") if path.name.endswith(".tmp")]


def test_after_a_restore_haytham_resumes_from_the_restored_phase_as_it_was_then(project, tmp_path):
    folder = watched_over_time(tmp_path, project)
    session_dir = founder_session(folder, RETRIED)
    checkpoint = restored(RETRIED, "phase_3_niche_selection", FOUNDER, version=0)  # the rejected first attempt

    haytham.write_back(session_named(RETRIED, FOUNDER), checkpoint, folder)

    then = founder_session(MOMENTS[0], RETRIED)
    assert haytham_session(session_dir) == {"current_phase": 3, "completed_phases": [1, 2, 3], "can_resume": False}
    assert haytham_approved_phases(session_dir) == [1, 2]  # phase 3's approval was for the redo
    assert haytham_agent_outputs(session_dir) == haytham_agent_outputs(then)
    assert without_last_updated(files_haytham_reads(session_dir)) == without_last_updated(files_haytham_reads(then))


def test_a_restored_in_progress_phase_can_resume_without_what_came_after_it(project, tmp_path):
    folder = watched_over_time(tmp_path, project)
    session_dir = founder_session(folder, STARTED)
    checkpoint = restored(STARTED, "phase_1_concept", FOUNDER, version=0)  # started, no agent run yet

    haytham.write_back(session_named(STARTED, FOUNDER), checkpoint, folder)

    assert haytham_session(session_dir) == {"current_phase": 1, "completed_phases": [], "can_resume": True}
    assert haytham_approved_phases(session_dir) == []
    assert haytham_agent_outputs(session_dir) == {}
    then = founder_session(MOMENTS[0], STARTED)
    assert without_last_updated(files_haytham_reads(session_dir)) == without_last_updated(files_haytham_reads(then))
    report = import_folder(folder, project)  # read again after the write-back: nothing new, nothing stray
    assert (report.imported, report.errors) == (0, [])
    assert phases_of(session_named(STARTED, FOUNDER))[2].status == "pending"


def test_export_after_a_restore_is_what_write_back_leaves_on_disk(project, tmp_path):
    folder = watched_over_time(tmp_path, project)
    checkpoint = restored(RETRIED, "phase_3_niche_selection", FOUNDER, version=0)
    session = session_named(RETRIED, FOUNDER)
    haytham.write_back(session, checkpoint, folder)

    haytham.export(session, tmp_path / "out")

    exported = files_haytham_reads(founder_session(tmp_path / "out", RETRIED))
    on_disk = files_haytham_reads(founder_session(folder, RETRIED))
    assert without_last_updated(exported) == without_last_updated(on_disk)


def without_last_updated(files: dict[str, bytes]) -> dict[str, bytes]:
    """The manifest's "- Last Updated:" is the moment of the write-back, the one line that may differ."""
    return {name: re.sub(rb"- Last Updated: .*", b"", data) for name, data in files.items()}
