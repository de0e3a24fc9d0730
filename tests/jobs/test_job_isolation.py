"""One session holding data that breaks code must not stop a job for the others.

Each test poisons one session for real: its checkpoints' `created_at` becomes a value the database
stored but the driver cannot read back (PostgreSQL keeps `0001-01-01 00:00:00+14` as a BC timestamp
psycopg refuses; SQLite keeps a date that does not exist). The sessions of both projects around it
must be fully processed, the bad one named in the JobRun's errors, and nothing of it half-done.
"""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from checkpoints import services
from checkpoints.models import (
    AgentSession,
    AlertKind,
    AuditEvent,
    Checkpoint,
    DriftAlert,
    JobRun,
    JobRunStatus,
    RetentionPolicy,
    WatchedSource,
)
from checkpoints.services import batches, record_live_state
from checkpoints.tasks import apply_retention, detect_drift, scan_watched_sources, take_routine_checkpoints

pytestmark = pytest.mark.django_db

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def count(session: AgentSession) -> int:
    return Checkpoint.objects.filter(session=session).count()  # no timestamp read: works on a poisoned session


@pytest.fixture
def three(project, other_project, make_session):
    """acme/good, acme/bad (in the middle, so batches must be split around it) and globex/good."""
    return make_session("good"), make_session("bad"), make_session("good", in_project=other_project)


def only_error_names(run: JobRun, session: AgentSession) -> None:
    assert run.status == JobRunStatus.SUCCEEDED_WITH_ERRORS
    assert run.result["error_count"] == 1
    [error] = run.result["errors"]
    assert (error["session"], error["id"]) == (str(session), session.pk)
    assert error["error"].split(":")[0] in {"DataError", "ValueError"}


def set_step_policy(**fields) -> None:
    blank = {"keep_last": None, "max_age": None, "keep_first": False, "keep_latest_per_name": False}
    RetentionPolicy.objects.update_or_create(project=None, kind="step", defaults=blank | fields)


# ---- retention --------------------------------------------------------------------------------------


@pytest.fixture
def retention_world(three, make_checkpoint, poison):
    set_step_policy(keep_last=1)
    for session in three:
        for i in range(4):
            make_checkpoint(session, {"i": i}, name=f"s{i}")
    poison(three[1])
    return three


def test_retention_deletes_in_every_healthy_session_and_names_the_unreadable_one(retention_world):
    good, bad, other = retention_world
    result = apply_retention.delay(triggered_by="test").get()

    assert count(good) == count(other) == 1  # both projects' healthy sessions were processed
    assert count(bad) == 4  # nothing of the bad session was deleted
    assert (result["deleted"], result["kept"], result["sessions_done"]) == (6, 2, 2)
    only_error_names(JobRun.objects.get(job="retention", dry_run=False), bad)
    assert AuditEvent.objects.get(action="retention").details["error_count"] == 1


def test_retention_dry_run_command_prints_the_plan_and_the_failure_and_exits_non_zero(retention_world):
    good, bad, other = retention_world
    out = StringIO()
    with pytest.raises(CommandError, match="1 session"):
        call_command("apply_retention", "--dry-run", "--json", stdout=out)

    printed = json.loads(out.getvalue())
    assert (printed["deleted"], printed["kept"], printed["sessions_done"], printed["error_count"]) == (6, 2, 2, 1)
    assert [error["session"] for error in printed["errors"]] == [str(bad)]
    assert count(good) == count(other) == 4 and count(bad) == 4
    only_error_names(JobRun.objects.get(job="retention", dry_run=True), bad)


def test_retention_without_any_bad_session_succeeds_plainly(three, make_checkpoint):
    set_step_policy(keep_last=1)
    for session in three:
        make_checkpoint(session, {"i": 1})
        make_checkpoint(session, {"i": 2})
    result = apply_retention.delay(triggered_by="test").get()
    assert (result["deleted"], result["errors"], result["error_count"], result["sessions_done"]) == (3, [], 0, 3)
    assert JobRun.objects.get(job="retention", dry_run=False).status == JobRunStatus.SUCCEEDED


def test_a_real_run_is_followed_by_a_dry_run_so_the_preview_shows_what_the_next_one_would_do(three, make_checkpoint):
    set_step_policy(keep_last=1)
    for session in three:
        make_checkpoint(session, {"i": 1})
        make_checkpoint(session, {"i": 2})
    apply_retention.delay(triggered_by="test").get()

    preview = JobRun.objects.get(job="retention", dry_run=True)
    assert (preview.status, preview.triggered_by) == (JobRunStatus.SUCCEEDED, "after retention")
    assert (preview.result["deleted"], preview.result["kept"]) == (0, 3)


# ---- drift -----------------------------------------------------------------------------------------


def stall(make_checkpoint, session: AgentSession) -> None:
    """Three step checkpoints with one state: the `stalled` detector fires on an active session."""
    for step in range(3):
        make_checkpoint(session, {"same": True}, name="work", step=step)


def test_drift_opens_alerts_everywhere_else_and_leaves_the_bad_sessions_alerts_alone(three, make_checkpoint, poison):
    for session in three:
        stall(make_checkpoint, session)
    good, bad, other = three
    earlier = DriftAlert.objects.create(session=bad, kind=AlertKind.REPETITION, message="looped before it broke")
    poison(bad)

    err = StringIO()
    with pytest.raises(CommandError, match="1 session"):
        call_command("detect_drift", stdout=StringIO(), stderr=err)

    stalled = DriftAlert.objects.filter(kind=AlertKind.STALLED, state="open")
    assert set(stalled.values_list("session_id", flat=True)) == {good.pk, other.pk}
    earlier.refresh_from_db()
    assert earlier.state == "open"  # not resolved by a run that could not read its session
    assert str(bad) in err.getvalue()
    run = JobRun.objects.get(job="drift_detection")
    only_error_names(run, bad)
    assert (run.result["opened"], run.result["sessions_done"]) == (2, 2)
    opened = AuditEvent.objects.filter(action="alert_opened", actor="system:drift")
    assert set(opened.values_list("session_id", flat=True)) == {good.pk, other.pk}


def test_the_failures_listed_are_capped_and_counted(project, make_session, make_checkpoint, monkeypatch, poison):
    monkeypatch.setattr(batches, "ERRORS_KEPT", 2)
    for name in ("a", "b", "c"):
        session = make_session(name)
        make_checkpoint(session, {"i": 1})
        poison(session)
    healthy = make_session("fine")
    stall(make_checkpoint, healthy)

    result = detect_drift.delay(triggered_by="test").get()

    assert (result["error_count"], len(result["errors"]), result["sessions_done"]) == (3, 2, 1)
    assert DriftAlert.objects.filter(session=healthy, kind=AlertKind.STALLED).exists()


# ---- routine checkpoints -----------------------------------------------------------------------------


def test_routine_checkpoints_are_taken_for_every_healthy_session(three, make_checkpoint, poison):
    for session in three:
        make_checkpoint(session, {"step": 1}, step=1, created_at=T0)
        AgentSession.objects.filter(pk=session.pk).update(last_seen_at=T0)
        Checkpoint.objects.filter(session=session).update(received_at=T0)
        session.refresh_from_db()
        record_live_state(session, state={"step": 2, "of": session.external_id}, now=T0 + timedelta(minutes=5))
    good, bad, other = three
    poison(bad)

    result = take_routine_checkpoints.delay(triggered_by="test").get()

    assert result["taken"] == 2
    for session in (good, other):
        session.refresh_from_db()
        assert (session.head.kind, count(session)) == ("routine", 2)
    assert count(bad) == 1
    only_error_names(JobRun.objects.get(job="routine_checkpoints"), bad)


# ---- watched folders ---------------------------------------------------------------------------------


def test_a_watched_folder_imports_its_other_sessions_and_retries_the_bad_one(tmp_path, db, poison):
    folder = tmp_path / "ares"
    shutil.copytree(FIXTURES / "ares", folder)
    other_folder = tmp_path / "kaizen"
    shutil.copytree(FIXTURES / "kaizen", other_folder)
    project = services.get_or_create_project("watch")
    source = WatchedSource.objects.create(project=project, path=str(folder), format="ares")
    other = WatchedSource.objects.create(
        project=services.get_or_create_project("watch-2"), path=str(other_folder), format="kaizen"
    )
    scan_watched_sources.delay().get()
    sessions = list(AgentSession.objects.filter(project=project).order_by("external_id"))
    bad, good = sessions[0], sessions[1]
    poison(bad)
    before = {session.pk: count(session) for session in sessions}
    for session in (bad, good):  # one new step file for each of two sessions in the folder
        latest = max(folder.glob(f"{session.external_id}_[0-9]*.json"), key=lambda p: int(p.stem.split("_")[-1]))
        document = json.loads(latest.read_text())
        document.update(id=f"{session.external_id}-new", step=1000)
        (folder / f"{session.external_id}_1000.json").write_text(json.dumps(document))
    (other_folder / "note.txt").write_text("changes the other folder too")

    result = scan_watched_sources.delay().get()

    assert count(good) == before[good.pk] + 1  # the healthy session of the same folder took its new file
    assert count(bad) == before[bad.pk]
    run = JobRun.objects.filter(job="watched_sources").latest("started_at")
    assert run.status == JobRunStatus.SUCCEEDED_WITH_ERRORS
    [error] = result["errors"]
    assert (error["source"], error["id"]) == (str(folder), source.pk)
    assert bad.external_id in error["error"] and "tried again next scan" in error["error"]
    assert (result["scanned"], result["sources_done"]) == (2, 1)
    other.refresh_from_db()
    assert "note.txt" in other.seen  # the other folder was scanned all the same
    source.refresh_from_db()
    assert f"{bad.external_id}_1000.json" not in source.seen  # its files are read again next time


# ---- the batching itself ---------------------------------------------------------------------------


@pytest.mark.postgres
def test_a_statement_failing_in_the_server_is_retried_in_halves_without_poisoning_the_transaction(project):
    """A real set-based statement that PostgreSQL rejects for one row (a cast) inside the test's transaction."""
    ids = [services.upsert_session(project, external_id=name, agent="a")[0].pk for name in "12x45678"]
    table = connection.ops.quote_name(AgentSession._meta.db_table)

    def number_titles(batch: list[int]) -> int:
        with connection.cursor() as cursor:
            cursor.execute(f"UPDATE {table} SET title = (external_id::int * 10)::text WHERE id = ANY(%s)", [batch])  # noqa: S608 - the table's quoted name
            return cursor.rowcount

    failures = batches.Failures()
    done = sum(batches.each_batch(ids, number_titles, failures, size=4))

    assert done == 7 and failures.count == 1 and failures.done == 7
    assert failures.errors[0]["session"] == "acme/x" and "invalid input syntax" in failures.errors[0]["error"]
    titles = dict(AgentSession.objects.values_list("external_id", "title"))
    assert titles == {"1": "10", "2": "20", "x": "", "4": "40", "5": "50", "6": "60", "7": "70", "8": "80"}
