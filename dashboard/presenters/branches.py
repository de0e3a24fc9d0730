"""The timeline's branch layout: which lane each stretch of a session's checkpoint tree is drawn in.

A restore, a checkpoint an agent sends with an earlier parent (time travel, an importer's tree) or a
new root adds a checkpoint whose parent is not the one before it, so history forks there: the
checkpoints between form a side branch, and the newer ones continue the line that leads to the head.
The layout is computed from those branch starts alone (one small query on a partial index), whatever
the session's size. The head's line is lane 0 and never folds; side branches fold (see `Folding`).
"""

from __future__ import annotations

from bisect import bisect_right, insort
from dataclasses import dataclass, field
from functools import cached_property

from django.db.models import TextField
from django.db.models.fields.json import KT
from django.db.models.functions import Cast

from checkpoints.models import AgentSession, Checkpoint, CheckpointKind, SourceFormat

FOLD_OVER = 3  # a side branch of more checkpoints than this starts folded (see Folding)
LANE_COLOURS = 6


@dataclass
class Stretch:
    """Consecutive seqs `lo`…`hi` of one line, drawn in one lane, growing out of the checkpoint `attach`."""

    lo: int
    hi: int
    attach: int | None
    lane: int = 0
    branch: Branch | None = field(default=None, repr=False)

    @property
    def bottom(self) -> int:
        return self.attach if self.attach is not None else self.lo

    @property
    def size(self) -> int:
        return self.hi - self.lo + 1


@dataclass(eq=False)
class Branch:
    """What an operator folds and opens: the head's line (never folded), or everything that hangs from one
    checkpoint of it, or from nothing (a run of its own), with every later fork off that.

    Its first line runs from its newest checkpoint down to where it hangs; forks off it add more lines."""

    root: Stretch  # its first line's oldest stretch: where it hangs
    main: bool
    stretches: list[Stretch] = field(default_factory=list)  # its first line's first, newest first
    origin: str = ""  # how it began, as its row says: "branched from #12", "new run", …
    folded: bool = False

    @cached_property
    def lo(self) -> int:
        """Its first seq: how the URL names it."""
        return min(s.lo for s in self.stretches)

    @property
    def hi(self) -> int:
        return self.stretches[0].hi

    @property
    def attach(self) -> int | None:
        """The checkpoint of the head's line it hangs from; None for a run of its own."""
        return self.root.attach

    @property
    def lane(self) -> int:
        return self.stretches[0].lane

    @cached_property
    def size(self) -> int:
        return sum(s.size for s in self.stretches)

    @property
    def is_run(self) -> bool:
        """A whole run of its own (the session's first, or a new root), not a branch off another line."""
        return self.attach is None


def branch_layout(last_seq: int, head_seq: int | None, starts: list[tuple[int, int | None]]) -> list[Branch]:
    """The head's line in lane 0, then each side branch, newest first, its lines in side lanes.

    Seqs are split into segments at each branch start (a restore, a checkpoint sent with an earlier
    parent, a new root; every other checkpoint's parent is the one before it). A line runs down a
    segment to its start, jumps to the start's parent, and so on, until it meets a line drawn before
    (or a root). The head's line is drawn first, then a line from each newest checkpoint not drawn yet;
    a line that meets the head's line starts a side branch, one that meets a side branch joins it.
    """
    if last_seq < 1:
        return []
    parent_of = {seq: parent for seq, parent in starts if 1 < seq <= last_seq}
    firsts = sorted({1, *parent_of})
    segments = [
        (first, firsts[i + 1] - 1 if i + 1 < len(firsts) else last_seq, parent_of.get(first))
        for i, first in enumerate(firsts)
    ]
    drawing = _Drawing(firsts, segments)
    head = drawing.line(head_seq if head_seq and head_seq <= last_seq else last_seq)
    main = Branch(head[-1], main=True, stretches=head)
    for stretch in head:
        stretch.branch = main
    branches = [main]
    lowest: list[int] = []  # per side lane, the lowest seq its lines reach so far
    for index in reversed(range(len(segments))):
        first, last, _ = segments[index]
        if drawing.drawn.get(index, first - 1) >= last:
            continue
        stretches = drawing.line(last)
        host = drawing.owner(stretches[-1].attach) if stretches[-1].attach is not None else main
        branch = host if not host.main else Branch(stretches[-1], main=False)
        if branch is not host:
            branches.append(branch)
        lane = next((i for i, reach in enumerate(lowest) if stretches[0].hi < reach), len(lowest))
        if lane == len(lowest):
            lowest.append(0)
        lowest[lane] = stretches[-1].bottom
        for stretch in stretches:
            stretch.lane, stretch.branch = lane + 1, branch
        branch.stretches += stretches
    return branches


class _Drawing:
    """The lines `branch_layout` has drawn so far over the session's segments (first seq, last seq, the first's
    parent), each segment split at the branch starts."""

    def __init__(self, firsts: list[int], segments: list[tuple[int, int, int | None]]) -> None:
        self.firsts, self.segments = firsts, segments
        self.drawn: dict[int, int] = {}  # segment index → the top of its drawn part (always a prefix: a chain)
        self.placed: list[Stretch] = []  # every stretch, by lo

    def line(self, seq: int | None) -> list[Stretch]:
        """Draw the line down from `seq` until it meets one drawn before (or a root); its stretches, top first."""
        stretches: list[Stretch] = []
        while seq is not None:
            index = bisect_right(self.firsts, seq) - 1
            first, _, attach = self.segments[index]
            top = self.drawn.get(index)
            if top is not None and seq <= top:
                break  # it meets a line drawn before here
            self.drawn[index] = seq
            stretches.append(Stretch(first if top is None else top + 1, seq, attach if top is None else top))
            if top is not None:
                break
            seq = attach
        for stretch in stretches:
            insort(self.placed, stretch, key=lambda s: s.lo)
        return stretches

    def owner(self, seq: int) -> Branch:
        branch = self.placed[bisect_right(self.placed, seq, key=lambda s: s.lo) - 1].branch
        # lines are drawn newest first: what one meets belongs to a branch already (the assert is for mypy)
        assert branch is not None  # noqa: S101
        return branch


@dataclass(frozen=True)
class Start:
    """A checkpoint whose parent is not the one before it: what it is, for its label."""

    parent: int | None  # seq; None for a new root
    kind: str

    @property
    def label(self) -> str:
        """What the row says about it."""
        if self.parent is None:
            return "new run"
        if self.kind == CheckpointKind.RESTORE:
            return f"restore of #{self.parent}"
        return f"branched from #{self.parent}"


def _origin(branch: Branch, starts: dict[int, Start], leavers: dict[int | None, int]) -> str:
    """How a branch began: at a branch start, as the first run, or left behind when the head's line went back
    (`leavers`: where the head's line goes back to → the branch start that goes there)."""
    root = branch.root
    if root.lo in starts and starts[root.lo].label:
        return starts[root.lo].label
    if root.lo == 1:
        return "first run"
    if root.attach not in leavers:  # the head is not the newest checkpoint of its line
        return f"after the head #{root.attach}"
    return f"left behind by #{leavers[root.attach]}, {starts[leavers[root.attach]].label}"


@dataclass(frozen=True)
class Folding:
    """Which side branches are folded into one row: the default, and the operator's choices the URL keeps.

    By default a side branch of more than FOLD_OVER checkpoints is folded. The head's line is what the
    agent resumes from and stays open; a long stretch of history it left behind (an earlier run, a path
    a restore or time travel abandoned) would push that line off the page, while a short one (the few
    steps a restore undid) costs hardly more rows than its summary and shows at a glance what was undone.
    `open` and `fold` in the URL name branches (by their first seq) shown against that default.
    """

    opened: frozenset[int] = frozenset()
    folded: frozenset[int] = frozenset()

    def folds(self, branch: Branch) -> bool:
        if branch.main:
            return False
        if _folded_by_default(branch):
            return branch.lo not in self.opened
        return branch.lo in self.folded

    def toggled(self, branch: Branch) -> Folding:
        """The same, with `branch` the other way round."""
        opened, folded = self.opened - {branch.lo}, self.folded - {branch.lo}
        if self.folds(branch) and _folded_by_default(branch):
            opened |= {branch.lo}
        elif not self.folds(branch) and not _folded_by_default(branch):
            folded |= {branch.lo}
        return Folding(opened, folded)

    def opening(self, branch: Branch | None) -> Folding:
        return self.toggled(branch) if branch is not None and self.folds(branch) else self

    def params(self) -> list[tuple[str, int]]:
        return [("open", seq) for seq in sorted(self.opened)] + [("fold", seq) for seq in sorted(self.folded)]


def _folded_by_default(branch: Branch) -> bool:
    """A long side branch."""
    return branch.size > FOLD_OVER


NAMESPACE_SHOWN = 24  # characters of a subgraph's namespace a label shows; its title has the rest


def short_namespace(namespace: str) -> str:
    """`child:100d2d5e-07a4-…` for a LangGraph checkpoint_ns (`node:task id`, `|`-joined when nested)."""
    return namespace if len(namespace) <= NAMESPACE_SHOWN else f"{namespace[: NAMESPACE_SHOWN - 1]}…"


@dataclass
class Cell:
    """One lane of one row: lines above and below the middle, and the node, if any."""

    lane: int
    up: bool = False
    down: bool = False
    node: str = ""  # "", "dot", "head", "restore", "run", "fold" (a folded branch), "open" (an open one's heading)
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
    branches: list[Branch]  # the head's line first
    lanes: int
    restore_targets: dict[int, list[int]]  # target seq → restore seqs
    starts: dict[int, Start]  # seq → what starts a branch there
    stretches: list[Stretch] = field(default_factory=list)  # all of them, by lo
    drawn: list[Stretch] = field(default_factory=list)  # what rows draw: open branches', one per folded branch
    folds: dict[int, Stretch] = field(default_factory=dict)  # folded branch's lo → the stretch it is drawn as
    attach_points: dict[int, list[Stretch]] = field(default_factory=dict)  # of the drawn stretches
    undos: dict[int, tuple[int, int | None]] = field(default_factory=dict)  # undo seq → (restore seq, its target)
    near: list[Stretch] | None = None  # the drawn stretches the rows of a page can meet (None: every drawn one)

    @property
    def undone(self) -> frozenset[int]:
        """Restores undone right after them: shown in their undo's row, with no row or branch of their own."""
        return frozenset(restore for restore, _ in self.undos.values())

    @classmethod
    def for_session(cls, session: AgentSession) -> Layout:
        """A LangGraph thread's subgraph runs are no branches of its path (`Checkpoint.subgraph_hop`): the layout
        reads its path's branch starts only, and a page shows the runs beside the rows they ran under."""
        checkpoints = Checkpoint.objects.for_session(session)
        points = list(checkpoints.path_points() if is_langgraph(session) else checkpoints.branch_points())
        head_seq = session.head.seq if session.head is not None else None
        return cls.build(session.last_seq, head_seq, points, _undos(session, points))

    @classmethod
    def build(
        cls,
        last_seq: int,
        head_seq: int | None,
        points: list[tuple[int, int | None, str]],
        undos: dict[int, tuple[int, int | None]] | None = None,
    ) -> Layout:
        """The layout, nothing folded, from the branch starts: (seq, parent seq or None, kind) each, and the
        undos made right after their restore (undo seq → (restore seq, its target))."""
        undos = undos or {}
        undone = {restore for restore, _ in undos.values()}
        branches = branch_layout(last_seq, head_seq, [(seq, parent) for seq, parent, _ in points])
        branches = [b for b in branches if b.main or not (b.size == 1 and b.lo in undone)]  # one event, not a branch
        starts = {seq: Start(parent, kind) for seq, parent, kind in points}
        leavers = {s.attach: s.lo for s in branches[0].stretches if s.lo in starts} if branches else {}
        for branch in branches:
            branch.origin = _origin(branch, starts, leavers)
        targets: dict[int, list[int]] = {}
        for seq, start in starts.items():
            if start.parent is not None and start.kind == CheckpointKind.RESTORE and seq not in undone:
                targets.setdefault(start.parent, []).append(seq)
        stretches = sorted((s for branch in branches for s in branch.stretches), key=lambda s: s.lo)
        layout = cls(branches, 1 + max((s.lane for s in stretches), default=0), targets, starts, stretches)
        layout.undos = undos
        layout.fold(None)
        return layout

    def fold(self, folding: Folding | None) -> None:
        """Fold the side branches `folding` folds (None: none): each is drawn as one stretch at its newest seq."""
        self.drawn, self.folds, self.attach_points = [], {}, {}
        for branch in self.branches:
            branch.folded = folding is not None and folding.folds(branch)
            if branch.folded:
                self.folds[branch.lo] = Stretch(branch.hi, branch.hi, branch.attach, branch.lane, branch)
                self.drawn.append(self.folds[branch.lo])
            else:
                self.drawn += branch.stretches
        for stretch in self.drawn:
            if stretch.attach is not None:
                self.attach_points.setdefault(stretch.attach, []).append(stretch)
        self.near = None

    def focus(self, lo: float, hi: float) -> None:
        """Rows from now on stand for seqs within lo…hi: keep aside the drawn stretches they can meet (a stretch
        overlapping them, one attached at or below them that starts above, one attached among them), so a page
        costs its rows times those rather than times every stretch of a session that branched thousands of times."""
        self.near = [
            s
            for s in self.drawn
            if (s.lo <= hi and s.hi >= lo)
            or (s.attach is not None and s.attach <= hi and (s.lo > lo or s.attach >= lo))
        ]

    def stretch_of(self, seq: int) -> Stretch | None:
        index = bisect_right(self.stretches, seq, key=lambda s: s.lo) - 1
        return self.stretches[index] if index >= 0 and seq <= self.stretches[index].hi else None

    def branch_of(self, seq: int) -> Branch | None:
        stretch = self.stretch_of(seq)
        return stretch.branch if stretch else None

    def graph(self, lo: float, hi: float, node: str, own: Stretch | None = None) -> tuple[list[Cell], Stretch | None]:
        """The lanes of a row that stands for seqs `lo`…`hi` of one stretch: a checkpoint, a run, a folded
        branch, or (at a half seq, between two checkpoints) the heading of an open branch."""
        cells = [Cell(lane) for lane in range(self.lanes)]
        own = own or self.stretch_of(int(hi))
        for stretch in self.drawn if self.near is None else self.near:
            cell = cells[stretch.lane]
            if stretch is own:
                cell.node = node
                cell.up = cell.up or hi < stretch.hi
                cell.down = cell.down or lo > stretch.lo or stretch.attach is not None
            elif stretch.attach is not None and stretch.attach < lo and hi < stretch.lo:
                cell.up = cell.down = True
            elif stretch.attach is not None and lo <= stretch.attach <= hi:
                cell.up = True
                if own is not None and own.lane != stretch.lane:
                    elbow = Elbow(stretch.lane, min(own.lane, stretch.lane), abs(own.lane - stretch.lane))
                    for lane, css in elbow.segments():
                        cells[lane].segments.append(css)
        return cells, own


def is_langgraph(session: AgentSession) -> bool:
    return session.source_format == SourceFormat.LANGGRAPH


def namespace() -> Cast:
    """A LangGraph checkpoint's namespace (metadata's `checkpoint_ns`) as text that compares as text everywhere.
    A bare KT keeps the JSON lookups of a key: on SQLite `= ''` and `> ''` compare with JSON_EXTRACT('', '$'),
    which fails ("malformed JSON"), and every LangGraph thread's timeline answered 500 on the embedded database."""
    return Cast(KT("metadata__checkpoint_ns"), TextField())


def _undos(session: AgentSession, points: list[tuple[int, int | None, str]]) -> dict[int, tuple[int, int | None]]:
    """Undo seq → (the restore it undid, that restore's target), for undos made right after their restore: one
    small query, only when two restores follow each other (an undo is a restore of the head its restore replaced)."""
    restores = {seq: parent for seq, parent, kind in points if kind == CheckpointKind.RESTORE}
    candidates = [seq for seq in restores if seq - 1 in restores]
    if not candidates:
        return {}
    marked = Checkpoint.objects.for_session(session).filter(seq__in=candidates, metadata__has_key="undo_of_seq")
    return {
        seq: (undone, restores[undone])
        for seq, undone in marked.values_list("seq", "metadata__undo_of_seq")
        if undone == seq - 1 and undone in restores
    }
