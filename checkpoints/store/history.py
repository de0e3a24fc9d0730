"""What a restore takes the agent off: the checkpoints on the head's path after the target, and their tool calls.

The head's path is a few runs of consecutive seqs read from the session's branch points (`lineage`). A
restore to a target on that path takes the agent off everything after the target; a target on a branch
the head is not on, off everything after the point where the target's branch leaves the path. Counting
them reads index entries of the discarded seq ranges (retention leaves gaps, so the ranges are counted,
not measured); the tool calls come from the counter each checkpoint keeps of the calls made on its path
(`calls_made`, its parent's plus what it added, worked out at ingest with its preview): the head's minus the
meeting point's. A whole list of targets costs three queries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db import connection

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
    """What restoring each of `targets` discards, by target id, in three queries whatever their number."""
    if not targets:
        return {}
    session_ids = {target.session_id for target in targets}
    heads = {
        pk: (seq, calls)
        for pk, seq, calls in AgentSession.objects.filter(pk__in=session_ids).values_list(
            "pk", "head__seq", "head__calls_made"
        )
    }
    shapes = shapes_within(session_ids)

    points: list[_Point] = []
    for target in targets:
        head_seq, head_calls = heads.get(target.session_id, (None, None))
        if head_seq is None:
            continue
        path = path_from(target.session_id, head_seq, shapes)
        meet = meeting_point(path, path_from(target.session_id, target.seq, shapes))
        spans = [(max(span.low, meet + 1), span.high) for span in path if span.high > meet]
        points.append(_Point(target.pk, target.session_id, meet, head_calls, spans))

    measured = _measure(points)
    found = {target.pk: Discards(0, 0) for target in targets}
    for point in points:
        count, meet_found, meet_calls = measured[point.target]
        if not meet_found:  # no meeting point (two runs), or retention removed it: nothing made before it
            meet_calls = 0
        calls = None
        if point.head_calls is not None and meet_calls is not None:
            calls = max(point.head_calls - meet_calls, 0)
        found[point.target] = Discards(count, calls)
    return found


@dataclass(frozen=True)
class _Point:
    """A restore target: where its branch meets the head's path, and the seq ranges of that path after it."""

    target: int
    session_id: int
    meet: int
    head_calls: int | None
    spans: list[tuple[int, int]]


def _measure(points: list[_Point]) -> dict[int, tuple[int, bool, int | None]]:
    """Per target: the checkpoints in its ranges, whether its meeting point exists and the calls made up to it. One
    statement, its rows joined to VALUES lists (ORM filters of a Q per range cost more to build than to run)."""
    if not points:
        return {}
    table = connection.ops.quote_name(Checkpoint._meta.db_table)
    spans = [(p.target, p.session_id, low, high) for p in points for low, high in p.spans]
    span_rows = ", ".join(["(%s, %s, %s, %s)"] * len(spans))
    counted = (
        f"(SELECT COUNT(*) FROM span JOIN {table} c ON c.session_id = span.session_id "  # noqa: S608 - the table's quoted name; values are parameters
        "AND c.seq BETWEEN span.low AND span.high WHERE span.target = point.target)"
        if spans
        else "0"
    )
    span_list = f", span (target, session_id, low, high) AS (VALUES {span_rows})" if spans else ""
    sql = (
        f"WITH point (target, session_id, meet) AS (VALUES {', '.join(['(%s, %s, %s)'] * len(points))}){span_list} "  # noqa: S608 - quoted names and placeholders; values are parameters
        f"SELECT point.target, {counted}, meet.id IS NOT NULL, meet.calls_made FROM point "
        f"LEFT JOIN {table} meet ON meet.session_id = point.session_id AND meet.seq = point.meet"
    )
    params = [value for p in points for value in (p.target, p.session_id, p.meet)]
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, *(value for span in spans for value in span)])
        return {target: (count, bool(exists), calls) for target, count, exists, calls in cursor.fetchall()}
