"""What the checkpoint page shows around the state: its neighbours, forks and phase, and what changed there."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from checkpoint_console.typedjson import readable
from checkpoints.models import AgentSession, Checkpoint, CheckpointKind, Phase
from checkpoints.store import diff_checkpoints

from .diff import present_diff

CHANGES_ROWS = 12  # rows of "what changed here"; Compare has the rest


def related(checkpoint: Checkpoint, user: Any) -> dict[str, Any]:
    """Neighbours by seq, children (next on the branch, restores back to here), forks and the phase."""
    session = checkpoint.session
    siblings = Checkpoint.objects.for_session(session).for_timeline()
    previous = siblings.filter(seq__lt=checkpoint.seq).order_by("-seq").first()
    following = siblings.filter(seq__gt=checkpoint.seq).order_by("seq").first()
    children = list(siblings.filter(parent=checkpoint).order_by("seq")[:20])
    forks = list(AgentSession.objects.visible_to(user).filter(forked_from=checkpoint).order_by("pk")[:20])
    phase = (
        Phase.objects.filter(session=session, number=checkpoint.phase).first() if checkpoint.phase is not None else None
    )
    # "Compare with previous": the parent, except for a restore, where the interesting change is from the head it replaced
    compare_from = previous.pk if checkpoint.kind == CheckpointKind.RESTORE and previous else checkpoint.parent_id
    return {
        "previous": previous,
        "following": following,
        "children": children,
        "forks": forks,
        "phase": phase,
        "compare_from": compare_from,
        "metadata_json": json.dumps(readable(checkpoint.metadata), indent=2, ensure_ascii=False, default=str)
        if checkpoint.metadata
        else "",
        "langgraph": langgraph_view(checkpoint),
    }


@dataclass
class LangGraphParent:
    namespace: str
    checkpoint_id: str
    found: tuple[int, int] | None  # (pk, seq) of the console's checkpoint of that id, when the thread has it


@dataclass
class LangGraphView:
    """What LangGraph calls a checkpoint: its id, namespace, source and run, and the checkpoints of the
    enclosing graphs it ran under (`parents`: namespace → checkpoint id), as the checkpoint page lists them."""

    checkpoint_id: str
    namespace: str
    source: str
    run_id: str
    parents: list[LangGraphParent] = field(default_factory=list)


def langgraph_view(checkpoint: Checkpoint) -> LangGraphView | None:
    """None unless the checkpoint came from LangGraph (its metadata names a checkpoint_id)."""
    metadata = readable(checkpoint.metadata)
    if not isinstance(metadata, dict) or not isinstance(metadata.get("checkpoint_id"), str):
        return None
    listed = metadata.get("parents")
    parents = {str(ns): str(cid) for ns, cid in listed.items()} if isinstance(listed, dict) else {}
    found: dict[tuple[str, str], tuple[int, int]] = {}
    if parents:
        rows = Checkpoint.objects.for_session(checkpoint.session).filter(
            metadata__checkpoint_id__in=list(parents.values())
        )
        named = rows.order_by("seq").values_list("metadata__checkpoint_ns", "metadata__checkpoint_id", "pk", "seq")
        for ns, cid, pk, seq in named:
            found[(str(ns or ""), str(cid))] = (pk, seq)  # a repeated put's newest version wins
    return LangGraphView(
        checkpoint_id=metadata["checkpoint_id"],
        namespace=str(metadata.get("checkpoint_ns") or ""),
        source=str(metadata.get("source") or ""),
        run_id=str(metadata.get("run_id") or ""),
        parents=[LangGraphParent(ns, cid, found.get((ns, cid))) for ns, cid in sorted(parents.items())],
    )


def changed_here(checkpoint: Checkpoint) -> dict[str, Any]:
    """ "What changed here": the diff from the checkpoint this one continues (for a restore, from the head it
    replaced: its parent has the same state), or why there is none (`changed_why`: root or fork)."""
    session = checkpoint.session
    before = checkpoint.parent
    if checkpoint.kind == CheckpointKind.RESTORE and isinstance(checkpoint.metadata.get("previous_head"), int):
        before = Checkpoint.objects.filter(session=session, pk=checkpoint.metadata["previous_head"]).first() or before
    if before is None:
        return {
            "changed_from": None,
            "changed_why": "fork" if checkpoint.seq == 1 and session.forked_from_id else "root",
        }
    query = {"a": before.pk, "b": checkpoint.pk, "base": "a"}
    changes = present_diff(
        diff_checkpoints(before, checkpoint), query=query, rows=CHANGES_ROWS, old_pk=before.pk, new_pk=checkpoint.pk
    )
    return {
        "changed_from": before,
        "changes": changes,
        "old_label": f"#{before.seq}",
        "new_label": f"#{checkpoint.seq}",
    }
