"""What a session's page shows above its timeline: counts, alerts, phases, charts, and the index of events."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db.models import F, Max, Min, QuerySet, Sum
from django.db.models.functions import TruncDay, TruncHour, TruncMonth, TruncWeek

from checkpoints.models import (
    ROLLUP_BLOCK,
    TROUBLE,
    AgentSession,
    Checkpoint,
    CheckpointKind,
    DriftAlert,
    SessionRollup,
    SessionStatus,
)

from .branches import is_langgraph, namespace, short_namespace
from .checkpoint import label, with_nodes
from .secrets import masker

CHART_POINTS = 200  # the size chart samples at most this many buckets: 2 px each on its 400 px plot
CHART_BARS = 60  # the rate and error charts draw at most about this many bars (a month's bars beyond five years)
SLOTS = [
    ("hour", TruncHour, timedelta(hours=1)),
    ("day", TruncDay, timedelta(days=1)),
    ("week", TruncWeek, timedelta(weeks=1)),
    ("month", TruncMonth, timedelta(days=30.44)),
]
INDEX_MAX = 12  # the timeline's index lists this many of each kind of event, newest first
HOPS_READ = 4 * INDEX_MAX  # subgraph hops read on each side of a page to find the runs near it


def session_overview(session: AgentSession) -> dict[str, Any]:
    """What the full page shows above the timeline: counts, alerts, forks, phases, charts.

    The counts are the session's running tallies; its first and last times are the ends of the (session,
    created_at) index: nothing here reads the session's checkpoints one by one."""
    stats = {
        "count": session.checkpoint_count,
        "raw_bytes": session.raw_bytes,
        "stored_bytes": session.stored_bytes,
        "failed": session.failed_count,
        "tool_failed": session.tool_failed_count,
        **Checkpoint.objects.for_session(session)
        .order_by()
        .aggregate(first_at=Min("created_at"), last_at=Max("created_at")),
    }
    return {
        "stats": stats,
        "open_alerts": DriftAlert.objects.filter(session=session).open().count(),
        "failure": _why_it_failed(session),
        "phases": list(session.phases.order_by("number")),
        "charts": session_charts(session, stats) if stats["count"] else None,
    }


def _why_it_failed(session: AgentSession) -> DriftAlert | None:
    """A failed or halted session's most severe open alert (a node error names the node and what it raised): the
    head's own row may read "completed" when a node raised after it, so the page says what went wrong."""
    if session.status not in (SessionStatus.FAILED, SessionStatus.HALTED):
        return None
    alert = DriftAlert.objects.filter(session=session).open().most_severe_first().only("kind", "message").first()
    if alert is not None:  # it may quote what a node raised, a found value included
        alert.message = masker(session.project).text(alert.message)
    return alert


def _size_buckets(session: AgentSession) -> QuerySet[Any]:
    """At most CHART_POINTS buckets of consecutive seqs, oldest first: first and last seq, largest state, stored
    bytes. From the checkpoints while a bucket is narrower than a rollup block (up to 500 × ROLLUP_BLOCK seqs),
    else from the rollups, in buckets of whole blocks."""
    width = max(1, math.ceil(session.last_seq / CHART_POINTS))
    if width < ROLLUP_BLOCK:
        rows: QuerySet[Any] = Checkpoint.objects.for_session(session).annotate(bucket=(F("seq") - 1) / width)
        sums = {"first": Min("seq"), "last": Max("seq"), "raw": Max("raw_bytes"), "stored": Sum("stored_bytes")}
    else:
        rows = SessionRollup.objects.filter(session=session)
        rows = rows.annotate(bucket=F("block") / math.ceil(width / ROLLUP_BLOCK))
        sums = {
            "first": Min("first_seq"),
            "last": Max("last_seq"),
            "raw": Max("raw_max"),
            "stored": Sum("stored_bytes"),
        }
    return rows.order_by().values("bucket").annotate(**sums).order_by("bucket")


def session_charts(session: AgentSession, stats: dict[str, Any]) -> dict[str, Any]:
    """Chart series from two grouped queries: at most CHART_POINTS seq buckets, and one bucket per hour/day/week
    from the session's rollups."""
    raw_points, stored_points, stored = [], [], 0
    for i, bucket in enumerate(_size_buckets(session)):  # by seq, not by time: a restore's clock is the operator's
        stored += bucket["stored"] or 0
        seq = bucket["first"] if i == 0 else bucket["last"]
        raw_points.append((seq, bucket["raw"] or 0))
        stored_points.append((seq, stored))
    span: timedelta = stats["last_at"] - stats["first_at"]
    unit, trunc, step = next(
        (slot for slot in SLOTS if span <= slot[2] * (CHART_BARS - 1)), SLOTS[-1]
    )  # the finest slot that keeps the bar charts within CHART_BARS bars (each bar is ~120 bytes of the page)
    activity = list(
        SessionRollup.objects.filter(session=session)
        .annotate(slot=trunc("hour"))
        .values("slot")
        .annotate(total=Sum("count"), step_count=Sum("steps"), failed=Sum("trouble"))
        .order_by("slot")
    )
    use_steps = any(slot["step_count"] for slot in activity)
    failed, tool_failed = stats["failed"], stats["tool_failed"]
    troubles = [
        f"{failed} of {stats['count']} checkpoints failed or halted" if failed else "",
        f"{tool_failed} had a tool call fail" if tool_failed else "",
    ]
    return {
        "size": [
            {"label": "State size (raw JSON)", "points": raw_points, "css": "series-raw"},
            {"label": "Stored, in total", "points": stored_points, "css": "series-stored", "axis": "right"},
        ],
        "unit": unit,
        "slot": step,
        "rate_label": f"{'Steps' if use_steps else 'Checkpoints'} per {unit}",
        "rate_unit": "steps" if use_steps else "checkpoints",
        "rate": [(slot["slot"], slot["step_count"] if use_steps else slot["total"]) for slot in activity],
        "error_label": f"Error rate per {unit}",
        "error_note": (
            "; ".join(filter(None, troubles)) + "." if failed or tool_failed else "No failed checkpoints or tool calls."
        ),
        "errors": [(slot["slot"], 100 * slot["failed"] / slot["total"]) for slot in activity if slot["total"]],
    }


@dataclass
class Landmark:
    """One entry of the timeline's index: a checkpoint to jump to and what happened there."""

    seq: int
    label: str
    bad: bool = False


def timeline_index(
    session: AgentSession, forks: list[AgentSession], *, near: int | None = None
) -> list[tuple[str, list[Landmark]]]:
    """Where the events an operator looks for are, newest first, INDEX_MAX of each: restores, forks,
    failures, phases and alerts, and a LangGraph thread's subgraph runs nearest the page (`near`, its top seq).
    Queries on indexes (kind, the partial index of checkpoints in trouble, the session's alerts, its branch
    starts), whatever the session's size."""
    checkpoints = Checkpoint.objects.for_session(session).order_by("-seq")
    restores = checkpoints.filter(kind=CheckpointKind.RESTORE).values_list("seq", "parent__seq")[:INDEX_MAX]
    troubles = with_nodes(checkpoints.filter(TROUBLE).only("seq", "name", "kind", "status"), session)[:INDEX_MAX]
    phases = checkpoints.filter(kind=CheckpointKind.PHASE).values_list("seq", "name")[:INDEX_MAX]
    alerts = (
        DriftAlert.objects.filter(session=session, checkpoint__isnull=False)
        .order_by("-opened_at", "-pk")
        .values_list("checkpoint__seq", "kind", "state")[:INDEX_MAX]
    )
    forked = [Landmark(f.forked_from.seq, f"#{f.forked_from.seq} {f.external_id}") for f in forks if f.forked_from]
    groups = [
        ("Restores", [Landmark(seq, f"#{seq} back to #{target}" if target else f"#{seq}") for seq, target in restores]),
        ("Forks", forked[-INDEX_MAX:]),
        ("Failures", [Landmark(c.seq, f"#{c.seq} {_named(c)}", bad=True) for c in troubles]),
        ("Phases", [Landmark(seq, f"#{seq} {name}") for seq, name in phases]),
        ("Alerts", [Landmark(seq, f"#{seq} {kind.replace('_', ' ')} ({state})") for seq, kind, state in alerts]),
        (
            "Subgraph runs",
            _subgraph_runs(session, session.last_seq if near is None else near) if is_langgraph(session) else [],
        ),
    ]
    return [(title, sorted(marks, key=lambda m: -m.seq)) for title, marks in groups if marks]


def _named(checkpoint: Checkpoint) -> str:
    """A failure as the index names it: the nodes that wrote it, its name, or else its status."""
    named = label(checkpoint)
    return str(checkpoint.status) if named == str(checkpoint.kind) else named


def _subgraph_runs(session: AgentSession, near: int) -> list[Landmark]:
    """The INDEX_MAX subgraph runs of a LangGraph thread nearest seq `near` (the page's top), each named by its
    namespace and jumped to at its newest checkpoint, so that the page shows the run open.

    Read from the thread's subgraph hops on either side of `near` (the partial index of branch starts): a run
    begins at a hop with no parent and ends before the next hop that is not inside it (the root graph going on,
    or another run). Two short index scans, however many runs the thread made."""
    hops = (
        Checkpoint.objects.for_session(session)
        .filter(starts_branch=True, subgraph_hop=True)
        .annotate(ns=namespace())
        .values_list("seq", "parent_id", "ns")
    )
    older = list(hops.filter(seq__lte=near).order_by("-seq")[:HOPS_READ])
    newer = list(hops.filter(seq__gt=near).order_by("seq")[:HOPS_READ])
    points = older[::-1] + newer
    ends = [seq for seq, parent, ns in points if parent is None or not ns]  # where a run begins or the root goes on
    runs = []
    for seq, parent, ns in points:
        if parent is not None or not ns:
            continue
        following = next((end for end in ends if end > seq), None)
        if following is None and len(newer) == HOPS_READ:
            continue  # its end lies beyond what was read
        runs.append((seq, (following - 1) if following is not None else session.last_seq, str(ns)))
    nearest = sorted(runs, key=lambda run: abs(run[0] - near))[:INDEX_MAX]
    return [Landmark(last, f"#{first}–{last} {short_namespace(ns)}") for first, last, ns in nearest]
