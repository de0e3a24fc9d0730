"""The purge job when its worker dies: the sweep queues again a purge whose worker stopped beating, and the rerun
ends with the value gone everywhere and each checkpoint rewritten once — whether the worker died during the
rewrite (rolled back: history as it was) or after it committed (the rerun only finishes)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from checkpoints import store, tasks
from checkpoints.jobs import purges as purge_job
from checkpoints.models import AuditEvent, Checkpoint, Purge, PurgeState, PurgeValue, SecretFinding
from checkpoints.services import Actor, CheckpointInput, ingest_checkpoints, purges
from checkpoints.store import purging
from checkpoints.store.secrets import fingerprint

pytestmark = pytest.mark.django_db

KEY = "ghp_" + "Zq9Xw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe9Dc8"
PLACEHOLDER = f"[purged github_token {fingerprint(KEY)[:12]}]"


class WorkerKilled(BaseException):
    """What SIGKILL does to the Python code of a worker: it stops where it is, no handler runs."""


def session_with_key(make_session, steps: int = 30):
    session = make_session("run-1")
    for step in range(1, steps + 1):
        messages = [f"step {n}: ran ls" for n in range(1, step + 1)]
        if step >= 3:
            messages[2] = f"step 3: token {KEY}"
        ingest_checkpoints([(session, [CheckpointInput(state={"messages": messages}, step=step)])])
    return session


def states(session) -> dict[int, object]:
    store.cache.clear()  # from the database, as a new process reads them
    return {row.seq: store.load_state(bytes(row.root)) for row in Checkpoint.objects.filter(session=session)}


def queued(project) -> Purge:
    sent: list[int] = []
    return purges.start_purge(project, actor=Actor.system("alice"), reason="leaked", value=KEY, start=sent.append)


def requeue_after_silence(purge: Purge) -> None:
    """A second worker leaves it alone while its heartbeat is fresh; the sweep queues it once it is stale."""
    assert purge_job.run(purge.pk) == {"claimed": False}
    sent: list[int] = []
    assert purges.requeue_stalled(sent.append, now=timezone.now()) == 0  # not stale yet
    later = timezone.now() + timedelta(seconds=600)
    assert purges.requeue_stalled(sent.append, now=later) == 1 and sent == [purge.pk]
    assert purges.requeue_stalled(sent.append, now=later) == 0  # taken once: not queued twice
    store.cache.clear()  # the rerun is another process


def assert_purged_once(session, before: dict[int, object], purge: Purge) -> None:
    purge.refresh_from_db()
    assert purge.state == PurgeState.FINISHED and purge.attempts == 2, purge.error
    assert not PurgeValue.objects.exists()
    assert [key for key, raw in purging.raw_chunks() if KEY.encode() in raw] == []
    after = states(session)
    assert sorted(after) == sorted(before)  # same rows
    for seq, state in before.items():
        # the value replaced exactly once, the rest as it was (no placeholder inside a placeholder)
        assert after[seq] == {"messages": [m.replace(KEY, PLACEHOLDER) for m in state["messages"]]}, seq
    assert AuditEvent.objects.filter(action="purge_done").count() == 1
    assert not SecretFinding.objects.open().exists()


def test_a_worker_killed_midway_through_the_rewrite_leaves_history_intact_and_the_sweep_finishes_it(
    project, make_session, monkeypatch, settings
):
    settings.CHECKPOINT_KEYFRAME_INTERVAL = 8
    session = session_with_key(make_session)
    before = states(session)
    roots = dict(Checkpoint.objects.filter(session=session).values_list("seq", "root"))
    purge = queued(project)
    real_save = store.save_state
    calls = {"n": 0}

    def dies_after_ten(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] > 10:
            raise WorkerKilled  # ten checkpoints stored again, inside the rewrite's transaction
        return real_save(*args, **kwargs)

    monkeypatch.setattr(store, "save_state", dies_after_ten)
    with pytest.raises(WorkerKilled):
        purge_job.run(purge.pk)
    monkeypatch.setattr(store, "save_state", real_save)

    purge.refresh_from_db()
    assert purge.state == PurgeState.RUNNING and purge.rewritten_at is None and calls["n"] == 11
    assert PurgeValue.objects.filter(purge=purge).exists()  # the value still waits for the rerun
    assert dict(Checkpoint.objects.filter(session=session).values_list("seq", "root")) == roots
    assert states(session) == before  # rolled back: every checkpoint reads as before

    requeue_after_silence(purge)
    purge_job.run(purge.pk)
    assert_purged_once(session, before, purge)


def test_a_worker_killed_after_the_rewrite_committed_is_finished_without_rewriting_again(
    project, make_session, monkeypatch
):
    session = session_with_key(make_session)
    before = states(session)
    purge = queued(project)

    def killed(tables):
        raise WorkerKilled  # committed, the value not yet deleted nor the tables vacuumed

    monkeypatch.setattr(purges, "vacuum", killed)
    with pytest.raises(WorkerKilled):
        purge_job.run(purge.pk)
    monkeypatch.undo()

    purge.refresh_from_db()
    assert purge.state == PurgeState.RUNNING and purge.rewritten_at is not None and purge.done == purge.total == 28
    roots = dict(Checkpoint.objects.filter(session=session).values_list("seq", "root"))
    vacuumed: list[str] = []
    monkeypatch.setattr(purges, "vacuum", vacuumed.extend)

    requeue_after_silence(purge)
    assert purge_job.run(purge.pk)["resumed"] is True
    assert dict(Checkpoint.objects.filter(session=session).values_list("seq", "root")) == roots  # not again
    assert {"checkpoints_purgevalue", "checkpoints_chunk", "checkpoints_checkpoint"} <= set(vacuumed)
    assert_purged_once(session, before, purge)


def test_a_purge_whose_message_was_lost_is_sent_by_the_every_minute_sweep(project, make_session):
    session = session_with_key(make_session, steps=5)
    purge = queued(project)  # its `start` recorded the message and sent nothing
    Purge.objects.filter(pk=purge.pk).update(heartbeat_at=timezone.now() - timedelta(seconds=600))

    assert tasks.send_due_deliveries()["purges"] == 1  # run_purge.delay: eager in unit tests

    purge.refresh_from_db()
    assert purge.state == PurgeState.FINISHED and purge.attempts == 1
    assert KEY not in str(states(session))


def test_a_finished_or_failed_purge_is_never_queued_again(project, make_session):
    session_with_key(make_session, steps=5)
    done, failed = queued(project), queued(project)
    purges.run_purge(done.pk)
    Purge.objects.filter(pk=failed.pk).update(state=PurgeState.FAILED)
    sent: list[int] = []
    assert purges.requeue_stalled(sent.append, now=timezone.now() + timedelta(days=1)) == 0 and sent == []
    assert purge_job.run(done.pk) == {"claimed": False}
