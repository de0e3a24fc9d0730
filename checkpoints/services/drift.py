"""Drift detection (docs/drift.md): small pure detectors over a session's recent checkpoints, and the alerts.

The detectors are those `registry.detectors` declares, each a `detect_<kind>` function of the module its
declaration names (this one, or `loops` for the published loop rules of OpenHands and Gemini CLI); the rows and
limits they share are in `findings`.
Each detector takes a `Recent` (the newest checkpoints as light rows, states loaded only on demand), the clock
and the `Limits`, and returns findings. `sync_alerts` turns findings into alerts: one unresolved alert per
(session, kind), updated while the condition holds and resolved when it clears; opening, escalating and resolving
each write an AuditEvent (actor `system:drift`) in the same transaction. Cheap detectors run after each ingest;
the time-based ones (and all the others again) in the `drift_detection` beat job and `detect_drift`, which go on
past a session whose data breaks a detector and name it in the run's errors.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterable
from contextlib import nullcontext
from datetime import datetime
from typing import Any, cast

from django.db import IntegrityError, transaction
from django.db.models import F, OuterRef, Subquery
from django.utils import timezone

from ..audit import Actor, audit_event
from ..humanize import plain_duration
from ..models import (
    SEVERITY_RANKS,
    AgentSession,
    AlertKind,
    AlertSeverity,
    AlertState,
    AuditEvent,
    Checkpoint,
    CheckpointStatus,
    DriftAlert,
    EventType,
    SessionStatus,
)
from ..outbox import events
from ..registry import detectors as registry
from ..registry.detectors import Runs
from ..store.previews import failed_call
from .batches import Failures, each_batch
from .findings import (
    COPIES,
    RESETS,
    ROW_FIELDS,
    Detector,
    Finding,
    Limits,
    Recent,
    SeenCheckpoint,
    action_of,
    good_ancestor,
    healthy_before,
    index_of_step,
    progress_of,
)

logger = logging.getLogger(__name__)

DETECTOR_ACTOR = "system:drift"
DETECT_BATCH = 100  # sessions per savepoint in detect_all
STATUS_KINDS: list[str] = [AlertKind.FAILED, AlertKind.HALTED]  # alerts about the head's own status
RUNNING_KINDS: list[str] = [
    AlertKind.LONG_RUNNING,
    AlertKind.MISSED_ROUTINE,
]  # rules about an agent expected to be running


# ---- detectors -----------------------------------------------------------------------------------


def detect_failed(recent: Recent, now: datetime, limits: Limits) -> list[Finding]:
    return _status_finding(recent, CheckpointStatus.FAILED, AlertKind.FAILED)


def detect_halted(recent: Recent, now: datetime, limits: Limits) -> list[Finding]:
    return _status_finding(recent, CheckpointStatus.HALTED, AlertKind.HALTED)


def _status_finding(recent: Recent, status: str, kind: str) -> list[Finding]:
    head = recent.head
    if head is None or head.status != status:
        return []
    reason = f": {head.status_reason}" if head.status_reason else ""
    return [
        Finding(
            kind,
            AlertSeverity.CRITICAL,
            f"Checkpoint #{head.seq} arrived {status}{reason}",
            {"seq": head.seq, "status": status, "reason": head.status_reason},
            head,
            good_ancestor(recent, head),
        )
    ]


def detect_state_growth(recent: Recent, now: datetime, limits: Limits) -> list[Finding]:
    head = recent.head
    if head is None or head.raw_bytes <= limits.state_max_bytes:
        return []
    last_good = next((row for row in reversed(recent.rows) if row.raw_bytes <= limits.state_max_bytes), None)
    return [
        Finding(
            AlertKind.STATE_GROWTH,
            AlertSeverity.WARNING,
            f"State is {head.raw_bytes:,} bytes, above the {limits.state_max_bytes:,}-byte limit.",
            {"raw_bytes": head.raw_bytes, "limit": limits.state_max_bytes, "seq": head.seq},
            head,
            last_good,
        )
    ]


def detect_error_rate(recent: Recent, now: datetime, limits: Limits) -> list[Finding]:
    head = recent.head
    if head is None:
        return []
    threshold = limits.error_percent / 100
    rows = [row for row in recent.rows if row.kind not in COPIES][-limits.error_window :]
    failed_rows = [index for index, row in enumerate(rows) if row.status == CheckpointStatus.FAILED]
    calls = recent.head_calls()[-limits.error_window :]
    failed_calls = [call for call in calls if failed_call(call)]
    evidence = {
        "window": limits.error_window,
        "failed_checkpoints": len(failed_rows),
        "checkpoints": len(rows),
        "failed_tool_calls": len(failed_calls),
        "tool_calls": len(calls),
        "limit_percent": limits.error_percent,
    }
    if len(calls) >= limits.error_min_samples and len(failed_calls) / len(calls) > threshold:
        index = index_of_step(recent.rows, failed_calls[0].get("step"))
        message = f"{len(failed_calls)} of the last {len(calls)} tool calls failed."
    elif len(rows) >= limits.error_min_samples and len(failed_rows) / len(rows) > threshold:
        index = recent.rows.index(rows[failed_rows[0]])
        message = f"{len(failed_rows)} of the last {len(rows)} checkpoints failed."
    else:
        return []
    return [
        Finding(
            AlertKind.ERROR_RATE, AlertSeverity.WARNING, message, evidence, head, healthy_before(recent.rows, index)
        )
    ]


def detect_repetition(recent: Recent, now: datetime, limits: Limits) -> list[Finding]:
    head = recent.head
    if head is None:
        return []
    calls = recent.head_calls()
    if len(calls) <= limits.repetition_limit:
        return []
    action = action_of(calls[-1])
    run = 0
    for call in reversed(calls):
        if action_of(call) != action:
            break
        run += 1
    if run <= limits.repetition_limit:
        return []
    first_step = calls[-run].get("step")
    index = index_of_step(recent.rows, first_step)
    last_good = healthy_before(recent.rows, index)
    if last_good is not None:  # the repeats moved the task forward: that is work, not a loop
        before, after = progress_of(recent.state(last_good)), progress_of(recent.state(head))
        if before and after and before[0] == after[0] and after[1] > before[1]:
            return []
    tool, arguments = calls[-1].get("tool_name") or calls[-1].get("name"), calls[-1].get("arguments")
    return [
        Finding(
            AlertKind.REPETITION,
            AlertSeverity.WARNING,
            f"The same action ({tool}, same arguments) ran {run} times without progress.",
            {"tool": tool, "arguments": arguments, "count": run, "limit": limits.repetition_limit},
            head,
            last_good,
        )
    ]


def detect_stalled(recent: Recent, now: datetime, limits: Limits) -> list[Finding]:
    steps = [(index, row) for index, row in enumerate(recent.rows) if row.kind not in COPIES]
    if not steps:
        return []
    _, head = steps[-1]
    same = 0
    for _, row in reversed(steps):
        if row.state_hash != head.state_hash:
            break
        same += 1
    if same >= limits.stalled_same_hash:
        first_index = steps[-same][0]
        return [
            Finding(
                AlertKind.STALLED,
                AlertSeverity.WARNING,
                f"The state has not changed across the last {same} checkpoints.",
                {"metric": "state_hash", "count": same, "seqs": [row.seq for _, row in steps[-same:]]},
                head,
                healthy_before(recent.rows, first_index),
            )
        ]
    if len(steps) < limits.stalled_window:
        return []
    first_index, first = steps[-limits.stalled_window]
    before, after = progress_of(recent.state(first)), progress_of(recent.state(head))
    if not before or not after or before[0] != after[0] or after[1] >= 100 or after[1] > before[1]:
        return []
    flat = "reversing" if after[1] < before[1] else "flat"
    return [
        Finding(
            AlertKind.STALLED,
            AlertSeverity.WARNING,
            f"Task progress {flat} at {after[1]:g}% over the last {limits.stalled_window} checkpoints.",
            {
                "metric": "progress",
                "window": limits.stalled_window,
                "from": before[1],
                "to": after[1],
                "seqs": [first.seq, head.seq],
            },
            head,
            healthy_before(recent.rows, first_index),
        )
    ]


def _steps_since_reset(row: SeenCheckpoint, reset: SeenCheckpoint | None) -> int:
    if row.step is not None and reset is None:
        return row.step
    if row.step is not None and reset is not None and reset.step is not None:
        return row.step - reset.step
    return row.seq - (reset.seq if reset else 0)


def detect_cycle_count(recent: Recent, now: datetime, limits: Limits) -> list[Finding]:
    head, reset = recent.head, recent.last_reset
    if head is None or _steps_since_reset(head, reset) <= limits.cycle_limit:
        return []
    since = _steps_since_reset(head, reset)
    within = [row for row in recent.rows if _steps_since_reset(row, reset) <= limits.cycle_limit]
    return [
        Finding(
            AlertKind.CYCLE_COUNT,
            AlertSeverity.INFO,
            f"{since} steps since the last recovery checkpoint (limit {limits.cycle_limit}).",
            {"steps": since, "limit": limits.cycle_limit, "last_recovery_seq": reset.seq if reset else None},
            head,
            within[-1] if within else reset,
        )
    ]


def detect_long_running(recent: Recent, now: datetime, limits: Limits) -> list[Finding]:
    reset = recent.last_reset
    since = reset.created_at if reset else recent.started_at
    if not recent.running(now, limits) or recent.head is None or since is None or now - since <= limits.long_running:
        return []
    drift_from = since + limits.long_running
    within = [row for row in recent.rows if row.created_at <= drift_from]
    minutes = int((now - since).total_seconds() // 60)
    return [
        Finding(
            AlertKind.LONG_RUNNING,
            AlertSeverity.INFO,
            f"Active for {plain_duration(minutes * 60)} without a recovery checkpoint.",
            {"minutes": minutes, "limit_minutes": int(limits.long_running.total_seconds() // 60)},
            recent.head,
            within[-1] if within else reset,
        )
    ]


def detect_missed_routine(recent: Recent, now: datetime, limits: Limits) -> list[Finding]:
    heartbeat = recent.heartbeat_at
    if heartbeat is None or not recent.running(now, limits):
        return []
    if now - heartbeat <= limits.routine_interval + limits.routine_grace:
        return []
    minutes = int((now - heartbeat).total_seconds() // 60)
    return [
        Finding(
            AlertKind.MISSED_ROUTINE,
            AlertSeverity.WARNING,
            f"No checkpoint or heartbeat for {plain_duration(minutes * 60)}.",
            {
                "last_seen_at": heartbeat.isoformat(),
                "minutes": minutes,
                "interval_minutes": int(limits.routine_interval.total_seconds() // 60),
            },
            recent.head,
            recent.head,
        )
    ]


def kinds_that_run(*when: Runs) -> list[str]:
    """The registered kinds that run `when` ("ingest", "job", "timed"), in the registry's order."""
    return [spec.name for spec in registry.DETECTORS if spec.runs in when]


def cheap_kinds() -> list[str]:
    """The detectors of checkpoints: whatever the clock, they find the same until new checkpoints arrive."""
    return kinds_that_run("ingest", "job")


def timed_kinds() -> list[str]:
    """The detectors the clock moves: the drift job runs them on active sessions even when nothing arrived."""
    return kinds_that_run("timed")


def every_kind() -> list[str]:
    return cheap_kinds() + timed_kinds()


def on_ingest_kinds() -> list[str]:
    """Right after an ingest: the detectors that read no state (a cold state read costs milliseconds)."""
    return kinds_that_run("ingest")


def detector(kind: str) -> Detector:
    """The `detect_<kind>` function of the module the kind's declaration names (imported by its name: the
    declaration sits below the models, which cannot import this wing)."""
    spec = registry.DETECTORS.get(kind)
    found = getattr(importlib.import_module(spec.module), spec.function, None)
    if not callable(found):
        raise LookupError(f"drift detector {kind!r}: {spec.module} has no {spec.function}()")
    return cast(Detector, found)


def run_detectors(recent: Recent, now: datetime, limits: Limits, kinds: Iterable[str]) -> list[Finding]:
    return [finding for kind in kinds for finding in detector(kind)(recent, now, limits)]


# ---- alerts --------------------------------------------------------------------------------------


def audit_alert(alert: DriftAlert, action: str, *, actor: str, reason: str, now: datetime, **details: Any) -> None:
    """The AuditEvent of a detector's change to an alert: `alert_opened`, `alert_escalated` or `alert_resolved`;
    and the event of the same name (alert.opened, …) for webhooks and notifications."""
    _alert_event(alert, action, actor=actor, reason=reason, now=now, **details).save()
    events.publish_alert(action.replace("_", "."), alert, previous_severity=details.get("previous_severity", ""))


def open_raised_alert(session: AgentSession, *, actor: str, now: datetime, **fields: Any) -> DriftAlert | None:
    """Open an alert a module raises itself (a `raised` kind: a node error, a secret found), audited and
    published as alert.opened; None when a concurrent writer opened the session's alert of that kind first."""
    try:
        with transaction.atomic():
            alert = DriftAlert.objects.create(session=session, opened_at=now, **fields)
            audit_alert(alert, "alert_opened", actor=actor, reason=alert.message, now=now)
    except IntegrityError:  # one unresolved alert of a kind a session
        return None
    return alert


def _alert_event(alert: DriftAlert, action: str, *, actor: str, reason: str, now: datetime, **details: Any) -> Any:
    return audit_event(
        Actor.system(actor),
        action,
        session=alert.session,
        target=f"{alert.kind} alert #{alert.pk}",
        reason=reason,
        details={"alert_id": alert.pk, "kind": alert.kind, "severity": alert.severity, "message": alert.message}
        | details,
        now=now,
    )


def sync_alerts(
    session: AgentSession,
    findings: list[Finding],
    *,
    kinds: Iterable[str],
    now: datetime,
    head: SeenCheckpoint | None = None,
    unresolved: list[DriftAlert] | None = None,
    clearing: list[tuple[DriftAlert, str]] | None = None,
) -> tuple[int, int]:
    """Open, update or resolve the session's alerts of `kinds` (only those evaluated); returns (opened, resolved).

    `unresolved`: the session's unresolved alerts as `unresolved_alerts` reads them, when the caller read them
    for many sessions at once. An alert whose finding did not change is not written again. `clearing`: a
    list the alerts to resolve (with the reason) go to, for the caller to resolve with others at once; they
    are not counted in the result then.

    An alert keeps the `last_good` it opened with: later runs see a window that starts after the drift began.
    A failed or halted alert is one incident: when a healthy checkpoint stands between its failure and the
    head's (a batch brought both, so nothing resolved it in between), it resolves and a new alert opens with
    the new failure's own last good. Opening, a rise in severity and resolving are audited in the transaction
    that makes the change.
    """
    found = {finding.kind: finding for finding in findings}
    kinds = set(kinds) | set(found)
    if unresolved is None:
        unresolved = unresolved_alerts([session.pk])[session.pk]
    existing = {alert.kind: alert for alert in unresolved if alert.kind in kinds}
    opened = resolved = 0
    for kind, finding in found.items():
        alert = existing.get(kind)
        if alert is not None and finding.last_good is not None and _earlier_incident(alert, finding):
            alert.session = session
            reason = f"the condition cleared: #{finding.last_good.seq} completed after it"
            resolved += resolve_by_detector(alert, actor=DETECTOR_ACTOR, reason=reason, now=now)
            alert = None
        fields = {
            "severity": finding.severity,
            "message": finding.message,
            "evidence": finding.evidence,
            "checkpoint_id": finding.checkpoint.pk if finding.checkpoint else None,
        }
        last_good = finding.last_good.pk if finding.last_good else None
        if alert is not None:
            extra = {"last_good_id": last_good} if alert.last_good_id is None and last_good else {}
            if not extra and all(getattr(alert, name) == value for name, value in fields.items()):
                continue
            previous = alert.severity
            escalated = SEVERITY_RANKS.get(finding.severity, 0) > SEVERITY_RANKS.get(previous, 0)
            with transaction.atomic() if escalated else nullcontext():
                DriftAlert.objects.filter(pk=alert.pk).update(**fields, **extra)
                if escalated:
                    alert.session, alert.severity, alert.message = session, finding.severity, finding.message
                    reason = f"{previous} → {finding.severity}: {finding.message}"
                    audit_alert(
                        alert,
                        "alert_escalated",
                        actor=DETECTOR_ACTOR,
                        reason=reason,
                        now=now,
                        previous_severity=previous,
                    )
            continue
        try:
            with transaction.atomic():
                alert = DriftAlert.objects.create(
                    session=session, kind=kind, opened_at=now, last_good_id=last_good, **fields
                )
                audit_alert(alert, "alert_opened", actor=DETECTOR_ACTOR, reason=finding.message, now=now)
            opened += 1
        except IntegrityError:  # a concurrent run (ingest and beat) opened it first
            DriftAlert.objects.unresolved().filter(session=session, kind=kind).update(**fields)
    cleared = []
    for kind, alert in existing.items():
        if kind not in found:
            alert.session = session
            reason = "the condition cleared"
            if kind in STATUS_KINDS and head is not None:
                reason += f": the head #{head.seq} is {head.status}"
            cleared.append((alert, reason))
    if clearing is not None:
        clearing += cleared
        return opened, resolved
    return opened, resolved + resolve_all_by_detector(cleared, actor=DETECTOR_ACTOR, now=now)


def unresolved_alerts(session_ids: list[int]) -> dict[int, list[DriftAlert]]:
    """The unresolved alerts of each session, with the seq of the checkpoint each was last raised on: one query."""
    found: dict[int, list[DriftAlert]] = {pk: [] for pk in session_ids}
    alerts = DriftAlert.objects.unresolved().filter(session_id__in=session_ids)
    for alert in alerts.annotate(checkpoint_seq=F("checkpoint__seq")).order_by("pk"):
        found[alert.session_id].append(alert)
    return found


def _earlier_incident(alert: DriftAlert, finding: Finding) -> bool:
    """Whether `finding` (a failure or halt) is a new incident after the one `alert` was opened for."""
    seq = getattr(alert, "checkpoint_seq", None)
    return (
        alert.kind in STATUS_KINDS
        and seq is not None
        and finding.last_good is not None
        and (finding.last_good.seq > seq)
    )


def resolve_by_detector(alert: DriftAlert, *, actor: str, reason: str, now: datetime) -> int:
    """Resolve `alert` unless someone already did, auditing it in the same transaction; returns 1 if it resolved."""
    return resolve_all_by_detector([(alert, reason)], actor=actor, now=now)


def resolve_all_by_detector(alerts: list[tuple[DriftAlert, str]], *, actor: str, now: datetime) -> int:
    """Resolve each (alert, reason) unless someone already did, auditing each in the same transaction; returns
    how many resolved. Three statements however many: the run that clears thousands at once (after a rule
    changed) takes seconds."""
    if not alerts:
        return 0
    with transaction.atomic():
        pending = DriftAlert.objects.filter(pk__in=[alert.pk for alert, _ in alerts]).exclude(state=AlertState.RESOLVED)
        claimed = set(pending.select_for_update().values_list("pk", flat=True))
        if not claimed:
            return 0
        DriftAlert.objects.filter(pk__in=claimed).update(state=AlertState.RESOLVED, resolved_at=now)
        AuditEvent.objects.bulk_create(
            _alert_event(alert, "alert_resolved", actor=actor, reason=reason, now=now)
            for alert, reason in alerts
            if alert.pk in claimed
        )
        for alert, _ in alerts:
            if alert.pk in claimed:
                alert.state, alert.resolved_at = AlertState.RESOLVED, now
                events.publish_alert(EventType.ALERT_RESOLVED, alert)
    return len(claimed)


# ---- running -------------------------------------------------------------------------------------

SESSION_FIELDS = [
    "pk", "project_id", "status", "head_id", "last_seq", "last_seen_at", "created_at", "drift_checked_seq",
]  # fmt: skip


def _row(values: dict[str, Any]) -> SeenCheckpoint:
    return SeenCheckpoint(**{**values, "state_hash": bytes(values["state_hash"]), "root": bytes(values["root"])})


def recents_for(session_ids: list[int], *, limits: Limits, timed: bool) -> dict[int, tuple[AgentSession, Recent]]:
    """Each session as it is now (a caller's copy may predate a restore) and what the detectors know of it, in
    three queries whatever their number: the sessions (for the timed detectors with the id of the last
    recovery checkpoint and the time of the first checkpoint, an index probe each), their newest
    `limits.window` checkpoints (an index range each) and those recovery checkpoints."""
    sessions = AgentSession.objects.filter(pk__in=session_ids).only(*SESSION_FIELDS)
    if timed:
        theirs = Checkpoint.objects.filter(session_id=OuterRef("pk"))
        sessions = sessions.annotate(
            reset_pk=Subquery(theirs.filter(kind__in=RESETS).order_by("-seq").values("pk")[:1]),
            first_at=Subquery(theirs.order_by("seq").values("created_at")[:1]),
        )
    found = list(sessions.order_by("pk"))
    rows: dict[int, list[SeenCheckpoint]] = {session.pk: [] for session in found}
    newest = Checkpoint.objects.newest_per_session(found, count=limits.window)
    for values in newest.values(*ROW_FIELDS, "session_id"):
        rows[values.pop("session_id")].append(_row(values))
    resets: dict[int, SeenCheckpoint] = {}  # session pk → its last recovery checkpoint
    if timed:
        # `reset_pk` is annotated only when timed: the sessions' static type does not know it
        session_of = {pk: session.pk for session in found if (pk := getattr(session, "reset_pk", None))}
        resets = {
            session_of[values["pk"]]: _row(values)
            for values in Checkpoint.objects.filter(pk__in=session_of).values(*ROW_FIELDS)
        }
    return {session.pk: (session, _recent(session, rows[session.pk], resets, timed=timed)) for session in found}


def _recent(
    session: AgentSession, rows: list[SeenCheckpoint], resets: dict[int, SeenCheckpoint], *, timed: bool
) -> Recent:
    def fetch(pk: int) -> SeenCheckpoint | None:
        values = Checkpoint.objects.filter(session_id=session.pk, pk=pk).values(*ROW_FIELDS).first()
        return _row(values) if values else None

    return Recent(  # `first_at` is annotated when timed (see recents_for)
        rows=rows,
        active=session.status == SessionStatus.ACTIVE,
        started_at=min(filter(None, [session.created_at, getattr(session, "first_at", None)])) if timed else None,
        heartbeat_at=session.last_seen_at or (rows[-1].created_at if rows else session.created_at),
        last_reset=resets.get(session.pk) if timed else None,
        head_pk=session.head_id,
        fetch=fetch,
    )


def detect_session(
    session: AgentSession,
    *,
    cheap_only: bool = False,
    kinds: Iterable[str] | None = None,
    now: datetime | None = None,
    limits: Limits | None = None,
) -> tuple[int, int]:
    """Run the detectors on one session and sync its alerts; returns (opened, resolved)."""
    now = now or timezone.now()
    limits = limits or Limits.from_settings()
    kinds = list(kinds) if kinds is not None else cheap_kinds() if cheap_only else every_kind()
    found = recents_for([session.pk], limits=limits, timed=not set(kinds).isdisjoint(timed_kinds())).get(session.pk)
    if found is None:
        return 0, 0
    session, recent = found
    return sync_alerts(session, run_detectors(recent, now, limits, kinds), kinds=kinds, now=now, head=recent.head)


def _kinds_for(session: AgentSession) -> list[str]:
    """What can have changed since the job last looked: everything when checkpoints arrived, else only what the
    clock moves. An ended session keeps only its failed or halted alert, and its running alerts resolve."""
    unseen = session.drift_checked_seq != session.last_seq
    if session.status == SessionStatus.ACTIVE:
        return every_kind() if unseen else timed_kinds()
    return [*STATUS_KINDS, *RUNNING_KINDS] if unseen else RUNNING_KINDS


def detect_batch(
    session_ids: list[int], *, now: datetime, limits: Limits, kinds: list[str] | None = None
) -> tuple[int, int]:
    """Run the detectors over `session_ids` and sync their alerts, in the same few queries however many;
    returns (opened, resolved). With `kinds`, those detectors; without, what can have changed for each
    session (`_kinds_for`), noting the seq read up to so that the job skips it until new checkpoints arrive."""
    opened = resolved = 0
    alerts = unresolved_alerts(session_ids)
    read: list[AgentSession] = []
    clearing: list[tuple[DriftAlert, str]] = []
    timed = kinds is None or not set(kinds).isdisjoint(timed_kinds())
    for session, recent in recents_for(session_ids, limits=limits, timed=timed).values():
        evaluated = _kinds_for(session) if kinds is None else kinds
        session_opened, session_resolved = sync_alerts(
            session,
            run_detectors(recent, now, limits, evaluated),
            kinds=evaluated,
            now=now,
            head=recent.head,
            unresolved=alerts[session.pk],
            clearing=clearing,
        )
        opened += session_opened
        resolved += session_resolved
        if kinds is None and session.drift_checked_seq != session.last_seq:
            session.drift_checked_seq = session.last_seq
            read.append(session)
    resolved += resolve_all_by_detector(clearing, actor=DETECTOR_ACTOR, now=now)
    AgentSession.objects.bulk_update(read, ["drift_checked_seq"])
    return opened, resolved


def detect_all(now: datetime | None = None) -> dict[str, Any]:
    """The detectors over the sessions whose alerts can change (the `drift_detection` job and
    `manage.py detect_drift`; `AgentSessionQuerySet.for_drift_check` says which): every detector over an active
    session with checkpoints the job has not read, the time-based ones over active sessions heard from lately,
    the status detectors over other sessions with new checkpoints and a failed or halted alert (it resolves once
    the head is healthy, whatever the session's status), and the rules about a running agent while one of their
    alerts is unresolved (they resolve it once the session has ended or gone idle).

    Sessions go DETECT_BATCH at a time through `services.batches.each_batch`: a session whose data breaks a detector is
    named in the result's `errors`, its alerts left as they were, and the others are checked all the same. A
    batch reads its sessions, checkpoints and alerts in four queries, and notes the seq it read up to.
    """
    now = now or timezone.now()
    limits = Limits.from_settings()
    failures = Failures()

    def detect(batch: list[int]) -> tuple[int, int]:
        return detect_batch(batch, now=now, limits=limits)

    candidates = AgentSession.objects.for_drift_check(idle_before=now - limits.idle_after)
    ids = candidates.order_by("pk").values_list("pk", flat=True)
    totals = {"opened": 0, "resolved": 0}
    for opened, resolved in each_batch(ids.iterator(chunk_size=1000), detect, failures, size=DETECT_BATCH):
        totals["opened"] += opened
        totals["resolved"] += resolved
    return {**totals, **failures.as_dict()}


def detect_after_restores(session_ids: list[int]) -> None:
    """`detect_after_ingest` for many sessions at once (a fleet recovery's page of restores): the same detectors,
    in `detect_batch`'s few queries however many sessions. When one session's data breaks a detector, each
    session is checked alone, so the others' alerts still clear."""
    try:
        with transaction.atomic():
            detect_batch(session_ids, now=timezone.now(), limits=Limits.from_settings(), kinds=on_ingest_kinds())
    except Exception:
        logger.exception("drift detection failed for a batch of %s sessions; each is checked alone", len(session_ids))
        detect_after_ingest(session_ids)


def detect_after_ingest(session_ids: list[int]) -> None:
    """The state-free detectors, run once checkpoints are committed; a detector's failure never fails an ingest."""
    now, limits, kinds = timezone.now(), Limits.from_settings(), on_ingest_kinds()
    for session, recent in recents_for(session_ids, limits=limits, timed=False).values():
        try:
            findings = run_detectors(recent, now, limits, kinds)
            sync_alerts(session, findings, kinds=kinds, now=now, head=recent.head)
        except Exception:
            logger.exception("drift detection failed for session %s", session.pk)
