"""One page of a session's timeline: its checkpoint tree, newest first, as rows the template draws.

The branches are laid out by `presenters.branches`. A folded side branch's checkpoints are left out of the
page's fetch, and the rows naming the side branches a page shows get their counts from one grouped query,
however many branches the session has: a page of a 10,000-checkpoint session with a hundred branches costs
the same handful of queries as a page of a short one.
"""

from __future__ import annotations

import operator
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache, reduce
from typing import Any, ClassVar

from django.db.models import Case, Count, IntegerField, Max, Min, Q, Value, When
from django.urls import reverse
from django.utils.http import urlencode

from checkpoints.models import AgentSession, Checkpoint, CheckpointKind, CheckpointQuerySet, CheckpointStatus

from .branches import Branch, Cell, Folding, Layout, Start, Stretch, is_langgraph, namespace, short_namespace
from .checkpoint import Nodes, nodes_view, with_nodes
from .secrets import mask_rows

PAGE_SIZE = 60  # checkpoints per timeline page: at ~1.1 kB a row, a first view stays under 100 kB (docs/benchmarks.md)
RUN_MIN = 3  # this many consecutive routine checkpoints collapse into one row
EXPAND_MAX = 500  # most rows one expanded run shows
WINDOW = 2 * PAGE_SIZE  # a page's fetch takes stretches of seqs until they hold this many (a folded branch: one)…
SPANS_MAX = 100  # …or this many stretches between folded branches


@cache
def _checkpoints_url() -> str:
    return reverse("dashboard:checkpoint_detail", args=[1]).removesuffix("1/")


@dataclass
class CheckpointRow:
    """A timeline row for one checkpoint (or a collapsed run of them), beside `BranchRow` and `GapRow`."""

    checkpoint: Checkpoint
    cells: list[Cell]
    stretch: Stretch | None
    is_head: bool = False
    previous_id: int | None = None
    start: Start | None = None  # what it starts, unless its name says so already
    restored_by: list[int] = field(default_factory=list)
    undoes: tuple[int, int | None] | None = None  # (the restore this undo undid, that restore's target)
    forks: list[AgentSession] = field(default_factory=list)
    run: list[Checkpoint] = field(default_factory=list)  # a collapsed run: its checkpoints, newest first
    subgraph_runs: list[SubgraphRun] = field(default_factory=list)  # LangGraph: the runs made under it, folded
    is_branch: ClassVar[bool] = False
    is_gap: ClassVar[bool] = False

    @property
    def url(self) -> str:
        """The checkpoint's page; its actions are below it (restore/, fork/, pin/). Reversed once per process:
        six reverses a row were a fifth of a 100-row page's time."""
        return f"{_checkpoints_url()}{self.checkpoint.pk}/"

    @property
    def branch(self) -> Branch | None:
        return self.stretch.branch if self.stretch else None

    @property
    def namespace(self) -> str:
        """The LangGraph subgraph namespace it was sent in (`_rows_of` reads it); empty for the root graph."""
        return getattr(self.checkpoint, "namespace", None) or ""

    @property
    def nodes(self) -> Nodes | None:
        """A LangGraph checkpoint's nodes: those that wrote it and those that run next (`_rows_of` reads them)."""
        return nodes_view(getattr(self.checkpoint, "lg_nodes", None))

    @property
    def namespace_label(self) -> str:
        return short_namespace(self.namespace)

    @property
    def main(self) -> bool:
        return self.branch.main if self.branch else True

    @property
    def first(self) -> Checkpoint:
        return self.run[-1] if self.run else self.checkpoint

    @property
    def top(self) -> int:
        return self.checkpoint.seq

    @property
    def bottom(self) -> int:
        return self.first.seq


@dataclass(frozen=True)
class SubgraphRun:
    """A LangGraph subgraph's run, folded into the root-graph row it ran under: its namespace and seqs."""

    namespace: str
    first: int
    last: int
    count: int
    failed: int

    @property
    def label(self) -> str:
        return short_namespace(self.namespace)


@dataclass
class Summary:
    """What a side branch's row says about it."""

    count: int
    first_at: datetime
    last_at: datetime
    failed: int
    tool_failed: int
    pinned: int
    forks: int
    newest: Checkpoint | None  # only for a folded branch: its checkpoints are not on the page


@dataclass
class BranchRow:
    """The row naming a side branch: a folded one's summary in its place, or an open one's heading above its rows."""

    branch: Branch
    cells: list[Cell]
    summary: Summary
    toggle: str  # the query string that folds or opens it
    top: int
    is_branch: ClassVar[bool] = True
    is_gap: ClassVar[bool] = False

    @property
    def bottom(self) -> int:
        return self.branch.lo if self.branch.folded else self.top


@dataclass
class GapRow:
    """Seqs `lo`…`hi` that are gone (retention, or an operator, deleted them): said, not skipped silently."""

    lo: int
    hi: int
    cells: list[Cell]
    is_branch: ClassVar[bool] = False
    is_gap: ClassVar[bool] = True

    @property
    def top(self) -> int:
        return self.hi

    @property
    def bottom(self) -> int:
        return self.lo

    @property
    def count(self) -> int:
        return self.hi - self.lo + 1


@dataclass
class Page:
    rows: list[CheckpointRow | BranchRow | GapRow]
    lanes: int
    forks: list[AgentSession]  # sessions forked from any checkpoint of this one
    newer: int | None  # `after` for the newer page
    older: int | None  # `before` for the older page
    at_newest: bool
    query: str = ""  # this page's position and folding, kept by the no-JavaScript links that expand a run
    folding: str = ""  # which branches are open or folded against the default, kept by the pager's links
    at: int | None = None  # the checkpoint jumped to: its row is highlighted

    @property
    def lane_slots(self) -> range:
        """One empty slot per lane in the header: they give the graph column its width."""
        return range(self.lanes)

    @property
    def top(self) -> int | None:
        return self.rows[0].top if self.rows else None

    @property
    def bottom(self) -> int | None:
        return self.rows[-1].bottom if self.rows else None


def _rows_of(session: AgentSession) -> CheckpointQuerySet:
    """The checkpoints as rows read them; a LangGraph thread's with the namespace each was sent in and the nodes
    that wrote it and run next (keys of small metadata, in the same query: other sessions' metadata can be large
    and stays behind)."""
    queryset = Checkpoint.objects.for_session(session).for_timeline()
    if not is_langgraph(session):
        return queryset
    return with_nodes(queryset, session).annotate(namespace=namespace())


def _subgraph_runs(session: AgentSession, lo: int, hi: int) -> list[SubgraphRun]:
    """The subgraph runs of a LangGraph thread within seqs lo…hi, oldest first, in one grouped query over that range
    (a page's rows and the runs between them): the cost follows the page, not the thread's number of runs."""
    rows = (
        Checkpoint.objects.for_session(session)
        .filter(seq__range=(lo, hi))
        .annotate(ns=namespace())
        .filter(ns__gt="")
        .order_by()
        .values("ns")
        .annotate(
            first=Min("seq"),
            last=Max("seq"),
            count=Count("pk"),
            failed=Count("pk", filter=Q(status__in=[CheckpointStatus.FAILED, CheckpointStatus.HALTED])),
        )
    )
    runs = [SubgraphRun(r["ns"], r["first"], r["last"], r["count"], r["failed"]) for r in rows]
    return sorted(runs, key=lambda run: (run.first, run.namespace))


def _opened_run(session: AgentSession, at: int | None) -> tuple[int, int] | None:
    """The seqs between the root-graph checkpoints around `at` when `at` is a subgraph's checkpoint: the runs made
    there, shown open (every namespace's rows). Three small queries on the (session, seq) index."""
    if at is None or not is_langgraph(session):
        return None
    checkpoints = Checkpoint.objects.for_session(session).annotate(ns=namespace()).order_by()
    if not checkpoints.filter(seq=at, ns__gt="").exists():
        return None
    roots = checkpoints.filter(ns="").values_list("seq", flat=True)
    below = roots.filter(seq__lt=at).order_by("-seq").first()
    above = roots.filter(seq__gt=at).order_by("seq").first()
    return ((below or 0) + 1, (above or session.last_seq + 1) - 1)


def _fold_runs(
    rows: list[CheckpointRow], runs: list[SubgraphRun], opened: tuple[int, int] | None, hidden: list[Stretch]
) -> None:
    """Give each root-graph row the runs that started after it and before the next row up: not those shown open
    (`opened`), nor those made within a folded branch (`hidden`), which ran under a row the page does not show."""
    roots = sorted((row for row in rows if not row.namespace), key=lambda row: row.top)
    tops, los = [row.top for row in roots], [stretch.lo for stretch in hidden]
    for run in runs:
        if opened and opened[0] <= run.first <= opened[1]:
            continue
        at = bisect_right(los, run.first) - 1
        if at >= 0 and run.first <= hidden[at].hi:
            continue
        index = bisect_right(tops, run.first) - 1
        if index >= 0:
            roots[index].subgraph_runs.append(run)


def _child_forks(session: AgentSession, user: Any) -> list[AgentSession]:
    queryset = AgentSession.objects.visible_to(user).forks_of(session)
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
) -> list[CheckpointRow]:
    """Rows for `checkpoints` (newest first); `below` is the checkpoint just older than the last one."""
    mask_rows(checkpoints, session.project)
    forks: dict[int | None, list[AgentSession]] = {}  # by the checkpoint forked from (always set: these are forks)
    for fork in child_forks:
        forks.setdefault(fork.forked_from_id, []).append(fork)
    by_seq = {c.seq: c for c in checkpoints}
    if below is not None:
        by_seq[below.seq] = below

    def row(checkpoint: Checkpoint) -> CheckpointRow:
        is_head = checkpoint.pk == session.head_id
        node = "head" if is_head else "restore" if checkpoint.kind == CheckpointKind.RESTORE else "dot"
        cells, own = layout.graph(checkpoint.seq, checkpoint.seq, node)
        previous = checkpoint.parent_id
        if checkpoint.kind == CheckpointKind.RESTORE and checkpoint.seq - 1 in by_seq:
            previous = by_seq[checkpoint.seq - 1].pk  # what the restore changed: the head it replaced
        start = layout.starts.get(checkpoint.seq)
        undoes = layout.undos.get(checkpoint.seq)
        return CheckpointRow(
            checkpoint,
            cells,
            own,
            is_head=is_head,
            previous_id=previous,
            start=start if start and start.label and start.label != checkpoint.name and not undoes else None,
            restored_by=layout.restore_targets.get(checkpoint.seq, []),
            undoes=undoes,
            forks=forks.get(checkpoint.pk, []),
        )

    def routine(checkpoint: Checkpoint) -> bool:
        return (
            checkpoint.kind == CheckpointKind.ROUTINE
            and checkpoint.status == CheckpointStatus.COMPLETED
            and not checkpoint.tool_failed
            and not checkpoint.pinned
            and checkpoint.pk != session.head_id
            and checkpoint.seq not in layout.attach_points
            and checkpoint.pk not in forks
            and not (expand and expand[0] <= checkpoint.seq <= expand[1])
        )

    rows: list[CheckpointRow] = []
    undone = layout.undone
    i = 0
    while i < len(checkpoints):
        if checkpoints[i].seq in undone:  # shown in its undo's row
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
    return layout.stretch_of(newer.seq) is layout.stretch_of(older.seq)


def _run_row(run: list[Checkpoint], layout: Layout) -> CheckpointRow:
    cells, own = layout.graph(run[-1].seq, run[0].seq, "run")
    return CheckpointRow(run[0], cells, own, run=run)


def _with_branch_rows(
    rows: list[CheckpointRow],
    folds: list[Branch],
    summaries: dict[int, Summary],
    layout: Layout,
    toggle: Callable[[Branch], str],
) -> list[CheckpointRow | BranchRow]:
    """`rows` with a row for each side branch on the page: a folded branch's summary where its newest checkpoint
    would be, and a heading above the newest row of an open one, joined to it by the line of that row."""
    waiting = sorted((b for b in folds if b.lo in summaries), key=lambda b: -b.hi)
    out: list[CheckpointRow | BranchRow] = []
    headed: set[int] = set()

    def folded(branch: Branch) -> BranchRow:
        cells, _ = layout.graph(branch.hi, branch.hi, "fold", layout.folds[branch.lo])
        return BranchRow(branch, cells, summaries[branch.lo], toggle(branch), branch.hi)

    for row in rows:
        while waiting and waiting[0].hi > row.top:
            out.append(folded(waiting.pop(0)))
        branch, stretch = row.branch, row.stretch
        if branch is not None and stretch is not None and not branch.main and branch.lo not in headed:
            headed.add(branch.lo)
            if branch.lo in summaries:
                cells, _ = layout.graph(row.top + 0.5, row.top + 0.5, "open", stretch)
                out.append(BranchRow(branch, cells, summaries[branch.lo], toggle(branch), row.top))
                row.cells[stretch.lane].up = True
        out.append(row)
    out.extend(folded(branch) for branch in waiting)
    return out


def _summaries(session: AgentSession, branches: list[Branch], forks: list[AgentSession]) -> dict[int, Summary]:
    """Each branch's count, times, failures and pins in one grouped query, and the newest checkpoint of each
    folded one in a second: two queries for any number of branches. Keyed by the branch's first seq."""
    if not branches:
        return {}
    spans = [(s.lo, s.hi, branch.lo) for branch in branches for s in _merged(branch.stretches)]
    which = Case(*(When(seq__range=(lo, hi), then=Value(key)) for lo, hi, key in spans), output_field=IntegerField())
    checkpoints = Checkpoint.objects.for_session(session).order_by()
    groups = list(  # a flat CASE, and one range around it all: SQLite refuses conditions nested 1,000 deep
        checkpoints.filter(seq__range=(min(lo for lo, _, _ in spans), max(hi for _, hi, _ in spans)))
        .annotate(branch=which)
        .values("branch")
        .annotate(
            count=Count("pk"),
            newest=Max("seq"),
            first_at=Min("created_at"),
            last_at=Max("created_at"),
            failed=Count("pk", filter=Q(status__in=[CheckpointStatus.FAILED, CheckpointStatus.HALTED])),
            tool_failed=Count("pk", filter=Q(tool_failed=True)),
            pinned=Count("pk", filter=Q(pinned=True)),
        )
    )
    folded = {b.lo for b in branches if b.folded}
    newest_seqs = [group["newest"] for group in groups if group["branch"] in folded]
    newest = {c.seq: c for c in checkpoints.for_timeline().filter(seq__in=newest_seqs)} if newest_seqs else {}
    fork_seqs = [fork.forked_from.seq for fork in forks if fork.forked_from]
    by_lo = {b.lo: b for b in branches}
    summaries: dict[int, Summary] = {}
    for group in groups:
        if group["branch"] is None:  # between the branches' stretches
            continue
        branch = by_lo[group["branch"]]
        summaries[branch.lo] = Summary(
            count=group["count"],
            first_at=group["first_at"],
            last_at=group["last_at"],
            failed=group["failed"],
            tool_failed=group["tool_failed"],
            pinned=group["pinned"],
            forks=sum(any(s.lo <= seq <= s.hi for s in branch.stretches) for seq in fork_seqs),
            newest=newest.get(group["newest"]),
        )
    return summaries


def _merged(stretches: list[Stretch]) -> list[Stretch]:
    """The same seqs in as few stretches as can hold them (neighbours joined), by lo."""
    out: list[Stretch] = []
    for stretch in sorted(stretches, key=lambda s: s.lo):
        if out and out[-1].hi + 1 == stretch.lo:
            out[-1] = Stretch(out[-1].lo, stretch.hi, None)
        else:
            out.append(stretch)
    return out


@dataclass
class Window:
    """Where one page's fetch looks: stretches of shown seqs, from the page's near end to `edge`."""

    spans: list[tuple[int, int]]
    edge: int  # the far end: the lowest seq it covers going back, the highest going forward
    complete: bool  # it reaches the session's first (going back) or last (going forward) seq


def _window(hidden: list[Stretch], lo: int, hi: int, *, newest_first: bool) -> Window:
    """The stretches of seqs lo…hi outside folded branches (`hidden`, by lo, apart), walked from `hi` down
    (or from `lo` up) until they hold enough seqs and folded stretches for a page, or SPANS_MAX stretches:
    the fetch stays one range scan with a bounded condition, however many branches are folded."""
    items: list[tuple[int, int, bool]] = []  # (lo, hi, folded), ascending
    at = lo
    for stretch in hidden:
        if stretch.hi < lo or stretch.lo > hi:
            continue
        if stretch.lo > at:
            items.append((at, stretch.lo - 1, False))
        items.append((max(stretch.lo, lo), min(stretch.hi, hi), True))
        at = stretch.hi + 1
    if at <= hi:
        items.append((at, hi, False))
    if newest_first:
        items.reverse()
    spans: list[tuple[int, int]] = []
    seen = 0  # seqs (a folded branch counts one) the window holds so far
    for i, (start, end, folded) in enumerate(items):
        if seen >= WINDOW or len(spans) >= SPANS_MAX:
            return Window(spans, items[i - 1][0] if newest_first else items[i - 1][1], complete=False)
        seen += 1 if folded else end - start + 1
        if not folded:
            spans.append((start, end))
    return Window(spans, lo if newest_first else hi, complete=True)


def _in_spans(spans: list[tuple[int, int]]) -> Q:
    """Seq in any of `spans`; none: nothing at all (Django then runs no query)."""
    return reduce(operator.or_, (Q(seq__range=span) for span in spans)) if spans else Q(pk__in=[])


def timeline_page(
    session: AgentSession,
    *,
    before: int | None = None,
    after: int | None = None,
    at: int | None = None,
    expand: tuple[int, int] | None = None,
    folding: Folding | None = None,
    user: Any,
) -> Page:
    """One page of the timeline, newest first: keyset pagination on seq (`before` / `after` / `at`).

    A page holds up to PAGE_SIZE checkpoints that are shown (a folded branch's are not fetched) and the
    row of each folded branch whose newest seq lies between the page's ends; `at` opens its branch.
    """
    layout = Layout.for_session(session)
    folding = folding or Folding()
    opened_run = _opened_run(session, at)
    if at is not None:
        folding = folding.opening(layout.branch_of(at))
    layout.fold(folding)
    folded = [b for b in layout.branches if b.folded]
    hidden = _merged([s for b in folded for s in b.stretches] + [Stretch(seq, seq, None) for seq in layout.undone])
    queryset = _rows_of(session)
    if is_langgraph(session):  # the root graph's rows; a subgraph's only where its run is shown open
        queryset = queryset.filter(Q(namespace="") | Q(seq__range=opened_run) if opened_run else Q(namespace=""))
    before = at + 1 if at is not None else before
    expand = expand or ((at, at) if at is not None else None)  # the checkpoint jumped to is never in a run
    below = None
    if after is not None and before is None:
        low = after + 1
        window = _window(hidden, low, session.last_seq, newest_first=False)
        fetched = list(queryset.filter(_in_spans(window.spans)).order_by("seq")[: PAGE_SIZE + 1])
        checkpoints = fetched[:PAGE_SIZE][::-1]
        high = checkpoints[0].seq if len(fetched) > PAGE_SIZE else window.edge
        has_older = low > 1
        floor = low
    else:
        high = min(before - 1, session.last_seq) if before is not None else session.last_seq
        window = _window(hidden, 1, high, newest_first=True)
        fetched = list(queryset.filter(_in_spans(window.spans)).order_by("-seq")[: PAGE_SIZE + 1])
        checkpoints, below = fetched[:PAGE_SIZE], fetched[PAGE_SIZE] if len(fetched) > PAGE_SIZE else None
        low = checkpoints[-1].seq if below is not None else window.edge
        has_older = below is not None or not window.complete
        floor = below.seq + 1 if below is not None else low  # a gap down to the next page's top is told here
    folds = [b for b in folded if low <= b.hi <= high]
    opened = {b.lo: b for b in map(layout.branch_of, (c.seq for c in checkpoints)) if b is not None and not b.main}
    forks = _child_forks(session, user)
    summaries = _summaries(session, folds + list(opened.values()), forks)
    anchor = [("before", high + 1)] if high < session.last_seq else []  # toggles keep the page's top in place
    layout.focus(min(low, floor, below.seq if below is not None else low) - 1, high + 1)
    rows = _build_rows(checkpoints, below, session, layout, forks, collapse=True, expand=expand)
    runs = _subgraph_runs(session, floor, high) if is_langgraph(session) and checkpoints else []
    _fold_runs(rows, [run for run in runs if run.first > low], opened_run, hidden)
    shown = hidden + [Stretch(run.first, run.last, None) for run in runs]
    gaps = _gaps([c.seq for c in checkpoints], shown, floor, high) if checkpoints else []
    return Page(
        rows=_with_gaps(
            _with_branch_rows(
                rows, folds, summaries, layout, lambda branch: urlencode(anchor + folding.toggled(branch).params())
            ),
            gaps,
            layout,
        ),
        lanes=layout.lanes,
        forks=forks,
        newer=high if high < session.last_seq else None,
        older=low if has_older else None,
        at_newest=before is None and after is None,
        query=urlencode(anchor + folding.params()),
        folding=urlencode(folding.params()),
        at=at,
    )


def _gaps(present: list[int], hidden: list[Stretch], lo: int, hi: int) -> list[tuple[int, int]]:
    """The runs of seqs lo…hi that are neither fetched nor in a folded branch, newest first: the fetch read
    every other seq of the range, so these are no longer stored (seqs are gapless when written)."""
    taken = sorted([(seq, seq) for seq in present] + [(s.lo, s.hi) for s in hidden if s.hi >= lo and s.lo <= hi])
    gaps: list[tuple[int, int]] = []
    at = lo
    for start, end in taken:
        if start > at:
            gaps.append((at, start - 1))
        at = max(at, end + 1)
    if at <= hi:
        gaps.append((at, hi))
    return gaps[::-1]


def _with_gaps(
    rows: list[CheckpointRow | BranchRow], gaps: list[tuple[int, int]], layout: Layout
) -> list[CheckpointRow | BranchRow | GapRow]:
    """`rows` with a marker row where each gap (newest first) falls: below the row it follows."""
    out: list[CheckpointRow | BranchRow | GapRow] = []
    waiting = list(gaps)

    def marker(gap: tuple[int, int]) -> GapRow:
        return GapRow(*gap, layout.graph(gap[0], gap[1], "")[0])

    for row in rows:
        while waiting and waiting[0][0] > row.top:
            out.append(marker(waiting.pop(0)))
        out.append(row)
    out.extend(map(marker, waiting))
    return out


def expanded_run(session: AgentSession, span: tuple[int, int], *, folding: Folding, user: Any) -> Page:
    """The checkpoints of a collapsed run, for the htmx request that opens it (drawn with the page's folding)."""
    queryset = _rows_of(session)
    checkpoints = list(queryset.filter(seq__gte=span[0], seq__lte=span[1]).order_by("-seq")[:EXPAND_MAX])
    layout = Layout.for_session(session)
    layout.fold(folding)
    forks = _child_forks(session, user)
    rows = _build_rows(checkpoints, None, session, layout, forks, collapse=False)
    return Page(list(rows), layout.lanes, forks, newer=None, older=None, at_newest=False)
