"""What the checkpoint page shows around the state: its neighbours, forks and phase, and what changed there."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db.models.fields.json import KeyTransform

from checkpoint_console.typedjson import readable
from checkpoints.models import AgentSession, Checkpoint, CheckpointKind, Phase
from checkpoints.store import diff_checkpoints, lgnodes, load_shared
from checkpoints.store.diff import diff_states

from .branches import is_langgraph
from .diff import present_diff

CHANGES_ROWS = 12  # rows of "what changed here"; Compare has the rest


def related(checkpoint: Checkpoint, user: Any) -> dict[str, Any]:
    """Neighbours by seq, children (next on the branch, restores back to here), forks and the phase."""
    session = checkpoint.session
    siblings = with_nodes(Checkpoint.objects.for_session(session).for_timeline(), session)
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
    nodes: Nodes | None = None

    @property
    def root_parent(self) -> LangGraphParent | None:
        """The root graph's checkpoint a subgraph's ran under, when the thread has it: where a restore goes."""
        return next((parent for parent in self.parents if not parent.namespace and parent.found), None)


@dataclass(frozen=True)
class Nodes:
    """The LangGraph nodes that wrote a checkpoint and those that run next, as labels ("work ×2" for two Sends).
    `ran` is None when the console could not tell (its parent was not stored)."""

    ran: list[str] | None
    next: list[str]

    @property
    def wrote(self) -> str:
        return ", ".join(self.ran or [])


def _labels(nodes: list[Any]) -> list[str]:
    counts: dict[str, int] = {}
    for node in nodes:
        counts[str(node)] = counts.get(str(node), 0) + 1
    return [node if count == 1 else f"{node} ×{count}" for node, count in counts.items()]


def nodes_view(kept: Any) -> Nodes | None:
    """The nodes a LangGraph checkpoint's metadata keeps (`store.lgnodes.KEY`), None when it keeps none."""
    if not isinstance(kept, dict):
        return None
    ran, following = kept.get("ran"), kept.get("next")
    return Nodes(
        ran=_labels(ran) if isinstance(ran, list) else None,
        next=_labels(following) if isinstance(following, list) else [],
    )


def label(checkpoint: Checkpoint) -> str:
    """How a link names a checkpoint: for a LangGraph checkpoint the nodes that wrote it (its name is only
    LangGraph's source, "loop" for nearly all), otherwise its name or kind. The nodes come from an `lg_nodes`
    annotation (`with_nodes`) or from metadata already loaded: never a query per link."""
    kept = getattr(checkpoint, "lg_nodes", None)
    if kept is None and "metadata" in checkpoint.__dict__ and isinstance(checkpoint.metadata, dict):
        kept = checkpoint.metadata.get(lgnodes.KEY)
    nodes = nodes_view(kept)
    if nodes is not None and nodes.ran:
        return nodes.wrote
    return checkpoint.name or str(checkpoint.kind)


def with_nodes(checkpoints: Any, session: AgentSession) -> Any:
    """`checkpoints` with the nodes that wrote each (`lg_nodes`) when the session is a LangGraph thread: a key of
    small metadata, read in the same query."""
    if not is_langgraph(session):
        return checkpoints
    return checkpoints.annotate(lg_nodes=KeyTransform(lgnodes.KEY, "metadata"))


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
        nodes=nodes_view(checkpoint.metadata.get(lgnodes.KEY)),
    )


def visible_state(state: Any, session: AgentSession, *, internal: bool) -> tuple[Any, int]:
    """The state the tree draws: a LangGraph thread's without LangGraph's internal channels unless `internal`;
    and how many channels were left out."""
    if internal or not is_langgraph(session) or not isinstance(state, dict):
        return state, 0
    shown = {key: value for key, value in state.items() if not lgnodes.is_internal(key)}
    return shown, len(state) - len(shown)


def changed_here(
    checkpoint: Checkpoint, *, internal: bool = False, shown: Callable[[Any], Any] | None = None
) -> dict[str, Any]:
    """ "What changed here": the diff from the checkpoint this one continues (for a restore, from the head it
    replaced: its parent has the same state), or why there is none (`changed_why`: root or fork). A LangGraph
    thread's internal channels are left out unless `internal`. `shown` turns a state into what the viewer may see
    (found secrets masked) before the two are compared."""
    session = checkpoint.session
    before = checkpoint.parent
    if checkpoint.kind == CheckpointKind.RESTORE and isinstance(checkpoint.metadata.get("previous_head"), int):
        before = Checkpoint.objects.filter(session=session, pk=checkpoint.metadata["previous_head"]).first() or before
    if before is None:
        return {
            "changed_from": None,
            "changed_why": "fork" if checkpoint.seq == 1 and session.forked_from_id else "root",
        }
    query: dict[str, Any] = {"a": before.pk, "b": checkpoint.pk, "base": "a", **({"internal": 1} if internal else {})}
    changes = present_diff(
        diff_checkpoints(before, checkpoint)
        if shown is None
        else diff_states(*(shown(load_shared(bytes(c.root))) for c in (before, checkpoint))),
        query=query,
        rows=CHANGES_ROWS,
        old_pk=before.pk,
        new_pk=checkpoint.pk,
        hide_internal=not internal and is_langgraph(session),
    )
    return {
        "changed_from": before,
        "changes": changes,
        "old_label": f"#{before.seq}",
        "new_label": f"#{checkpoint.seq}",
    }
