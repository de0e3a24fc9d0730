from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from checkpoints import services, store
from checkpoints.models import (
    AgentSession,
    AlertKind,
    AlertState,
    ApiToken,
    AuditEvent,
    Checkpoint,
    CheckpointKind,
    Chunk,
    DriftAlert,
)
from checkpoints.services import Actor, CheckpointInput, cleanup
from checkpoints.store import tallies
from checkpoints.store.history import Discards

OPERATOR = Actor.system("alice")


def test_seqs_are_gapless_and_parents_follow_the_branch(make_session, make_checkpoint):
    session = make_session()
    made = [make_checkpoint(session, {"n": i}) for i in range(5)]
    assert [c.seq for c in made] == [1, 2, 3, 4, 5]
    assert [c.parent_id for c in made] == [None, *[c.pk for c in made[:-1]]]
    session.refresh_from_db()
    assert session.head_id == made[-1].pk and session.last_seq == 5


def test_a_checkpoint_can_branch_from_any_earlier_one_and_becomes_the_head(make_session, make_checkpoint):
    session = make_session()
    first, second, third = (make_checkpoint(session, {"n": i}) for i in range(3))
    branch = make_checkpoint(session, {"n": 1, "retry": True}, parent=first.pk)
    continued = make_checkpoint(session, {"n": 2, "retry": True})
    assert (branch.seq, branch.parent_id, branch.starts_branch) == (4, first.pk, True)
    assert (continued.parent_id, continued.starts_branch) == (branch.pk, False)
    assert not any(c.starts_branch for c in (first, second, third))
    session.refresh_from_db()
    assert session.head_id == continued.pk
    assert list(Checkpoint.objects.for_session(session).branch_points()) == [(4, 1, "step")]
    assert store.load_state(bytes(branch.root)) == {"n": 1, "retry": True}


def test_parents_named_by_key_link_a_tree_and_a_new_root_starts_a_second_run(make_session):
    """An importer names parents by the source's ids, within one call and across calls."""
    session = make_session()
    services.ingest_checkpoints(
        [(session, [CheckpointInput(state={"run": 1, "step": n}, idempotency_key=f"r1-{n}") for n in range(3)])]
    )
    made = services.ingest_checkpoints(
        [
            (
                session,
                [
                    CheckpointInput(state={"run": 1, "step": "1b"}, idempotency_key="r1-1b", parent_key="r1-0"),
                    CheckpointInput(state={"run": 2, "step": 0}, idempotency_key="r2-0", new_root=True),
                    CheckpointInput(state={"run": 2, "step": 1}, idempotency_key="r2-1", parent_key="r2-0"),
                    CheckpointInput(state={"run": 1, "step": 3}, idempotency_key="r1-3", parent_key="r1-2"),
                ],
            )
        ]
    )
    by_key = {c.idempotency_key: c for c in Checkpoint.objects.filter(session=session)}
    parent_keys = {key: c.parent.idempotency_key if c.parent else None for key, c in by_key.items()}
    assert parent_keys == {
        "r1-0": None, "r1-1": "r1-0", "r1-2": "r1-1", "r1-1b": "r1-0", "r2-0": None, "r2-1": "r2-0", "r1-3": "r1-2",
    }  # fmt: skip
    assert [c.seq for c, _ in made] == [4, 5, 6, 7]
    assert [c.starts_branch for c, _ in made] == [True, True, False, True]
    assert [store.load_state(bytes(c.root)) for c, _ in made][1] == {"run": 2, "step": 0}


def _chain_with_a_branch() -> list[CheckpointInput]:
    """Five checkpoints in a row, a branch from the second (by key), and one more after the branch."""
    items = [CheckpointInput(state={"n": n}, idempotency_key=f"k{n}") for n in range(1, 6)]
    return [*items, CheckpointInput(state={"n": "2b"}, parent_key="k2"), CheckpointInput(state={"n": 7})]


def test_parents_stored_in_the_same_call_are_linked_as_sent(make_session, make_checkpoint):
    session = make_session()
    make_checkpoint(session, {"n": 0})
    made = services.ingest_checkpoints([(session, _chain_with_a_branch())])
    stored = dict(Checkpoint.objects.filter(session=session).values_list("seq", "parent__seq"))
    assert stored == {1: None, 2: 1, 3: 2, 4: 3, 5: 4, 6: 5, 7: 3, 8: 7}
    assert {c.pk: c.parent_id for c, _ in made} == dict(
        Checkpoint.objects.filter(session=session, seq__gt=1).values_list("pk", "parent_id")
    )


@pytest.mark.postgres
def test_ingest_writes_each_checkpoint_row_once(make_session, make_checkpoint):
    """No update after the insert to link in-call parents: each would leave a dead row version behind."""
    session = make_session()
    make_checkpoint(session, {"n": 0})
    with CaptureQueriesContext(connection) as queries:
        services.ingest_checkpoints([(session, _chain_with_a_branch())])
    assert not [q["sql"] for q in queries if q["sql"].startswith('UPDATE "checkpoints_checkpoint"')]


@pytest.mark.postgres
def test_a_creates_chunks_go_in_the_statement_that_locks_its_session(make_session, make_checkpoint):
    """A round trip fewer a create: the state's new chunk is inserted by the SELECT … FOR NO KEY UPDATE of its
    session, and read back as any other."""
    session = make_session()
    make_checkpoint(session, {"n": 0, "text": "x" * 5000})
    with CaptureQueriesContext(connection) as queries:
        checkpoint, _ = services.create_checkpoint(session, CheckpointInput(state={"n": 1, "text": "x" * 5000}))
    chunk_statements = [q["sql"] for q in queries if '"checkpoints_chunk"' in q["sql"]]
    assert len(chunk_statements) == 1
    assert chunk_statements[0].startswith('WITH chunks AS (INSERT INTO "checkpoints_chunk"')
    assert "FOR NO KEY UPDATE" in chunk_statements[0]
    assert Chunk.objects.filter(hash=bytes(checkpoint.root)).exists()
    store.cache.clear()
    assert store.load_state(bytes(checkpoint.root)) == {"n": 1, "text": "x" * 5000}


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        (lambda other: {"parent": other.pk}, "parent", "not a checkpoint of this session"),
        (lambda other: {"parent_key": "nowhere"}, "parent_key", "no checkpoint of this session has the key"),
        (lambda other: {"parent": other.pk, "new_root": True}, "parent", "not several"),
    ],
)
def test_a_parent_outside_the_session_is_refused_and_nothing_is_written(
    make_session, make_checkpoint, fields, field, message
):
    other = make_checkpoint(make_session("other"), {"n": 0})
    session = make_session()
    make_checkpoint(session, {"n": 1})
    before = Checkpoint.objects.count(), Chunk.objects.count()
    with pytest.raises(services.InvalidInput, match=message) as refused:
        services.create_checkpoint(session, CheckpointInput(state={"n": 2}, **fields(other)))
    assert refused.value.field == field
    assert (Checkpoint.objects.count(), Chunk.objects.count()) == before


def test_a_restore_starts_a_branch_unless_it_restores_the_head(make_session, make_checkpoint):
    session = make_session()
    first, second = make_checkpoint(session, {"n": 1}), make_checkpoint(session, {"n": 2})
    of_head = services.restore_checkpoint(second, actor=OPERATOR)
    back = services.restore_checkpoint(first, actor=OPERATOR)
    assert (of_head.starts_branch, back.starts_branch) == (False, True)
    assert list(Checkpoint.objects.for_session(session).branch_points()) == [(back.seq, first.seq, "restore")]


@pytest.mark.django_db(transaction=True)
def test_migrating_marks_the_restores_made_before_branches_were_recorded(project):
    """Until 0013 only a restore could point back; those become branch starts, retention gaps do not."""
    from django.db.migrations.executor import MigrationExecutor

    from tests.kits.migration_kit import old_executor

    executor = old_executor(connection)  # 0012 is one of the squashed set's: back through 0.1's files
    executor.migrate([("checkpoints", "0012_project_memberships")])
    old = executor.loader.project_state([("checkpoints", "0012_project_memberships")]).apps
    OldSession, OldCheckpoint = old.get_model("checkpoints", "AgentSession"), old.get_model("checkpoints", "Checkpoint")
    session = OldSession.objects.create(project_id=project.pk, external_id="old", agent="a", last_seq=6)
    rows: dict[int, object] = {}

    def add(seq: int, parent: int | None, kind: str = "step") -> None:
        rows[seq] = OldCheckpoint.objects.create(
            session=session, seq=seq, parent=rows.get(parent), kind=kind, root=b"r", state_hash=b"h"
        )

    add(1, None)
    add(4, 1)  # retention deleted 2 and 3: not a branch
    add(5, 4, "restore")  # restored the head: not a branch
    add(6, 1, "restore")  # went back: a branch
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
    marked = Checkpoint.objects.filter(session_id=session.pk, starts_branch=True).values_list("seq", flat=True)
    assert list(marked) == [6]


def test_an_idempotency_key_returns_the_original(make_session):
    session = make_session()
    first, created = services.create_checkpoint(session, CheckpointInput(state={"n": 1}, idempotency_key="k"))
    again, created_again = services.create_checkpoint(session, CheckpointInput(state={"n": 1}, idempotency_key="k"))
    assert (created, created_again) == (True, False)
    assert again.pk == first.pk
    assert Checkpoint.objects.count() == 1


def test_a_checkpoint_imported_again_from_another_folder_is_the_same_one(make_session):
    session = make_session()

    def imported(path: str, **metadata) -> tuple[Checkpoint, bool]:
        item = CheckpointInput(state={"n": 1}, idempotency_key="k", metadata={"source_path": path, **metadata})
        return services.create_checkpoint(session, item)

    first, _ = imported("/watched/run-1/checkpoint.md")
    again, created = imported("/copies/run-1/checkpoint.md")

    assert (again.pk, created) == (first.pk, False)
    with pytest.raises(services.IdempotencyConflict):  # anything else that differs is still a conflict
        imported("/copies/run-1/checkpoint.md", phase_status="failed")


def test_an_invalid_state_raises_and_writes_nothing(make_session):
    session = make_session()
    with pytest.raises(services.InvalidState):
        services.create_checkpoint(session, CheckpointInput(state={"x": float("nan")}))
    assert Checkpoint.objects.count() == 0 and Chunk.objects.count() == 0


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_writers_get_gapless_unique_seqs(project):
    session, _ = services.upsert_session(project, external_id="busy", agent="a")
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def writer(worker: int) -> None:
        try:
            start.wait()
            for i in range(15):
                state = {"worker": worker, "i": i, "pad": "p" * 3000}
                services.create_checkpoint(AgentSession.objects.get(pk=session.pk), CheckpointInput(state=state))
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    seqs = sorted(Checkpoint.objects.filter(session=session).values_list("seq", flat=True))
    assert seqs == list(range(1, 121))
    session.refresh_from_db()
    assert session.last_seq == 120 and session.head.seq == 120
    # every checkpoint's parent is the one before it: a single unbroken branch
    by_seq = {c.seq: c for c in Checkpoint.objects.filter(session=session)}
    assert all(by_seq[n].parent_id == by_seq[n - 1].pk for n in range(2, 121))
    store.cache.clear()
    for checkpoint in by_seq.values():
        assert store.load_state(checkpoint.root)["pad"] == "p" * 3000


def test_restore_adds_a_checkpoint_sharing_the_target_state(make_session, make_checkpoint):
    session = make_session()
    made = [make_checkpoint(session, {"n": i, "blob": "b" * 10_000}) for i in range(4)]
    chunks = Chunk.objects.count()
    restored = services.restore_checkpoint(made[1], actor=OPERATOR, reason="drifted after step 2")
    session.refresh_from_db()
    assert (restored.kind, restored.parent_id, restored.seq) == (CheckpointKind.RESTORE, made[1].pk, 5)
    assert bytes(restored.root) == bytes(made[1].root) and restored.stored_bytes == 0
    assert session.head_id == restored.pk and session.restore_generation == 1
    assert Chunk.objects.count() == chunks
    assert Checkpoint.objects.filter(session=session).count() == 5  # later checkpoints are kept
    event = AuditEvent.objects.get(action="restore")
    assert (event.actor, event.reason, event.checkpoint_id) == ("alice", "drifted after step 2", restored.pk)
    assert event.details["previous_head"] == made[3].pk


def test_a_restore_whose_target_was_deleted_meanwhile_is_refused_with_a_reason(make_session, make_checkpoint):
    session = make_session()
    made = [make_checkpoint(session, {"n": i}) for i in range(4)]
    cleanup.delete_checkpoints([made[1].pk], actor=OPERATOR, reason="clean-up")  # as retention, before the lock
    with pytest.raises(services.CheckpointError, match="was deleted"):
        services.restore_checkpoint(made[1], actor=OPERATOR, reason="too late")
    session.refresh_from_db()
    assert session.head_id == made[3].pk and not AuditEvent.objects.filter(action="restore").exists()


def test_the_next_checkpoint_after_a_restore_branches_from_it(make_session, make_checkpoint):
    session = make_session()
    made = [make_checkpoint(session, {"n": i}) for i in range(3)]
    restored = services.restore_checkpoint(made[0], actor=OPERATOR)
    session.refresh_from_db()
    after = make_checkpoint(session, {"n": 0, "retry": True})
    assert after.parent_id == restored.pk
    assert store.load_state(after.root) == {"n": 0, "retry": True}


def test_undo_gives_the_agent_back_its_state_as_a_new_head(make_session, make_checkpoint):
    """Agents that order checkpoints by their own ids (LangGraph) resume from the newest: the state from
    before the restore comes back as a new head, and the restore generation changes again."""
    session = make_session()
    made = [make_checkpoint(session, {"n": i}) for i in range(3)]
    restore = services.restore_checkpoint(made[0], actor=OPERATOR, reason="looping")
    session.refresh_from_db()
    undone = services.undo_restore(session, actor=OPERATOR)
    session.refresh_from_db()
    assert session.head_id == undone.pk and undone.seq == restore.seq + 1
    assert (undone.kind, undone.parent_id, bytes(undone.root)) == ("restore", made[2].pk, bytes(made[2].root))
    assert undone.name == f"undo of restore #{restore.seq}"
    assert undone.metadata["undo_of"] == restore.pk and undone.metadata["undo_of_seq"] == restore.seq
    assert session.restore_generation == 2 and undone.metadata["restore_generation"] == 2
    assert list(AuditEvent.objects.order_by("id").values_list("action", flat=True)) == ["restore", "undo"]
    event = AuditEvent.objects.get(action="undo")
    assert (event.checkpoint_id, event.reason) == (undone.pk, f"undo restore #{restore.seq}")
    assert event.details == {
        "undone_seq": restore.seq,
        "undone_target_seq": made[0].seq,
        "restored_seq": made[2].seq,
        "new_seq": undone.seq,
        "restore_generation": 2,
    }


def test_an_undo_cannot_be_undone(make_session, make_checkpoint):
    session = make_session()
    made = [make_checkpoint(session, {"n": i}) for i in range(3)]
    services.restore_checkpoint(made[0], actor=OPERATOR)
    services.undo_restore(session, actor=OPERATOR)
    with pytest.raises(services.NothingToUndo):
        services.undo_restore(session, actor=OPERATOR)


def test_undo_without_a_restore_is_refused(make_session, make_checkpoint):
    session = make_session()
    make_checkpoint(session, {"n": 1})
    session.refresh_from_db()
    with pytest.raises(services.NothingToUndo):
        services.undo_restore(session, actor=OPERATOR)


def test_fork_is_a_new_session_sharing_the_root_without_copying(make_session, make_checkpoint):
    session = make_session()
    made = [make_checkpoint(session, {"n": i, "blob": "b" * 20_000}) for i in range(3)]
    chunks = Chunk.objects.count()
    fork = services.fork_session(made[1], actor=OPERATOR, title="Try another plan")
    assert fork.forked_from_id == made[1].pk and fork.external_id == "run-1-fork-1"
    first = fork.checkpoints.get()
    assert (first.seq, first.kind) == (1, CheckpointKind.FORK)
    assert bytes(first.root) == bytes(made[1].root)
    assert Chunk.objects.count() == chunks
    assert AuditEvent.objects.filter(action="fork", session=session).exists()
    second = services.fork_session(made[1], actor=OPERATOR)
    assert second.external_id == "run-1-fork-2"


def test_pinning_is_audited_once(make_session, make_checkpoint):
    checkpoint = make_checkpoint(make_session(), {"n": 1})
    services.pin_checkpoint(checkpoint, actor=OPERATOR)
    services.pin_checkpoint(checkpoint, actor=OPERATOR)
    checkpoint.refresh_from_db()
    assert checkpoint.pinned
    assert AuditEvent.objects.filter(action="pin").count() == 1


def test_two_pins_of_the_same_checkpoint_write_one_audit_row(make_session, make_checkpoint):
    checkpoint = make_checkpoint(make_session(), {"n": 1})
    first, second = Checkpoint.objects.get(pk=checkpoint.pk), Checkpoint.objects.get(pk=checkpoint.pk)
    services.pin_checkpoint(first, actor=OPERATOR)
    services.pin_checkpoint(second, actor=OPERATOR)  # loaded before the first pin: it still reads unpinned
    assert second.pinned and Checkpoint.objects.get(pk=checkpoint.pk).pinned
    assert AuditEvent.objects.filter(action="pin").count() == 1


def test_two_acknowledgements_and_two_resolutions_of_one_alert_write_one_audit_row_each(make_session):
    alert = DriftAlert.objects.create(session=make_session(), kind=AlertKind.STALLED, message="stuck")
    first, second = DriftAlert.objects.get(pk=alert.pk), DriftAlert.objects.get(pk=alert.pk)
    services.acknowledge_alert(first, actor=OPERATOR)
    services.acknowledge_alert(second, actor=OPERATOR)  # loaded before: it still reads open
    services.resolve_alert(first, actor=OPERATOR)
    services.resolve_alert(second, actor=OPERATOR)
    assert second.state == AlertState.RESOLVED
    assert sorted(AuditEvent.objects.values_list("action", flat=True)) == ["acknowledge", "resolve"]


def test_a_token_is_audited_even_when_no_one_is_named(project):
    token, _ = services.create_api_token(project, name="ci")
    event = AuditEvent.objects.get(action="token_created")
    assert (event.actor, event.target, event.project) == ("create_api_token", str(token), project)


def test_a_token_whose_audit_row_fails_is_not_created(project, monkeypatch):
    def refuse(*args, **kwargs):
        raise RuntimeError("audit refused")

    monkeypatch.setattr("checkpoints.services.tokens.record_audit", refuse)
    with pytest.raises(RuntimeError):
        services.create_api_token(project, name="ci", actor=OPERATOR)
    assert not ApiToken.objects.exists()


def test_summary_reports_counts_span_and_sizes(make_session, make_checkpoint):
    session = make_session()
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for i, (name, kind) in enumerate([("task_started", "step"), ("tick", "routine"), ("tick", "routine")]):
        make_checkpoint(session, {"i": i}, name=name, kind=kind, created_at=start + timedelta(hours=i))
    summary = tallies.session_summary(session)
    assert summary["checkpoint_count"] == 3
    assert summary["by_name"] == {"task_started": 1, "tick": 2}
    assert summary["by_kind"] == {"step": 1, "routine": 2}
    assert summary["duration_seconds"] == 7200
    assert summary["first"].name == "task_started" and summary["last"].seq == 3


def test_diff_across_a_fork(make_session, make_checkpoint):
    session = make_session()
    source = make_checkpoint(session, {"plan": "A", "log": ["start"]})
    fork = services.fork_session(source, actor=OPERATOR)
    later = make_checkpoint(fork, {"plan": "B", "log": ["start", "switched"]})
    result = store.diff_checkpoints(source, later)
    assert result.summary == "1 changed, 1 added, 1 list item appended"


def test_restore_preview_lists_each_forgotten_tool_call_once(make_session, make_checkpoint):
    session = make_session()
    target = make_checkpoint(session, {"messages": [], "tool_calls": []})
    call = {"id": "c1", "tool_name": "search", "arguments": {"q": "x"}}
    make_checkpoint(
        session,
        {
            "messages": [{"role": "assistant", "content": "searching", "tool_calls": [call]}],
            "tool_calls": [{**call, "result": "3 hits", "success": True}],
        },
    )
    session.refresh_from_db()
    target.refresh_from_db()
    preview = services.restore_preview(target)
    assert preview.forgotten_tool_calls == [{**call, "result": "3 hits", "success": True}]
    assert preview.discards == Discards(checkpoints=1, tool_calls=1) and preview.head.seq == 2


def test_a_batch_is_stored_in_its_order_with_its_text_and_parents_as_sent(make_session):
    """PostgreSQL inserts a batch as one array a column: each row gets its own id, its parent (stored in the same
    statement) and its text, NULs and the escape character included, exactly as sent."""
    session = make_session()
    items = [
        CheckpointInput(
            state={"n": i},
            name=f"n\x00{i}",
            status_reason="r\ue000e",
            metadata={"k": "a\x00b"},
            idempotency_key=f"k{i}",
        )
        for i in range(3)
    ]
    items.append(CheckpointInput(state={"n": 9}, parent_key="k0", step=-1))
    results = services.ingest_checkpoints([(session, items)])
    rows = list(Checkpoint.objects.filter(session=session).order_by("seq"))
    assert [checkpoint.pk for checkpoint, _ in results] == [row.pk for row in rows]
    assert [row.name for row in rows] == ["n\x000", "n\x001", "n\x002", ""]
    assert {row.status_reason for row in rows[:3]} == {"r\ue000e"} and rows[0].metadata == {"k": "a\x00b"}
    assert [row.parent_id for row in rows] == [None, rows[0].pk, rows[1].pk, rows[0].pk]
    assert rows[3].starts_branch and rows[3].step == -1
    assert [store.load_shared(bytes(row.root)) for row in rows] == [{"n": 0}, {"n": 1}, {"n": 2}, {"n": 9}]
