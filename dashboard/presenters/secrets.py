"""The Secrets page's layout: a project's findings by detector, one row per value (fingerprint), with where it was
first introduced, when it was first and last seen, and the sessions holding it; and the masking of what other
pages show of states (`store.masking`): timeline rows, alerts, audit events."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from checkpoints import store
from checkpoints.models import (
    AgentOutput,
    AgentSession,
    AuditEvent,
    Checkpoint,
    DriftAlert,
    Phase,
    PhaseFeedback,
    Project,
    SecretFinding,
)
from checkpoints.services.secrets import detector_label, masker_for_people
from checkpoints.store.masking import Masker, Maskers
from checkpoints.store.previews import preview_of

SHOWN = 1000  # findings read for one page, newest first; more are counted, not listed
SESSIONS_SHOWN = 5


@dataclass
class ValueRow:
    fingerprint: str
    length: int
    introduced: SecretFinding  # the earliest finding of the value: its session, checkpoint and path
    first_seen_at: datetime
    last_seen_at: datetime
    sessions: list[AgentSession] = field(default_factory=list)

    @property
    def more_sessions(self) -> int:
        return max(len(self.sessions) - SESSIONS_SHOWN, 0)

    @property
    def shown_sessions(self) -> list[AgentSession]:
        return self.sessions[:SESSIONS_SHOWN]


@dataclass
class DetectorGroup:
    name: str
    label: str
    values: list[ValueRow] = field(default_factory=list)


@dataclass(frozen=True)
class SecretsPage:
    groups: list[DetectorGroup]
    findings: int
    listed: int


def secrets_page(project: Project) -> SecretsPage:
    """Two queries: the count, and the newest `SHOWN` findings with their sessions."""
    findings = SecretFinding.objects.filter(project=project).open()  # dismissed and purged ones are closed
    total = findings.count()
    rows = list(findings.select_related("session").order_by("-last_seen_at", "-pk")[:SHOWN])
    groups: dict[str, DetectorGroup] = {}
    values: dict[tuple[str, str], ValueRow] = {}
    for finding in sorted(rows, key=lambda f: (f.detector, f.first_seen_at, f.pk)):
        group = groups.setdefault(finding.detector, DetectorGroup(finding.detector, detector_label(finding.detector)))
        row = values.get((finding.detector, finding.fingerprint))
        if row is None:
            row = ValueRow(finding.fingerprint, finding.length, finding, finding.first_seen_at, finding.last_seen_at)
            values[(finding.detector, finding.fingerprint)] = row
            group.values.append(row)
        row.last_seen_at = max(row.last_seen_at, finding.last_seen_at)
        row.sessions.append(finding.session)
    for group in groups.values():
        group.values.sort(key=lambda row: row.last_seen_at, reverse=True)
    ordered = sorted(groups.values(), key=lambda group: (-len(group.values), group.label))
    return SecretsPage(ordered, total, len(rows))


def masker(project: Project) -> Masker:
    """What turns a state of the project (or a text made from one) into what people see: found secrets masked,
    for everyone — a person holding `reveal_secrets` reveals one finding at a time, with a reason
    (`services.reveals`).
    Made once a request: the project's fingerprints are read once."""
    return masker_for_people(project)


def mask_rows(checkpoints: list[Checkpoint], project: Project) -> None:
    """What timeline rows show of each checkpoint's state — its preview, its status's reason, its name — with the
    project's found secrets masked, in place (the rows are this page's copies). A preview is cut to one line, and a
    cut value no longer matches its fingerprint: the preview of a checkpoint that introduced a finding is made
    again from its masked state and its parent's. No query where nothing was ever found; else two, and one read
    of two states a checkpoint that introduced a value."""
    mask = masker(project)
    if not mask.active or not checkpoints:
        return
    introduced = set(
        SecretFinding.objects.filter(checkpoint_id__in=[c.pk for c in checkpoints]).values_list(
            "checkpoint_id", flat=True
        )
    )
    for checkpoint in checkpoints:
        checkpoint.preview = (
            _preview_again(checkpoint, mask) if checkpoint.pk in introduced else mask.text(checkpoint.preview)
        )
        checkpoint.status_reason = mask.text(checkpoint.status_reason)
        checkpoint.name = mask.text(checkpoint.name)


def _preview_again(checkpoint: Checkpoint, mask: Masker) -> str:
    roots = dict(
        Checkpoint.objects.filter(pk__in=[checkpoint.pk, checkpoint.parent_id or checkpoint.pk]).values_list(
            "pk", "root"
        )
    )
    state = mask(store.load_shared(bytes(roots[checkpoint.pk])))
    parent = mask(store.load_shared(bytes(roots[checkpoint.parent_id]))) if checkpoint.parent_id in roots else None
    return preview_of(state, parent).text


def mask_alerts(alerts: list[DriftAlert]) -> None:
    """Alerts' messages and evidence (which quote tool arguments, errors, names) with their projects' found secrets
    masked, in place, before anything cuts them short: a cut value no longer matches its fingerprint."""
    maskers = Maskers()
    for alert in alerts:
        mask = maskers.of(alert.session.project)
        alert.message = mask.text(alert.message)
        alert.evidence = mask.json(alert.evidence)


def mask_events(events: list[AuditEvent]) -> list[AuditEvent]:
    """Audit events' reasons and targets (typed by people, or naming checkpoints) with their projects' found
    secrets masked, in place. The events come with their `project` (select_related): no query for a project where
    nothing was ever found, one for each other project on the page."""
    maskers = Maskers()
    for event in events:
        if event.project is not None:
            mask = maskers.of(event.project)
            event.reason = mask.text(event.reason)
            event.target = mask.text(event.target)
    return events


def mask_phase(phase: Phase, outputs: list[AgentOutput], history: list[PhaseFeedback]) -> None:
    """What a phase's page shows of what agents and reviewers wrote — its errors, the outputs' content, errors and
    tools, the reviewers' comments and requested changes — with the project's found secrets masked, in place (the
    page's copies; validation has read the real ones). No query where nothing was ever found, else one."""
    mask = masker(phase.session.project)
    if not mask.active:
        return
    phase.errors = mask.json(phase.errors)
    for output in outputs:
        output.content, output.error = mask.text(output.content), mask.text(output.error)
        output.tools_used, output.error_details = mask.json(output.tools_used), mask.json(output.error_details)
    for feedback in history:
        feedback.comments, feedback.requested_changes = (
            mask.text(feedback.comments),
            mask.json(feedback.requested_changes),
        )
