from __future__ import annotations

import threading
import uuid

import pytest
from langgraph.checkpoint.base.id import uuid6

from checkpoints.jobs.retention import apply_retention
from checkpoints.models import AgentSession, Checkpoint, CheckpointKind, RetentionPolicy
from checkpoints.services import Actor, fork_session, restore_checkpoint, undo_restore
from checkpoints.services import langgraph as lg
from tests.helpers import in_thread
from tests.kits.langgraph_kit import lg_id, messages, put_body, typed

pytestmark = pytest.mark.django_db
ACTOR = Actor.system("test")


def put(project, thread_id, n, *, ns="", parent=None, checkpoint_id=None, **kwargs):
    body = put_body(thread_id, n, ns=ns, parent=parent, **kwargs)
    if checkpoint_id is not None:
        body["checkpoint"]["id"] = checkpoint_id
    item = lg.PutInput(**{key: value for key, value in body.items()})
    return lg.put_checkpoint(project, item, actor=ACTOR)


def write(project, thread_id, checkpoint_id, writes, task_id="task", ns=""):
    return lg.put_writes(
        project,
        actor=ACTOR,
        thread_id=thread_id,
        checkpoint_ns=ns,
        checkpoint_id=checkpoint_id,
        task_id=task_id,
        task_path="",
        writes=writes,
    )


def latest(project, thread_id, **kwargs):
    return lg.get_tuple(project, thread_id=thread_id, **kwargs)


# ---- thread ids ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("thread_id", "external_id"),
    [
        ("plain-id", "plain-id"),
        ("a/b", "a%2Fb"),
        ("50%", "50%25"),
        ("nul\x00", "nul%00"),
        ("x" * 200, "x" * 200),
    ],
)
def test_thread_external_ids_are_the_thread_id_or_its_reversible_encoding(thread_id, external_id):
    assert lg.thread_external_id(thread_id) == external_id


def test_thread_ids_too_long_once_encoded_become_a_digest():
    assert lg.thread_external_id("x" * 201).startswith("%sha256:")
    assert lg.thread_external_id("/" * 100) != lg.thread_external_id("/" * 101)
    assert len(lg.thread_external_id("/" * 100)) <= 200


# ---- ids minted for restores -----------------------------------------------------------------------------


def test_a_minted_id_sorts_just_above_a_langgraph_id_and_below_the_clients_next_one():
    largest = str(uuid6(clock_seq=7))
    minted = lg.next_checkpoint_id(largest)
    later = str(uuid6(clock_seq=8))
    assert largest < minted < later
    assert uuid.UUID(minted).version == 6
    assert minted[19:] == largest[19:]  # same clock sequence and node: only the time moved, by one tick


@pytest.mark.parametrize(
    "largest", ["checkpoint-9", "ABC", str(uuid.UUID(int=5)), "ffffffff-ffff-6fff-bfff-ffffffffffff"]
)
def test_a_minted_id_sorts_above_any_id(largest):
    assert lg.next_checkpoint_id(largest) > largest


# ---- put -------------------------------------------------------------------------------------------------


def test_an_identical_repeat_is_not_stored_again_so_imports_are_idempotent(project):
    first, created = put(project, "thread-1", 0)
    again, created_again = put(project, "thread-1", 0)
    assert (created, created_again, again.pk) == (True, False, first.pk)


def test_a_put_with_an_unparseable_ts_is_dated_now(project):
    body_ts = {"ts": "yesterday-ish"}
    checkpoint, _ = put(project, "thread-1", 0)
    item = lg.PutInput(**put_body("thread-1", 1))
    item.checkpoint.update(body_ts)
    later, _ = lg.put_checkpoint(project, item, actor=ACTOR)
    assert later.created_at > checkpoint.created_at  # now, not the agent's 2026-11-26T10:00


def test_a_thread_id_naming_an_ordinary_session_is_refused(project, make_session):
    make_session("run-1")
    with pytest.raises(lg.InvalidInput):
        put(project, "run-1", 0)


# ---- restore and fork ------------------------------------------------------------------------------------


def interrupted_thread(project, thread_id="thread-1"):
    ids = [str(uuid6(clock_seq=n)) for n in range(3)]
    for n, checkpoint_id in enumerate(ids):
        put(project, thread_id, n, checkpoint_id=checkpoint_id, parent=None)
    write(project, thread_id, ids[1], [["__interrupt__", typed({"value": "approve?"})], ["messages", typed("m")]])
    return ids


def test_a_console_restore_makes_the_restored_state_langgraphs_latest_under_a_larger_id(project):
    ids = interrupted_thread(project)
    target = Checkpoint.objects.get(metadata__checkpoint_id=ids[1])
    restored = restore_checkpoint(target, actor=ACTOR, reason="back")
    now_latest = latest(project, "thread-1")
    assert now_latest["checkpoint_id"] > ids[2]
    assert uuid.UUID(now_latest["checkpoint_id"]).version == 6
    assert now_latest["checkpoint"]["channel_values"] == {"messages": messages(2)}
    assert now_latest["parent_checkpoint_id"] == ids[1]
    assert now_latest["metadata"] == {
        "source": "fork",
        "step": 1,
        "parents": {},
        "restored_from": ids[1],
        "restore_reason": "back",
    }
    assert (
        now_latest["checkpoint"]["channel_versions"]
        == latest(project, "thread-1", checkpoint_id=ids[1])["checkpoint"]["channel_versions"]
    )
    assert now_latest["pending_writes"] == []  # the tasks run again under the new id, an interrupt asks again
    assert now_latest["console"]["id"] == restored.pk
    session = AgentSession.objects.get()
    assert session.head_id == restored.pk and restored.kind == CheckpointKind.RESTORE
    assert Checkpoint.objects.get(pk=restored.pk).metadata["checkpoint_id"] == now_latest["checkpoint_id"]


def test_the_clients_next_put_after_a_restore_becomes_the_latest(project):
    ids = interrupted_thread(project)
    restore_checkpoint(Checkpoint.objects.get(metadata__checkpoint_id=ids[0]), actor=ACTOR)
    restored_id = latest(project, "thread-1")["checkpoint_id"]
    next_id = str(uuid6(clock_seq=9))
    put(project, "thread-1", 9, checkpoint_id=next_id, parent=None)
    assert latest(project, "thread-1")["checkpoint_id"] == next_id > restored_id


def test_undoing_a_restore_brings_the_previous_state_back_under_a_still_larger_id(project):
    ids = interrupted_thread(project)
    restore_checkpoint(Checkpoint.objects.get(metadata__checkpoint_id=ids[0]), actor=ACTOR)
    restored_id = latest(project, "thread-1")["checkpoint_id"]
    undo_restore(AgentSession.objects.get(), actor=ACTOR)
    back = latest(project, "thread-1")
    assert back["checkpoint_id"] > restored_id
    assert back["checkpoint"]["channel_values"] == {"messages": messages(3)}
    assert back["metadata"]["restored_from"] == ids[2]


def test_a_console_fork_is_a_new_thread_that_continues_from_the_forked_state(project):
    ids = interrupted_thread(project, "team/thread-1")
    target = Checkpoint.objects.get(metadata__checkpoint_id=ids[1])
    fork = fork_session(target, actor=ACTOR)
    thread_id = fork.metadata["thread_id"]
    assert thread_id == "team/thread-1-fork-1"
    assert fork.external_id == lg.thread_external_id(thread_id)
    assert fork.source_format == "langgraph"
    forked = latest(project, thread_id)
    assert forked["checkpoint_id"] == ids[1]
    assert forked["checkpoint"]["channel_values"] == {"messages": messages(2)}
    assert forked["metadata"]["forked_from"] == ids[1]
    assert forked["metadata"]["forked_from_thread"] == "team/thread-1"
    assert forked["pending_writes"] == [["task", "__interrupt__", {"value": "approve?"}]]  # the task runs again
    assert forked["parent_checkpoint_id"] is None
    put(project, thread_id, 5, checkpoint_id=str(uuid6(clock_seq=5)), parent=None)  # the graph goes on
    assert len(list(lg.iter_tuples(project, thread_id=thread_id))) == 2


def test_a_fork_of_an_answered_interrupt_leaves_the_answer_behind(project):
    ids = interrupted_thread(project)
    write(project, "thread-1", ids[1], [["__resume__", typed("no")]])
    write(project, "thread-1", ids[1], [["__resume__", typed("no")]], task_id="00000000-0000-0000-0000-000000000000")
    fork = fork_session(Checkpoint.objects.get(metadata__checkpoint_id=ids[1]), actor=ACTOR)
    assert latest(project, fork.metadata["thread_id"])["pending_writes"] == [
        ["task", "__interrupt__", {"value": "approve?"}]
    ]


# ---- what a subgraph adds ------------------------------------------------------------------------------


@pytest.mark.parametrize(("ns", "calls"), [("work:1", 0), ("", 1)])
def test_a_subgraphs_first_step_counts_no_call_of_the_conversation_its_input_carried(project, ns, calls):
    start = {"__start__": {"messages": messages(2)}}  # a question and an answer calling a tool
    put(project, "thread-1", 0, ns=ns, values=start, metadata={"source": "input", "step": -1, "parents": {}})
    checkpoint, _ = put(project, "thread-1", 1, ns=ns, parent=0, values={"messages": messages(2)})
    assert checkpoint.calls_made == calls  # a root graph's input is new to the thread; a subgraph's is inherited


# ---- retention -------------------------------------------------------------------------------------------


def keep_last_step(n, **fields):
    rules = {"keep_last": n, "max_age": None, "keep_first": False, "keep_latest_per_name": False}
    RetentionPolicy.objects.update_or_create(project=None, kind="step", defaults={**rules, "enabled": True, **fields})


def test_a_policy_says_when_it_applies_to_langgraph_threads():
    from checkpoints.jobs.retention import describe

    policy = RetentionPolicy(kind="step", keep_last=5)
    assert describe(policy) == "keep the last 5 per session"
    policy.applies_to_langgraph = True
    assert describe(policy) == "keep the last 5 per session; LangGraph threads too"


def test_retention_leaves_langgraph_threads_whole_by_default(project, make_session, make_checkpoint):
    keep_last_step(1)
    for n in range(5):
        put(project, "thread-1", n)
    plain = make_session("run-1")
    for n in range(5):
        make_checkpoint(plain, {"n": n})
    apply_retention()
    assert len(list(lg.iter_tuples(project, thread_id="thread-1"))) == 5
    assert Checkpoint.objects.filter(session=plain).count() == 1


def test_retention_for_langgraph_keeps_each_namespaces_latest_and_unanswered_interrupts(project):
    keep_last_step(0, applies_to_langgraph=True)
    for n in range(6):
        put(project, "thread-1", n)
    put(project, "thread-1", 3, ns="child:1")
    put(project, "thread-1", 4, ns="child:1")
    write(project, "thread-1", lg_id(1), [["__interrupt__", typed("wait")]])
    write(project, "thread-1", lg_id(2), [["__interrupt__", typed("wait")]])
    write(project, "thread-1", lg_id(2), [["__resume__", typed("go")]], task_id="other")
    write(project, "thread-1", lg_id(0), [["messages", typed("gone with it")]])
    apply_retention()
    kept = {(item["checkpoint_ns"], item["checkpoint_id"]) for item in lg.iter_tuples(project, thread_id="thread-1")}
    assert kept == {("", lg_id(5)), ("", lg_id(1)), ("child:1", lg_id(4))}
    assert latest(project, "thread-1", checkpoint_id=lg_id(1))["pending_writes"] == [["task", "__interrupt__", "wait"]]
    from checkpoints.models import LangGraphWrites

    assert not LangGraphWrites.objects.filter(checkpoint_id=lg_id(0)).exists()


def test_an_admin_deletion_of_a_langgraph_checkpoint_takes_its_pending_writes_along(project):
    from checkpoints.models import LangGraphCheckpoint, LangGraphWrites
    from checkpoints.services.cleanup import delete_checkpoints

    for n in range(3):
        put(project, "thread-1", n)
    write(project, "thread-1", lg_id(1), [["messages", typed("said at 1")]])
    write(project, "thread-1", lg_id(2), [["messages", typed("said at 2")]])
    doomed = LangGraphCheckpoint.objects.get(checkpoint_id=lg_id(1)).console
    result = delete_checkpoints([doomed.pk], actor=ACTOR, reason="cleanup")
    assert len(result.deleted) == 1
    ids = [item["checkpoint"]["id"] for item in lg.iter_tuples(project, thread_id="thread-1")]
    assert ids == [lg_id(2), lg_id(0)]
    assert sorted(LangGraphWrites.objects.values_list("checkpoint_id", flat=True)) == [lg_id(2)]
    assert latest(project, "thread-1")["pending_writes"] == [["task", "messages", "said at 2"]]


# ---- writes stored once --------------------------------------------------------------------------------


def test_a_replaced_channels_write_is_stored_once_as_the_next_states_value(project):
    from checkpoints.models import LangGraphWrites

    memory = {f"key-{n}": f"value {n} " * 20 for n in range(50)}
    put(project, "thread-1", 0, values={"memory": {**memory, "key-0": "old"}, "progress": {"step": 0}})
    written = [["memory", memory], ["progress", {"step": 1}], ["branch:to:agent", None]]
    write(project, "thread-1", lg_id(0), written)
    before = latest(project, "thread-1", checkpoint_id=lg_id(0))["pending_writes"]
    put(project, "thread-1", 1, parent=0, values={"memory": memory, "progress": {"step": 1}})
    write(project, "thread-1", lg_id(1), [["progress", {"step": 2}]], task_id="next")  # the next step's writes
    row = LangGraphWrites.objects.get(checkpoint_id=lg_id(0))
    assert row.values_root is not None and len(row.writes) < 100  # the 50 keys are held by checkpoint 1 only
    assert latest(project, "thread-1", checkpoint_id=lg_id(0))["pending_writes"] == before


def test_a_write_changing_a_few_keys_is_stored_as_those_changes_until_the_next_state_holds_it(project):
    from checkpoints.models import LangGraphWrites

    memory = {f"key-{n}": f"value {n} " * 20 for n in range(50)}
    put(project, "thread-1", 0, values={"memory": memory})
    changed = {**memory, "key-1": "new", "key-99": 1}
    del changed["key-2"]
    write(project, "thread-1", lg_id(0), [["memory", changed]])
    assert len(LangGraphWrites.objects.get().writes) < 150  # not the 50 keys again
    assert latest(project, "thread-1", checkpoint_id=lg_id(0))["pending_writes"] == [["task", "memory", changed]]
    put(project, "thread-1", 1, parent=0, values={"memory": {**changed, "key-3": "set by another task"}})
    assert latest(project, "thread-1", checkpoint_id=lg_id(0))["pending_writes"] == [["task", "memory", changed]]


def test_a_write_equal_to_the_next_value_only_by_python_equality_keeps_its_own_value(project):
    from checkpoints.models import LangGraphWrites

    put(project, "thread-1", 0, values={"progress": {"done": 0}})
    write(project, "thread-1", lg_id(0), [["progress", {"done": True}]])
    put(project, "thread-1", 1, parent=0, values={"progress": {"done": 1}})  # 1 == True, but not in JSON
    assert LangGraphWrites.objects.get().values_root is None
    assert latest(project, "thread-1", checkpoint_id=lg_id(0))["pending_writes"] == [
        ["task", "progress", {"done": True}]
    ]


def test_a_write_named_in_a_later_state_outlives_that_checkpoint(project):
    from checkpoints.jobs.gc import live_roots
    from checkpoints.models import LangGraphWrites

    put(project, "thread-1", 0, values={"messages": messages(1)})
    new = messages(2)[1]
    write(project, "thread-1", lg_id(0), [["messages", [new]]])
    appends = {"messages": {"base_len": 1, "items": [new]}}
    item = lg.PutInput(
        **put_body("thread-1", 1, parent=0, values={}, metadata={"source": "loop", "step": 1, "run_id": "r1"}),
        channels=["messages"],
        appends=appends,
        base_checkpoint_id=lg_id(0),
    )
    lg.put_checkpoint(project, item, actor=ACTOR)
    write(project, "thread-1", lg_id(1), [["branch:to:agent", None]], task_id="next")
    row = LangGraphWrites.objects.get(checkpoint_id=lg_id(0))
    assert row.values_root is not None and bytes(row.values_root) in live_roots()
    assert lg.delete_for_runs(project, actor=ACTOR, run_ids=["r1"]) == (1, 1)
    assert latest(project, "thread-1")["pending_writes"] == [["task", "messages", [new]]]


def grown(n, new, *, base_len):
    """Checkpoint n as the saver puts it after n - 1: `new` appended to the messages."""
    body = put_body("thread-1", n, parent=n - 1, values={}, metadata={"source": "loop", "step": n})
    appends = {"messages": {"base_len": base_len, "items": new}}
    item = lg.PutInput(**body, channels=["messages"], appends=appends, base_checkpoint_id=lg_id(n - 1))
    return lg.put_checkpoint(project_of("thread-1"), item, actor=ACTOR)[0]


def project_of(thread_id):
    return AgentSession.objects.get(external_id=thread_id).project


def test_writes_arriving_after_the_next_put_are_stored_once_in_its_state(project):
    from checkpoints.models import LangGraphWrites

    put(project, "thread-1", 0, values={"messages": messages(1)})
    new = messages(2)[1]
    child = grown(1, [new], base_len=1)
    write(project, "thread-1", lg_id(0), [["messages", [new]]])  # LangGraph sent it in the background: late
    row = LangGraphWrites.objects.get()
    assert bytes(row.values_root) == bytes(child.root) and len(row.writes) < 60
    assert latest(project, "thread-1", checkpoint_id=lg_id(0))["pending_writes"] == [["task", "messages", [new]]]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_put_never_waits_for_writes_in_flight_and_the_next_writes_store_them_once(project):
    """LangGraph sends a step's writes in the background while it puts the next checkpoint: the put does not wait
    for them (nor does a put elsewhere in the thread). The next step's writes, against the new checkpoint, name
    the written message in its state."""
    from django.db import transaction

    from checkpoints.models import LangGraphCheckpoint, LangGraphWrites

    put(project, "thread-1", 0, values={"messages": messages(1)})
    new, newer = messages(3)[1:]
    written, release, errors = threading.Event(), threading.Event(), []

    def writes_in_flight() -> None:
        with transaction.atomic():
            write(project, "thread-1", lg_id(0), [["messages", [new]]])
            written.set()
            release.wait(10)

    writer = in_thread(writes_in_flight, errors)
    assert written.wait(10)
    unrelated = in_thread(lambda: put(project, "thread-1", 5, ns="child:1", values={"messages": messages(1)}), errors)
    child = in_thread(lambda: grown(1, [new], base_len=1), errors)
    unrelated.join(10)
    child.join(10)
    finished_meanwhile = not unrelated.is_alive() and not child.is_alive()
    release.set()
    writer.join(10)
    assert not errors and finished_meanwhile
    assert LangGraphWrites.objects.get().values_root is None  # held whole for now

    child_root = bytes(LangGraphCheckpoint.objects.get(checkpoint_id=lg_id(1)).console.root)
    write(project, "thread-1", lg_id(1), [["messages", [newer]]], task_id="next")
    row = LangGraphWrites.objects.get(checkpoint_id=lg_id(0))
    assert bytes(row.values_root) == child_root and len(row.writes) < 60
    assert latest(project, "thread-1", checkpoint_id=lg_id(0))["pending_writes"] == [["task", "messages", [new]]]
