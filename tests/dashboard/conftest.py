"""What the console's tests share: a project with one of everything a console URL can address."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from checkpoints.models import (
    AgentSession,
    Checkpoint,
    DriftAlert,
    ImportJob,
    ImportJobStatus,
    Phase,
    PhaseStatus,
    Recovery,
    RecoveryState,
    RetentionPolicy,
)
from checkpoints.services import (
    Actor,
    CheckpointInput,
    create_checkpoint,
    pin_checkpoint,
    record_audit,
    restore_checkpoint,
    upsert_session,
)


@dataclass
class World:
    session: AgentSession
    checkpoint: Checkpoint
    alert: DriftAlert
    phase: Phase
    job: ImportJob
    recovery: Recovery


def keep_one_step_checkpoint() -> None:
    """The global step rule keeps only the last step checkpoint: #3 and #4 of a world are in the retention preview."""
    RetentionPolicy.objects.filter(project=None, kind="step").update(
        keep_last=1, keep_first=False, keep_latest_per_name=False
    )


def build_world(project, tag: str) -> World:
    """A session of five checkpoints (one restored, one pinned), an open alert, a completed phase, a finished
    import job, a finished fleet recovery and audit events with and without a session, every name starting with `tag`."""
    session, _ = upsert_session(project, external_id=f"{tag}-run", agent=f"{tag}-agent")
    AgentSession.objects.filter(pk=session.pk).update(title=f"{tag} title")
    checkpoints = [
        create_checkpoint(
            session,
            CheckpointInput(state={"messages": [{"role": "user", "content": f"{tag} {i}"}]}, name=f"{tag}_{i}", step=i),
        )[0]
        for i in range(1, 6)
    ]
    restore_checkpoint(checkpoints[0], actor=Actor.system(f"{tag}-restorer"), reason=f"{tag} reason")
    pin_checkpoint(checkpoints[1], actor=Actor.system(f"{tag}-pinner"))
    record_audit(Actor.system(f"{tag}-uploader"), "upload", project=project, target=f"{tag}.zip")
    alert = DriftAlert.objects.create(
        session=session, kind="failed", severity="critical", message=f"{tag} alert", last_good=checkpoints[0]
    )
    phase = Phase.objects.create(session=session, number=1, name=f"{tag} phase", status=PhaseStatus.COMPLETED)
    job = ImportJob.objects.create(
        project=project,
        archive="/nowhere.zip",
        original_name=f"{tag}.zip",
        status=ImportJobStatus.DONE,
        report={"imported": 3, "skipped": 0, "errors": [], "sessions": [f"{tag}-run"]},
    )
    recovery = Recovery.objects.create(
        project=project,
        action="restore",
        rule="last_good",
        reason=f"{tag} outage",
        actor=f"{tag}-operator",
        state=RecoveryState.FINISHED,
    )
    session.refresh_from_db()
    return World(session, checkpoints[-1], alert, phase, job, recovery)


@pytest.fixture
def make_world(db):
    """`make_world(project, tag)`: `build_world` in the test's own transaction."""
    keep_one_step_checkpoint()
    return build_world
