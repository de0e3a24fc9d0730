from __future__ import annotations

import json
import math
import os
import signal
import threading
import time
from datetime import timedelta

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from checkpoints import store, tasks
from checkpoints.jobs import StopRequest, recoveries, retention
from checkpoints.jobs.retention import apply_retention, describe, plan_retention, recorded_plan
from checkpoints.models import (
    AgentSession,
    AuditEvent,
    Checkpoint,
    DriftAlert,
    JobLock,
    JobRun,
    JobRunStatus,
    LangGraphCheckpoint,
    RecoveryItem,
    RetentionPolicy,
)
from checkpoints.services import Actor, cleanup, fork_session, pin_checkpoint, restore_checkpoint
from checkpoints.services.fleet import Reach, Selection, start_recovery
from checkpoints.services.targets import TargetRule
from tests.helpers import command
from tests.store.test_tallies import counted, stored

pytestmark = pytest.mark.django_db


def set_policy(kind: str, **fields) -> None:
    """Small custom rules keep the tests fast; every other field goes back to its blank default."""
    blank = {"keep_last": None, "max_age": None, "keep_first": False, "keep_latest_per_name": False}
    blank |= {"until_operation_done": False, "keep_last_scope": "session", "enabled": True}
    RetentionPolicy.objects.update_or_create(project=None, kind=kind, defaults=blank | fields)


def seqs(session: AgentSession) -> list[int]:
    return list(Checkpoint.objects.filter(session=session).order_by("seq").values_list("seq", flat=True))


def steps(make_checkpoint, session, count: int, *, kind: str = "step", name=None, **fields) -> list[Checkpoint]:
    return [
        make_checkpoint(session, {"i": i, "kind": kind}, kind=kind, name=name(i) if name else f"s{i}", **fields)
        for i in range(count)
    ]


def test_default_policies_are_installed_and_described(db):
    policies = {p.kind: p for p in RetentionPolicy.objects.filter(project=None)}
    assert set(policies) == {"routine", "pre_operation", "recovery", "step", "imported", "manual"}
    assert describe(policies["routine"]) == "keep the last 3 per agent"
    assert describe(policies["pre_operation"]) == "keep until its operation is done"
    assert describe(policies["recovery"]) == "keep for 7 days"
    assert describe(policies["step"]) == (
        "keep the last 100 per session, plus the session's first checkpoint, plus the latest of each name"
    )


def test_routine_keeps_the_last_three_per_agent_across_sessions(make_session, make_checkpoint):
    start = timezone.now() - timedelta(hours=10)
    first, second = make_session("a"), make_session("b")
    other_agent = make_session("c", agent="agent-other")
    made = []
    for i in range(8):  # interleaved in time across the agent's two sessions
        session = first if i % 2 == 0 else second
        made.append(make_checkpoint(session, {"r": i}, kind="routine", created_at=start + timedelta(minutes=i)))
    for i in range(4):
        make_checkpoint(other_agent, {"r": i}, kind="routine", created_at=start + timedelta(minutes=i))
    make_checkpoint(first, {"tail": 1}, name="tail")  # heads are protected: make them steps
    make_checkpoint(second, {"tail": 2}, name="tail")
    make_checkpoint(other_agent, {"tail": 3}, name="tail")

    result = apply_retention()

    remaining = set(Checkpoint.objects.filter(kind="routine", session__in=[first, second]).values_list("pk", flat=True))
    assert remaining == {made[5].pk, made[6].pk, made[7].pk}
    assert Checkpoint.objects.filter(kind="routine", session=other_agent).count() == 3
    assert result["by_kind"] == {"routine": 6}


def test_routine_scope_session_keeps_the_last_n_of_each_session(make_session, make_checkpoint):
    set_policy("routine", keep_last=2, keep_last_scope="session")
    first, second = make_session("a"), make_session("b")
    for session in (first, second):
        steps(make_checkpoint, session, 4, kind="routine")
        make_checkpoint(session, {"end": 1}, name="end")
    apply_retention()
    assert seqs(first) == seqs(second) == [3, 4, 5]


def test_pre_operation_checkpoints_go_only_once_their_operation_is_done(make_session, make_checkpoint):
    session = make_session()
    done = make_checkpoint(session, {"a": 1}, kind="pre_operation", operation_id="op-1")
    pending = make_checkpoint(session, {"a": 2}, kind="pre_operation", operation_id="op-2")
    make_checkpoint(session, {"a": 3}, name="after")
    assert apply_retention()["deleted"] == 0

    Checkpoint.objects.filter(pk=done.pk).update(operation_done=True)
    result = apply_retention()

    assert result["by_kind"] == {"pre_operation": 1}
    assert not Checkpoint.objects.filter(pk=done.pk).exists()
    assert Checkpoint.objects.filter(pk=pending.pk).exists()


def test_recovery_checkpoints_go_after_seven_days(make_session, make_checkpoint, time_machine):
    time_machine.move_to(timezone.now(), tick=False)
    session = make_session()
    recovery = make_checkpoint(session, {"a": 1}, kind="recovery")
    make_checkpoint(session, {"a": 2}, name="after")
    time_machine.shift(timedelta(days=6, hours=23))
    assert apply_retention()["deleted"] == 0
    time_machine.shift(timedelta(hours=1, minutes=1))
    result = apply_retention()
    assert result["by_kind"] == {"recovery": 1}
    assert not Checkpoint.objects.filter(pk=recovery.pk).exists()


def test_step_keeps_the_last_n_plus_the_first_and_the_latest_of_each_name(make_session, make_checkpoint):
    set_policy("step", keep_last=5, keep_first=True, keep_latest_per_name=True)
    session = make_session()
    # seq 1..20; names cycle a, b, c, d except seq 3 is the only "setup"
    for i in range(1, 21):
        make_checkpoint(session, {"i": i}, name="setup" if i == 3 else "abcd"[i % 4])
    apply_retention()
    # first (1), setup (3), last 5 (16-20); the latest a/b/c/d (16, 17, 18, 19) are within the last 5
    assert seqs(session) == [1, 3, 16, 17, 18, 19, 20]


def test_latest_of_each_name_survives_beyond_the_last_n(make_session, make_checkpoint):
    set_policy("step", keep_last=2, keep_latest_per_name=True)
    session = make_session()
    for name in ["plan", "plan", "code", "code", "test", "test", "x", "y"]:
        make_checkpoint(session, {"n": name, "r": len(seqs(session))}, name=name)
    apply_retention()
    assert [c.name for c in Checkpoint.objects.filter(session=session).order_by("seq")] == [
        "plan", "code", "test", "x", "y"
    ]  # fmt: skip


def test_kinds_without_a_policy_are_kept(make_session, make_checkpoint):
    RetentionPolicy.objects.filter(kind="step").delete()
    set_policy("manual", keep_last=1, enabled=False)
    session = make_session()
    steps(make_checkpoint, session, 5)
    steps(make_checkpoint, session, 3, kind="manual")
    assert apply_retention()["deleted"] == 0
    assert len(seqs(session)) == 8


def test_a_project_policy_overrides_the_global_one(project, other_project, make_session, make_checkpoint):
    set_policy("step", keep_last=2)
    RetentionPolicy.objects.create(project=project, kind="step", keep_last=4)
    ours, theirs = make_session("ours"), make_session("theirs", in_project=other_project)
    for session in (ours, theirs):
        steps(make_checkpoint, session, 6)
    apply_retention()
    assert seqs(ours) == [3, 4, 5, 6]
    assert seqs(theirs) == [5, 6]


def test_protected_checkpoints_survive(make_session, make_checkpoint):
    set_policy("step", keep_last=1)
    session = make_session()
    made = steps(make_checkpoint, session, 12)
    pinned, fork_source, restore_target, last_good, alert_checkpoint, resolved_last_good = made[1:7]
    pin_checkpoint(pinned, actor=Actor.system("test"))
    fork = fork_session(fork_source, actor=Actor.system("test"))
    restore_checkpoint(restore_target, actor=Actor.system("test"))
    DriftAlert.objects.create(
        session=session, kind="stall", message="stuck", last_good=last_good, checkpoint=alert_checkpoint
    )
    DriftAlert.objects.create(
        session=session, kind="loop", message="old", state="resolved", last_good=resolved_last_good
    )
    make_checkpoint(session, {"after": 1}, name="after")  # the newest: the one kept by keep_last=1

    apply_retention()

    kept = set(Checkpoint.objects.filter(session=session).values_list("pk", flat=True))
    for survivor in (pinned, fork_source, restore_target, last_good, alert_checkpoint):
        assert survivor.pk in kept, survivor
    assert resolved_last_good.pk not in kept  # a resolved alert protects nothing
    assert made[0].pk not in kept and made[7].pk not in kept
    session.refresh_from_db()
    assert session.head_id in kept
    assert AgentSession.objects.get(pk=fork.pk).forked_from_id == fork_source.pk


def test_the_head_survives_even_when_the_rules_would_delete_it(make_session, make_checkpoint):
    set_policy("routine", keep_last=0, keep_last_scope="session")
    session = make_session()
    made = steps(make_checkpoint, session, 3, kind="routine")
    apply_retention()
    assert list(Checkpoint.objects.filter(session=session).values_list("pk", flat=True)) == [made[-1].pk]


def test_children_of_deleted_checkpoints_are_re_pointed_to_the_nearest_kept_ancestor(make_session, make_checkpoint):
    set_policy("step", keep_last=2, keep_first=True)
    set_policy("routine", keep_last=5, keep_last_scope="session")
    session = make_session()
    first = make_checkpoint(session, {"i": 0}, name="first")
    steps(make_checkpoint, session, 3)  # deleted
    routine = make_checkpoint(session, {"r": 1}, kind="routine")  # kept, its parent is deleted
    steps(make_checkpoint, session, 2)  # deleted
    last = steps(make_checkpoint, session, 2)  # kept

    result = apply_retention(batch_size=2)  # several batches: each re-points the children it orphans

    assert result["deleted"] == 5
    routine.refresh_from_db()
    assert routine.parent_id == first.pk
    assert Checkpoint.objects.get(pk=last[0].pk).parent_id == routine.pk
    assert Checkpoint.objects.get(pk=last[1].pk).parent_id == last[0].pk
    # still a tree: every parent exists and belongs to the session
    kept = dict(Checkpoint.objects.filter(session=session).values_list("pk", "parent_id"))
    assert all(parent is None or parent in kept for parent in kept.values())
    assert sum(parent is None for parent in kept.values()) == 1


def test_a_branch_whose_first_checkpoint_is_deleted_still_starts_where_it_branched(make_session, make_checkpoint):
    """The kept child takes over the branch start: the timeline draws it off the same checkpoint."""
    set_policy("step", keep_last=None)
    set_policy("routine", keep_last=1, keep_last_scope="session")
    session = make_session()
    trunk = steps(make_checkpoint, session, 3)  # #1–#3, kept (no step policy deletes)
    start = make_checkpoint(session, {"b": 0}, kind="routine", parent=trunk[0].pk)  # #4, branches off #1: deleted
    child = make_checkpoint(session, {"b": 1})  # #5, kept
    make_checkpoint(session, {"r": 2}, kind="routine", parent=trunk[-1].pk)  # #6, the last routine: kept

    apply_retention()

    assert not Checkpoint.objects.filter(pk=start.pk).exists()
    child.refresh_from_db()
    assert (child.parent_id, child.starts_branch) == (trunk[0].pk, True)
    assert (5, 1, "step") in Checkpoint.objects.for_session(session).branch_points()


def test_deleting_a_branch_start_by_hand_hands_the_branch_to_its_child(make_session, make_checkpoint):
    from checkpoints.services.cleanup import delete_checkpoints

    session = make_session()
    trunk = steps(make_checkpoint, session, 3)
    start = make_checkpoint(session, {"b": 0}, parent=trunk[0].pk)
    child = make_checkpoint(session, {"b": 1})
    delete_checkpoints([start.pk], actor=Actor.system("alice"))
    child.refresh_from_db()
    assert (child.parent_id, child.starts_branch) == (trunk[0].pk, True)


def test_a_dry_run_deletes_nothing_and_matches_the_real_run(make_session, make_checkpoint):
    set_policy("step", keep_last=1, keep_first=True)
    set_policy("manual", keep_last=1)
    start = timezone.now() - timedelta(days=30)
    sessions = [make_session(f"run-{i}", agent=f"agent-{i % 2}") for i in range(3)]
    for session in sessions:
        for i in range(15):
            kind = ["step", "routine", "recovery", "pre_operation", "manual"][i % 5]
            make_checkpoint(
                session,
                {"s": session.pk, "i": i},
                kind=kind,
                name=f"n{i % 2}",
                created_at=start + timedelta(hours=i),
                operation_id="op" if kind == "pre_operation" else "",
            )
    Checkpoint.objects.filter(kind="pre_operation", seq__lt=10).update(operation_done=True)
    total = Checkpoint.objects.count()

    preview = apply_retention(dry_run=True)
    plan = plan_retention()
    assert Checkpoint.objects.count() == total
    assert not AuditEvent.objects.filter(action="retention").exists()

    result = apply_retention(batch_size=4)

    assert preview == result
    assert plan.as_dict() == result
    assert result["deleted"] + result["kept"] == total
    assert Checkpoint.objects.count() == result["kept"]
    assert set(result["checkpoints"]).isdisjoint(Checkpoint.objects.values_list("pk", flat=True))
    assert set(result["by_kind"]) == {"step", "routine", "recovery", "pre_operation", "manual"}
    assert apply_retention(dry_run=True)["deleted"] == 0  # a second run has nothing left to do


def test_a_run_writes_one_audit_event_with_the_counts(make_session, make_checkpoint):
    set_policy("step", keep_last=2)
    session = make_session()
    steps(make_checkpoint, session, 5)
    apply_retention()
    event = AuditEvent.objects.get(action="retention")
    assert event.actor == "retention"
    assert event.details == {"deleted": 3, "kept": 2, "by_kind": {"step": 3}, "error_count": 0}


def test_kept_states_still_load_after_deletion(make_session, make_checkpoint):
    set_policy("step", keep_last=3)
    session = make_session()
    # each state builds on the previous one, so the stored chunks are shared with deleted checkpoints
    for i in range(10):
        make_checkpoint(session, {"messages": [f"message {j}" for j in range(i * 5)], "i": i}, name=f"s{i}")
    apply_retention()
    store.cache.clear()
    for checkpoint in Checkpoint.objects.filter(session=session):
        state = store.load_state(bytes(checkpoint.root))
        assert state["i"] == checkpoint.seq - 1
        assert len(state["messages"]) == (checkpoint.seq - 1) * 5


def test_the_preview_lists_at_most_200_ids(make_session, make_checkpoint):
    set_policy("step", keep_last=1)
    session = make_session()
    from checkpoints.services import CheckpointInput, ingest_checkpoints

    ingest_checkpoints([(session, [CheckpointInput(state={"i": i}, name="s") for i in range(230)])])
    result = apply_retention(dry_run=True)
    assert result["deleted"] == 229 and len(result["checkpoints"]) == 200


def test_command_json_prints_the_counts_without_the_preview_and_records_the_run(make_session, make_checkpoint):
    set_policy("step", keep_last=2)
    session = make_session()
    steps(make_checkpoint, session, 6)
    out, _ = command("apply_retention", "--dry-run", "--json")

    counts = {"deleted": 4, "kept": 2, "by_kind": {"step": 4}, "sessions_done": 1, "error_count": 0, "errors": []}
    assert json.loads(out) == counts
    assert len(seqs(session)) == 6
    run = JobRun.objects.get(job="retention", dry_run=True)
    assert run.dry_run and run.triggered_by == "command" and run.status == JobRunStatus.SUCCEEDED

    assert json.loads(command("apply_retention", "--json")[0]) == counts
    assert seqs(session) == [5, 6]
    assert JobRun.objects.filter(job="retention", dry_run=False, result__deleted=4).exists()


def test_command_prints_a_summary(make_session, make_checkpoint):
    set_policy("step", keep_last=1)
    steps(make_checkpoint, make_session(), 3)
    out, _ = command("apply_retention", "--dry-run")
    assert out.strip() == "Would delete 2 checkpoints (step: 2); kept 1."


def test_the_task_records_a_job_run_and_an_audit_event(make_session, make_checkpoint):
    from checkpoints.tasks import apply_retention as task

    set_policy("step", keep_last=1)
    steps(make_checkpoint, make_session(), 3)
    result = task.delay(triggered_by="test").get()
    assert result["deleted"] == 2
    run = JobRun.objects.get(job="retention", dry_run=False)
    assert run.triggered_by == "test" and run.result["deleted"] == 2 and run.finished_at
    assert AuditEvent.objects.filter(action="retention", details__deleted=2).exists()


def test_planning_reads_a_bounded_number_of_queries(big_session, django_assert_max_num_queries):
    with django_assert_max_num_queries(8):
        plan = plan_retention()
    assert plan.deleted > 0
    assert plan.deleted + plan.kept == Checkpoint.objects.count()


def test_a_checkpoint_protected_after_planning_survives_and_keeps_its_children(
    make_session, make_checkpoint, monkeypatch
):
    """Between planning and its batch a checkpoint is pinned, restored, forked or named by a new alert: it stays,
    and the children of the deleted ones hang from the nearest checkpoint that stayed."""
    set_policy("step", keep_last=1)
    session = make_session()
    made = steps(make_checkpoint, session, 12)
    branches: list[Checkpoint] = []
    plan_sessions = retention._plan_sessions

    def plan_then_protect(rules, sessions):
        plans = plan_sessions(rules, sessions)
        pin_checkpoint(made[2], actor=Actor.system("test"))
        restore_checkpoint(made[4], actor=Actor.system("test"))
        fork_session(made[6], actor=Actor.system("test"))
        DriftAlert.objects.create(session=session, kind="stall", message="x", last_good=made[8], checkpoint=made[9])
        branches.append(make_checkpoint(session, {"branch": 1}, name="branch", parent=made[10].pk))
        return plans

    monkeypatch.setattr(retention, "_plan_sessions", plan_then_protect)

    result = apply_retention(batch_size=3)

    assert result["deleted"] == 6
    parents = dict(Checkpoint.objects.filter(session=session).values_list("pk", "parent_id"))
    assert {made[i].pk for i in (2, 4, 6, 8, 9, 11)} <= set(parents)
    assert not {made[i].pk for i in (0, 1, 3, 5, 7, 10)} & set(parents)
    assert parents[made[2].pk] is None
    assert parents[made[4].pk] == made[2].pk
    assert parents[made[8].pk] == made[6].pk
    assert parents[made[11].pk] == parents[branches[0].pk] == made[9].pk
    assert all(parent is None or parent in parents for parent in parents.values())


def test_deleting_clears_references_from_resolved_alerts_and_audit_rows(make_session, make_checkpoint):
    set_policy("step", keep_last=1)
    session = make_session()
    made = steps(make_checkpoint, session, 3)
    pin_checkpoint(made[0], actor=Actor.system("test"))
    pin_checkpoint(made[0], actor=Actor.system("test"), pinned=False)
    alert = DriftAlert.objects.create(
        session=session, kind="loop", message="old", state="resolved", last_good=made[0], checkpoint=made[1]
    )

    assert apply_retention()["deleted"] == 2

    alert.refresh_from_db()
    assert (alert.last_good_id, alert.checkpoint_id) == (None, None)
    pins = AuditEvent.objects.filter(action__in=["pin", "unpin"])
    assert pins.count() == 2 and not pins.exclude(checkpoint=None).exists()


@pytest.mark.django_db(transaction=True)  # the references are checked when a batch commits
def test_deleting_clears_what_a_fleet_recovery_recorded_and_the_run_reports_no_error(make_session, make_checkpoint):
    """A recovery item names the head it replaced and the one it planned on; once the session is restored that
    head is an ordinary checkpoint retention may let go. The batch used to fail at commit on the item's
    reference, in every run, so the session's expired checkpoints were never deleted again."""
    set_policy("step", keep_last=1)
    session = make_session()
    made = steps(make_checkpoint, session, 4)
    Checkpoint.objects.filter(pk=made[3].pk).update(status="failed", status_reason="search API down")
    reach = Reach(AgentSession.objects.filter(pk=session.pk), None, session.project)
    selection = Selection("restore", TargetRule())
    recovery = start_recovery(selection, reach, actor=Actor.system("on-call"), reason="outage", start=lambda pk: None)
    recoveries.run(recovery.pk)
    item = RecoveryItem.objects.get(recovery=recovery)
    assert (item.result, item.target_id, item.previous_head_id) == ("restored", made[2].pk, made[3].pk)
    make_checkpoint(session, {"i": 4}, name="s4")  # the agent goes on from the restored state

    result = apply_retention()

    assert (result["deleted"], result["error_count"]) == (3, 0)  # #0, #1 and the failed #3; #2 is the target
    item.refresh_from_db()
    assert (item.previous_head_id, item.planned_head_id) == (None, None)
    assert (item.result, item.target_id) == ("restored", made[2].pk)
    assert Checkpoint.objects.filter(pk=item.new_head_id).exists()


@pytest.mark.postgres
def test_every_record_naming_a_checkpoint_is_cleared_by_deleting_and_refuses_a_delete_that_did_not(
    make_session, make_checkpoint
):
    """The references a deletion clears are read from the models, and with the ones it handles by name they are
    every foreign key to a checkpoint; the database holds each to `ON DELETE RESTRICT` (migration 0044: half the
    check of a deferred NO ACTION), so a foreign key added later without that treatment fails here. A DELETE
    that left one standing is refused at once, not at commit."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT rel.relname, a.attname, con.confdeltype FROM pg_constraint con"
            " JOIN pg_class rel ON rel.oid = con.conrelid"
            " JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = con.conkey[1]"
            " WHERE con.contype = 'f' AND con.confrelid = %s::regclass",
            [Checkpoint._meta.db_table],
        )
        actions = {(table, column): action for table, column, action in cursor.fetchall()}
    cleared = {
        (model._meta.db_table, model._meta.get_field(name).column)
        for model, names in cleanup.history_references().items()
        for name in names
    }
    handled = {
        (AgentSession._meta.db_table, "head_id"),
        (AgentSession._meta.db_table, "forked_from_id"),
        (Checkpoint._meta.db_table, "parent_id"),
        (LangGraphCheckpoint._meta.db_table, "console_id"),
    }
    assert set(actions) == cleared | handled
    assert set(actions.values()) == {"r"}

    session = make_session()
    made = steps(make_checkpoint, session, 2)
    pin_checkpoint(made[0], actor=Actor.system("test"))
    pin_checkpoint(made[0], actor=Actor.system("test"), pinned=False)  # two audit rows name #0, unpinned again
    Checkpoint.objects.filter(pk=made[1].pk).update(parent=None)
    with pytest.raises(IntegrityError), transaction.atomic():
        Checkpoint.objects.filter(pk=made[0].pk)._raw_delete(Checkpoint.objects.db)


def test_planning_reads_many_sessions_in_a_few_queries(make_session, make_checkpoint, django_assert_max_num_queries):
    set_policy("step", keep_last=1)
    for i in range(12):
        steps(make_checkpoint, make_session(f"run-{i}"), 3)
    with django_assert_max_num_queries(8):
        plan = plan_retention()
    assert (plan.deleted, plan.kept) == (24, 12)


def test_a_recorded_dry_run_shows_each_project_its_own_figures(project, other_project, make_session, make_checkpoint):
    set_policy("step", keep_last=1)
    steps(make_checkpoint, make_session("ours"), 3)
    steps(make_checkpoint, make_session("theirs", in_project=other_project), 5, kind="manual")
    set_policy("manual", keep_last=2)
    result = apply_retention(dry_run=True)

    ours = recorded_plan(result, projects=[project.pk])
    both = recorded_plan(result, projects=[project.pk, other_project.pk])

    assert (ours.deleted, ours.kept, dict(ours.by_kind)) == (2, 1, {"step": 2})
    assert len(ours.checkpoints) == 2 and set(ours.checkpoints) < set(both.checkpoints)
    assert (both.deleted, both.kept, dict(both.by_kind)) == (5, 3, {"step": 2, "manual": 3})


def test_sessions_with_little_to_delete_share_a_batch(make_session, make_checkpoint, django_assert_max_num_queries):
    set_policy("step", keep_last=1)
    sessions = [make_session(f"run-{i}") for i in range(12)]
    for session in sessions:
        steps(make_checkpoint, session, 3)
    with django_assert_max_num_queries(30):  # one batch for all twelve (with their tallies), not one per session
        result = apply_retention()
    assert (result["deleted"], result["kept"], result["sessions_done"]) == (24, 12, 12)
    assert all(seqs(session) == [3] for session in sessions)


def test_when_a_shared_batch_fails_each_session_is_tried_alone_and_the_bad_one_is_named(
    make_session, make_checkpoint, monkeypatch
):
    set_policy("step", keep_last=1)
    good, bad, other = (make_session(name) for name in ("good", "bad", "other"))
    for session in (good, bad, other):
        steps(make_checkpoint, session, 3)
    doomed_in_bad = Checkpoint.objects.get(session=bad, seq=1).pk
    delete_batch = retention.delete_expired

    def failing_on_bad(ids, parents):
        if doomed_in_bad in ids:
            raise ValueError("cannot delete this one")
        return delete_batch(ids, parents)

    monkeypatch.setattr(retention, "delete_expired", failing_on_bad)

    result = apply_retention()

    assert seqs(good) == seqs(other) == [3] and seqs(bad) == [1, 2, 3]
    assert (result["deleted"], result["error_count"]) == (4, 1)
    assert [error["id"] for error in result["errors"]] == [bad.pk]


# ---- throttled batches (RETENTION_BATCH_ROWS, RETENTION_BATCH_PAUSE_MS) ----------------------------------

CHECKPOINT_DELETE = 'DELETE FROM "checkpoints_checkpoint" WHERE'


def checkpoint_deletes(queries) -> int:
    return sum(query["sql"].startswith(CHECKPOINT_DELETE) for query in queries.captured_queries)


@pytest.fixture
def sleeps(monkeypatch) -> list[float]:
    """The pauses retention takes (the clock is the system edge: a test does not wait them out)."""
    taken: list[float] = []
    monkeypatch.setattr(retention.time, "sleep", taken.append)
    return taken


@pytest.mark.parametrize(("rows", "batches"), [(1, 23), (4, 6), (23, 1), (500, 1)])
def test_a_run_deletes_in_batches_of_the_configured_rows_with_the_configured_pause_between_them(
    make_session, make_checkpoint, settings, sleeps, rows, batches
):
    settings.RETENTION_BATCH_ROWS, settings.RETENTION_BATCH_PAUSE_MS = rows, 30
    set_policy("step", keep_last=1)
    session = make_session()
    steps(make_checkpoint, session, 24)

    with CaptureQueriesContext(connection) as queries:
        result = apply_retention()

    assert result["deleted"] == 23 and seqs(session) == [24]
    assert checkpoint_deletes(queries) == batches == math.ceil(23 / rows)
    assert sleeps == [0.03] * (batches - 1)  # between batches, not before the first or after the last


def test_every_batch_but_the_last_is_full_whatever_the_sessions_hold(
    make_session, make_checkpoint, settings, sleeps, monkeypatch
):
    """Sessions with 5, 5 and 3 to delete at 4 rows a batch: four batches of 4, 4, 4 and 1, a session's deletions
    cut in seq order to fill them, not five (a batch of 4 and one of 1 a session: each batch costs its statements,
    a commit and a pause whatever its size) nor one over the setting."""
    settings.RETENTION_BATCH_ROWS, settings.RETENTION_BATCH_PAUSE_MS = 4, 30
    set_policy("step", keep_last=1)
    sessions = [make_session(f"run-{i}") for i in range(3)]
    for session, count in zip(sessions, (6, 6, 4), strict=True):
        steps(make_checkpoint, session, count)
    sizes: list[int] = []
    delete = cleanup.delete_expired
    monkeypatch.setattr(
        retention, "delete_expired", lambda ids, parents: sizes.append(len(ids)) or delete(ids, parents)
    )

    result = apply_retention()

    assert (result["deleted"], result["kept"], result["error_count"]) == (13, 3, 0)
    assert [seqs(session) for session in sessions] == [[6], [6], [4]]
    assert sizes == [4, 4, 4, 1]
    assert sleeps == [0.03] * 3
    assert result["checkpoints"] == sorted(result["checkpoints"]) and len(result["checkpoints"]) == 13


def test_a_session_cut_into_many_batches_hands_each_batch_its_one_map_of_parents_not_a_copy(
    make_session, make_checkpoint, settings, sleeps, monkeypatch
):
    """The map of parents a batch needs (each planned id → its parent, the whole session's, so that a child hangs
    from its nearest kept ancestor) is the session's own in every batch of it. A copy per batch cost a session's
    size again in each of its batches (at 1M checkpoints, the 100,000-checkpoint session: ~9 % of the job's CPU)."""
    settings.RETENTION_BATCH_ROWS = 3
    set_policy("step", keep_last=1)
    session = make_session()
    steps(make_checkpoint, session, 10)
    handed: list[dict[int, int | None]] = []
    delete = cleanup.delete_expired
    monkeypatch.setattr(
        retention, "delete_expired", lambda ids, parents: handed.append(parents) or delete(ids, parents)
    )

    result = apply_retention()

    assert (result["deleted"], result["error_count"], seqs(session)) == (9, 0, [10])
    assert len(handed) == 3 and all(parents is handed[0] for parents in handed)


@pytest.mark.django_db(transaction=True)
def test_each_batch_commits_on_its_own(make_session, make_checkpoint, settings, sleeps, monkeypatch):
    """No transaction spans the run: each batch is one short transaction of its own, committed before the pause,
    so a writer waits on a lock retention holds for one batch at most."""
    settings.RETENTION_BATCH_ROWS, settings.RETENTION_BATCH_PAUSE_MS = 5, 10
    set_policy("step", keep_last=1)
    session = make_session()
    steps(make_checkpoint, session, 16)
    delete_batch = retention.delete_expired
    outside_a_transaction: list[bool] = []

    def recording(ids, parents):
        outside_a_transaction.append(not connection.in_atomic_block)
        return delete_batch(ids, parents)

    monkeypatch.setattr(retention, "delete_expired", recording)

    assert apply_retention()["deleted"] == 15
    assert outside_a_transaction == [True, True, True]
    assert len(sleeps) == 2


def test_settings_that_make_no_sense_still_delete_one_row_at_a_time_without_sleeping(
    make_session, make_checkpoint, settings, sleeps
):
    """An operator's `RETENTION_BATCH_ROWS=0` (or negative) and a negative pause must not stop retention (a zero
    step would raise on every run) nor make it sleep a negative time."""
    settings.RETENTION_BATCH_ROWS, settings.RETENTION_BATCH_PAUSE_MS = 0, -5
    set_policy("step", keep_last=1)
    session = make_session()
    steps(make_checkpoint, session, 4)
    with CaptureQueriesContext(connection) as queries:
        assert apply_retention()["deleted"] == 3
    assert checkpoint_deletes(queries) == 3 and sleeps == []
    settings.RETENTION_BATCH_ROWS = -2
    steps(make_checkpoint, session, 2)
    assert apply_retention()["deleted"] == 2


def kept_world(make_session, make_checkpoint) -> tuple[AgentSession, dict[str, set[int]]]:
    """A session where every rule and every protection keeps something, spread so that batch boundaries fall
    between what goes and what stays."""
    set_policy("step", keep_last=3, keep_first=True, keep_latest_per_name=True)
    session = make_session()
    made = steps(make_checkpoint, session, 30, name=lambda i: "named" if i in (5, 9) else "step")
    actor = Actor.system("test")
    pin_checkpoint(made[11], actor=actor)
    fork_session(made[14], actor=actor)
    DriftAlert.objects.create(session=session, kind="stall", message="x", last_good=made[17], checkpoint=made[18])
    restore_checkpoint(made[21], actor=actor)  # the restore is the head; made[21] its target
    kept = {
        "first": {made[0].pk},
        "latest of a name": {made[9].pk},
        "pinned": {made[11].pk},
        "fork source": {made[14].pk},
        "alert": {made[17].pk, made[18].pk},
        "restore target": {made[21].pk},
        "last 3": {made[27].pk, made[28].pk, made[29].pk},
    }
    return session, kept


@pytest.mark.parametrize("rows", [1, 2, 3, 7, 1000])
def test_nothing_a_rule_keeps_is_deleted_whatever_the_batch_boundaries(
    make_session, make_checkpoint, settings, sleeps, rows
):
    settings.RETENTION_BATCH_ROWS = rows
    session, kept = kept_world(make_session, make_checkpoint)
    session.refresh_from_db()
    head = session.head_id

    result = apply_retention()

    parents = dict(Checkpoint.objects.filter(session=session).values_list("pk", "parent_id"))
    for why, ids in kept.items():
        assert ids <= set(parents), why
    assert set(parents) == set().union(*kept.values(), {head})
    assert result["deleted"] == 30 - len(set().union(*kept.values()))
    assert all(parent is None or parent in parents for parent in parents.values())  # still a tree
    assert AuditEvent.objects.filter(action="retention").count() == 1  # one audit row per run, as before


@pytest.mark.django_db(transaction=True)  # as in a worker: each batch commits (in a test transaction, savepoints)
def test_a_failure_mid_run_leaves_a_consistent_state_and_the_next_run_goes_on(
    make_session, make_checkpoint, settings, sleeps, monkeypatch
):
    """The third batch fails after its statements ran (its last step raises): it is rolled back whole, the two
    before it stay done, the timeline is a tree with its tallies right, and the next run deletes the rest: the
    same survivors as a run that never failed."""
    settings.RETENTION_BATCH_ROWS = 3
    session, kept = kept_world(make_session, make_checkpoint)
    calls = 0
    mark = cleanup.mark_branch_starts

    def failing_third(pks):
        nonlocal calls
        calls += 1
        if calls == 3:
            raise RuntimeError("the database went away mid-batch")
        return mark(pks)

    monkeypatch.setattr(cleanup, "mark_branch_starts", failing_third)
    before = set(Checkpoint.objects.filter(session=session).values_list("pk", flat=True))

    first = apply_retention()

    assert (first["deleted"], first["error_count"]) == (6, 1)
    assert first["errors"][0]["id"] == session.pk
    parents = dict(Checkpoint.objects.filter(session=session).values_list("pk", "parent_id"))
    assert len(before - set(parents)) == 6
    assert set().union(*kept.values()) <= set(parents)
    assert all(parent is None or parent in parents for parent in parents.values())
    assert stored(session) == counted(session)

    monkeypatch.setattr(cleanup, "mark_branch_starts", mark)
    second = apply_retention()

    survivors = set(Checkpoint.objects.filter(session=session).values_list("pk", flat=True))
    session.refresh_from_db()
    assert second["error_count"] == 0
    assert first["deleted"] + second["deleted"] == 30 - len(set().union(*kept.values()))
    assert survivors == set().union(*kept.values(), {session.head_id})
    assert stored(session) == counted(session)
    assert AuditEvent.objects.filter(action="retention").count() == 2


# ---- stopping between batches: asked to, or having lost the job's lock ---------------------------------


def assert_consistent(session: AgentSession, kept: dict[str, set[int]]) -> set[int]:
    """What retention guarantees after any batch: every kept checkpoint is there, the timeline is a tree, the
    tallies equal a count. Returns the ids left."""
    parents = dict(Checkpoint.objects.filter(session=session).values_list("pk", "parent_id"))
    for why, ids in kept.items():
        assert ids <= set(parents), why
    assert all(parent is None or parent in parents for parent in parents.values())
    assert stored(session) == counted(session)
    return set(parents)


def test_a_run_asked_to_stop_during_a_pause_ends_before_the_next_batch_and_the_next_run_does_the_rest(
    make_session, make_checkpoint, settings, monkeypatch
):
    settings.RETENTION_BATCH_ROWS, settings.RETENTION_BATCH_PAUSE_MS = 3, 20
    session, kept = kept_world(make_session, make_checkpoint)
    doomed = 30 - len(set().union(*kept.values()))
    stop = StopRequest()
    pauses: list[float] = []

    def pause(seconds: float) -> None:  # a SIGTERM arrives while retention sleeps after its second batch
        pauses.append(seconds)
        if len(pauses) == 2:
            stop.set("asked to stop (SIGTERM)")

    monkeypatch.setattr(retention.time, "sleep", pause)
    with CaptureQueriesContext(connection) as queries:
        first = apply_retention(stop=stop)

    assert checkpoint_deletes(queries) == 2 and first["deleted"] == 6
    assert first["stopped"] == "asked to stop (SIGTERM)" and first["error_count"] == 0
    assert len(assert_consistent(session, kept)) == 30 + 1 - 6  # the restore added one
    audit = AuditEvent.objects.get(action="retention")
    assert (audit.details["deleted"], audit.details["stopped"]) == (6, "asked to stop (SIGTERM)")

    second = apply_retention()

    session.refresh_from_db()
    assert "stopped" not in second and first["deleted"] + second["deleted"] == doomed
    assert assert_consistent(session, kept) == set().union(*kept.values(), {session.head_id})


def test_a_run_asked_to_stop_before_it_starts_deletes_nothing(make_session, make_checkpoint, sleeps):
    set_policy("step", keep_last=1)
    session = make_session()
    steps(make_checkpoint, session, 5)
    stop = StopRequest()
    stop.set("asked to stop (SIGINT)")

    result = apply_retention(stop=stop)

    assert (result["deleted"], result["stopped"]) == (0, "asked to stop (SIGINT)")
    assert seqs(session) == [1, 2, 3, 4, 5] and sleeps == []


@pytest.mark.django_db(transaction=True)  # the heartbeat is a thread with its own connection, as in a worker
def test_a_run_that_loses_its_lock_stops_at_the_next_batch_and_leaves_the_lock_to_the_other_run(
    make_session, make_checkpoint, settings, monkeypatch
):
    """Another run takes the lock (this one went silent past the threshold, say): the heartbeat notices and the
    run ends after the batch under way, what it did consistent, without freeing the lock it no longer holds."""
    settings.RETENTION_BATCH_ROWS, settings.RETENTION_BATCH_PAUSE_MS = 3, 0
    settings.JOB_HEARTBEAT_SECONDS = 0.05
    session, kept = kept_world(make_session, make_checkpoint)
    thief = "other-host:1:abcdef"
    delete_batch = retention.delete_expired
    batches = 0

    def first_batch_then_the_lock_is_taken(ids, parents):
        nonlocal batches
        batches += 1
        deleted = delete_batch(ids, parents)
        if batches == 1:
            JobLock.objects.filter(name="retention").update(
                holder=thief, expires_at=timezone.now() + timedelta(hours=1)
            )
            run = JobRun.objects.get(job="retention", status=JobRunStatus.RUNNING)
            for _ in range(2):  # two beats after the theft: the first has certainly finished, stop set
                beaten = JobRun.objects.get(pk=run.pk).heartbeat_at
                deadline = time.monotonic() + 10
                while JobRun.objects.get(pk=run.pk).heartbeat_at == beaten and time.monotonic() < deadline:
                    time.sleep(0.01)
        return deleted

    monkeypatch.setattr(retention, "delete_expired", first_batch_then_the_lock_is_taken)

    result = tasks.apply_retention(triggered_by="test")

    assert batches == 1 and result["deleted"] == 3
    assert result["stopped"] == f"lost its lock to {thief}"
    assert_consistent(session, kept)
    assert JobLock.objects.get(name="retention").holder == thief
    assert JobRun.objects.get(job="retention", dry_run=True).status == JobRunStatus.SKIPPED  # the lock is not ours


def test_the_command_stops_on_sigterm_between_two_batches_and_says_why(
    make_session, make_checkpoint, settings, monkeypatch
):
    """SIGTERM reaches the command while the run pauses after its first batch: the run ends there, recorded."""
    settings.RETENTION_BATCH_ROWS = 2
    set_policy("step", keep_last=1)
    session = make_session()
    steps(make_checkpoint, session, 6)
    monkeypatch.setattr(retention.time, "sleep", lambda seconds: os.kill(os.getpid(), signal.SIGTERM))
    handler = signal.getsignal(signal.SIGTERM)

    printed = json.loads(command("apply_retention", "--json")[0])

    assert (printed["deleted"], printed["stopped"]) == (2, "asked to stop (SIGTERM)")
    assert seqs(session) == [3, 4, 5, 6]
    assert JobRun.objects.get(job="retention", dry_run=False).result["stopped"] == "asked to stop (SIGTERM)"
    assert signal.getsignal(signal.SIGTERM) is handler  # the command puts the process's handler back


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_pin_racing_a_batch_either_lands_first_and_is_kept_or_finds_the_checkpoint_gone(
    make_session, make_checkpoint, monkeypatch
):
    """An operator pins a checkpoint while a batch that plans to delete it has just checked the protections: the
    pin waits for the batch's session lock and finds the checkpoint gone (nothing audited), never a pin recorded on
    a checkpoint retention then deletes."""
    set_policy("step", keep_last=1)
    session = make_session()
    made = steps(make_checkpoint, session, 4)
    checked = threading.Event()
    check = cleanup.protected_among
    errors: list[BaseException] = []

    def slow_check(ids):
        found = check(ids)
        checked.set()
        time.sleep(0.5)  # the pin arrives now, between the check and the delete
        return found

    def operator() -> None:
        try:
            checked.wait(10)
            pin_checkpoint(Checkpoint.objects.get(pk=made[1].pk), actor=Actor.system("operator"))
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connection.close()

    monkeypatch.setattr(cleanup, "protected_among", slow_check)
    other = threading.Thread(target=operator)
    other.start()
    apply_retention()
    other.join()

    assert not errors
    # without the lock the pin would commit during the pause, audited, and the batch would then delete it
    assert not AuditEvent.objects.filter(action="pin").exists()
    assert not Checkpoint.objects.filter(pk=made[1].pk).exists()
    assert stored(session) == counted(session)
