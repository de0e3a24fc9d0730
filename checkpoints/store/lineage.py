"""How two checkpoints are related in the history: on one line, or on branches that met at a common ancestor.

A session's checkpoints form a tree, and a fork continues another session's tree from one of its checkpoints.
Walking parents row by row would cost a query per checkpoint on a 100,000-checkpoint session. Instead each
session's shape comes from its branch points (the few checkpoints whose parent is not the one that arrived just
before them; an index serves them): between two branch points every checkpoint continues the one before it. A
path to the root is then a handful of seq ranges, and two paths meet where their ranges first overlap.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from django.db import connection
from django.db.models import OuterRef, Subquery

from ..models import AgentSession, Checkpoint

FORK_DEPTH = 100  # forks of forks followed back at most this far


class Relation(StrEnum):
    SAME = "same"
    ANCESTOR = "ancestor"  # A is an ancestor of B: B continues from A
    DESCENDANT = "descendant"  # B is an ancestor of A
    DIVERGED = "diverged"  # on different branches, which meet at a common ancestor
    UNRELATED = "unrelated"  # no common ancestor: different roots


@dataclass(frozen=True)
class Span:
    """Checkpoints `low`…`high` of one session, each the parent of the next."""

    session_id: int
    low: int
    high: int

    def holds(self, checkpoint: Checkpoint) -> bool:
        return checkpoint.session_id == self.session_id and self.low <= checkpoint.seq <= self.high


@dataclass
class Lineage:
    relation: Relation
    ancestor: Checkpoint | None  # the newest checkpoint both descend from (A or B themselves when on one line)


def relate(a: Checkpoint, b: Checkpoint) -> Lineage:
    """Where `a` and `b` stand to each other. A few queries: each session's branch points, its fork source."""
    if a.pk == b.pk:
        return Lineage(Relation.SAME, a)
    shapes: dict[int, Shape] = {}
    path_a = path_to_root(a, shapes)
    path_b = path_to_root(b, shapes)
    if any(span.holds(a) for span in path_b):
        return Lineage(Relation.ANCESTOR, a)
    if any(span.holds(b) for span in path_a):
        return Lineage(Relation.DESCENDANT, b)
    for span in path_a:  # nearest to A first: the first overlap holds the newest common ancestor
        for other in path_b:
            if other.session_id != span.session_id:
                continue
            low, high = max(span.low, other.low), min(span.high, other.high)
            if low > high:
                continue
            # retention may have removed the meeting point itself: the newest survivor below it stands in
            found = (
                Checkpoint.objects.filter(session_id=span.session_id, seq__gte=low, seq__lte=high)
                .select_related("session")
                .order_by("-seq")
                .first()
            )
            if found is not None:
                return Lineage(Relation.DIVERGED, found)
    return Lineage(Relation.UNRELATED, None)


@dataclass
class Shape:
    """A session's tree as its branch points: enough to walk any checkpoint's path to the root."""

    starts: list[int]  # seqs of the checkpoints that start a branch, ascending
    parents: list[int | None]  # the parent seq of each (None: a new root)
    fork_source: tuple[int, int] | None  # (session id, seq) that the session's first checkpoint continues


def shapes_within(session_ids: Iterable[int]) -> dict[int, Shape]:
    """The shapes of many sessions in one query, their forks' sources left out: paths stay in their session."""
    found: dict[int, Shape] = {pk: Shape([], [], None) for pk in session_ids}
    points = Checkpoint.objects.filter(session_id__in=list(found), starts_branch=True).order_by("session_id", "seq")
    for session_id, seq, parent in points.values_list("session_id", "seq", "parent__seq"):
        found[session_id].starts.append(seq)
        found[session_id].parents.append(parent)
    return found


def _shape(session_id: int) -> Shape:
    points = list(Checkpoint.objects.filter(session_id=session_id).branch_points())
    source = (
        AgentSession.objects.filter(pk=session_id, forked_from__isnull=False)
        .values_list("forked_from__session_id", "forked_from__seq")
        .first()
    )
    return Shape([seq for seq, _, _ in points], [parent for _, parent, _ in points], source)


def path_to_root(checkpoint: Checkpoint, shapes: dict[int, Shape] | None = None) -> list[Span]:
    """The spans from `checkpoint` back to its root, nearest first, continuing into a fork's source session."""
    return path_from(checkpoint.session_id, checkpoint.seq, shapes)


def path_from(session_id: int, seq: int, shapes: dict[int, Shape] | None = None) -> list[Span]:
    """`path_to_root` of the checkpoint #`seq` of a session (`shapes`: those known already, added to)."""
    shapes = shapes if shapes is not None else {}
    spans: list[Span] = []
    for _ in range(FORK_DEPTH):
        shape = shapes.get(session_id) or shapes.setdefault(session_id, _shape(session_id))
        parent: int | None = seq
        while parent is not None:
            at = bisect.bisect_right(shape.starts, parent) - 1
            low = shape.starts[at] if at >= 0 else 1
            spans.append(Span(session_id, low, parent))
            next_parent = shape.parents[at] if at >= 0 else None
            parent = next_parent if next_parent is not None and next_parent < low else None
        if spans[-1].low != 1 or shape.fork_source is None:
            break
        session_id, seq = shape.fork_source
    return spans


def mark_branch_starts(ids: Iterable[int]) -> int:
    """After a deletion moved the checkpoints `ids` to a kept ancestor, those whose new parent is not the
    checkpoint just before them start a branch now: the first checkpoint of a branch was deleted, and its
    successor must not look like it continues whatever arrived before it. Returns how many were marked."""
    before = Checkpoint.objects.filter(session_id=OuterRef("session_id"), seq__lt=OuterRef("seq")).order_by("-seq")
    rows = (
        Checkpoint.objects.filter(pk__in=list(ids), starts_branch=False)
        .annotate(before=Subquery(before.values("pk")[:1]))
        .values_list("pk", "parent_id", "before")
    )
    marked = [pk for pk, parent, previous in rows if parent != previous]
    return Checkpoint.objects.filter(pk__in=marked).update(starts_branch=True) if marked else 0


def reattach_children(gone: Any, parents: dict[int, int | None]) -> list[tuple[int, int | None]]:
    """Before the checkpoints `gone` (ids, or a subquery of them) are deleted, hang each child they leave behind
    from its nearest ancestor that stays (`parents`: id → parent of each doomed checkpoint); returns the moved
    (id, new parent) pairs, whose branch starts the caller marks once the deletion is done."""

    def kept_ancestor(pk: int | None) -> int | None:
        while pk is not None and pk in parents:
            pk = parents[pk]
        return pk

    children = Checkpoint.objects.filter(parent__in=gone).exclude(pk__in=gone).values_list("pk", "parent_id")
    moved = [(pk, kept_ancestor(parent)) for pk, parent in children]
    repoint(moved)
    return moved


def repoint(moved: list[tuple[int, int | None]]) -> None:
    """Hang each checkpoint of `moved` (id, new parent) from its new parent, before a deletion takes the old one:
    one UPDATE joined to a VALUES list (Django's bulk_update builds a CASE with a WHEN per row, which cost ten
    times the statement)."""
    if not moved:
        return
    table = connection.ops.quote_name(Checkpoint._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH moved (id, parent_id) AS (VALUES {', '.join(['(%s, %s)'] * len(moved))}) "  # noqa: S608 - quoted names and placeholders; values are parameters
            f"UPDATE {table} SET parent_id = CAST(moved.parent_id AS BIGINT) FROM moved WHERE {table}.id = moved.id",
            [value for row in moved for value in row],
        )
