"""Purging a value from history (docs/purges.md).

`start_purge` checks a request (a finding, or a pasted value), records the `Purge` — who, why, the value's
fingerprint, never the value — and queues its job; the value waits in `PurgeValue` until the job ends.
`run_purge` is the job:

1. Read every stored chunk once (`store.purging.scan_store`): which hold the value, and what refers to what.
2. The purge's reach: the chunks holding the value that the project's sessions (or the ones named) reach, and
   every chunk that reaches one of those — in any project: content is shared, and a shared node is deleted for all.
   A dry run stops here and records its preview.
3. Under the row lock of every session it rewrites (ingest inserts under the same lock, and checks the session's
   `purge_generation` there), chunks written since the scan are read too, then each checkpoint whose root is in the
   reach is stored again, in order, with the value replaced by the placeholder (`[purged <detector> <fingerprint>]`):
   same rows, same parents, new roots and digests. Live states and LangGraph's stored writes follow; then the rows
   that quote states (previews, names, metadata, alerts, audit reasons, events, deliveries, phases) are scrubbed, the
   old chunks deleted at once, the sessions' findings of the value closed, and each project audited.
4. Outside the transaction (PostgreSQL): VACUUM of the tables it changed, so dead rows do not keep the value.

A worker that dies midway (killed, out of memory) stops beating (`beat_purge`, from the job's heartbeat thread):
the every-minute sweep (`requeue_stalled`) queues the purge again, and the next run starts over. Nothing is lost by
that: before the rewrite commits, history is as it was and the value still waits in `PurgeValue`; once it has
committed (`rewritten_at`, set in the same transaction), a run only deletes the value, vacuums and finishes.

Not undoable: nothing keeps the value.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import Model, Q, TextField
from django.db.models.functions import Cast
from django.utils import timezone

from .. import store
from ..audit import Actor, InvalidInput, record_audit
from ..models import (
    AgentOutput,
    AgentSession,
    AuditEvent,
    Checkpoint,
    Chunk,
    Delivery,
    DriftAlert,
    Event,
    FindingClosed,
    InterruptAnswer,
    LangGraphCheckpoint,
    LangGraphWrites,
    Phase,
    PhaseFeedback,
    Project,
    Purge,
    PurgeState,
    PurgeValue,
    SecretFinding,
    SessionCount,
)
from ..store import jsoncodec, purging
from ..store import secrets as scanner
from ..store.diff import format_path
from ..store.previews import preview_of
from . import heartbeats

logger = logging.getLogger(__name__)

MIN_LENGTH = 8  # shorter values are words, not secrets: purging one would rewrite prose across projects
MAX_LENGTH = 10_000
MAX_SESSIONS = 1000
_FLUSH_EVERY = 50
_LOCK_ROUNDS = 5
_WRITE_MARGIN = timedelta(minutes=1)
INLINE = "inline"  # the holder of a run in the asking process (the console's preview), not a worker's


class PurgeNotRunnable(InvalidInput):
    pass


# ---- asking --------------------------------------------------------------------------------------------------


def value_of_finding(finding: SecretFinding) -> str | None:
    """The value behind a finding, found again by its fingerprint where it came in (the checkpoint's state and
    metadata, or the session's LangGraph writes); None once it is stored nowhere there."""
    for path, text in _strings_of_finding(finding):
        if path == finding.path or not finding.path:
            found = _find_by_fingerprint(text, finding.fingerprint, finding.length)
            if found is not None:
                return found
    for _, text in _strings_of_finding(finding):
        found = _find_by_fingerprint(text, finding.fingerprint, finding.length)
        if found is not None:
            return found
    return None


def _strings_of_finding(finding: SecretFinding) -> Iterator[tuple[str, str]]:
    checkpoint = finding.checkpoint
    if checkpoint is not None:
        for part, value in (("state", _state_or_none(bytes(checkpoint.root))), ("metadata", checkpoint.metadata)):
            yield from _strings(value, (part,))
    for row in LangGraphWrites.objects.filter(session_id=finding.session_id).only("writes"):
        for entry in jsoncodec.unpack(row.writes):
            if isinstance(entry, list) and len(entry) >= 3:
                yield from _strings(entry[2], ("writes", entry[1]))


def _state_or_none(root: bytes) -> Any:
    try:
        return store.load_shared(root)
    except store.StateNotFound:
        return None


def _strings(value: Any, prefix: tuple[str | int, ...]) -> Iterator[tuple[str, str]]:
    stack: list[tuple[tuple[str | int, ...], Any]] = [(prefix, value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            yield format_path(path), item
        elif isinstance(item, dict):
            stack.extend(((*path, key), child) for key, child in item.items())
            stack.extend(((*path, "(key)"), key) for key in item)
        elif isinstance(item, list):
            stack.extend(((*path, index), child) for index, child in enumerate(item))


def _find_by_fingerprint(text: str, fingerprint: str, length: int) -> str | None:
    """The substring of `text` of that length with that fingerprint: a keyed digest tells nothing but equality, so
    each candidate is tried (once per character of the strings where the value came in)."""
    if len(text) < length:
        return None
    for start in range(len(text) - length + 1):
        candidate = text[start : start + length]
        if scanner.fingerprint(candidate) == fingerprint:
            return candidate
    return None


def detector_of(value: str) -> str:
    """The detector that recognises the value by itself, named in its placeholder; "value" when none does."""
    hits = scanner.scan([["s", [], value]]).hits
    return next((hit.detector for hit in hits if hit.length == len(value)), "value")


def start_purge(
    project: Project,
    *,
    actor: Actor,
    reason: str,
    value: str | None = None,
    finding: SecretFinding | None = None,
    sessions: Sequence[str] = (),
    dry_run: bool = False,
    start: Callable[[int], object] | None = None,
) -> Purge:
    """Record a purge (or its dry run) of a finding's value or of a pasted one in `project`, and queue its job
    (`start(purge_id)` once committed). InvalidInput says what is wrong with the request; nothing is recorded then."""
    if (value is None) == (finding is None):
        raise InvalidInput("value", "give either a value or a finding, not both")
    reason = (reason or "").strip()
    if not reason and not dry_run:
        raise InvalidInput("reason", "say why: the reason is kept with the purge and in the audit log")
    if finding is not None:
        if finding.project_id != project.pk:
            raise InvalidInput("finding", "no such finding in this project")
        value = value_of_finding(finding)
    if value is None:
        raise InvalidInput("finding", "the value is no longer stored where it was found: paste it instead")
    reason = reason.replace(value, "[the value]")  # a reason quoting the value must not keep it
    if not MIN_LENGTH <= len(value) <= MAX_LENGTH:
        raise InvalidInput("value", f"a value to purge has {MIN_LENGTH} to {MAX_LENGTH} characters")
    names = list(dict.fromkeys(sessions))
    if len(names) > MAX_SESSIONS:
        raise InvalidInput("sessions", f"at most {MAX_SESSIONS} sessions")
    known = set(
        AgentSession.objects.filter(project=project, external_id__in=names).values_list("external_id", flat=True)
    )
    if missing := [name for name in names if name not in known]:
        raise InvalidInput("sessions", f"no session {missing[0]!r} in this project")
    with transaction.atomic():
        purge = Purge.objects.create(
            project=project,
            finding=finding,
            detector=finding.detector if finding is not None else detector_of(value),
            fingerprint=scanner.fingerprint(value),
            length=len(value),
            sessions=names,
            dry_run=dry_run,
            reason=reason,
            created_by=actor.user,
            token=actor.token,
            actor=actor.label,
            heartbeat_at=timezone.now(),  # a message the broker lost is sent again by the sweep once this is stale
        )
        PurgeValue.objects.create(purge=purge, value=value)
        details = {"purge": purge.pk, "detector": purge.detector, "fingerprint": purge.fingerprint[:12]}
        record_audit(
            actor,
            "purge_preview" if dry_run else "purge_secret",
            project=project,
            target=f"purge {purge.pk}",
            reason=reason,
            details={**details, "sessions": len(names)},
        )
        if start is not None:
            transaction.on_commit(lambda: heartbeats.send("purge", purge.pk, start), robust=True)
    return purge


def preview_purge(project: Project, *, actor: Actor, **asked: Any) -> Purge:
    """A dry run asked and run at once (the console's preview, before it asks to confirm): the Purge with its counts
    and preview. The API's dry run is a job like any purge."""
    purge = start_purge(project, actor=actor, reason=asked.pop("reason", ""), dry_run=True, **asked)
    run_purge(purge.pk)
    purge.refresh_from_db()
    return purge


# ---- the job -------------------------------------------------------------------------------------------------


@dataclass
class _Reach:
    scan: purging.StoreScan
    chunks: set[bytes] = field(default_factory=set)  # to re-encode and delete
    orphans: set[bytes] = field(default_factory=set)  # holding the value, referred to by nothing
    checkpoints: list[tuple[int, int, int, int | None, bytes]] = field(default_factory=list)  # id, session, seq…
    # what the rewrite stored, by digest: a chunk of the reach stored again under the same digest (a patch rebased on a
    # keyframe's leaves that hold the value, itself without it: store._rebase) is kept with its new data, not deleted
    written: dict[bytes, bytes] = field(default_factory=dict)


@dataclass
class Progress:
    """How far a run is, written by its heartbeat (`beat_purge`): the rewrite is one transaction, so what it wrote
    to the purge's row would be seen by nobody before it commits, and would hold the row the heartbeat moves."""

    phase: str = "reading the store"
    total: int = 0
    done: int = 0


def claim_purge(purge_id: int, *, holder: str, now: datetime | None = None) -> bool:
    """Take the purge for this worker (`heartbeats.claim`): a finished or failed purge is never taken again."""
    return heartbeats.claim(Purge, purge_id, holder=holder, now=now, phase=Progress.phase)


def beat_purge(purge_id: int, *, holder: str, progress: Progress, now: datetime | None = None) -> None:
    """Proof of life, while this worker still holds the purge, with how far it is."""
    heartbeats.beat(
        Purge, purge_id, holder=holder, now=now, phase=progress.phase, total=progress.total, done=progress.done
    )


def requeue_stalled(start: Callable[[int], object], *, now: datetime | None = None, limit: int = 100) -> int:
    """Queue again the purges whose worker stopped beating or whose message never reached a worker (a purge of
    before the heartbeat has none: its age counts)."""
    return heartbeats.requeue_stalled(Purge, "purge", start, now=now, limit=limit)


def run_purge(purge_id: int, *, holder: str = INLINE, progress: Progress | None = None) -> dict[str, Any]:
    """Claim a purge and run it; a purge another live worker holds (or that ended) changes nothing. A run after one
    whose worker died starts over, or only finishes if that one's rewrite had committed (the module's docstring)."""
    if not claim_purge(purge_id, holder=holder):
        return {"claimed": False}
    progress = progress or Progress()
    purge = Purge.objects.select_related("project").get(pk=purge_id)
    value = PurgeValue.objects.filter(purge=purge).values_list("value", flat=True).first()
    result: dict[str, Any]
    try:
        if purge.rewritten_at is not None:
            result = {"claimed": True, "resumed": True, "tables": _tables_a_purge_changes()}
        elif value is None:
            raise PurgeNotRunnable("value", "the value is gone (a purge runs once): ask again")
        else:
            result = _preview(purge, value) if purge.dry_run else _purge(purge, value, progress)
    except Exception as exc:
        logger.exception("purge %s failed", purge_id)
        message = str(exc) if isinstance(exc, InvalidInput) else f"stopped on an internal error: {type(exc).__name__}"
        Purge.objects.filter(pk=purge_id, worker=holder).update(
            state=PurgeState.FAILED, finished_at=timezone.now(), error=message
        )
        PurgeValue.objects.filter(purge_id=purge_id).delete()
        raise
    PurgeValue.objects.filter(purge_id=purge_id).delete()
    vacuum(["checkpoints_purgevalue", *result.pop("tables", [])])
    Purge.objects.filter(pk=purge_id, worker=holder).update(
        state=PurgeState.FINISHED, finished_at=timezone.now(), phase=""
    )
    return result


def _reach(purge: Purge, scan: purging.StoreScan) -> _Reach:
    """What the purge rewrites: see the module's docstring, step 2."""
    everything = scan.reaching(scan.holding)
    rows = _checkpoints_with_roots(everything)
    mine = {root for _, session, _, _, root in rows if session in _sessions_in_scope(purge)}
    mine |= _other_roots_in_scope(purge, everything)
    holding = scan.reachable(mine) & scan.holding
    reach = _Reach(scan, chunks=scan.reaching(holding))
    reach.checkpoints = sorted((row for row in rows if row[4] in reach.chunks), key=lambda row: (row[1], row[2]))
    referred = {key for key in scan.holding if scan.referrers.get(key)}
    unheld = scan.holding - reach.chunks - referred
    reach.orphans = unheld - _live_roots(unheld)
    return reach


def _sessions_in_scope(purge: Purge) -> set[int]:
    cached = getattr(purge, "_scope_ids", None)
    if cached is None:
        sessions = AgentSession.objects.filter(project_id=purge.project_id)
        if purge.sessions:
            sessions = sessions.filter(external_id__in=purge.sessions)
        cached = set(sessions.values_list("pk", flat=True))
        purge._scope_ids = cached  # type: ignore[attr-defined]
    return cached


def _batches(keys: Iterable[bytes], size: int = 500) -> Iterator[list[bytes]]:
    ordered = list(keys)
    for start in range(0, len(ordered), size):
        yield ordered[start : start + size]


def _checkpoints_with_roots(roots: set[bytes]) -> list[tuple[int, int, int, int | None, bytes]]:
    rows = []
    for batch in _batches(roots):
        found = Checkpoint.objects.filter(root__in=batch).values_list("pk", "session_id", "seq", "parent_id", "root")
        rows += [(pk, session, seq, parent, bytes(root)) for pk, session, seq, parent, root in found]
    return rows


def _other_roots_in_scope(purge: Purge, roots: set[bytes]) -> set[bytes]:
    """Live states and LangGraph writes' states of the sessions in scope among `roots`."""
    found: set[bytes] = set()
    scope = _sessions_in_scope(purge)
    for batch in _batches(roots):
        found |= {
            bytes(r)
            for r in AgentSession.objects.filter(pk__in=scope, live_root__in=batch).values_list("live_root", flat=True)
            if r is not None
        }
        found |= {
            bytes(r)
            for r in LangGraphWrites.objects.filter(session_id__in=scope, values_root__in=batch).values_list(
                "values_root", flat=True
            )
            if r is not None
        }
    return found


def _live_roots(keys: set[bytes]) -> set[bytes]:
    """Which of `keys` a checkpoint, a live state or LangGraph writes still name (another project's own copy)."""
    named: set[bytes] = set()
    for batch in _batches(keys):
        for model, column in ((Checkpoint, "root"), (AgentSession, "live_root"), (LangGraphWrites, "values_root")):
            named |= {bytes(r) for r in model.objects.filter(**{f"{column}__in": batch}).values_list(column, flat=True)}
    return named


def _preview(purge: Purge, value: str) -> dict[str, Any]:
    reach = _reach(purge, purging.scan_store(value))
    counts = _counts(purge, reach)
    Purge.objects.filter(pk=purge.pk).update(**counts, total=len(reach.checkpoints), phase="")
    return {"claimed": True, **counts}


def _counts(purge: Purge, reach: _Reach) -> dict[str, Any]:
    scope = _sessions_in_scope(purge)
    project_of = dict(
        AgentSession.objects.filter(pk__in={row[1] for row in reach.checkpoints}).values_list("pk", "project_id")
    )
    mine = [row for row in reach.checkpoints if row[1] in scope or project_of[row[1]] == purge.project_id]
    others = [row for row in reach.checkpoints if row not in mine]
    names = dict(AgentSession.objects.filter(pk__in={row[1] for row in mine}).values_list("pk", "external_id"))
    preview: dict[str, list[int]] = {}
    for _, session, seq, _, _ in mine:
        preview.setdefault(names[session], []).append(seq)
    return {
        "checkpoints": len(mine),
        "session_count": len({row[1] for row in mine}),
        "other_checkpoints": len(others),
        "other_sessions": len({row[1] for row in others}),
        "preview": [
            {"session": name, "seqs": seqs[:200], "count": len(seqs)} for name, seqs in sorted(preview.items())
        ],
    }


def _purge(purge: Purge, value: str, progress: Progress) -> dict[str, Any]:
    started = timezone.now() - _WRITE_MARGIN  # a chunk is stamped when queued, a little before it is inserted
    scan = purging.scan_store(value)
    placeholder = purge.placeholder
    try:
        with transaction.atomic():
            reach = _locked_reach(purge, scan, value, started)
            counts = _counts(purge, reach)
            progress.phase, progress.total = "rewriting", len(reach.checkpoints)
            roots = _rewrite_checkpoints(reach, value, placeholder, progress)
            sessions = {row[1] for row in reach.checkpoints} | _sessions_in_scope(purge) | _naming(reach.chunks)
            _rewrite_live_states(sessions, reach, roots, value, placeholder)
            scrubbed, tables = _scrub(purge, sessions, value, placeholder)
            again = {key: data for key, data in reach.written.items() if key in reach.chunks}
            purging.replace_chunks(again)
            deleted = purging.delete_chunks((reach.chunks | reach.orphans) - again.keys())
            AgentSession.objects.filter(pk__in=sessions).update(purge_generation=purge.pk)
            closed = _close_findings(purge, sessions)
            _audit(purge, reach, closed)
            progress.phase, progress.done = "vacuuming", len(reach.checkpoints)
            # the purge's own row last (the heartbeat moves it): held only while this transaction commits
            Purge.objects.filter(pk=purge.pk).update(
                **counts,
                total=len(reach.checkpoints),
                done=len(reach.checkpoints),
                chunks_deleted=deleted,
                rows_scrubbed=scrubbed,
                phase=progress.phase,
                rewritten_at=timezone.now(),
            )
    finally:
        store.cache.clear()  # states written by a rewrite that rolled back must not be read from memory either
    store.cache.generation = max(store.cache.generation, purge.pk)
    tables = sorted({Chunk._meta.db_table, Checkpoint._meta.db_table, AgentSession._meta.db_table, *tables})
    return {"claimed": True, **counts, "chunks_deleted": deleted, "rows_scrubbed": scrubbed, "tables": tables}


def _locked_reach(purge: Purge, scan: purging.StoreScan, value: str, started: datetime) -> _Reach:
    """The reach, with every session it rewrites locked (step 3 of the module's docstring)."""
    locked: set[int] = set()
    for _ in range(_LOCK_ROUNDS):
        reach = _reach(purge, scan)
        wanted = {row[1] for row in reach.checkpoints} | _sessions_in_scope(purge)
        if wanted <= locked:
            break
        list(AgentSession.objects.select_for_update().filter(pk__in=wanted - locked).order_by("pk").values("pk"))
        locked |= wanted
        # chunks written since the scan (a checkpoint stored meanwhile on a head about to be rewritten)
        fresh = Chunk.objects.filter(created_at__gte=started).values_list("hash", flat=True)
        purging.scan_store(value, [bytes(key) for key in fresh], into=scan)
        started = timezone.now() - _WRITE_MARGIN
    return reach


def _rewrite_checkpoints(reach: _Reach, value: str, placeholder: str, progress: Progress) -> dict[bytes, bytes]:
    """Store each checkpoint's state again without the value, against its parent's new root (the same shape:
    patches on keyframes), and update its row. Returns old root → new root."""
    new_roots: dict[bytes, bytes] = {}
    saved_of: dict[bytes, store.Saved] = {}
    parent_roots = dict(
        Checkpoint.objects.filter(pk__in={row[3] for row in reach.checkpoints if row[3]}).values_list("pk", "root")
    )
    batch = store.ChunkBatch(written=reach.written)
    changed: list[Checkpoint] = []
    for done, (pk, _, _, parent, root) in enumerate(reach.checkpoints, start=1):
        if root not in saved_of:
            state = purging.replaced(store.load_state(root), value, placeholder)
            base = bytes(parent_roots[parent]) if parent in parent_roots else None
            if base is not None and base in reach.chunks:  # rewritten: its new root (or whole, if not yet)
                base = new_roots.get(base)
            saved_of[root] = store.save_state(state, base=base, batch=batch)
            new_roots[root] = saved_of[root].root
        saved = saved_of[root]
        changed.append(
            Checkpoint(
                pk=pk,
                root=saved.root,
                state_hash=saved.state_hash,
                raw_bytes=saved.raw_bytes,
                stored_bytes=saved.stored_bytes,
            )
        )
        if done % _FLUSH_EVERY == 0:
            batch.flush()
            progress.done = done
    batch.flush()
    Checkpoint.objects.bulk_update(changed, ["root", "state_hash", "raw_bytes", "stored_bytes"], batch_size=500)
    _refresh_previews(changed)
    return new_roots


def _refresh_previews(changed: list[Checkpoint]) -> None:
    """A timeline row's one-line preview quotes what the checkpoint added: made again from the new states."""
    rows = (
        Checkpoint.objects.filter(pk__in=[c.pk for c in changed])
        .select_related("parent")
        .only("pk", "root", "preview", "parent__root")
    )
    updated = []
    for row in rows:
        previous = _state_or_none(bytes(row.parent.root)) if row.parent is not None else None
        state = _state_or_none(bytes(row.root))
        text = preview_of(state, previous).text
        if text != row.preview:
            row.preview = text
            updated.append(row)
    Checkpoint.objects.bulk_update(updated, ["preview"], batch_size=500)


def _naming(chunks: set[bytes]) -> set[int]:
    """Sessions whose live state or LangGraph writes name a chunk of the reach (their checkpoints may not)."""
    found: set[int] = set()
    for batch in _batches(chunks):
        found |= set(AgentSession.objects.filter(live_root__in=batch).values_list("pk", flat=True))
        found |= set(LangGraphWrites.objects.filter(values_root__in=batch).values_list("session_id", flat=True))
    return found


def _rewrite_live_states(
    sessions: set[int], reach: _Reach, roots: dict[bytes, bytes], value: str, placeholder: str
) -> None:
    """Live states and the states LangGraph's writes name, moved to their new roots (stored again whole when no
    checkpoint had the same root), and the values the writes hold themselves cleaned."""

    def new_root(old: bytes) -> bytes | None:
        if old not in roots:
            if old not in reach.chunks and old not in reach.orphans:
                return None
            state = _state_or_none(old)
            roots[old] = store.save_state(purging.replaced(state if state is not None else {}, value, placeholder)).root
        return roots[old]

    for session in AgentSession.objects.filter(pk__in=sessions, live_root__isnull=False).only("pk", "live_root"):
        moved = new_root(bytes(session.live_root))
        if moved is not None:
            AgentSession.objects.filter(pk=session.pk).update(live_root=moved)
    for row in LangGraphWrites.objects.filter(session_id__in=sessions).only("pk", "writes", "values_root"):
        entries = jsoncodec.unpack(row.writes)
        cleaned = purging.replaced(entries, value, placeholder)
        fields: dict[str, Any] = {}
        if cleaned != entries:
            fields["writes"] = jsoncodec.pack(cleaned)
        moved = new_root(bytes(row.values_root)) if row.values_root is not None else None
        if moved is not None:
            fields["values_root"] = moved
        if fields:
            LangGraphWrites.objects.filter(pk=row.pk).update(**fields)


# What quotes states besides the store: (model, the lookup to a session, text fields, JSON fields).
_QUOTING: list[tuple[type[Model], str, list[str], list[str]]] = [
    (Checkpoint, "session_id", ["name", "preview", "status_reason"], ["metadata"]),
    (AgentSession, "pk", ["title"], ["metadata"]),
    (SessionCount, "session_id", ["value"], []),
    (DriftAlert, "session_id", ["message"], ["evidence"]),
    (LangGraphCheckpoint, "session_id", [], ["metadata"]),
    (InterruptAnswer, "session_id", [], ["question", "value"]),
    (Phase, "session_id", [], ["errors", "metadata"]),
    (AgentOutput, "phase__session_id", ["content"], ["tools_used", "error_details"]),
    (PhaseFeedback, "phase__session_id", ["comments"], ["requested_changes"]),
]
# Rows of a project rather than of a session: scrubbed in every project the purge rewrote.
_QUOTING_PROJECT: list[tuple[type[Model], str, list[str], list[str]]] = [
    (AuditEvent, "project_id", ["reason", "target"], ["details"]),
    (Purge, "project_id", ["reason"], []),
    (Event, "project_id", [], ["data"]),
    (Delivery, "event__project_id", ["last_error"], []),
]


def _tables_a_purge_changes() -> list[str]:
    """Every table a purge may write the value out of: what a run vacuums when the one before it died after its
    rewrite committed (which tables that one changed is not known)."""
    models = [Chunk, Checkpoint, AgentSession, LangGraphCheckpoint, LangGraphWrites]
    models += [model for model, *_ in (*_QUOTING, *_QUOTING_PROJECT)]
    return sorted({model._meta.db_table for model in models})


def _scrub(purge: Purge, sessions: set[int], value: str, placeholder: str) -> tuple[int, list[str]]:
    projects = set(AgentSession.objects.filter(pk__in=sessions).values_list("project_id", flat=True))
    projects.add(purge.project_id)
    total, tables = 0, []
    for quoting, scope in ((_QUOTING, sessions), (_QUOTING_PROJECT, projects)):
        for model, lookup, texts, jsons in quoting:
            count = _scrub_model(model, {f"{lookup}__in": scope}, texts, jsons, value, placeholder)
            if count:
                total += count
                tables.append(model._meta.db_table)
    total += _scrub_headers(sessions, value, placeholder)
    return total, [*tables, LangGraphCheckpoint._meta.db_table, LangGraphWrites._meta.db_table]


def _scrub_model(
    model: type[Model], scope: dict[str, Any], texts: list[str], jsons: list[str], value: str, placeholder: str
) -> int:
    """Rows of `model` in `scope` whose fields quote the value, with it replaced (JSON fields are matched by their
    text, as the database spells it)."""
    spelled = [needle.decode() for needle in purging.needles(value)]
    matches = Q()
    for name in texts:
        matches |= Q(**{f"{name}__contains": value})
    annotations = {f"_purge_{name}": Cast(name, TextField()) for name in jsons}
    for name in jsons:
        for needle in spelled:
            matches |= Q(**{f"_purge_{name}__contains": needle})
    manager = model._default_manager
    rows = manager.filter(**scope).annotate(**annotations).filter(matches).only("pk", *texts, *jsons)
    count = 0
    for row in rows:
        for name in [*texts, *jsons]:
            setattr(row, name, purging.replaced(getattr(row, name), value, placeholder))
        row.save(update_fields=[*texts, *jsons])
        count += 1
    return count


def _scrub_headers(sessions: set[int], value: str, placeholder: str) -> int:
    count = 0
    for row in LangGraphCheckpoint.objects.filter(session_id__in=sessions).only("pk", "header"):
        header = jsoncodec.unpack(row.header)
        cleaned = purging.replaced(header, value, placeholder)
        if cleaned != header:
            LangGraphCheckpoint.objects.filter(pk=row.pk).update(header=jsoncodec.pack(cleaned))
            count += 1
    return count


def _close_findings(purge: Purge, sessions: set[int]) -> int:
    return (
        SecretFinding.objects.filter(session_id__in=sessions, fingerprint=purge.fingerprint)
        .open()
        .update(
            closed_at=timezone.now(),
            closed_as=FindingClosed.PURGED,
            closed_by=purge.actor,
            close_reason=f"purge {purge.pk}",
        )
    )


def _audit(purge: Purge, reach: _Reach, closed: int) -> None:
    """The purge in the project that asked (its own counts) and, in every other project it rewrote, a row saying
    a purge asked elsewhere did it — not where, nor why: that is the other project's business."""
    actor = Actor(label=purge.actor, user=purge.created_by, token=purge.token)
    project_of = dict(
        AgentSession.objects.filter(pk__in={row[1] for row in reach.checkpoints}).values_list("pk", "project_id")
    )
    per_project: dict[int, int] = {}
    for row in reach.checkpoints:
        per_project[project_of[row[1]]] = per_project.get(project_of[row[1]], 0) + 1
    details = {"purge": purge.pk, "detector": purge.detector, "fingerprint": purge.fingerprint[:12]}
    record_audit(
        actor,
        "purge_done",
        project=purge.project,
        target=f"purge {purge.pk}",
        reason=purge.reason,
        details={**details, "checkpoints": per_project.get(purge.project_id, 0), "findings_closed": closed},
    )
    for project_id, count in sorted(per_project.items()):
        if project_id != purge.project_id:
            record_audit(
                Actor.system("system:purge"),
                "purge_done",
                project=Project(pk=project_id),
                target="a purge asked in another project",
                details={"detector": purge.detector, "checkpoints": count, "shared_content": True},
            )


def vacuum(tables: Iterable[str]) -> None:
    """VACUUM the tables a purge changed (PostgreSQL; outside any transaction): the old row versions holding the
    value become free space at once, rather than at autovacuum's leisure."""
    if connection.vendor != "postgresql" or connection.in_atomic_block:
        return
    with connection.cursor() as cursor:
        for table in sorted(set(tables)):
            cursor.execute(f"VACUUM {connection.ops.quote_name(table)}")


# ---- closing a finding by hand -------------------------------------------------------------------------------


@transaction.atomic
def dismiss_finding(finding: SecretFinding, *, actor: Actor, reason: str) -> SecretFinding:
    """Close a finding without purging (a test key, a false positive, a key already revoked), with a reason,
    audited — and the project's other open findings of the same value (one row of the Secrets page: the value, in
    every session it was found in). Its value stays in the states; masking goes on matching its fingerprint."""
    reason = (reason or "").strip()
    if not reason:
        raise InvalidInput("reason", "say why the finding is closed")
    if finding.closed_at is not None:
        raise InvalidInput("finding", f"already closed ({finding.closed_as})")
    now = timezone.now()
    same_value = Q(pk=finding.pk) | Q(
        project_id=finding.project_id, detector=finding.detector, fingerprint=finding.fingerprint
    )
    closed = (
        SecretFinding.objects.filter(same_value)
        .open()
        .update(closed_at=now, closed_as=FindingClosed.DISMISSED, closed_by=actor.label, close_reason=reason)
    )
    if not closed:  # closed meanwhile by another request or a purge
        raise InvalidInput("finding", "already closed")
    finding.closed_at, finding.closed_as, finding.closed_by, finding.close_reason = (
        now,
        FindingClosed.DISMISSED,
        actor.label,
        reason,
    )
    record_audit(
        actor,
        "dismiss_finding",
        project=Project(pk=finding.project_id),
        target=f"finding {finding.pk} ({finding.detector})",
        reason=reason,
        details={"finding": finding.pk, "fingerprint": finding.fingerprint[:12], "findings": closed},
    )
    return finding
