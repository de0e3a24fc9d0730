"""What a restore takes the agent off: the checkpoints on the head's path after the target, and their tool calls.

The head's path is a few runs of consecutive seqs read from the session's branch points (`lineage`). A
restore to a target on that path takes the agent off everything after the target; a target on a branch
the head is not on, off everything after the point where the target's branch leaves the path. Counting
them reads index entries of the discarded seq ranges (retention leaves gaps, so the ranges are counted,
not measured); the tool calls come from the counter each checkpoint keeps of the calls made on its path
(`calls_made`, its parent's plus what it added, worked out at ingest with its preview): the head's minus the
meeting point's. A whole list of targets costs four queries.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.db.models import Count, Q

from ..models import AgentSession, Checkpoint
from .lineage import Span, path_from, shapes_within


@dataclass(frozen=True)
class Discards:
    """What restoring a checkpoint takes off the agent's path (all of it stays in the history)."""

    checkpoints: int
    tool_calls: int | None  # None: stored before calls were counted (manage.py fill_previews counts them)


def meeting_point(path: list[Span], other: list[Span]) -> int:
    """The newest seq on both paths of one session (0 when they share none: two runs of one session)."""
    best = 0
    for span in path:
        for theirs in other:
            if span.low <= theirs.high and theirs.low <= span.high:
                best = max(best, min(span.high, theirs.high))
    return best


def discards(target: Checkpoint) -> Discards:
    return discards_for([target])[target.pk]


def discards_for(targets: Sequence[Checkpoint]) -> dict[int, Discards]:
    """What restoring each of `targets` discards, by target id, in four queries whatever their number."""
    if not targets:
        return {}
    session_ids = {target.session_id for target in targets}
    heads = {
        pk: (seq, head_id)
        for pk, head_id, seq in AgentSession.objects.filter(pk__in=session_ids).values_list(
            "pk", "head_id", "head__seq"
        )
    }
    shapes = shapes_within(session_ids)

    plans: dict[int, tuple[int, int, Q]] = {}  # target id → (session, meeting seq, the discarded ranges)
    for target in targets:
        head_seq, _ = heads.get(target.session_id, (None, None))
        if head_seq is None:
            continue
        path = path_from(target.session_id, head_seq, shapes)
        meet = meeting_point(path, path_from(target.session_id, target.seq, shapes))
        ranges = Q()
        for span in path:
            if span.high > meet:
                ranges |= Q(seq__gte=max(span.low, meet + 1), seq__lte=span.high)
        plans[target.pk] = (target.session_id, meet, Q(session_id=target.session_id) & ranges if ranges else Q())

    counts = _count(plans)
    wanted = {(session_id, meet) for session_id, meet, _ in plans.values()}
    wanted |= {(session_id, heads[session_id][0]) for session_id, _, _ in plans.values()}
    tool_calls = _tool_calls(wanted)
    found: dict[int, Discards] = {}
    for target in targets:
        if target.pk not in plans:
            found[target.pk] = Discards(0, 0)
            continue
        session_id, meet, _ = plans[target.pk]
        head_calls = tool_calls.get((session_id, heads[session_id][0]))
        meet_calls = tool_calls.get((session_id, meet), 0) if meet else 0
        calls = max(head_calls - meet_calls, 0) if head_calls is not None and meet_calls is not None else None
        found[target.pk] = Discards(counts.get(target.pk, 0), calls)
    return found


def _count(plans: dict[int, tuple[int, int, Q]]) -> dict[int, int]:
    """Checkpoints in each plan's ranges, in one pass over the index entries of all of them."""
    where = [(pk, ranges) for pk, (_, _, ranges) in plans.items() if ranges]
    if not where:
        return {}
    union = Q()
    for _, ranges in where:
        union |= ranges
    totals = Checkpoint.objects.filter(union).aggregate(
        **{f"t{pk}": Count("pk", filter=ranges) for pk, ranges in where}
    )
    return {pk: totals[f"t{pk}"] for pk, _ in where}


def _tool_calls(wanted: Iterable[tuple[int, int]]) -> dict[tuple[int, int], int | None]:
    """The calls made on the paths to the checkpoints at (session, seq)."""
    where = Q()
    for session_id, seq in wanted:
        if seq:
            where |= Q(session_id=session_id, seq=seq)
    if not where:
        return {}
    rows = Checkpoint.objects.filter(where).values_list("session_id", "seq", "calls_made")
    return {(session_id, seq): calls for session_id, seq, calls in rows}
