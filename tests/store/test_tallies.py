"""The running tallies (checkpoints.store.tallies) always equal what counting the session's checkpoints gives."""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkpoints.jobs.retention import apply_retention
from checkpoints.models import (
    ROLLUP_BLOCK,
    AgentSession,
    Checkpoint,
    RetentionPolicy,
    SessionCount,
    SessionRollup,
)
from checkpoints.services import (
    Actor,
    CheckpointInput,
    NothingToUndo,
    fork_session,
    ingest_checkpoints,
    restore_checkpoint,
    undo_restore,
)
from checkpoints.services.cleanup import delete_checkpoints
from checkpoints.store import tallies
from tests.helpers import command

START = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
CALL = {"id": "ok", "tool_name": "fetch_url", "arguments": {"url": "https://example.org"}, "success": True}


def stored(session: AgentSession) -> tuple[Any, ...]:
    """The session's tallies as kept."""
    session.refresh_from_db()
    rollups = SessionRollup.objects.filter(session=session).values_list(
        "block", "hour", "count", "steps", "trouble", "raw_max", "stored_bytes", "first_seq", "last_seq"
    )
    counts = SessionCount.objects.filter(session=session).values_list("field", "value", "count")
    return {name: getattr(session, name) for name in tallies.SESSION_FIELDS}, sorted(rollups), sorted(counts)


def counted(session: AgentSession) -> tuple[Any, ...]:
    """The same tallies, counted here from the session's checkpoints one by one."""
    rows = list(Checkpoint.objects.filter(session=session).order_by("seq"))
    trouble = [c.status in ("failed", "halted") or c.tool_failed for c in rows]
    columns = {
        "checkpoint_count": len(rows),
        "raw_bytes": sum(c.raw_bytes for c in rows),
        "stored_bytes": sum(c.stored_bytes for c in rows),
        "failed_count": sum(c.status in ("failed", "halted") for c in rows),
        "tool_failed_count": sum(c.tool_failed for c in rows),
    }
    groups: dict[tuple[int, datetime], list[tuple[Checkpoint, bool]]] = {}
    for c, bad in zip(rows, trouble, strict=True):
        hour = c.created_at.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
        groups.setdefault(((c.seq - 1) // ROLLUP_BLOCK, hour), []).append((c, bad))
    rollups = [
        (
            block,
            hour,
            len(group),
            sum(c.kind == "step" for c, _ in group),
            sum(bad for _, bad in group),
            max(c.raw_bytes for c, _ in group),
            sum(c.stored_bytes for c, _ in group),
            min(c.seq for c, _ in group),
            max(c.seq for c, _ in group),
        )
        for (block, hour), group in groups.items()
    ]
    counts = Counter((field, getattr(c, field)) for c in rows for field in ("name", "kind", "status"))
    return columns, sorted(rollups), sorted((field, value, n) for (field, value), n in counts.items())


def assert_tallied(*sessions: AgentSession) -> None:
    for session in sessions:
        assert stored(session) == counted(session), session.external_id


def item(
    i: int, *, minutes: int, failed: bool = False, tool_failed: bool = False, kind: str = "step"
) -> CheckpointInput:
    calls = [CALL, {**CALL, "id": f"bad-{i}", "success": False, "error": "timeout"}] if tool_failed else [CALL]
    return CheckpointInput(
        state={"i": i, "tool_calls": calls, "notes": ["x" * (i % 7)] * (i % 5)},
        name=f"step_{i % 3}",
        kind=kind,
        status="failed" if failed else "completed",
        created_at=START + timedelta(minutes=minutes),
    )


# ---- any sequence of the writes that add or remove checkpoints -----------------------------------------

INGEST = st.tuples(
    st.just("ingest"),
    st.lists(
        st.tuples(st.integers(0, 400), st.booleans(), st.booleans(), st.sampled_from(["step", "routine"])),
        min_size=1,
        max_size=25,
    ),
)
PICK = st.integers(0, 10**6)
OPERATIONS = st.lists(
    st.one_of(
        INGEST,
        st.tuples(st.just("restore"), PICK),
        st.tuples(st.just("undo")),
        st.tuples(st.just("fork"), PICK),
        st.tuples(st.just("retention")),
        st.tuples(st.just("delete"), st.lists(PICK, min_size=1, max_size=30)),
    ),
    max_size=8,
).map(lambda later: [("ingest", [(0, False, False, "step")] * 3), *later])  # something to restore, fork or delete
_runs = itertools.count()


@pytest.mark.django_db
@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(operations=OPERATIONS)
def test_ingest_restore_undo_fork_retention_and_cleanup_keep_the_tallies_equal_to_a_count(project, operations):
    for kind, keep in (("step", 2), ("routine", 1)):  # retention deletes most of what it finds
        RetentionPolicy.objects.update_or_create(project=project, kind=kind, defaults={"keep_last": keep})
    system = Actor.system("test")
    session = AgentSession.objects.create(project=project, external_id=f"run-{next(_runs)}", agent="a")
    sessions = [session]
    for operation, *args in operations:
        present = list(Checkpoint.objects.filter(session=session).order_by("seq"))
        if operation == "ingest":
            items = [item(i, minutes=m, failed=f, tool_failed=t, kind=k) for i, (m, f, t, k) in enumerate(args[0])]
            ingest_checkpoints([(session, items)])
        elif operation == "restore":
            restore_checkpoint(present[args[0] % len(present)], actor=system)
        elif operation == "undo":
            with contextlib.suppress(NothingToUndo):
                undo_restore(session, actor=system)
        elif operation == "fork":
            sessions.append(fork_session(present[args[0] % len(present)], actor=system))
        elif operation == "retention":
            apply_retention(now=START + timedelta(days=400))
        elif operation == "delete":
            delete_checkpoints({present[pick % len(present)].pk for pick in args[0]}, actor=system)
    assert_tallied(*sessions)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_deleters_of_the_same_checkpoint_take_it_out_of_the_tallies_once(project):
    session = AgentSession.objects.create(project=project, external_id="raced", agent="a")
    ingest_checkpoints([(session, [item(i, minutes=i) for i in range(6)])])
    doomed = Checkpoint.objects.get(session=session, seq=2).pk
    first_holds_the_lock = threading.Event()
    errors: list[BaseException] = []

    def second_deleter() -> None:
        try:
            first_holds_the_lock.wait()
            delete_checkpoints([doomed], actor=Actor.system("admin"))
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connection.close()

    other = threading.Thread(target=second_deleter)
    other.start()
    with transaction.atomic():
        tallies.forget([doomed])
        first_holds_the_lock.set()
        time.sleep(0.5)  # the other deleter finds the row still there, then waits for the session's lock
        Checkpoint.objects.filter(pk=doomed).delete()
    other.join()

    assert not errors
    assert_tallied(session)
    assert session.checkpoint_count == 5


# ---- repair and upgrades ----------------------------------------------------------------------------


def test_recount_tallies_puts_wrong_tallies_right(make_session):
    session = make_session()
    ingest_checkpoints([(session, [item(i, minutes=37 * i, failed=i == 3, tool_failed=i == 5) for i in range(45)])])
    AgentSession.objects.filter(pk=session.pk).update(checkpoint_count=0, raw_bytes=7, failed_count=9)
    SessionRollup.objects.filter(session=session, block=1).delete()
    SessionCount.objects.filter(session=session, field="kind").update(count=1)

    out, _ = command("recount_tallies", "--session", str(session.pk))

    assert "Tallies of 1 session recounted." in out
    assert_tallied(session)
    assert session.checkpoint_count == 45 and session.failed_count == 1 and session.tool_failed_count == 1


def test_fill_previews_counts_the_failed_tool_calls_it_finds(make_session):
    from checkpoints.store.previews import fill_previews

    session = make_session()
    ingest_checkpoints([(session, [item(i, minutes=i, tool_failed=i == 2) for i in range(4)])])
    Checkpoint.objects.update(preview="", tool_failed=False, calls_made=None)  # as stored before previews existed…
    tallies.recount([session.pk])  # …and counted by the upgrade

    fill_previews(Checkpoint.objects.filter(session=session))

    assert_tallied(session)
    assert session.tool_failed_count == 1


def test_a_deleted_session_takes_its_tallies_with_it(make_session):
    from checkpoints.services.cleanup import purge_session

    session = make_session()
    ingest_checkpoints([(session, [item(i, minutes=i) for i in range(5)])])
    purge_session(session, actor=Actor.system("test"))

    assert not SessionRollup.objects.exists() and not SessionCount.objects.exists()
