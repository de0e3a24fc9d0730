from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from checkpoints import store
from checkpoints.jobs.retention import apply_retention
from checkpoints.models import (
    AgentOutput,
    AgentSession,
    AlertState,
    Checkpoint,
    CheckpointKind,
    CheckpointStatus,
    DriftAlert,
    Phase,
    PhaseFeedback,
    PhaseStatus,
    Project,
    SessionStatus,
)
from tests.helpers import command

pytestmark = pytest.mark.django_db


def seed(*args: str) -> str:
    return command("seed_demo", "--small", *args)[0]


@pytest.fixture
def seeded() -> str:
    return seed()


def test_seed_fills_an_empty_database_without_force(seeded):
    assert "Seeded" in seeded
    assert Project.objects.count() >= 3
    assert {"research-agents", "support-bots", "data-pipeline"} <= set(Project.objects.values_list("slug", flat=True))
    assert AgentSession.objects.count() >= 6
    assert Checkpoint.objects.count() >= 100


def test_summary_names_projects_sessions_checkpoints_and_time(seeded):
    sessions, checkpoints = AgentSession.objects.count(), Checkpoint.objects.count()
    assert f"{sessions} sessions" in seeded
    assert f"{checkpoints} checkpoints" in seeded
    assert " s." in seeded


def test_every_checkpoint_state_loads(seeded):
    for checkpoint in Checkpoint.objects.all():
        assert isinstance(store.load_state(bytes(checkpoint.root)), dict)


def test_transcripts_grow_along_a_session(seeded):
    grown = 0
    for session in AgentSession.objects.filter(forked_from__isnull=True):
        first = session.checkpoints.order_by("seq").first()
        last = session.checkpoints.order_by("-seq").first()
        first_state, last_state = store.load_state(bytes(first.root)), store.load_state(bytes(last.root))
        if "messages" not in last_state:
            continue
        assert len(last_state["messages"]) > len(first_state["messages"])
        grown += 1
    assert grown >= 5


def test_agent_states_carry_tool_calls_memory_and_progress(seeded):
    session = AgentSession.objects.get(external_id="patchwright-batch-ingest")
    state = store.load_state(bytes(session.head.root))
    assert {"role", "content"} <= set(state["messages"][-2])
    call = state["tool_calls"][-1]
    assert {"tool_name", "arguments", "result", "success"} <= set(call)
    assert 20 <= len(state["memory"]) <= 50
    assert 0 <= state["task"]["progress"] <= 100


def test_checkpoints_have_kinds_names_and_increasing_times(seeded):
    kinds = set(Checkpoint.objects.values_list("kind", flat=True))
    assert {CheckpointKind.STEP, CheckpointKind.ROUTINE, CheckpointKind.RECOVERY, CheckpointKind.PRE_OPERATION} <= kinds
    assert {CheckpointKind.FORK, CheckpointKind.RESTORE, CheckpointKind.PHASE} <= kinds
    assert Checkpoint.objects.filter(name="task_started").exists()
    for session in AgentSession.objects.all():
        times = list(session.checkpoints.order_by("seq").values_list("created_at", flat=True))
        assert times == sorted(times), session.external_id


def test_a_fork_starts_from_its_source_state(seeded):
    fork = AgentSession.objects.exclude(forked_from=None).get()
    first = fork.checkpoints.get(seq=1)
    assert first.kind == CheckpointKind.FORK
    assert bytes(first.root) == bytes(fork.forked_from.root)
    assert fork.checkpoints.count() > 1
    assert fork.head.seq > 1


def test_after_a_restore_the_session_goes_on(seeded):
    restored = Checkpoint.objects.get(kind=CheckpointKind.RESTORE)
    session = restored.session
    assert bytes(restored.root) == bytes(restored.parent.root)
    assert session.head.seq > restored.seq
    assert session.checkpoints.filter(seq=restored.seq + 1, parent=restored).exists()
    assert session.restore_generation == 1


def test_a_failed_and_a_halted_session_say_why(seeded):
    failed = AgentSession.objects.get(status=SessionStatus.FAILED)
    assert failed.head.status == CheckpointStatus.FAILED
    assert "No space left on device" in failed.head.status_reason
    halted = AgentSession.objects.get(status=SessionStatus.HALTED)
    assert halted.head.status == CheckpointStatus.HALTED
    assert halted.head.status_reason.startswith("loop detector:")


def test_a_phased_session_has_phases_outputs_and_feedback(seeded):
    session = AgentSession.objects.get(execution_mode="mvp")
    phases = list(Phase.objects.filter(session=session).order_by("number"))
    assert [phase.number for phase in phases] == [1, 2, 3, 6, 7]
    assert phases[0].name == "Concept Expansion" and phases[-1].name == "Final Synthesis"
    assert phases[0].status == PhaseStatus.COMPLETED and phases[0].duration and phases[0].cost > 0
    assert phases[-1].status == PhaseStatus.PENDING
    assert AgentOutput.objects.filter(phase__session=session).exclude(content="").count() >= 4
    assert "## Key findings" in AgentOutput.objects.filter(phase=phases[0]).get().content
    assert PhaseFeedback.objects.filter(phase__session=session, approved=True).exists()
    assert session.checkpoints.filter(kind=CheckpointKind.PHASE, phase=3).exists()


def test_drift_alerts_point_at_an_earlier_good_checkpoint(seeded):
    alerts = DriftAlert.objects.filter(state=AlertState.OPEN)
    assert {"repetition", "stalled"} <= set(alerts.values_list("kind", flat=True))
    for alert in alerts:
        assert alert.last_good.session_id == alert.session_id
        assert alert.last_good.seq < alert.checkpoint.seq


def test_second_run_refuses_and_changes_nothing(seeded):
    counts = (AgentSession.objects.count(), Checkpoint.objects.count(), Phase.objects.count())
    output = seed()
    assert "already has" in output and "--force" in output
    assert (AgentSession.objects.count(), Checkpoint.objects.count(), Phase.objects.count()) == counts


def test_force_adds_beside_existing_sessions(seeded):
    sessions = AgentSession.objects.count()
    seed("--force")
    assert AgentSession.objects.count() == 2 * sessions
    assert AgentSession.objects.filter(external_id="patchwright-batch-ingest-2").exists()


@pytest.mark.parametrize("size", [[], ["--small"]], ids=["full", "small"])
def test_the_demo_survives_its_own_retention_defaults(size):
    """Beat runs retention hourly with the default policies: the demo must still tell its stories after the
    first run and a day later — each showcase session keeps every checkpoint the tour visits."""
    start = timezone.now()
    call_command("seed_demo", *size, stdout=StringIO(), stderr=StringIO())
    seeded = set(Checkpoint.objects.values_list("pk", flat=True))
    for later in (timedelta(hours=1), timedelta(days=1)):
        result = apply_retention(now=start + later)
        assert (result["deleted"], result["by_kind"], result["error_count"]) == (0, {}, 0), later
    assert set(Checkpoint.objects.values_list("pk", flat=True)) == seeded

    coding = AgentSession.objects.get(external_id="patchwright-batch-ingest")
    restore = coding.checkpoints.get(kind=CheckpointKind.RESTORE)
    red_run = coding.checkpoints.filter(seq__gt=restore.parent.seq, seq__lt=restore.seq)
    assert restore.parent.pinned and red_run.count() >= 4  # the last green run, and every red step after it
    assert coding.checkpoints.filter(seq__gt=restore.seq).count() >= 6  # the agent went on from there
    scout = AgentSession.objects.get(external_id="scout-ctx-compression")
    assert AgentSession.objects.filter(forked_from__session=scout).exists()
    if not size:  # the full survey runs over several days, with a pinned milestone
        assert scout.checkpoints.filter(name="day1_final", pinned=True).exists()
        assert scout.checkpoints.filter(kind=CheckpointKind.MANUAL).count() >= 2
    for alert in DriftAlert.objects.unresolved():
        drift = alert.session.checkpoints.filter(seq__gt=alert.last_good.seq, seq__lte=alert.checkpoint.seq)
        assert drift.count() >= 3, alert.kind  # the loop, the flat run, the failing loads
    captain = AgentSession.objects.get(external_id="captain.1")
    kinds = list(captain.checkpoints.order_by("seq").values_list("kind", flat=True))
    assert kinds[-4:-1] == [CheckpointKind.ROUTINE] * 3  # a run of routine checkpoints, as Dream.OS keeps them
    assert kinds.count(CheckpointKind.RECOVERY) >= 4 and CheckpointKind.PRE_OPERATION in kinds
