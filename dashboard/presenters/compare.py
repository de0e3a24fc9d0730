"""A comparison of two checkpoints as the compare page shows it: from A, or from the common ancestor of two branches."""

from __future__ import annotations

from typing import Any

from checkpoints.models import Checkpoint
from checkpoints.store import diff_checkpoints
from checkpoints.store.lineage import Relation, relate
from checkpoints.store.masking import AS_IT_IS, Masker

from .branches import is_langgraph
from .diff import present_diff


def comparison(
    a: Checkpoint,
    b: Checkpoint,
    *,
    from_a: bool,
    path_filter: str = "",
    expand: str = "",
    offset: int = 0,
    internal: bool = False,
    shown: Masker = AS_IT_IS,
) -> dict[str, Any]:
    """What changed from A to B; for checkpoints on different branches, what changed on B's branch since their
        common ancestor (as `git diff A...B` does), unless `from_a` asks for the direct diff. LangGraph's internal
        channels are left out of a thread's diff unless `internal`; `shown` masks the values people may not see (its
    changes' values and their line diffs)."""
    lineage = relate(a, b)
    direct = lineage.relation != Relation.DIVERGED or from_a
    base = a if direct or lineage.ancestor is None else lineage.ancestor
    query = {"a": a.pk, "b": b.pk, **({"base": "a"} if direct and lineage.relation == Relation.DIVERGED else {})}
    if internal:
        query["internal"] = 1
    diff = present_diff(
        shown.diff(diff_checkpoints(base, b)),
        query=query,
        path_filter=path_filter,
        expand=expand,
        offset=offset,
        old_pk=base.pk,
        new_pk=b.pk,
        hide_internal=not internal and is_langgraph(b.session),
    )
    same = b.session_id == a.session_id
    return {
        "a": a,
        "b": b,
        "base": base,
        "lineage": lineage,
        "diff": diff,
        "diff_in_place": True,
        "old_label": f"A · #{a.seq}" if base is a else f"#{base.seq} · common ancestor",
        "new_label": f"B · #{b.seq}",
        # the form shows the comparison as the console labels it: seqs of A's session
        "fields": {"session": a.session_id, "a": f"#{a.seq}", "b": f"#{b.seq}" if same else f"id:{b.pk}"},
    }
