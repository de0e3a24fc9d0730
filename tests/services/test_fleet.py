"""Fleet recovery: the shared target rule, every skip reason, the preview as a dry run of the job, the head-moved
race, permissions per project, the batch's audit and event, undo of a batch of restores and of forks."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from checkpoints.audit import Actor, InvalidInput, NothingToUndo
from checkpoints.jobs import recoveries
from checkpoints.models import (
    AgentSession,
    AuditEvent,
    Checkpoint,
    Delivery,
    DriftAlert,
    Event,
    NotificationRule,
    ProjectMembership,
    Recovery,
    RecoveryItem,
    RecoveryState,
    SessionStatus,
)
from checkpoints.services import fleet, restore_checkpoint
from checkpoints.services.fleet import (
    FleetFilter,
    Reach,
    Selection,
    preview_recovery,
    start_recovery,
    undo_recovery,
)
from checkpoints.services.targets import Skip, TargetRule, alert_targets, decide

T0 = timezone.now() - timedelta(hours=2)


def at(minutes: int):
    return T0 + timedelta(minutes=minutes)


@pytest.fixture
def broken(make_session, make_checkpoint):
    """A session that worked for three steps, then failed twice on the shared tool: #1 #2 #3 ok, #4 #5 failed."""

    def make(external_id: str = "run-1", *, project=None, failures: int = 2, agent: str = "agent-7"):
        session = make_session(external_id, in_project=project, agent=agent)
        for step in range(1, 4):
            make_checkpoint(session, {"step": step}, created_at=at(step), name="plan" if step == 2 else "")
        for step in range(4, 4 + failures):
            make_checkpoint(
                session, {"step": step}, created_at=at(step), status="failed", status_reason="search API down"
            )
        session.refresh_from_db()
        return session

    return make


def seqs(session) -> list[int]:
    return list(session.checkpoints.order_by("seq").values_list("seq", flat=True))


def restore_all(selection: Selection, reach: Reach, reason: str = "search API outage") -> Recovery:
    recovery = start_recovery(selection, reach, actor=Actor.system("on-call"), reason=reason, start=lambda pk: None)
    recoveries.run(recovery.pk)
    recovery.refresh_from_db()
    return recovery


def everything(project) -> Reach:
    return Reach(AgentSession.objects.filter(project=project), None, project)


def restore(rule: TargetRule | None = None, **chosen) -> Selection:
    return Selection("restore", rule or TargetRule(), **chosen)


# ---- the rule -------------------------------------------------------------------------------------------------


def test_last_good_is_the_newest_healthy_checkpoint_before_the_first_failure(broken):
    session = broken()
    decision = decide([session], TargetRule())[session.pk]
    assert decision.skip is None
    assert decision.target.seq == 3
    assert decision.failure.seq == 4
    assert decision.discards.checkpoints == 2  # #4 and #5 leave the agent's path


def test_last_good_of_a_session_with_an_open_alert_is_the_alert_s_last_good(broken):
    session = broken()
    two = session.checkpoints.get(seq=2)
    DriftAlert.objects.create(session=session, kind="failed", message="x", last_good=two, checkpoint=session.head)
    assert decide([session], TargetRule())[session.pk].target.pk == two.pk


def test_the_alert_button_and_the_fleet_rule_are_one_decision(broken):
    session = broken()
    two = session.checkpoints.get(seq=2)
    alert = DriftAlert.objects.create(session=session, kind="failed", message="x", last_good=two)
    alert = DriftAlert.objects.select_related("session", "last_good").get(pk=alert.pk)
    [row] = preview_recovery(restore(), everything(session.project)).rows
    button = alert_targets([alert])[alert.pk]
    assert button.target.pk == row.target.pk == two.pk
    assert button.discards == row.decision.discards


def test_the_failure_window_picks_which_failure_counts(broken, make_checkpoint):
    session = broken()
    make_checkpoint(session, {"step": 6}, created_at=at(30))
    make_checkpoint(session, {"step": 7}, created_at=at(31), status="failed")
    # whole history: the first failure is #4, but the agent recovered after it at #6 and failed again at #7
    assert decide([session], TargetRule())[session.pk].target.seq == 3
    since = decide([session], TargetRule(since=at(20)))[session.pk]
    assert (since.target.seq, since.failure.seq) == (6, 7)


def test_before_a_time_takes_the_head_s_path_checkpoint_just_before_it(broken):
    session = broken()
    decision = decide([session], TargetRule("before", at=at(2) + timedelta(seconds=30)))[session.pk]
    assert decision.target.seq == 2
    nothing = decide([session], TargetRule("before", at=at(0)))[session.pk]
    assert nothing.skip == Skip.NOTHING_BEFORE and "before" in nothing.reason


def test_named_takes_the_newest_of_that_name_before_the_failure(broken, make_checkpoint):
    session = broken()
    make_checkpoint(session, {"late": True}, name="plan", created_at=at(9), status="failed")  # after the failure
    decision = decide([session], TargetRule("named", name="plan"))[session.pk]
    assert decision.target.seq == 2
    missing = decide([session], TargetRule("named", name="nope"))[session.pk]
    assert missing.skip == Skip.NO_NAMED and "'nope'" in missing.reason


def test_rules_only_read_the_head_s_path_never_a_side_branch(broken, make_checkpoint):
    session = broken()
    three = session.checkpoints.get(seq=3)
    restore_checkpoint(session.checkpoints.get(seq=1), actor=Actor.system())  # head #6 continues #1
    session.refresh_from_db()
    make_checkpoint(session, {"again": 1}, created_at=at(10), status="failed")  # #7 on the new path
    decision = decide([session], TargetRule())[session.pk]
    assert decision.target.seq == 6  # the restore, not #3 on the abandoned branch
    assert decision.target.pk != three.pk


@pytest.mark.parametrize(
    ("build", "rule", "skip"),
    [
        ("healthy", TargetRule(), Skip.NO_FAILURE),
        ("first_failed", TargetRule(), Skip.NO_HEALTHY_ANCESTOR),
        ("recovered", TargetRule(), Skip.RECOVERED),
        ("healthy", TargetRule("named", name="plan"), Skip.IS_HEAD),
        ("empty", TargetRule(), Skip.NO_HEAD),
    ],
)
def test_every_skip_reason_is_given_with_a_sentence(make_session, make_checkpoint, build, rule, skip):
    session = make_session()
    if build == "healthy":
        make_checkpoint(session, {"a": 1}, name="plan")
    elif build == "first_failed":
        make_checkpoint(session, {"a": 1}, status="failed")
    elif build == "recovered":
        make_checkpoint(session, {"a": 1})
        make_checkpoint(session, {"a": 2}, status="halted")
        make_checkpoint(session, {"a": 3})  # the agent went on by itself
    session.refresh_from_db()
    decision = decide([session], rule)[session.pk]
    assert decision.skip == skip
    assert decision.reason
    assert not decision.restorable


def test_an_alert_s_last_good_off_the_head_s_path_is_a_moved_head(broken):
    session = broken()
    two = session.checkpoints.get(seq=2)
    DriftAlert.objects.create(session=session, kind="failed", message="x", last_good=session.checkpoints.get(seq=3))
    restore_checkpoint(two, actor=Actor.system())  # someone restored it to #2 by hand: #3 is off the path now
    session.refresh_from_db()
    decision = decide([session], TargetRule())[session.pk]
    assert decision.skip == Skip.HEAD_MOVED


def test_incomplete_rules_are_refused_with_the_field():
    with pytest.raises(InvalidInput, match="target.at"):
        TargetRule("before").check()
    with pytest.raises(InvalidInput, match="target.name"):
        TargetRule("named").check()
    with pytest.raises(InvalidInput, match="target.rule"):
        TargetRule("yesterday").check()


# ---- selection, preview, permissions ------------------------------------------------------------------------------


def test_the_preview_changes_nothing_and_totals_every_row(broken, make_session, make_checkpoint):
    a, _b = broken("run-a"), broken("run-b", failures=3)
    healthy = make_session("run-ok")
    make_checkpoint(healthy, {"ok": 1})
    before = (Checkpoint.objects.count(), AuditEvent.objects.count(), Recovery.objects.count())
    preview = preview_recovery(restore(), everything(a.project))
    assert before == (Checkpoint.objects.count(), AuditEvent.objects.count(), Recovery.objects.count())
    assert preview.totals.sessions == 3 and preview.totals.recover == 2 and preview.totals.skipped == 1
    assert preview.totals.discarded_checkpoints == 2 + 3
    assert preview.totals.skipped_by == {Skip.NO_FAILURE: 1}
    assert {row.session.external_id: row.skip for row in preview.rows} == {
        "run-a": "",
        "run-b": "",
        "run-ok": "no_failure",
    }


def test_filters_select_by_agent_status_search_and_alert(broken):
    a, _b, c = broken("run-a"), broken("run-b", agent="other"), broken("searcher-c")
    DriftAlert.objects.create(session=c, kind="repetition", severity="critical", message="loop")
    reach = everything(a.project)

    def chosen(**fields):
        return sorted(
            row.session.external_id for row in preview_recovery(restore(filter=FleetFilter(**fields)), reach).rows
        )

    assert chosen(agent="other") == ["run-b"]
    assert chosen(search="searcher") == ["searcher-c"]
    assert chosen(alert_kind="repetition", severity="critical", alert_state="open") == ["searcher-c"]
    with pytest.raises(InvalidInput, match="selects no session"):
        chosen(alert_kind="repetition", alert_state="resolved")


def test_a_filter_that_selects_nothing_or_too_much_is_refused(broken, settings):
    a = broken("run-a")
    broken("run-b")
    with pytest.raises(InvalidInput, match="no session"):
        preview_recovery(restore(filter=FleetFilter(agent="nobody")), everything(a.project))
    settings.RECOVERY_MAX_SESSIONS = 1
    with pytest.raises(InvalidInput, match="at most 1"):
        preview_recovery(restore(), everything(a.project))
    with pytest.raises(InvalidInput, match="alert_state"):
        preview_recovery(restore(filter=FleetFilter(alert_state="sideways")), everything(a.project))


def test_sessions_seen_but_not_restorable_are_skipped_and_unseen_ones_are_not_counted(
    broken, alice, other_project, grant, django_user_model
):
    third = type(other_project).objects.create(slug="initech", name="Initech")
    grant(alice, other_project, "viewer")
    mine, watched = broken("run-a"), broken("run-b", project=other_project)
    broken("run-c", project=third)  # alice is no member there
    preview = preview_recovery(restore(), Reach.for_user(alice))
    rows = {row.session.external_id: row for row in preview.rows}
    assert set(rows) == {"run-a", "run-b"}
    assert rows["run-a"].skip == "" and rows["run-b"].skip == Skip.NO_PERMISSION
    assert preview.totals.sessions == 2
    recovery = start_recovery(restore(), Reach.for_user(alice), actor=Actor.for_user(alice), reason="r", start=print)
    recoveries.run(recovery.pk)
    mine.refresh_from_db()
    watched.refresh_from_db()
    assert (mine.restore_generation, watched.restore_generation) == (1, 0)
    assert RecoveryItem.objects.get(recovery=recovery, session=watched).result == "skipped"


def test_a_reason_is_required(broken):
    session = broken()
    with pytest.raises(InvalidInput, match="reason"):
        start_recovery(restore(), everything(session.project), actor=Actor.system(), reason="  ", start=print)
    assert not Recovery.objects.exists()


# ---- the run --------------------------------------------------------------------------------------------------


def test_the_run_restores_the_targets_the_preview_showed(broken, make_session, make_checkpoint):
    a, b = broken("run-a"), broken("run-b")
    healthy = make_session("run-ok")
    make_checkpoint(healthy, {"ok": 1})
    preview = preview_recovery(restore(), everything(a.project))
    recovery = restore_all(restore(), everything(a.project))
    assert recovery.state == RecoveryState.FINISHED
    assert (recovery.total, recovery.done, recovery.skipped, recovery.failed) == (3, 2, 1, 0)
    items = {item.session.external_id: item for item in recovery.items.select_related("session", "new_head")}
    for row in preview.rows:
        item = items[row.session.external_id]
        assert item.target_id == (row.target.pk if row.target else None)
        assert item.discarded_checkpoints == row.discarded_checkpoints
    for session in (a, b):
        session.refresh_from_db()
        item = items[session.external_id]
        assert item.result == "restored" and session.head_id == item.new_head_id
        assert session.head.metadata["restored_from_seq"] == 3 and session.status == SessionStatus.ACTIVE
        assert session.restore_generation == 1
    healthy.refresh_from_db()
    assert healthy.restore_generation == 0 and items["run-ok"].result == "skipped"


def test_each_restore_is_audited_and_the_batch_once_naming_every_session(broken):
    a, _b = broken("run-a"), broken("run-b")
    recovery = restore_all(restore(filter=FleetFilter(agent="agent-7")), everything(a.project))
    restores = AuditEvent.objects.filter(action="restore")
    assert restores.count() == 2
    assert {event.details["recovery"] for event in restores} == {recovery.pk}
    assert {event.reason for event in restores} == {"search API outage"}
    [batch] = AuditEvent.objects.filter(action="recovery")
    assert batch.actor == "on-call" and batch.reason == "search API outage"
    assert batch.details["sessions"] == {"acme/run-a": "restored", "acme/run-b": "restored"}
    assert batch.details["counts"] == {"restored": 2} and batch.project_id == a.project_id
    assert batch.details["filter"] == {"agent": "agent-7"}
    assert AuditEvent.objects.filter(action="recovery_queued", details__recovery=recovery.pk).count() == 1


def test_notification_rules_hear_of_the_batch_once(broken, project):
    NotificationRule.objects.create(
        project=project, name="ops", events=["session.restored", "recovery.finished"], channel="webhook",
        target="https://hooks.example.com/x",
    )  # fmt: skip
    broken("run-a"), broken("run-b"), broken("run-c")
    recovery = restore_all(restore(), everything(project))
    finished = Event.objects.get(type="recovery.finished")
    assert finished.data["recovery"]["counts"] == {"restored": 3}
    assert finished.data["recovery"]["id"] == recovery.pk
    assert Delivery.objects.filter(rule__isnull=False).count() == 1
    assert Delivery.objects.get(rule__isnull=False).event_id == finished.pk


def test_a_looping_session_that_kept_writing_on_the_failed_path_is_restored_and_the_later_checkpoints_counted(
    broken, make_checkpoint
):
    looping = broken("run-loop")
    recovery = start_recovery(restore(), everything(looping.project), actor=Actor.system(), reason="r", start=print)
    for step in range(3):  # between the preview and the run the loop goes on, on the same failed path
        make_checkpoint(looping, {"again": step}, status="failed")
    recoveries.run(recovery.pk)
    item = RecoveryItem.objects.get(recovery=recovery)
    looping.refresh_from_db()
    assert item.result == "restored" and item.target_seq == 3
    assert item.discarded_checkpoints == 2 + 3
    assert looping.head.parent.seq == 3


def test_a_session_whose_head_left_the_failed_path_is_skipped_not_restored_to_a_stale_target(broken, make_checkpoint):
    moved = broken("run-moved")
    recovery = start_recovery(restore(), everything(moved.project), actor=Actor.system(), reason="r", start=print)
    restore_checkpoint(moved.checkpoints.get(seq=1), actor=Actor.system("someone else"))
    moved.refresh_from_db()
    make_checkpoint(moved, {"new": 1}, status="failed")  # and it failed again, elsewhere
    head_before = moved.head_id
    recoveries.run(recovery.pk)
    item = RecoveryItem.objects.get(recovery=recovery)
    moved.refresh_from_db()
    assert item.result == "skipped" and item.reason.startswith("head_moved")
    assert moved.head_id == head_before


def test_a_head_that_moves_after_the_run_read_its_page_is_decided_again_under_the_session_s_lock(
    broken, make_checkpoint, monkeypatch
):
    """The run decides a page of sessions before it locks any: a head that moves in between (the loop wrote
    again; someone restored the session elsewhere) is not restored on the page's stale decision."""
    looping, moved = broken("run-loop"), broken("run-moved")
    recovery = start_recovery(restore(), everything(looping.project), actor=Actor.system(), reason="r", start=print)
    read_page = fleet._read_page

    def and_then_the_heads_move(recovery, items, rule):
        page = read_page(recovery, items, rule)
        if len(items) == 2:  # the page's read (the second read is one session's, under its lock)
            make_checkpoint(AgentSession.objects.get(pk=looping.pk), {"again": 1}, status="failed")
            restore_checkpoint(moved.checkpoints.get(seq=1), actor=Actor.system("someone else"))
        return page

    monkeypatch.setattr(fleet, "_read_page", and_then_the_heads_move)
    recoveries.run(recovery.pk)
    items = {item.session.external_id: item for item in RecoveryItem.objects.select_related("session")}
    looping.refresh_from_db()
    assert items["run-loop"].result == "restored" and items["run-loop"].discarded_checkpoints == 2 + 1
    assert looping.head.parent.seq == 3
    assert items["run-moved"].result == "skipped" and items["run-moved"].reason.startswith("head_moved")
    assert AgentSession.objects.get(pk=moved.pk).restore_generation == 1  # someone else's restore only


def test_the_run_clears_each_restored_session_s_failed_alert(broken):
    sessions = [broken(f"run-{n}") for n in range(3)]
    for session in sessions:
        DriftAlert.objects.create(session=session, kind="failed", message="down", checkpoint=session.head)
    restore_all(restore(), everything(sessions[0].project))
    assert not DriftAlert.objects.unresolved().exists()


def test_a_session_that_recovered_by_itself_since_the_preview_is_skipped(broken, make_checkpoint):
    session = broken()
    recovery = start_recovery(restore(), everything(session.project), actor=Actor.system(), reason="r", start=print)
    make_checkpoint(session, {"fine": True})  # the tool came back
    recoveries.run(recovery.pk)
    item = RecoveryItem.objects.get(recovery=recovery)
    assert item.result == "skipped" and item.reason.startswith("recovered")


def test_a_user_who_lost_the_role_before_the_run_restores_nothing(broken, alice, project):
    session = broken()
    recovery = start_recovery(restore(), Reach.for_user(alice), actor=Actor.for_user(alice), reason="r", start=print)
    ProjectMembership.objects.filter(user=alice).delete()
    recoveries.run(recovery.pk)
    item = RecoveryItem.objects.get(recovery=recovery)
    session.refresh_from_db()
    assert item.result == "skipped" and item.reason.startswith("no_permission")
    assert session.restore_generation == 0


def test_a_message_delivered_twice_restores_nothing_twice(broken):
    session = broken()
    recovery = restore_all(restore(), everything(session.project))
    assert recoveries.run(recovery.pk) == {"claimed": False}
    session.refresh_from_db()
    assert session.restore_generation == 1
    assert AuditEvent.objects.filter(action="recovery").count() == 1


# ---- undo -----------------------------------------------------------------------------------------------------


def test_undo_returns_each_session_to_its_head_before_the_batch_and_reports_those_written_to_since(
    broken, make_checkpoint
):
    a, b = broken("run-a"), broken("run-b")
    heads = {a.pk: a.head_id, b.pk: b.head_id}
    recovery = restore_all(restore(), everything(a.project))
    make_checkpoint(b, {"resumed": True})  # b's agent took the restore up and wrote since
    report = undo_recovery(recovery, actor=Actor.system("on-call"), reason="wrong fix")
    assert report.undone == 1 and report.kept == ["run-b"]
    a.refresh_from_db()
    assert a.head.parent_id == heads[a.pk] and a.head.metadata["undo_of"]  # a new head with the old state
    assert a.status == SessionStatus.FAILED  # as before the batch
    b.refresh_from_db()
    assert b.head.metadata.get("resumed") is None and b.head.kind == "step"  # not forced
    assert AuditEvent.objects.filter(action="recovery_undo").count() == 1
    assert AuditEvent.objects.filter(action="undo").count() == 1
    with pytest.raises(NothingToUndo):
        undo_recovery(recovery, actor=Actor.system())


def test_a_batch_of_forks_leaves_the_sources_alone_and_is_undone_by_archiving_the_forks(broken):
    a, b = broken("run-a"), broken("run-b")
    recovery = restore_all(Selection("fork", TargetRule()), everything(a.project))
    assert recovery.done == 2
    forks = AgentSession.objects.filter(forked_from__session__in=[a, b])
    assert forks.count() == 2 and {f.forked_from.seq for f in forks} == {3}
    a.refresh_from_db()
    assert a.restore_generation == 0
    report = undo_recovery(recovery, actor=Actor.system())
    assert report.archived == 2
    assert set(forks.values_list("status", flat=True)) == {SessionStatus.ARCHIVED}


@pytest.mark.parametrize(
    ("rule", "target_seq"),
    [(TargetRule("before", at=at(2) + timedelta(seconds=30)), 2), (TargetRule("named", name="plan"), 2)],
)
def test_the_job_applies_the_before_and_named_rules_it_was_given(broken, rule, target_seq):
    session = broken()
    recovery = restore_all(restore(rule), everything(session.project))
    item = RecoveryItem.objects.get(recovery=recovery)
    session.refresh_from_db()
    assert (recovery.rule, item.result, item.target_seq) == (rule.rule, "restored", target_seq)
    assert session.head.metadata["restored_from_seq"] == target_seq
