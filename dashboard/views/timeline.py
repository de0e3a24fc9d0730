"""The session timeline: a session's checkpoint tree, newest first, with its branches, phases and charts.

A restore, a checkpoint an agent sends with an earlier parent (time travel, an importer's tree) or a
new root adds a checkpoint whose parent is not the one before it, so history forks there: the
checkpoints between form a side branch, and the newer ones continue the line that leads to the head.
The layout is computed from those branch starts alone (one small query on a partial index), so a page
of a 10,000-checkpoint session costs the same handful of queries as a page of a short one.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.db.models import Count, F, Max, Min, Q, Sum
from django.db.models.functions import TruncDay, TruncHour, TruncWeek
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from checkpoints.models import AgentSession, Checkpoint, CheckpointKind, CheckpointStatus, DriftAlert

from .common import HtmxHttpRequest, console, get_session_for_user, parse_int, render_page

PAGE_SIZE = 100  # checkpoints per timeline page
RUN_MIN = 3  # this many consecutive routine checkpoints collapse into one row
EXPAND_MAX = 500  # most rows one expanded run shows
LANE_COLOURS = 6
CHART_POINTS = 500  # the size chart samples at most this many buckets


@require_GET
@console()
def session_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    session = get_session_for_user(request, pk)
    expand = _parse_range(request.GET.get("expand"))
    if request.htmx and expand and "before" not in request.GET and "after" not in request.GET:
        context = {"session": session, "span": expand, "run": expanded_run(session, expand, user=request.user)}
        return render(request, "dashboard/session_detail.html#run", context)
    page = timeline_page(
        session,
        before=parse_int(request.GET.get("before")),
        after=parse_int(request.GET.get("after")),
        at=parse_int(request.GET.get("at")),
        expand=expand,
        user=request.user,
    )
    context: dict[str, Any] = {"session": session, "page": page}
    if not request.htmx:
        context.update(session_overview(session))
    return render_page(request, "dashboard/session_detail.html", context, "timeline")


def _parse_range(value: str | None) -> tuple[int, int] | None:
    """'40-51' → (40, 51); anything else → None."""
    low, _, high = (value or "").partition("-")
    lo, hi = parse_int(low), parse_int(high)
    return (lo, hi) if lo is not None and hi is not None and lo <= hi else None


# ---- branch layout --------------------------------------------------------------------------------


@dataclass
class Branch:
    """Consecutive seqs `lo`…`hi` drawn in one lane, growing out of the checkpoint `attach`."""

    lo: int
    hi: int
    attach: int | None
    main: bool
    lane: int = 0

    @property
    def bottom(self) -> int:
        return self.attach if self.attach is not None else self.lo


def branch_layout(
    last_seq: int, head_seq: int | None, starts: list[tuple[int, int | None]], folded: frozenset[int] = frozenset()
) -> list[Branch]:
    """Lane 0 is the head's ancestry; each stretch of history off it gets a side lane.

    Seqs are split into segments at each branch start (a restore, a checkpoint sent with an earlier
    parent, a new root; every other checkpoint's parent is the one before it). The head's line runs
    down its segment to the segment's start, jumps to the start's parent, and so on; what it skips is
    a side branch — except a restore that was undone at once (`folded`): it is shown with its undo.
    """
    if last_seq < 1:
        return []
    parent_of = {seq: parent for seq, parent in starts if 1 < seq <= last_seq}
    starts = sorted({1, *parent_of})
    segments = [
        (start, starts[i + 1] - 1 if i + 1 < len(starts) else last_seq, parent_of.get(start))
        for i, start in enumerate(starts)
    ]
    branches: list[Branch] = []
    main_top: dict[int, int] = {}
    seq = head_seq if head_seq and head_seq <= last_seq else last_seq
    while seq is not None and seq >= 1:
        index = bisect_right(starts, seq) - 1
        if index in main_top:
            break
        start, _, attach = segments[index]
        main_top[index] = seq
        branches.append(Branch(start, seq, attach, main=True))
        seq = attach
    side: list[Branch] = []
    for index, (start, end, attach) in enumerate(segments):
        if index not in main_top:
            side.append(Branch(start, end, attach, main=False))
        elif main_top[index] < end:
            side.append(Branch(main_top[index] + 1, end, main_top[index], main=False))
    side = [branch for branch in side if not (branch.lo == branch.hi and branch.lo in folded)]
    lowest: list[int] = []  # per side lane, the lowest seq it reaches so far
    for branch in sorted(side, key=lambda b: -b.hi):
        for lane, bottom in enumerate(lowest):
            if branch.hi < bottom:
                branch.lane, lowest[lane] = lane + 1, branch.bottom
                break
        else:
            lowest.append(branch.bottom)
            branch.lane = len(lowest)
    return branches + side


@dataclass
class Cell:
    """One lane of one row: lines above and below the middle, and the node, if any."""

    lane: int
    up: bool = False
    down: bool = False
    node: str = ""  # "", "dot", "head", "restore", "run"
    segments: list[str] = field(default_factory=list)  # pieces of elbows crossing this lane (CSS classes)

    @property
    def css(self) -> str:
        parts = ["lane", f"c{self.lane % LANE_COLOURS}"]
        parts += [name for name, on in (("up", self.up), ("down", self.down)) if on]
        if self.node:
            parts.append(f"node-{self.node}")
        return " ".join(parts)


@dataclass
class Elbow:
    """The line from the middle of lane `start` to the middle of lane `start + span`, where a branch leaves.

    It is drawn as one piece per lane it crosses, by class: the Content-Security-Policy allows no inline
    styles, so no lane can be positioned with a style attribute.
    """

    lane: int  # the branch's lane (its colour)
    start: int  # leftmost lane it spans
    span: int

    def segments(self) -> list[tuple[int, str]]:
        colour = f"c{self.lane % LANE_COLOURS}"
        end = self.start + self.span
        return [
            (lane, f"elbow {'from' if lane == self.start else 'to' if lane == end else 'through'} {colour}")
            for lane in range(self.start, end + 1)
        ]


@dataclass
class Layout:
    branches: list[Branch]
    lanes: int
    attach_points: dict[int, list[Branch]]
    restore_targets: dict[int, list[int]]  # target seq → restore seqs
    undos: dict[int, tuple[int, int | None]] = field(default_factory=dict)  # undo seq → (restore seq, its target)

    @property
    def folded(self) -> frozenset[int]:
        """Restores undone right after them: shown in their undo's row, not as a row and a branch of their own."""
        return frozenset(restore for restore, _ in self.undos.values())

    @classmethod
    def for_session(cls, session: AgentSession) -> Layout:
        starts = list(Checkpoint.objects.for_session(session).branch_points())
        head_seq = session.head.seq if session.head is not None else None
        undos = _undos(session, starts)
        folded = frozenset(restore for restore, _ in undos.values())
        branches = branch_layout(session.last_seq, head_seq, [(seq, parent) for seq, parent, _ in starts], folded)
        attach_points: dict[int, list[Branch]] = {}
        for branch in branches:
            if branch.attach is not None:
                attach_points.setdefault(branch.attach, []).append(branch)
        targets: dict[int, list[int]] = {}
        for seq, parent, kind in starts:
            if parent is not None and kind == CheckpointKind.RESTORE and seq not in folded:
                targets.setdefault(parent, []).append(seq)
        return cls(branches, 1 + max((b.lane for b in branches), default=0), attach_points, targets, undos)

    def branch_of(self, seq: int) -> Branch | None:
        return next((b for b in self.branches if b.lo <= seq <= b.hi), None)

    def graph(self, seq: int, node: str) -> tuple[list[Cell], Branch | None]:
        cells = [Cell(lane) for lane in range(self.lanes)]
        own = self.branch_of(seq)
        for branch in self.branches:
            cell = cells[branch.lane]
            if branch is own:
                cell.node = node
                cell.up = cell.up or seq < branch.hi
                cell.down = cell.down or seq > branch.lo or branch.attach is not None
            elif branch.attach is not None and branch.attach < seq < branch.lo:
                cell.up = cell.down = True
            elif branch.attach == seq:
                cell.up = True
                if own is not None and own.lane != branch.lane:
                    elbow = Elbow(branch.lane, min(own.lane, branch.lane), abs(own.lane - branch.lane))
                    for lane, css in elbow.segments():
                        cells[lane].segments.append(css)
        return cells, own


def _undos(session: AgentSession, starts: list[tuple[int, int | None, str]]) -> dict[int, tuple[int, int | None]]:
    """Undo seq → (the restore it undid, that restore's target), for undos made right after their restore
    (one small query, only for sessions that have restores)."""
    restores = {seq: parent for seq, parent, kind in starts if kind == CheckpointKind.RESTORE}
    if not restores:
        return {}
    marked = Checkpoint.objects.for_session(session).filter(seq__in=list(restores), metadata__has_key="undo_of_seq")
    undos: dict[int, tuple[int, int | None]] = {}
    for seq, undone in marked.values_list("seq", "metadata__undo_of_seq"):
        if undone == seq - 1 and undone in restores:
            undos[seq] = (undone, restores[undone])
    return undos


# ---- rows -------------------------------------------------------------------------------------------


@dataclass
class Row:
    checkpoint: Checkpoint
    cells: list[Cell]
    main: bool
    is_head: bool = False
    previous_id: int | None = None
    restored_by: list[int] = field(default_factory=list)
    undoes: tuple[int, int | None] | None = None  # (the restore this undo undid, that restore's target)
    forks: list[AgentSession] = field(default_factory=list)
    run: list[Checkpoint] = field(default_factory=list)  # a collapsed run: its checkpoints, newest first

    @property
    def first(self) -> Checkpoint:
        return self.run[-1] if self.run else self.checkpoint


@dataclass
class Page:
    rows: list[Row]
    lanes: int
    forks: list[AgentSession]  # sessions forked from any checkpoint of this one
    newer: int | None  # `after` for the newer page
    older: int | None  # `before` for the older page
    at_newest: bool
    query: str = ""  # this page's position, kept by the no-JavaScript links that expand a run

    @property
    def lane_slots(self) -> range:
        """One empty slot per lane in the header: they give the graph column its width."""
        return range(self.lanes)

    @property
    def top(self) -> int | None:
        return self.rows[0].checkpoint.seq if self.rows else None

    @property
    def bottom(self) -> int | None:
        return self.rows[-1].first.seq if self.rows else None


def _child_forks(session: AgentSession, user: Any) -> list[AgentSession]:
    queryset = AgentSession.objects.visible_to(user).filter(forked_from__session=session)
    return list(queryset.select_related("project", "forked_from").order_by("created_at", "pk")[:50])


def _build_rows(
    checkpoints: list[Checkpoint],
    below: Checkpoint | None,
    session: AgentSession,
    layout: Layout,
    child_forks: list[AgentSession],
    *,
    collapse: bool,
    expand: tuple[int, int] | None = None,
) -> list[Row]:
    """Rows for `checkpoints` (newest first); `below` is the checkpoint just older than the last one."""
    forks: dict[int, list[AgentSession]] = {}
    for fork in child_forks:
        forks.setdefault(fork.forked_from_id, []).append(fork)
    by_seq = {c.seq: c for c in checkpoints}
    if below is not None:
        by_seq[below.seq] = below

    def row(checkpoint: Checkpoint) -> Row:
        is_head = checkpoint.pk == session.head_id
        node = "head" if is_head else "restore" if checkpoint.kind == CheckpointKind.RESTORE else "dot"
        cells, own = layout.graph(checkpoint.seq, node)
        previous = checkpoint.parent_id
        if checkpoint.kind == CheckpointKind.RESTORE and checkpoint.seq - 1 in by_seq:
            previous = by_seq[checkpoint.seq - 1].pk  # what the restore changed: the head it replaced
        return Row(
            checkpoint,
            cells,
            main=own.main if own else True,
            is_head=is_head,
            previous_id=previous,
            restored_by=layout.restore_targets.get(checkpoint.seq, []),
            undoes=layout.undos.get(checkpoint.seq),
            forks=forks.get(checkpoint.pk, []),
        )

    def routine(checkpoint: Checkpoint) -> bool:
        return (
            checkpoint.kind == CheckpointKind.ROUTINE
            and checkpoint.status == CheckpointStatus.COMPLETED
            and not checkpoint.pinned
            and checkpoint.pk != session.head_id
            and checkpoint.seq not in layout.attach_points
            and checkpoint.pk not in forks
            and not (expand and expand[0] <= checkpoint.seq <= expand[1])
        )

    rows: list[Row] = []
    folded = layout.folded
    i = 0
    while i < len(checkpoints):
        if checkpoints[i].seq in folded:  # shown in its undo's row
            i += 1
            continue
        j = i
        if collapse:
            while j < len(checkpoints) and routine(checkpoints[j]) and (j == i or _same_run(checkpoints, j, layout)):
                j += 1
        if j - i >= RUN_MIN:
            rows.append(_run_row(checkpoints[i:j], layout))
            i = j
        else:
            rows.append(row(checkpoints[i]))
            i += 1
    return rows


def _same_run(checkpoints: list[Checkpoint], j: int, layout: Layout) -> bool:
    newer, older = checkpoints[j - 1], checkpoints[j]
    return layout.branch_of(newer.seq) is layout.branch_of(older.seq)


def _run_row(run: list[Checkpoint], layout: Layout) -> Row:
    top_cells, own = layout.graph(run[0].seq, "run")
    bottom_cells, _ = layout.graph(run[-1].seq, "run")
    if own is not None:
        top_cells[own.lane].down = bottom_cells[own.lane].down
    return Row(run[0], top_cells, main=own.main if own else True, run=run)


def timeline_page(
    session: AgentSession,
    *,
    before: int | None = None,
    after: int | None = None,
    at: int | None = None,
    expand: tuple[int, int] | None = None,
    user: Any,
) -> Page:
    """One page of the timeline, newest first: keyset pagination on seq (`before` / `after` / `at`)."""
    queryset = Checkpoint.objects.for_session(session).for_timeline()
    before = at + 1 if at is not None else before
    if after is not None and before is None:
        fetched = list(queryset.filter(seq__gt=after).order_by("seq")[: PAGE_SIZE + 1])
        has_newer = len(fetched) > PAGE_SIZE
        checkpoints = fetched[:PAGE_SIZE][::-1]
        below = queryset.filter(seq__lte=after).order_by("-seq").first()
    else:
        if before is not None:
            queryset = queryset.filter(seq__lt=before)
        fetched = list(queryset.order_by("-seq")[: PAGE_SIZE + 1])
        checkpoints, below = fetched[:PAGE_SIZE], fetched[PAGE_SIZE] if len(fetched) > PAGE_SIZE else None
        top = checkpoints[0].seq if checkpoints else (before or 1) - 1
        has_newer = before is not None and top < session.last_seq
    layout = Layout.for_session(session)
    forks = _child_forks(session, user)
    rows = _build_rows(checkpoints, below, session, layout, forks, collapse=True, expand=expand)
    return Page(
        rows=rows,
        lanes=layout.lanes,
        forks=forks,
        newer=(checkpoints[0].seq if checkpoints else (before or 1) - 1) if has_newer else None,
        older=checkpoints[-1].seq if below is not None and checkpoints else None,
        at_newest=before is None and after is None,
        query=f"before={before}" if before is not None else f"after={after}" if after is not None else "",
    )


def expanded_run(session: AgentSession, span: tuple[int, int], *, user: Any) -> Page:
    """The checkpoints of a collapsed run, for the htmx request that opens it."""
    queryset = Checkpoint.objects.for_session(session).for_timeline()
    checkpoints = list(queryset.filter(seq__gte=span[0], seq__lte=span[1]).order_by("-seq")[:EXPAND_MAX])
    layout = Layout.for_session(session)
    forks = _child_forks(session, user)
    rows = _build_rows(checkpoints, None, session, layout, forks, collapse=False)
    return Page(rows, layout.lanes, forks, newer=None, older=None, at_newest=False)


# ---- header, phases and charts ----------------------------------------------------------------------


def session_overview(session: AgentSession) -> dict[str, Any]:
    """What the full page shows above the timeline: counts, alerts, forks, phases, charts."""
    checkpoints = Checkpoint.objects.for_session(session).order_by()
    stats = checkpoints.aggregate(
        count=Count("pk"),
        raw_bytes=Sum("raw_bytes"),
        stored_bytes=Sum("stored_bytes"),
        failed=Count("pk", filter=Q(status__in=[CheckpointStatus.FAILED, CheckpointStatus.HALTED])),
        first_at=Min("created_at"),
        last_at=Max("created_at"),
    )
    return {
        "stats": stats,
        "open_alerts": DriftAlert.objects.filter(session=session).open().count(),
        "phases": list(session.phases.order_by("number")),
        "charts": session_charts(session, stats) if stats["count"] else None,
    }


def session_charts(session: AgentSession, stats: dict[str, Any]) -> dict[str, Any]:
    """Chart series from two grouped queries: at most CHART_POINTS seq buckets, and one bucket per hour/day/week."""
    checkpoints = Checkpoint.objects.for_session(session).order_by()
    width = max(1, math.ceil(session.last_seq / CHART_POINTS))
    buckets = (
        checkpoints.annotate(bucket=(F("seq") - 1) / width)
        .values("bucket")
        .annotate(first=Min("seq"), last=Max("seq"), raw=Max("raw_bytes"), stored=Sum("stored_bytes"))
        .order_by("bucket")
    )
    raw_points, stored_points, stored = [], [], 0
    for i, bucket in enumerate(buckets):  # by seq, not by time: a restore's clock is the operator's, not the agent's
        stored += bucket["stored"] or 0
        seq = bucket["first"] if i == 0 else bucket["last"]
        raw_points.append((seq, bucket["raw"] or 0))
        stored_points.append((seq, stored))
    span: timedelta = stats["last_at"] - stats["first_at"]
    unit, trunc, step = (
        ("hour", TruncHour, timedelta(hours=1))
        if span <= timedelta(days=7)
        else ("day", TruncDay, timedelta(days=1))
        if span <= timedelta(days=365)
        else ("week", TruncWeek, timedelta(weeks=1))
    )
    activity = list(
        checkpoints.annotate(slot=trunc("created_at"))
        .values("slot")
        .annotate(
            total=Count("pk"),
            steps=Count("pk", filter=Q(kind=CheckpointKind.STEP)),
            failed=Count("pk", filter=Q(status__in=[CheckpointStatus.FAILED, CheckpointStatus.HALTED])),
        )
        .order_by("slot")
    )
    use_steps = any(slot["steps"] for slot in activity)
    failed = stats["failed"]
    return {
        "size": [
            {"label": "State size (raw JSON)", "points": raw_points, "css": "series-raw"},
            {"label": "Stored, in total", "points": stored_points, "css": "series-stored", "axis": "right"},
        ],
        "unit": unit,
        "slot": step,
        "rate_label": f"{'Steps' if use_steps else 'Checkpoints'} per {unit}",
        "rate_unit": "steps" if use_steps else "checkpoints",
        "rate": [(slot["slot"], slot["steps"] if use_steps else slot["total"]) for slot in activity],
        "error_label": f"Error rate per {unit}",
        "error_note": (
            f"{failed} of {stats['count']} checkpoints failed or halted."
            if failed
            else "No failed or halted checkpoints."
        ),
        "errors": [(slot["slot"], 100 * slot["failed"] / slot["total"]) for slot in activity if slot["total"]],
    }
