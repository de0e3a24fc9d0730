"""Importing checkpoint files: any of the formats, a file or a whole tree, tolerant and idempotent.

Formats (checkpoints/sources/formats/) turn files into records; this module stores them. A file that cannot
be read, or a checkpoint whose state is not valid JSON, is reported and skipped — the rest goes in.
Each checkpoint's idempotency key is "<format>:<its key in the source>", so importing the same tree
twice adds nothing. Records stream: memory holds one batch per session, not the tree.
LangGraph history (a SqliteSaver file, or a PostgresSaver database named by its URL) goes in through the
LangGraph service instead (langgraph_import), thread by thread, under the same report.

The report adds up: every checkpoint read is imported, skipped (already stored, identical: nothing
else) or an error line saying why not; a file that yields no checkpoint is an error line of its own.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from django.db import transaction
from django.db.models import Max

from ..access import may_import_into
from ..audit import Actor, CheckpointError, IdempotencyConflict, InvalidState, record_audit
from ..models import AgentSession, AuditEvent, Checkpoint, CheckpointKind, Phase, PhaseFeedback, Project
from ..sources import formats
from ..sources.formats import langgraph
from ..sources.formats.base import CheckpointRecord, PhaseRecord, Problem, SessionRecord
from .batches import ImportReport
from .checkpoints import (
    CheckpointInput,
    checkpoint_differences,
    get_or_create_project,
    ingest_checkpoints,
    upsert_session,
)
from .langgraph_import import import_threads
from .phases import import_agent_output

BATCH = 200


def idempotency_key(fmt: str, key: str) -> str:
    key = f"{fmt}:{key}"
    return key if len(key) <= 200 else f"{fmt}:sha256:{hashlib.sha256(key.encode()).hexdigest()}"


SQLITE_COMPANIONS = ("-wal", "-shm", "-journal")


def sqlite_companion(path: Path) -> bool:
    """A SQLite database's write-ahead log, shared memory or journal: read with the database, not a file of its own
    (a SqliteSaver file still open, or left by a crash, keeps its newest checkpoints in `-wal`)."""
    return any(
        path.name.endswith(suffix) and path.with_name(path.name.removesuffix(suffix)).is_file()
        for suffix in SQLITE_COMPANIONS
    )


def sources(path: Path, fmt: str, report: ImportReport) -> Iterator[tuple[str, Path]]:
    """(format, path) to read: the path itself when it is in a format, else each of its entries."""
    if fmt != "auto":
        yield fmt, path
        return
    name = formats.detect(path)
    if name:
        yield name, path
    elif path.is_dir() and not path.is_symlink():
        for child in sorted(path.iterdir()):
            yield from sources(child, fmt, report)
    elif not path.name.startswith(".") and not sqlite_companion(path):
        report.problem(path, "not a checkpoint file of any known format; skipped")


def import_path(
    path: Path | str,
    *,
    fmt: str = "auto",
    project: Project | str,
    actor: Actor,
    dry_run: bool = False,
    write_back: bool = False,
    record_source: bool = True,
    progress: Callable[[ImportReport], None] | None = None,
    label: str | None = None,
) -> ImportReport:
    """Import a file or a folder tree (or a PostgresSaver database's URL). A dry run reads and stores everything,
    then rolls it all back.

    `project` is where sessions go unless their files name a project (Haytham's `projects/<project>/`);
    given as a slug, the project is created only once a session goes into it.
    Each session remembers the folder and format it came from (unless `record_source` is off, as for
    a temporary folder); with `write_back`, a restore of it is also written back there in that format.
    `label` names the source in the audit log instead of its path (an upload's name, not a temporary folder).
    """
    database = langgraph.is_url(path)
    if database and fmt not in ("auto", langgraph.NAME):
        raise ValueError(f"a database URL holds LangGraph history, not {fmt!r} files")
    if not database and not Path(path).exists():
        raise FileNotFoundError(f"{path} does not exist")
    if fmt != "auto":
        formats.get(fmt)  # an unknown name fails before anything is read
    report = ImportReport()
    target = label or (langgraph.database_name(str(path)) if database else str(path))
    with transaction.atomic() if dry_run else nullcontext():
        importer = _Importer(project, report, progress, write_back, actor, target=target)
        found: Iterable[tuple[str, Path | str]] = (
            [(langgraph.NAME, path)] if database else sources(Path(path), fmt, report)
        )
        for name, source in found:
            if name == langgraph.NAME:  # LangGraph history: a SqliteSaver file or a database URL
                where = target if database else str(source)
                if write_back:
                    report.note(
                        f"{where}: LangGraph threads are not written back (export them with --format langgraph)"
                    )
                threads = langgraph.threads(source)
                import_threads(
                    threads,
                    source=where,
                    project_of=lambda: importer.project,
                    actor=actor,
                    report=report,
                    progress=progress,
                )
                continue
            source = Path(source)
            importer.fmt = name
            importer.folder = (source if source.is_dir() else source.parent) if record_source else None
            for record in formats.get(name).read(source):
                importer.take(record)
            importer.flush_all()
        importer.finish()
        if dry_run:
            transaction.set_rollback(True)
        else:
            importer.audit_counts()
    return report


def _refusal(record: CheckpointRecord, exc: CheckpointError) -> str:
    """Why a checkpoint was not imported, in the words of an import (not of an API retry)."""
    if isinstance(exc, IdempotencyConflict):
        where = f"stored as checkpoint #{exc.seq}" if exc.seq is not None else "read before in this import"
        return f"not imported: {record.key} is already {where}, with a different {', '.join(exc.differences)}"
    if isinstance(exc, InvalidState):
        return f"invalid state: {exc}"
    return f"not imported: {exc}"


class _Importer:
    def __init__(
        self,
        project: Project | str,
        report: ImportReport,
        progress: Callable[[ImportReport], None] | None,
        write_back: bool,
        actor: Actor,
        *,
        target: str,
    ):
        self.slug = project if isinstance(project, str) else project.slug
        self._project = None if isinstance(project, str) else project
        self.actor = actor
        self.target = target
        self.audit: AuditEvent | None = None  # the import's audit row, once a checkpoint is stored
        self.report = report
        self.progress = progress
        self.write_back = write_back
        self.fmt = ""
        self.folder: Path | None = None
        self.sessions: dict[str, AgentSession] = {}
        self.pending: dict[str, list[CheckpointRecord]] = {}
        self.heads: dict[str, str] = {}  # session → idempotency key of its head
        self.forks: dict[str, tuple[str, str]] = {}  # session → (source session, source idempotency key)
        self.statuses: dict[str, str] = {}
        self.grown: set[str] = set()  # sessions this import added checkpoints to
        # idempotency key of a refused state → its (parent_key, new_root)
        self.refused: dict[str, tuple[str, bool]] = {}

    def take(self, record: Any) -> None:
        if isinstance(record, Problem):
            self.report.problem(record.path, record.error)
        elif isinstance(record, SessionRecord):
            self._session(record)
        elif isinstance(record, CheckpointRecord):
            self._session_named(record.session)
            batch = self.pending.setdefault(record.session, [])
            batch.append(record)
            if len(batch) >= BATCH:
                self.flush(record.session)
        elif isinstance(record, PhaseRecord):
            self.flush(record.session)
            self._phase(record)

    @property
    def project(self) -> Project:
        """The import's own project, created when the first session goes into it (a dry run rolls it back)."""
        if self._project is None:
            self._project = get_or_create_project(self.slug)
        return self._project

    def audited_project(self) -> Project | None:
        """Where the audit row goes: the import's project, else the first one the files named."""
        if self._project is not None:
            return self._project
        return next((session.project for session in self.sessions.values()), None)

    def _project_of(self, record: SessionRecord) -> Project:
        """The project the files name, where the importing user may import (an operator there); else ours."""
        if not record.project or record.project == self.slug:
            return self.project
        user = self.actor.user
        if user is not None and not may_import_into(user, record.project):
            self.report.note(
                f"the files name project {record.project!r} (projects/{record.project}/), where "
                f"{user.get_username()} is not an operator: its sessions go into {self.slug!r} instead"
            )
            return self.project
        self.report.note(
            f"the files name project {record.project!r} (projects/{record.project}/): its sessions go there, "
            f"not into {self.slug!r}"
        )
        return get_or_create_project(record.project)

    def _session(self, record: SessionRecord) -> AgentSession:
        project = self._project_of(record)
        session, _ = upsert_session(
            project,
            external_id=record.external_id,
            agent=record.agent,
            title=record.title or None,
            execution_mode=record.execution_mode or None,
            metadata=record.metadata or None,
            merge_metadata=True,
        )
        if self.folder is not None:
            source_path = str((Path(record.folder) if record.folder else self.folder).resolve())
            AgentSession.objects.filter(pk=session.pk).update(
                source_path=source_path, source_format=self.fmt, write_back=self.write_back
            )
            session.source_path, session.source_format = source_path, self.fmt
        self.sessions[record.external_id] = session
        if record.external_id not in self.report.sessions:
            self.report.sessions.append(record.external_id)
        if record.forked_from:
            source_session, source_key = record.forked_from
            self.forks[record.external_id] = (source_session, idempotency_key(self.fmt, source_key))
        if record.status:
            self.statuses[record.external_id] = record.status
        return session

    def _session_named(self, external_id: str) -> AgentSession:
        session = self.sessions.get(external_id)
        return session or self._session(SessionRecord(external_id=external_id, agent=external_id))

    def flush(self, external_id: str) -> None:
        records = self.pending.pop(external_id, [])
        if not records:
            return
        session = self.sessions[external_id]
        inputs = [self._past_refused(self._input(record)) for record in records]
        try:
            with transaction.atomic():
                records, inputs = self._without_legacy_repeats(session, records, inputs)
                results = self._ingest(session, records, inputs)
                self.audit_counts(created=sum(created for _, created in results))
        except Exception as exc:  # the session's stored rows broke, not these files: skip it, import the others
            self.report.session_failed(external_id, exc, step=f"imported ({len(records)} checkpoint(s))")
            return
        for _, created in results:
            if created:
                self.report.imported += 1
                self.grown.add(external_id)
            else:
                self.report.skipped += 1
        for record in records:
            if record.head:
                self.heads[external_id] = idempotency_key(self.fmt, record.key)
        if self.progress:
            self.progress(self.report)

    def audit_counts(self, *, created: int = 0) -> None:
        """The import's audit row, written with the first batch that stores a checkpoint and recounted with each
        later one, in the batch's transaction: what it says was imported is stored, wherever an import stops."""
        details = {"imported": self.report.imported + created, "skipped": self.report.skipped}
        details["errors"] = len(self.report.errors)
        if self.audit is not None:
            AuditEvent.objects.filter(pk=self.audit.pk).update(details=details)
        elif details["imported"]:
            self.audit = record_audit(
                self.actor, "import", project=self.audited_project(), target=self.target, details=details
            )

    def _without_legacy_repeats(
        self, session: AgentSession, records: list[CheckpointRecord], inputs: list[CheckpointInput]
    ) -> tuple[list[CheckpointRecord], list[CheckpointInput]]:
        """Drop (as skipped) the checkpoints an earlier version stored under their legacy key, unchanged.

        One indexed query a batch; a legacy key holding a different checkpoint (the source reused an id)
        does not count: that checkpoint is imported under its own key.
        """
        legacy = {idempotency_key(self.fmt, record.legacy_key) for record in records if record.legacy_key}
        if not legacy:
            return records, inputs
        stored = {c.idempotency_key: c for c in Checkpoint.objects.filter(session=session, idempotency_key__in=legacy)}
        kept: list[tuple[CheckpointRecord, CheckpointInput]] = []
        for record, item in zip(records, inputs, strict=True):
            existing = stored.get(idempotency_key(self.fmt, record.legacy_key)) if record.legacy_key else None
            if existing is not None and not checkpoint_differences(existing, item):
                self.report.skipped += 1
            else:
                kept.append((record, item))
        return [record for record, _ in kept], [item for _, item in kept]

    def _ingest(
        self, session: AgentSession, records: list[CheckpointRecord], inputs: list[CheckpointInput]
    ) -> list[tuple[Checkpoint, bool]]:
        try:
            return ingest_checkpoints([(session, inputs)])
        except CheckpointError:  # find the refused one(s), each reported: the others still go in
            results = []
            for record, item in zip(records, inputs, strict=True):
                item = self._past_refused(item)
                try:
                    results += ingest_checkpoints([(session, [item])])
                except CheckpointError as exc:
                    if not isinstance(exc, IdempotencyConflict):  # else the key is stored: children find it
                        self.refused[item.idempotency_key] = (item.parent_key, item.new_root)
                    self.report.problem(record.source_path or record.key, _refusal(record, exc))
            return results

    def _past_refused(self, item: CheckpointInput) -> CheckpointInput:
        """A checkpoint whose parent's state was refused hangs where that parent would have."""
        while item.parent_key in self.refused:
            parent_key, new_root = self.refused[item.parent_key]
            item = dataclasses.replace(item, parent_key=parent_key, new_root=new_root)
        return item

    def flush_all(self) -> None:
        for external_id in list(self.pending):
            self.flush(external_id)

    def _input(self, record: CheckpointRecord) -> CheckpointInput:
        return CheckpointInput(
            state=record.state,
            name=record.name,
            kind=record.kind,
            status=record.status,
            status_reason=record.status_reason,
            step=record.step,
            phase=record.phase,
            created_at=record.created_at,
            idempotency_key=idempotency_key(self.fmt, record.key),
            metadata={"source_format": self.fmt, "source_id": record.key, **record.metadata},
            parent_key=idempotency_key(self.fmt, record.parent_key) if record.parent_key else "",
            new_root=record.new_root,
        )

    def _phase(self, record: PhaseRecord) -> None:
        session = self._session_named(record.session)
        fields = {
            name: getattr(record, name)
            for name in ("name", "status", "started_at", "completed_at", "duration", "retry_count")
            + ("tokens_in", "tokens_out", "cost", "errors", "metadata")
        }
        phase, _ = Phase.objects.update_or_create(session=session, number=record.number, defaults=fields)
        for output in record.outputs:  # earlier runs first: each new one is the agent's next attempt
            import_agent_output(phase, **vars(output))
        for feedback in record.feedback:
            values = {**vars(feedback)}
            created_at = values.pop("created_at")
            lookup = {"phase": phase, "action": feedback.action, "reviewer_name": feedback.reviewer_name}
            if created_at:
                lookup["created_at"] = created_at
            if not PhaseFeedback.objects.filter(**lookup).exists():
                PhaseFeedback.objects.create(
                    **{**values, "phase": phase, **({"created_at": created_at} if created_at else {})}
                )

    def finish(self) -> None:
        """Heads named by the source, fork links, statuses, and when each session was last heard of.

        Session by session, each in its own transaction: one whose stored rows cannot be read is reported.
        """
        for external_id, session in self.sessions.items():
            if external_id in self.report.failed_sessions:
                continue
            try:
                with transaction.atomic():
                    self._finish_session(external_id, session)
            except Exception as exc:
                self.report.session_failed(external_id, exc, step="finished")

    def _finish_session(self, external_id: str, session: AgentSession) -> None:
        key = self.heads.get(external_id)
        head = Checkpoint.objects.filter(session=session, idempotency_key=key).first() if key else None
        current = Checkpoint.objects.filter(pk=AgentSession.objects.filter(pk=session.pk).values("head")[:1]).first()
        restored = current is not None and current.kind == CheckpointKind.RESTORE
        if head and current is not None and restored and head != current and external_id not in self.grown:
            # the files hold nothing newer than the operator's restore: it stands
            self.report.note(
                f"session {external_id}: kept #{current.seq}, restored in the console, as the head; "
                f"the files' latest is #{head.seq} (a new checkpoint in the files moves the head again)"
            )
            head = None
            self.statuses.pop(external_id, None)
        if head:
            AgentSession.objects.filter(pk=session.pk).update(head=head)
        if external_id in self.forks:
            source_session, source_key = self.forks[external_id]
            source = Checkpoint.objects.filter(
                session__project=session.project, session__external_id=source_session, idempotency_key=source_key
            ).first()
            if source:
                AgentSession.objects.filter(pk=session.pk).update(forked_from=source)
        if external_id in self.statuses:
            AgentSession.objects.filter(pk=session.pk).update(status=self.statuses[external_id])
        latest = Checkpoint.objects.filter(session=session).aggregate(latest=Max("created_at"))["latest"]
        if latest:
            AgentSession.objects.filter(pk=session.pk).update(last_seen_at=latest, updated_at=latest)
