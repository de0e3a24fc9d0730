"""Writing a restore back to a file-based agent, in its own format, in its own folder."""

from __future__ import annotations

import logging
from pathlib import Path

from . import formats, services
from .models import Checkpoint

log = logging.getLogger(__name__)


def write_back_restore(checkpoint_id: int) -> list[Path]:
    """Called after a restore commits. Failure is audited, never raised: the restore itself stands."""
    checkpoint = Checkpoint.objects.select_related("session__project").get(pk=checkpoint_id)
    session = checkpoint.session
    actor = services.Actor.system("write-back")
    try:
        written = formats.get(session.source_format).write_back(session, checkpoint, Path(session.source_path))
    except Exception as exc:  # a full disk or a vanished folder must not undo the restore
        log.exception("write-back of checkpoint %s failed", checkpoint_id)
        services.record_audit(
            actor, "write_back_failed", session=session, checkpoint=checkpoint, details={"error": str(exc)}
        )
        return []
    services.record_audit(
        actor,
        "write_back",
        session=session,
        checkpoint=checkpoint,
        details={"files": [str(path) for path in written], "format": session.source_format},
    )
    return written
