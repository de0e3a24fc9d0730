"""Running tallies of each session's checkpoints, so that no page counts a session's rows to describe it.

* On the session: how many checkpoints, their raw and stored bytes, how many failed or halted and how many had a
  tool call fail (the timeline's header, the API's totals, the overview's storage).
* `SessionRollup`, per block of ROLLUP_BLOCK seqs and hour of creation: count, steps, checkpoints in trouble, the
  largest state, stored bytes, first and last seq (the timeline's charts, the overview's "today").
* `SessionCount`, per name, kind and status: how many checkpoints have it (the summary API).

Whatever inserts checkpoints calls `count_in` after the INSERT, whatever deletes them calls `forget` before the
DELETE, in the same transaction and under the session's row lock (ingest, restore and fork hold it already;
`forget` takes it), so the tallies move with the rows or not at all. Checkpoints are immutable: nothing else
changes what is tallied (`fill_previews`, which marks failed tool calls of old checkpoints, recounts). `recount`
rebuilds the tallies from the rows: the migration that introduced them, and `manage.py recount_tallies`.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from functools import reduce
from typing import Any, cast

from django.apps import apps as global_apps
from django.db import connection, transaction
from django.db.models import Count, F, Field, Max, Min, Model, Q, QuerySet, Sum
from django.db.models.functions import TruncHour

from ..models import (
    ROLLUP_BLOCK,
    TROUBLE,
    AgentSession,
    Checkpoint,
    CheckpointKind,
    CheckpointStatus,
    SessionCount,
    SessionRollup,
    TalliedField,
)
from . import arrays

_STOPPED = (CheckpointStatus.FAILED, CheckpointStatus.HALTED)
_UPSERT_ROWS = 500  # rows per INSERT … ON CONFLICT statement
_SPANS = 200  # seq ranges per recount query (SQLite refuses conditions nested 1,000 deep)
SESSION_FIELDS = ["checkpoint_count", "raw_bytes", "stored_bytes", "failed_count", "tool_failed_count"]


def _hour(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def _block(seq: int) -> int:
    return (seq - 1) // ROLLUP_BLOCK


def count_in(checkpoints: Sequence[Checkpoint], **session_fields: Any) -> None:
    """Add checkpoints just inserted into one session to its tallies: one UPDATE of the session (which also sets
    `session_fields`, the caller's own changes to it) and one upsert each of the rollups and the counts they touch,
    however many checkpoints."""
    if not checkpoints:
        return
    session_id = checkpoints[0].session_id
    rollups: dict[tuple[int, datetime], tuple[int, ...]] = {}
    for c in checkpoints:
        key = (_block(c.seq), _hour(c.created_at))
        count, steps, trouble, raw_max, stored, first, last = rollups.get(key, (0, 0, 0, 0, 0, c.seq, c.seq))
        rollups[key] = (
            count + 1,
            steps + (c.kind == CheckpointKind.STEP),
            trouble + (c.status in _STOPPED or c.tool_failed),
            max(raw_max, c.raw_bytes),
            stored + c.stored_bytes,
            min(first, c.seq),
            max(last, c.seq),
        )
    greatest, least = ("GREATEST", "LEAST") if connection.vendor == "postgresql" else ("MAX", "MIN")
    hour = SessionRollup._meta.get_field("hour")
    rollup_upserts = _upserts(
        SessionRollup,
        ["block", "hour", "count", "steps", "trouble", "raw_max", "stored_bytes", "first_seq", "last_seq"],
        [(session_id, block, hour.get_db_prep_value(at, connection), *row) for (block, at), row in rollups.items()],
        conflict=["session_id", "block", "hour"],
        merge={
            "count": "{old} + {new}",
            "steps": "{old} + {new}",
            "trouble": "{old} + {new}",
            "raw_max": greatest + "({old}, {new})",
            "stored_bytes": "{old} + {new}",
            "first_seq": least + "({old}, {new})",
            "last_seq": greatest + "({old}, {new})",
        },
    )
    session_update = _session_update(session_id, checkpoints, **session_fields)
    _execute([session_update, *rollup_upserts, *_count_upserts({session_id: checkpoints}, sign=1)])


def lock_sessions(ids: Collection[int]) -> None:
    """Lock the sessions of these checkpoints, in id order, as ingest does (a lock the transaction holds already
    is taken again for free)."""
    doomed = Checkpoint.objects.filter(pk__in=arrays.ids(ids))
    sessions = AgentSession.objects.filter(pk__in=doomed.values("session_id")).order_by("pk")
    list(sessions.select_for_update().values_list("pk"))


def forget(ids: Collection[int], *, locked: bool = False) -> list[tuple[int, str]]:
    """Take checkpoints that are about to be deleted out of their sessions' tallies; call it in the deleting
    transaction before it locks any checkpoint row (re-pointing children, the DELETE): two deleters that took row
    locks first and then waited for each other's session lock would deadlock.

    Locks their sessions (in id order) as ingest does, then for all of them at once: one UPDATE of the sessions,
    the counts' upsert, and a recount of the rollup blocks they leave from the rows that stay (a block is
    ROLLUP_BLOCK seqs: the largest state and the first and last seq cannot be taken back by subtraction; a block
    left empty is only dropped, and retention empties most of the blocks it touches). A batch
    of retention spanning many small sessions costs the same few statements as one session's.

    The rows are read once the locks are held: a checkpoint that a concurrent deleter took out meanwhile is gone
    by then, and not subtracted twice. Returns what it took out, (id, kind) in session and seq order: the rows
    that are still there to delete."""
    doomed = Checkpoint.objects.filter(pk__in=arrays.ids(ids))
    if not locked:  # `locked`: the caller took `lock_sessions(ids)` in this transaction already
        lock_sessions(ids)
    by_session: dict[int, list[Any]] = {}
    fields = ("pk", "session_id", "seq", "name", "kind", "status", "tool_failed", "raw_bytes", "stored_bytes")
    for checkpoint in doomed.order_by("session_id", "seq").values_list(*fields, named=True):  # tuples: cheaper
        by_session.setdefault(checkpoint.session_id, []).append(checkpoint)
    if not by_session:
        return []
    _take_from_sessions(by_session)
    _execute(_count_upserts(by_session, sign=-1))
    SessionCount.objects.filter(session_id__in=list(by_session), count__lte=0).delete()
    leaving = Counter((session_id, _block(c.seq)) for session_id, rows in by_session.items() for c in rows)
    taken = [(c.pk, c.kind) for rows in by_session.values() for c in rows]
    _recount_blocks(_drop_rollups(leaving), without=[pk for pk, _ in taken])
    return taken


def recount(session_ids: Iterable[int], *, apps: Any = global_apps, batch_size: int = 100) -> int:
    """Rebuild the tallies of these sessions from their rows, `batch_size` sessions per transaction, each batch
    under its sessions' locks; returns how many sessions. `apps` lets a migration pass its historical models."""
    ids = list(session_ids)
    for start in range(0, len(ids), batch_size):
        with transaction.atomic():
            _recount_batch(ids[start : start + batch_size], apps)
    return len(ids)


def _recount_batch(batch: list[int], apps: Any) -> None:
    """Two reads of the sessions' checkpoints: the rollups, then one grouping that gives both the counts and the
    session's totals."""
    session_model, rollup_model, count_model = (
        apps.get_model("checkpoints", name) for name in ("AgentSession", "SessionRollup", "SessionCount")
    )
    sessions = list(session_model.objects.select_for_update().filter(pk__in=batch).order_by("pk"))
    rows = apps.get_model("checkpoints", "Checkpoint").objects.filter(session_id__in=batch).order_by()
    rollup_model.objects.filter(session_id__in=batch).delete()
    rollup_model.objects.bulk_create(_rollups(rows, rollup_model), batch_size=_UPSERT_ROWS)
    counts: Counter[tuple[int, str, str]] = Counter()
    totals = {session.pk: [0] * len(SESSION_FIELDS) for session in sessions}
    grouped = rows.values("session_id", *TalliedField.values, "tool_failed").annotate(
        n=Count("pk"), raw=Sum("raw_bytes"), stored=Sum("stored_bytes")
    )
    for row in grouped:
        n, total = row["n"], totals[row["session_id"]]
        for field in TalliedField.values:
            counts[row["session_id"], field, row[field]] += n
        for i, value in enumerate(
            (n, row["raw"], row["stored"], n * (row["status"] in _STOPPED), n * row["tool_failed"])
        ):
            total[i] += value
    count_model.objects.filter(session_id__in=batch).delete()
    count_model.objects.bulk_create(
        [count_model(session_id=s, field=field, value=value, count=n) for (s, field, value), n in counts.items()],
        batch_size=_UPSERT_ROWS,
    )
    for session in sessions:
        for name, value in zip(SESSION_FIELDS, totals[session.pk], strict=True):
            setattr(session, name, value)
    session_model.objects.bulk_update(sessions, SESSION_FIELDS)


def _shares(checkpoints: Sequence[Any]) -> tuple[int, ...]:
    """What checkpoints count for in their session's tallies, in SESSION_FIELDS order."""
    return (
        len(checkpoints),
        sum(c.raw_bytes for c in checkpoints),
        sum(c.stored_bytes for c in checkpoints),
        sum(c.status in _STOPPED for c in checkpoints),
        sum(bool(c.tool_failed) for c in checkpoints),
    )


Statement = tuple[str, list[Any]]
_JOINED_PARAMS = 20_000  # statements joined into one stay well within PostgreSQL's 65,535 parameters


def _session_update(session_id: int, checkpoints: Sequence[Checkpoint], **session_fields: Any) -> Statement:
    """The session's UPDATE: `session_fields` set, the checkpoints' shares added (for `_execute` to join)."""
    quote = connection.ops.quote_name
    sets, params = [], []
    for name, value in session_fields.items():
        field = _session_field(name)
        sets.append(f"{quote(field.column or name)} = %s")
        params.append(field.get_db_prep_save(value.pk if isinstance(value, Model) else value, connection))
    for name, share in zip(SESSION_FIELDS, _shares(checkpoints), strict=True):
        column = quote(_session_field(name).column or name)
        sets.append(f"{column} = {column} + %s")
        params.append(share)
    return f"UPDATE {quote(AgentSession._meta.db_table)} SET {', '.join(sets)} WHERE id = %s", [*params, session_id]  # noqa: S608 - quoted names and placeholders; values are parameters


def _session_field(name: str) -> Field[Any, Any]:
    return cast("Field[Any, Any]", AgentSession._meta.get_field(name))


def _execute(statements: Sequence[Statement]) -> None:
    """Run the statements; on PostgreSQL as one (each but the last a data-modifying WITH query): a round trip
    for the tallies of a put, not three. They touch distinct rows (one statement sees none of the others'
    changes), so the order they run in does not matter."""
    if not statements:
        return
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql" and sum(len(params) for _, params in statements) <= _JOINED_PARAMS:
            *first, (last, _) = statements
            queries = ", ".join(f"t{i} AS ({sql})" for i, (sql, _) in enumerate(first))
            cursor.execute(f"WITH {queries} {last}" if first else last, [p for _, params in statements for p in params])
            return
        for sql, params in statements:
            cursor.execute(sql, params)


def _take_from_sessions(by_session: dict[int, list[Any]]) -> None:
    """One UPDATE for all the sessions, each less its own share (joined to a VALUES list: an ORM CASE of a WHEN
    per session and column cost more to build than to run)."""
    shares = [(session_id, *_shares(rows)) for session_id, rows in by_session.items()]
    table = connection.ops.quote_name(AgentSession._meta.db_table)
    sets = ", ".join(f"{name} = {table}.{name} - share.{name}" for name in SESSION_FIELDS)
    rows = ", ".join(["(" + ", ".join(["%s"] * (1 + len(SESSION_FIELDS))) + ")"] * len(shares))
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH share (id, {', '.join(SESSION_FIELDS)}) AS (VALUES {rows}) "  # noqa: S608 - quoted names and placeholders; values are parameters
            f"UPDATE {table} SET {sets} FROM share WHERE {table}.id = share.id",
            [value for share in shares for value in share],
        )


def _count_upserts(by_session: Mapping[int, Sequence[Checkpoint]], *, sign: int) -> list[Statement]:
    """Move each name's, kind's and status's count by `sign` per checkpoint (one that reaches 0 is for the caller
    to delete)."""
    column = SessionCount._meta.get_field("value")  # escapes what the database cannot hold (NUL), as names are
    fields = TalliedField.values  # once: the enum builds the list anew at each read (4 ms of a 500-row batch)
    rows = []
    for session_id, checkpoints in by_session.items():
        counts = Counter((field, getattr(c, field)) for c in checkpoints for field in fields)
        rows += [
            (session_id, field, column.get_db_prep_value(value, connection), sign * n)
            for (field, value), n in counts.items()
        ]
    return _upserts(SessionCount, ["field", "value", "count"], rows, conflict=["session_id", "field", "value"])


def _upserts(
    model: Any,
    columns: list[str],
    rows: list[tuple[Any, ...]],
    *,
    conflict: list[str],
    merge: dict[str, str] | None = None,
) -> list[Statement]:
    """INSERTs of `rows` (session_id first), adding each one's numbers to the row it meets (ON CONFLICT … DO
    UPDATE, PostgreSQL and SQLite alike): concurrent writers never lose each other's increments."""
    quote = connection.ops.quote_name
    table = quote(model._meta.db_table)
    merge = merge or {"count": "{old} + {new}"}
    sets = ", ".join(
        f"{quote(name)} = " + how.format(old=f"{table}.{quote(name)}", new=f"EXCLUDED.{quote(name)}")
        for name, how in merge.items()
    )
    names = ", ".join(map(quote, ["session_id", *columns]))
    on = ", ".join(map(quote, conflict))
    statements = []
    for start in range(0, len(rows), _UPSERT_ROWS):
        chunk = rows[start : start + _UPSERT_ROWS]
        values = ", ".join(["(" + ", ".join(["%s"] * (len(columns) + 1)) + ")"] * len(chunk))
        sql = f"INSERT INTO {table} ({names}) VALUES {values} ON CONFLICT ({on}) DO UPDATE SET {sets}"  # noqa: S608 - quoted names and placeholders; values are parameters
        statements.append((sql, [value for row in chunk for value in row]))
    return statements


def _drop_rollups(leaving: Counter[tuple[int, int]]) -> dict[int, list[int]]:
    """Delete the rollups of the blocks that checkpoints are leaving (`leaving`: how many per (session, block));
    returns the blocks that keep some checkpoints, by session, sorted: those are to be recounted."""
    table = connection.ops.quote_name(SessionRollup._meta.db_table)
    held: Counter[tuple[int, int]] = Counter()
    keys = sorted(leaving)
    with connection.cursor() as cursor:
        for start in range(0, len(keys), _UPSERT_ROWS):
            chunk = keys[start : start + _UPSERT_ROWS]
            cursor.execute(
                f"DELETE FROM {table} WHERE (session_id, block) IN (VALUES {', '.join(['(%s, %s)'] * len(chunk))}) "  # noqa: S608 - quoted names and placeholders; values are parameters
                "RETURNING session_id, block, count",
                [value for key in chunk for value in key],
            )
            for session_id, block, count in cursor.fetchall():
                held[session_id, block] += count
    kept: dict[int, list[int]] = {}
    for session_id, block in keys:
        if held[session_id, block] > leaving[session_id, block]:
            kept.setdefault(session_id, []).append(block)
    return kept


def _recount_blocks(blocks: dict[int, list[int]], *, without: list[int]) -> None:
    """Rebuild the (dropped) rollups of each session's `blocks` (sorted) from its rows, leaving out the checkpoints
    `without`: one statement per _SPANS runs of blocks, whatever the number of sessions."""
    spans: list[tuple[int, int, int]] = []  # (session, first block, last block)
    for session_id, session_blocks in blocks.items():
        for block in session_blocks:
            if spans and spans[-1][0] == session_id and spans[-1][2] == block - 1:
                spans[-1] = (session_id, spans[-1][1], block)
            else:
                spans.append((session_id, block, block))
    for start in range(0, len(spans), _SPANS):
        chunk = spans[start : start + _SPANS]
        seqs = reduce(
            operator.or_,
            (Q(session_id=s, seq__range=(lo * ROLLUP_BLOCK + 1, (hi + 1) * ROLLUP_BLOCK)) for s, lo, hi in chunk),
        )
        rows = Checkpoint.objects.filter(seqs).exclude(pk__in=arrays.ids(without)).order_by()
        SessionRollup.objects.bulk_create(_rollups(rows, SessionRollup))


def _rollups(checkpoints: QuerySet[Any], model: Any) -> list[Any]:
    """The rollup rows of `checkpoints`, by session, block and hour, from one grouped query."""
    grouped = (
        checkpoints.annotate(
            rollup_block=(F("seq") - 1) / ROLLUP_BLOCK, rollup_hour=TruncHour("created_at", tzinfo=UTC)
        )
        .values("session_id", "rollup_block", "rollup_hour")
        .annotate(
            n=Count("pk"),
            steps=Count("pk", filter=Q(kind=CheckpointKind.STEP)),
            trouble=Count("pk", filter=TROUBLE),
            raw_max=Max("raw_bytes"),
            stored=Sum("stored_bytes"),
            first_seq=Min("seq"),
            last_seq=Max("seq"),
        )
    )
    return [
        model(
            session_id=row["session_id"],
            block=row["rollup_block"],
            hour=row["rollup_hour"],
            count=row["n"],
            steps=row["steps"],
            trouble=row["trouble"],
            raw_max=row["raw_max"],
            stored_bytes=row["stored"],
            first_seq=row["first_seq"],
            last_seq=row["last_seq"],
        )
        for row in grouped
    ]


def session_totals(session: AgentSession) -> dict[str, int]:
    """The session's running tallies (checkpoints.store.tallies), read afresh: `session` may have been loaded before
    its latest checkpoints were stored."""
    return AgentSession.objects.filter(pk=session.pk).values("checkpoint_count", "raw_bytes", "stored_bytes").get()


def session_summary(session: AgentSession) -> dict[str, Any]:
    """Counts by name, kind and status; first and last checkpoint; duration (the Breakpilot analytics).

    The counts are the session's tallies, the rest reads the (session, seq) and (session, created_at) indexes at
    their ends: a few rows whatever the session's length."""
    checkpoints = Checkpoint.objects.filter(session=session)
    by: dict[str, dict[str, int]] = {tallied: {} for tallied in TalliedField.values}
    for tallied, value, count in SessionCount.objects.filter(session=session).values_list("field", "value", "count"):
        by[tallied][value] = count
    span = checkpoints.order_by().aggregate(first=Min("created_at"), last=Max("created_at"))
    first = checkpoints.order_by("seq").first()
    last = checkpoints.order_by("-seq").first()
    duration = (span["last"] - span["first"]).total_seconds() if span["first"] and span["last"] else 0.0
    return {
        **session_totals(session),
        "by_name": by["name"],
        "by_kind": by["kind"],
        "by_status": by["status"],
        "first": first,
        "last": last,
        "first_at": span["first"],
        "last_at": span["last"],
        "duration_seconds": duration,
    }
