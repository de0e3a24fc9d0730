"""Secrets found at ingest (docs/secrets.md): what a checkpoint (or a LangGraph task's writes) added is scanned, each
value found becomes a `SecretFinding` of its session — fingerprinted, never stored — and a session's first finding
opens its `secret_found` alert (info), which notification rules route like any other.

Ingest calls `scan_ingested` inside its transaction, after the checkpoints' rows exist: a finding names the
checkpoint that added the value. A scanner that fails must not cost the agent its checkpoint: the scan and the
findings' writes are caught, logged and counted (`checkpoint_console_secret_scans_total{outcome="failed"}`), and
the findings' writes run in a savepoint of their own, so the checkpoint is stored without them.

A project's own patterns (`Project.secret_patterns`) are read from a per-process copy at most
`SECRETS_PATTERNS_TTL_SECONDS` old (the process that saves them forgets its copy at once): a project object loaded
with a session may be older than that."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from ..audit import Actor, InvalidInput, record_audit
from ..metrics import record_secret_scan, record_secrets_found
from ..models import (
    AgentSession,
    AlertKind,
    AlertSeverity,
    Checkpoint,
    DriftAlert,
    LangGraphCheckpoint,
    Project,
    SecretFinding,
)
from ..registry.secrets import SECRET_DETECTORS
from ..store import masking
from ..store import secrets as scanner
from ..store.diff import format_path
from .drift import open_raised_alert

logger = logging.getLogger(__name__)

SCANNER_ACTOR = "system:secrets"
_MESSAGE_MAX = 500
MAX_PATTERNS = 50
MAX_PATTERN_LENGTH = 1000
_PATTERN_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,59}$"


@dataclass(frozen=True)
class Added:
    """What one new checkpoint added: its state's change as patch operations (`store.Saved.added`), its metadata."""

    session: AgentSession
    checkpoint: Checkpoint
    ops: list[list[Any]]
    metadata: Any


# ---- a project's own patterns ------------------------------------------------------------------


class _PatternCache:
    def __init__(self) -> None:
        self._items: dict[int, tuple[float, tuple[tuple[str, str], ...]]] = {}
        self._lock = threading.Lock()

    def entries(self, project_id: int) -> tuple[tuple[str, str], ...]:
        now = time.monotonic()
        with self._lock:
            cached = self._items.get(project_id)
        if cached is not None and cached[0] > now:
            return cached[1]
        stored = Project.objects.filter(pk=project_id).values_list("secret_patterns", flat=True).first()
        entries = _entries(stored)
        with self._lock:
            self._items[project_id] = (now + settings.SECRETS_PATTERNS_TTL_SECONDS, entries)
        return entries

    def forget(self, project_id: int | None = None) -> None:
        with self._lock:
            if project_id is None:
                self._items.clear()
            else:
                self._items.pop(project_id, None)


_patterns = _PatternCache()
forget_patterns = _patterns.forget


def _entries(stored: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(stored, list):
        return ()
    return tuple((str(item[0]), str(item[1])) for item in stored if isinstance(item, list) and len(item) == 2)


def _project_patterns(session: AgentSession) -> tuple[Any, ...]:
    entries = _patterns.entries(session.project_id)
    return scanner.project_patterns(entries) if entries else ()


def parse_patterns(text: str) -> list[list[str]]:
    """The Secrets page's text, one `name: pattern` a line, as [name, pattern] pairs; InvalidInput names the line
    that is not one, or whose pattern RE2 does not compile."""
    entries: list[list[str]] = []
    names: set[str] = set()
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        name, colon, pattern = line.partition(":")
        name, pattern = name.strip(), pattern.strip()
        if not colon or not re.match(_PATTERN_NAME, name) or not pattern:
            raise InvalidInput("patterns", f"line {number}: write `name: pattern` (a name of letters, digits, _ . -)")
        if name in names:
            raise InvalidInput("patterns", f"line {number}: the name {name!r} is used twice")
        if len(pattern) > MAX_PATTERN_LENGTH:
            raise InvalidInput("patterns", f"line {number}: a pattern has at most {MAX_PATTERN_LENGTH} characters")
        try:
            scanner.compile_pattern(pattern)
        except scanner.InvalidPattern as exc:
            raise InvalidInput("patterns", f"line {number}: RE2 cannot compile it: {exc}") from None
        names.add(name)
        entries.append([name, pattern])
    if len(entries) > MAX_PATTERNS:
        raise InvalidInput("patterns", f"at most {MAX_PATTERNS} patterns a project")
    return entries


@transaction.atomic
def set_secret_patterns(project: Project, *, actor: Actor, text: str) -> Project:
    """Replace the project's own patterns (checked by parse_patterns), audited with the names added and removed:
    not the patterns, which may spell out part of a secret. Checkpoints stored before are not scanned again."""
    entries = parse_patterns(text)
    before = _entries(project.secret_patterns)
    if [tuple(entry) for entry in entries] == list(before):
        return project
    project.secret_patterns = entries
    project.save(update_fields=["secret_patterns"])
    _patterns.forget(project.pk)
    names_before, names_after = {name for name, _ in before}, {name for name, _ in entries}
    changed = sorted(name for name, pattern in entries if (name, pattern) not in before and name in names_before)
    details = {
        "added": sorted(names_after - names_before),
        "removed": sorted(names_before - names_after),
        "changed": changed,
    }
    record_audit(actor, "set_secret_patterns", project=project, target=f"project {project.slug}", details=details)
    return project


# ---- scanning at ingest ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Found:
    checkpoint: Checkpoint | None
    seq: int | None
    path: str
    hit: scanner.Hit


def scan_ingested(added: Sequence[Added], *, now: datetime) -> None:
    """Scan what each new checkpoint added and record what is found; never raises (see the module's docstring)."""
    if not settings.SECRETS_SCAN or not added:
        return
    try:
        by_session: dict[int, tuple[AgentSession, list[_Found]]] = {}
        for item in added:
            extra = _project_patterns(item.session)
            found = by_session.setdefault(item.session.pk, (item.session, []))[1]
            seq = item.checkpoint.seq
            for part, ops in (("state", item.ops), ("metadata", [["s", [], item.metadata]])):
                for hit in _scan(ops, extra):
                    found.append(_Found(item.checkpoint, seq, format_path((part, *hit.path)), hit))
    except Exception:
        logger.exception("the secret scan failed; the checkpoints are stored unscanned")
        record_secret_scan("failed", len(added))
        return
    for session, found in by_session.values():
        if found:
            _record_safely(session, found, now=now)


def scan_writes(
    session: AgentSession, *, checkpoint_ns: str, checkpoint_id: str, writes: Iterable[tuple[str, Any]]
) -> None:
    """Scan a LangGraph task's writes as they are stored (they reach a checkpoint's state only with the next put,
    or never): a finding names the checkpoint they were written against. Never raises."""
    if not settings.SECRETS_SCAN:
        return
    try:
        extra = _project_patterns(session)
        hits = [(channel, hit) for channel, value in writes for hit in _scan([["s", [], value]], extra)]
        if not hits:
            return
        row = (
            LangGraphCheckpoint.objects.filter(
                session=session, checkpoint_ns=checkpoint_ns, checkpoint_id=checkpoint_id, current=True
            )
            .select_related("console")
            .only("console__id", "console__seq")
            .first()
        )
        checkpoint = row.console if row is not None else None
        seq = checkpoint.seq if checkpoint is not None else None
        found = [_Found(checkpoint, seq, format_path(("writes", channel, *hit.path)), hit) for channel, hit in hits]
    except Exception:
        logger.exception("the secret scan of LangGraph writes failed; the writes are stored unscanned")
        record_secret_scan("failed")
        return
    _record_safely(session, found, now=timezone.now())


def _scan(ops: list[list[Any]], extra: tuple[Any, ...]) -> list[scanner.Hit]:
    result = scanner.scan(ops, extra=extra)
    if result.scanned_bytes:
        record_secret_scan("truncated" if result.truncated else "scanned")
    return result.hits


def _record_safely(session: AgentSession, found: list[_Found], *, now: datetime) -> None:
    try:
        with transaction.atomic():  # a savepoint: a failure here leaves the checkpoints stored
            record_findings(session, found, now=now)
    except Exception:
        logger.exception("recording secret findings of session %s failed; its checkpoints are stored", session.pk)
        record_secret_scan("failed")


def record_findings(session: AgentSession, found: list[_Found], *, now: datetime) -> list[SecretFinding]:
    """New findings inserted, known ones seen again (`last_seen_at`); the session's alert opened or updated when
    something new came. Returns the new ones. Runs under the session's row lock (ingest holds it)."""
    keys = {(f.hit.detector, f.hit.fingerprint) for f in found}
    known = set(
        SecretFinding.objects.filter(
            session=session,
            detector__in={d for d, _ in keys},
            fingerprint__in={fp for _, fp in keys},
        ).values_list("detector", "fingerprint")
    )
    new: dict[tuple[str, str], SecretFinding] = {}
    for f in found:
        key = (f.hit.detector, f.hit.fingerprint)
        if key in known or key in new:
            continue
        new[key] = SecretFinding(
            project_id=session.project_id,
            session=session,
            checkpoint=f.checkpoint,
            checkpoint_seq=f.seq,
            path=f.path,
            detector=f.hit.detector,
            fingerprint=f.hit.fingerprint,
            length=f.hit.length,
            first_seen_at=now,
            last_seen_at=now,
        )
    if seen := keys & known:
        for detector, fingerprint in seen:
            SecretFinding.objects.filter(session=session, detector=detector, fingerprint=fingerprint).update(
                last_seen_at=now
            )
    if not new:
        return []
    created = SecretFinding.objects.bulk_create(list(new.values()))
    Project.objects.filter(pk=session.project_id, secrets_found_at__isnull=True).update(secrets_found_at=now)
    slug = session.project.slug if AgentSession.project.is_cached(session) else str(session.project_id)
    transaction.on_commit(lambda: record_secrets_found(slug, [finding.detector for finding in created]))
    _raise_alert(session, created, now=now)
    return created


def masker_for_people(project: Project) -> masking.Masker:
    """What turns a state of the project into what a person sees (`store.masking`): every value found in the
    project masked, wherever it appears. One query for the project's fingerprints, none (and no scan) for a
    project where nothing was ever found."""
    return masking.for_project(project)


def detector_label(name: str) -> str:
    """A finding's detector as the console shows it: a declared one's label, a project's pattern by its name."""
    if name.startswith("custom:"):
        return f"Project pattern {name.removeprefix('custom:')}"
    return SECRET_DETECTORS.label(name)


def _raise_alert(session: AgentSession, created: list[SecretFinding], *, now: datetime) -> None:
    """Open the session's `secret_found` alert (its event routes notifications), or say more in the open one."""
    first = created[0]
    where = f"checkpoint #{first.checkpoint_seq}" if first.checkpoint_seq is not None else "LangGraph writes"
    labels = sorted({detector_label(finding.detector) for finding in created})
    message = (
        f"{len(created)} secret{'s' * (len(created) != 1)} found ({', '.join(labels)}), first at {first.path} "
        f"in {where}"
    )[:_MESSAGE_MAX]
    open_alert = DriftAlert.objects.unresolved().filter(session=session, kind=AlertKind.SECRET_FOUND).first()
    total = SecretFinding.objects.filter(session=session).count()
    evidence = {"findings": total, "detectors": labels, "checkpoint_id": first.checkpoint_id, "path": first.path}
    if open_alert is not None:
        DriftAlert.objects.filter(pk=open_alert.pk).update(
            message=f"{total} secrets found in this session; newest: {message}"[:_MESSAGE_MAX], evidence=evidence
        )
        return
    open_raised_alert(
        session,
        actor=SCANNER_ACTOR,
        now=now,
        kind=AlertKind.SECRET_FOUND,
        severity=AlertSeverity.INFO,
        message=message,
        evidence=evidence,
        checkpoint=first.checkpoint,
    )
