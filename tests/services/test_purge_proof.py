"""The proof of a purge (issue 26, item 4): a key planted at step 5 of a 300-step session, in a LangGraph thread (its
state and its pending writes), in an imported Kaizen file, in another project's session sharing the same content and
in a webhook delivery is purged; then `pg_dump` of the whole database and every stored chunk decompressed (and every
zstd'd LangGraph header and writes) hold its bytes nowhere — while every checkpoint still reads, diffs and restores,
with the placeholder. PostgreSQL only: the dump is PostgreSQL's, and so is the VACUUM."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from django.db import connection

from checkpoints import store
from checkpoints.models import (
    AgentSession,
    Checkpoint,
    Delivery,
    EventType,
    LangGraphCheckpoint,
    LangGraphWrites,
    Purge,
    SecretFinding,
)
from checkpoints.outbox.webhooks import create_webhook
from checkpoints.services import Actor, CheckpointInput, ingest_checkpoints, purges, restore_checkpoint
from checkpoints.services import langgraph as lg
from checkpoints.services.file_import import import_path
from checkpoints.store import jsoncodec
from checkpoints.store.purging import raw_chunks
from checkpoints.store.secrets import fingerprint

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(shutil.which("pg_dump") is None, reason="needs pg_dump"),
]

KEY = "ghp_" + "Pv4Lq8Zr2Xw6Ty1Mb9Nc3Kd7Hs5Jf0Ga2We4"
ALICE = Actor.system("alice")


@pytest.fixture(autouse=True)
def _postgresql_only() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the proof dumps PostgreSQL")


def conversation(steps: int) -> dict[str, object]:
    messages = [{"role": "tool", "content": f"step {n}: listed 3 files"} for n in range(1, steps + 1)]
    if steps >= 5:
        messages[4] = {"role": "tool", "content": f"step 5: env says GITHUB_TOKEN={KEY} and HOME=/root"}
    return {"messages": messages, "progress": steps}


def three_hundred_steps(session: AgentSession, *, named: bool = False) -> None:
    for step in range(1, 301):
        name = f"leaked {KEY}" if named and step == 5 else f"step-{step}"
        ingest_checkpoints([(session, [CheckpointInput(state=conversation(step), name=name, step=step)])])


def langgraph_thread(project) -> None:
    first, second = "1f0c0000-0000-6000-8000-000000000001", "1f0c0000-0000-6000-8000-000000000002"

    def put(checkpoint_id: str, values: dict[str, object], parent: str | None = None) -> None:
        lg.put_checkpoint(
            project,
            lg.PutInput(
                thread_id="chat-1",
                checkpoint_ns="",
                checkpoint={"v": 4, "id": checkpoint_id, "ts": "2026-11-27T10:00:00+00:00"},
                metadata={"source": "loop", "step": 1},
                values=values,
                parent_checkpoint_id=parent,
            ),
        )

    put(first, {"messages": [{"type": "human", "content": "what is in the env?"}]})
    lg.put_writes(
        project,
        thread_id="chat-1",
        checkpoint_ns="",
        checkpoint_id=first,
        task_id="task-0",
        task_path="~__pregel_pull, tools",
        writes=[("messages", [{"type": "tool", "content": f"GITHUB_TOKEN={KEY}"}])],
    )
    put(
        second,
        {"messages": [{"type": "human", "content": "what is in the env?"}, {"type": "ai", "content": f"it is {KEY}"}]},
        parent=first,
    )


def kaizen_file(tmp_path, project) -> None:
    line = {
        "checkpoint_id": "ckpt_0000leaky0001",
        "agent_id": "kaizen_agent",
        "timestamp": "2026-05-07T02:00:00+00:00",
        "step_number": 1,
        "conversation_history": [{"role": "tool", "content": f"export GITHUB_TOKEN={KEY}"}],
        "memory_contents": {"token": KEY},
        "pending_actions": [],
        "completed_actions": [],
        "budget_spent_usd": 0.0,
        "parent_checkpoint_id": None,
        "status": "running",
        "metadata": {},
    }
    path = tmp_path / "ckpt_0000leaky0001.jsonl"
    path.write_text(json.dumps(line) + "\n", encoding="utf-8")
    report = import_path(path, fmt="kaizen", project=project, actor=ALICE)
    assert report.errors == []


def stored_blobs() -> list[bytes]:
    """Every stored chunk decompressed, and LangGraph's zstd'd headers and writes."""
    blobs = [raw for _, raw in raw_chunks()]
    blobs += [
        jsoncodec.canonical(jsoncodec.unpack(header))
        for header in LangGraphCheckpoint.objects.values_list("header", flat=True)
    ]
    blobs += [
        jsoncodec.canonical(jsoncodec.unpack(writes))
        for writes in LangGraphWrites.objects.values_list("writes", flat=True)
    ]
    return blobs


def dump() -> str:
    settings = connection.settings_dict
    command = ["pg_dump", "-h", settings["HOST"] or "127.0.0.1", "-U", settings["USER"], "-d", settings["NAME"]]
    if settings["PORT"]:
        command += ["-p", str(settings["PORT"])]
    return subprocess.run(command, check=True, capture_output=True, text=True, timeout=300).stdout


def test_a_purged_key_occurs_nowhere_in_the_database_and_history_keeps_its_shape(
    project, other_project, make_session, receiver, tmp_path, settings
):
    create_webhook(project, url=receiver.url, events=[EventType.CHECKPOINT_CREATED], actor=ALICE)
    # a delivery published before the key was found carries it as it is (later ones are masked when published)
    settings.SECRETS_SCAN = False
    ingest_checkpoints([(make_session("before-the-scan"), [CheckpointInput(state={"n": 1}, name=f"leaked {KEY}")])])
    settings.SECRETS_SCAN = True
    ours = make_session("run-300")
    three_hundred_steps(ours, named=True)
    theirs = make_session("their-run", in_project=other_project)  # the same states: the same chunks
    three_hundred_steps(theirs)
    langgraph_thread(project)
    kaizen_file(tmp_path, project)
    assert Delivery.objects.filter(event__data__checkpoint__name=f"leaked {KEY}").exists()
    blobs = stored_blobs()
    assert any(KEY.encode() in blob for blob in blobs) and KEY in dump()  # planted where the proof looks
    finding = SecretFinding.objects.get(session=ours, detector="github_token")
    assert finding.checkpoint_seq == 5

    purge = purges.start_purge(project, actor=ALICE, reason="leaked GitHub token, revoked", finding=finding)
    result = purges.run_purge(purge.pk)

    purge.refresh_from_db()
    assert purge.state == "finished", purge.error
    # steps 5–300 in each 300-step session, the LangGraph put that added it, the Kaizen checkpoint
    assert purge.checkpoints == 296 + 1 + 1 and purge.other_checkpoints == 296 and purge.other_sessions == 1
    assert result["chunks_deleted"] > 0
    text = dump()
    assert KEY not in text and KEY.encode().hex() not in text
    assert not [blob for blob in stored_blobs() if KEY.encode() in blob]

    placeholder = purge.placeholder
    assert placeholder == f"[purged github_token {fingerprint(KEY)[:12]}]"
    for session in (ours, theirs):
        rows = list(Checkpoint.objects.filter(session=session).order_by("seq"))
        assert [row.seq for row in rows] == list(range(1, 301))  # the same history, every checkpoint there
        states = [store.load_state(bytes(row.root)) for row in rows]
        assert states[4]["messages"][4]["content"] == f"step 5: env says GITHUB_TOKEN={placeholder} and HOME=/root"
        assert states[299]["messages"][4] == states[4]["messages"][4] and len(states[299]["messages"]) == 300
        assert states[3] == conversation(4)  # before the key: unchanged
        diff = store.diff_checkpoints(rows[3], rows[4])
        assert any(placeholder in json.dumps(entry.new) for entry in diff.entries)
        restored = restore_checkpoint(rows[4], actor=ALICE, reason="back to step 5")
        assert store.load_state(bytes(restored.root))["messages"][4]["content"].count(placeholder) == 1
    assert not SecretFinding.objects.filter(fingerprint=fingerprint(KEY)).open().exists()
    assert Purge.objects.get(pk=purge.pk).sessions == []  # and no column of it holds the value (the dump says so)


def test_ingest_after_a_purge_goes_on_from_the_purged_head(project, make_session):
    session = make_session("run-9")
    for step in range(1, 9):
        ingest_checkpoints([(session, [CheckpointInput(state=conversation(step), step=step)])])
    purge = purges.start_purge(project, actor=ALICE, reason="leaked", value=KEY)
    purges.run_purge(purge.pk)
    session.refresh_from_db()
    assert session.purge_generation == purge.pk
    ingest_checkpoints(
        [(session, [CheckpointInput(state=store.load_state(bytes(session.head.root)) | {"progress": 9})])]
    )
    newest = Checkpoint.objects.filter(session=session).order_by("-seq").first()
    assert store.load_state(bytes(newest.root))["progress"] == 9
    assert not [blob for blob in stored_blobs() if KEY.encode() in blob]
