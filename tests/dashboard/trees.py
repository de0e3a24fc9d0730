"""Sessions shaped like the trees real agents grow: second runs, resumed forks, time travel, restores."""

from __future__ import annotations

from checkpoints.models import AgentSession
from checkpoints.services import Actor, CheckpointInput, ingest_checkpoints, restore_checkpoint

NEW_ROOT = None


def grow(
    session: AgentSession,
    count: int,
    starts: dict[int, int | None] | None = None,
    *,
    restores: dict[int, int] | None = None,
    failed: frozenset[int] | set[int] = frozenset(),
) -> AgentSession:
    """Checkpoints #1…#count. #s hangs from #starts[s] (NEW_ROOT: none), or is a restore of #restores[s];
    any other from the one before it, as an agent sends them. Returns the session, refreshed."""
    starts, restores = starts or {}, restores or {}
    batch: list[CheckpointInput] = []
    keys_in_batch: set[str] = set()

    def flush() -> None:
        if batch:
            ingest_checkpoints([(session, batch)])
            batch.clear()
            keys_in_batch.clear()

    for seq in range(1, count + 1):
        if seq in restores:
            flush()
            restore_checkpoint(session.checkpoints.get(seq=restores[seq]), actor=Actor.system("test"), reason="back")
            continue
        item = CheckpointInput(
            state={"seq": seq, "notes": ["x"] * (seq % 7)},
            name=f"step_{seq}",
            step=seq,
            status="failed" if seq in failed else "completed",
            idempotency_key=f"seq-{seq}",
        )
        if seq in starts and starts[seq] is NEW_ROOT:
            item.new_root = True
        elif seq in starts and f"seq-{starts[seq]}" in keys_in_batch:
            item.parent_key = f"seq-{starts[seq]}"
        elif seq in starts:  # stored by an earlier call, maybe a restore (which has no key)
            item.parent = session.checkpoints.get(seq=starts[seq]).pk
        batch.append(item)
        keys_in_batch.add(item.idempotency_key)
    flush()
    session.refresh_from_db()
    return session
