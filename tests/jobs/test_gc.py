from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from checkpoints import store
from checkpoints.jobs import gc
from checkpoints.models import Checkpoint, Chunk, JobRun
from checkpoints.services import CheckpointInput, ingest_checkpoints, record_live_state

HOUR = timedelta(hours=1)


def _hashes() -> set[bytes]:
    return {bytes(h) for h in Chunk.objects.values_list("hash", flat=True)}


def _age_everything(by: timedelta = 2 * HOUR) -> None:
    Chunk.objects.update(created_at=timezone.now() - by)


def _state(i: int, tag: str = "s") -> dict[str, Any]:
    # big enough for trees (leaves, internal nodes, value nodes) and small steps for patches
    return {
        "messages": [{"role": "user", "text": f"{tag} message {j} " + "x" * 300} for j in range(40 + i)],
        "memory": {f"k{j}": f"{tag} value {j} " + "y" * 200 for j in range(30)},
        "blob": f"{tag} " + "z" * 6000,
        "step": i,
    }


def _assert_all_load(expected: dict[int, Any]) -> None:
    store.cache.clear()
    for checkpoint in Checkpoint.objects.all():
        if checkpoint.pk in expected:
            assert store.load_state(bytes(checkpoint.root)) == expected[checkpoint.pk]
        else:
            store.load_state(bytes(checkpoint.root))


def _ingest(session, states: list[Any]) -> dict[int, Any]:
    items = [CheckpointInput(state=s, name=f"step {s['step']}", step=s["step"]) for s in states]
    rows = [row for row, _ in ingest_checkpoints([(session, items)])]
    return {row.pk: state for row, state in zip(rows, states, strict=True)}


def test_old_unreachable_chunks_go_reachable_and_young_ones_stay(make_session):
    session = make_session()
    expected = _ingest(session, [_state(i) for i in range(12)])
    record_live_state(session, state=_state(99, "live"))
    live = _hashes()
    store.save_state(_state(0, "orphan-old"))
    old_orphans = _hashes() - live
    _age_everything()
    before_young = _hashes()
    store.save_state(_state(0, "orphan-young"))
    young_orphans = _hashes() - before_young
    assert old_orphans and young_orphans

    result = gc.collect_garbage(grace=HOUR, batch_size=7)

    remaining = _hashes()
    assert not old_orphans & remaining
    assert young_orphans <= remaining
    assert live <= remaining
    assert result["deleted"] == len(old_orphans)
    assert result["bytes_freed"] > 0
    assert result["marked"] == len(live)
    _assert_all_load(expected)
    session.refresh_from_db()
    store.cache.clear()
    assert store.load_state(bytes(session.live_root)) == _state(99, "live")
    # a second run finds nothing more to do
    assert gc.collect_garbage(grace=HOUR)["deleted"] == 0


def test_nothing_younger_than_the_grace_period_is_touched(db, time_machine):
    time_machine.move_to(timezone.now(), tick=False)
    store.save_state(_state(1, "fresh"))
    count = Chunk.objects.count()
    assert gc.collect_garbage()["deleted"] == 0  # default grace: settings.GC_GRACE_MINUTES
    assert Chunk.objects.count() == count
    time_machine.shift(timedelta(minutes=30))
    assert gc.collect_garbage(grace=HOUR)["deleted"] == 0
    time_machine.shift(HOUR)
    assert gc.collect_garbage(grace=HOUR)["deleted"] == count


def test_after_retention_exclusive_chunks_go_and_patch_chains_stay_whole(make_session, settings):
    settings.CHECKPOINT_KEYFRAME_INTERVAL = 8
    session = make_session()
    shared_blob = "shared " + "q" * 9000
    states = [dict(_state(i), shared=shared_blob) for i in range(30)]
    expected = _ingest(session, states)
    rows = list(Checkpoint.objects.filter(session=session).order_by("seq"))
    patches = {bytes(h) for h in Chunk.objects.filter(base__isnull=False).values_list("hash", flat=True)}
    assert patches, "the workload must produce patches"
    # keep checkpoints whose roots are patches in the middle of a chain, plus the head
    kept = [rows[5], rows[13], rows[-1]]
    assert bytes(rows[5].root) in patches and bytes(rows[13].root) in patches
    Checkpoint.objects.filter(session=session).exclude(pk__in=[c.pk for c in kept]).delete()
    _age_everything()
    needed = gc.mark({bytes(c.root) for c in kept})
    # the keyframes and intermediate patches of kept checkpoints belong to deleted checkpoints' rows
    deleted_roots = {bytes(c.root) for c in rows if c not in kept}
    assert needed & deleted_roots
    before = _hashes()

    result = gc.collect_garbage(grace=HOUR, batch_size=50)

    remaining = _hashes()
    assert remaining == needed
    assert result["deleted"] == len(before - needed) > 0
    assert deleted_roots - needed, "some checkpoints' exclusive chunks existed"
    assert not (deleted_roots - needed) & remaining
    store.cache.clear()
    for checkpoint in kept:
        assert store.load_state(bytes(checkpoint.root)) == expected[checkpoint.pk]


def test_the_task_records_its_run(db):
    from checkpoints.tasks import collect_garbage

    store.save_state(_state(3, "orphan"))
    _age_everything()
    result = collect_garbage.delay(triggered_by="test").get()
    run = JobRun.objects.get(job="gc")
    assert run.status == "succeeded"
    assert run.triggered_by == "test"
    assert run.result == result and result["deleted"] > 0


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_ingest_while_gc_runs_then_every_state_reads_back(project, make_session):
    sessions = [make_session(f"run-{n}") for n in range(3)]
    expected: dict[int, Any] = {}
    for n, session in enumerate(sessions):
        expected.update(_ingest(session, [_state(i, f"a{n}") for i in range(10)]))
    for n in range(5):
        store.save_state(_state(n, f"garbage{n}"))  # old garbage for the sweeps to work on
    _age_everything()
    live_states: dict[int, Any] = {}
    errors: list[BaseException] = []
    done = threading.Event()

    def ingest() -> None:
        try:
            for i in range(10, 40):
                for n, session in enumerate(sessions):
                    expected.update(_ingest(session, [_state(i, f"a{n}")]))
                    live_states[session.pk] = _state(i, f"live{n}")
                    record_live_state(session, state=live_states[session.pk])
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)
        finally:
            done.set()
            connection.close()

    worker = threading.Thread(target=ingest)
    worker.start()
    runs = []
    while not done.is_set() or len(runs) < 2:
        runs.append(gc.collect_garbage(grace=timedelta(seconds=5), batch_size=20))
    worker.join()
    assert not errors, errors
    assert sum(r["deleted"] for r in runs) > 0
    runs.append(gc.collect_garbage(grace=timedelta(seconds=5)))
    _assert_all_load(expected)
    assert len(expected) == 3 * 40
    for session in sessions:
        session.refresh_from_db()
        assert store.load_state(bytes(session.live_root)) == live_states[session.pk]


def test_a_chunk_it_cannot_parse_stops_gc_before_any_delete(make_session):
    """What such a node references is unknown: sweeping would delete what it keeps alive, so nothing goes."""
    session = make_session()
    _ingest(session, [_state(0)])
    store.save_state(_state(0, "orphan"))
    _age_everything()
    root = bytes(Checkpoint.objects.get(session=session).root)
    Chunk.objects.filter(hash=root).update(data=b"\x00not a zstd frame")
    before = _hashes()

    with pytest.raises(Exception):  # noqa: B017 - whichever error zstd raises on the bad frame
        gc.collect_garbage(grace=HOUR)

    assert _hashes() == before


def test_a_kept_patch_rebased_on_a_deleted_keyframes_leaves_keeps_them(make_session, settings):
    """A keyframe compresses the patches before it again with its new leaves as dictionary (store._rebase): when
    retention deletes that keyframe's checkpoint and keeps one of those patches', the leaves stay for the patch."""
    settings.CHECKPOINT_KEYFRAME_INTERVAL = 8
    session = make_session()
    expected = _ingest(session, [_state(i) for i in range(12)])
    rows = list(Checkpoint.objects.filter(session=session).order_by("seq"))
    kept = rows[3]
    data = bytes(Chunk.objects.get(hash=kept.root).data)
    assert data[0] == store.REBASED and Chunk.objects.get(hash=rows[8].root).base is None
    Checkpoint.objects.filter(session=session).exclude(pk=kept.pk).delete()
    _age_everything()

    result = gc.collect_garbage(grace=HOUR)

    assert result["deleted"] > 0
    assert store.rebased_on(data) in _hashes()
    store.cache.clear()
    assert store.load_state(bytes(kept.root)) == expected[kept.pk]
