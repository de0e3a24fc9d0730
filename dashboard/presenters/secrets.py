"""The Secrets page's layout: a project's findings by detector, one row per value (fingerprint), with where it was
first introduced, when it was first and last seen, and the sessions holding it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from checkpoints.models import AgentSession, Project, SecretFinding
from checkpoints.roles import REVEAL_SECRETS
from checkpoints.services.secrets import detector_label, masker_for_people

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


def masker(user: Any, project: Project) -> Callable[[Any], Any]:
    """What turns a state of the project into what `user` may see: found secrets masked unless they hold
    `reveal_secrets`. Made once a request: the project's fingerprints are read once."""
    return _as_it_is if user.has_perm(REVEAL_SECRETS, project) else masker_for_people(project)


def _as_it_is(state: Any) -> Any:
    return state
