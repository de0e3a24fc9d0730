"""Purges (docs/purges.md): a value replaced in every checkpoint that holds it — patches and keyframes, forks and
restores sharing its roots, another project sharing its chunks — with history keeping its shape; a request that
is wrong changes nothing; a dry run changes nothing; findings closed; ingest racing a purge stores nothing on a
purged parent. These run on SQLite and PostgreSQL; the dump-level proof is test_purge_proof.py."""

from __future__ import annotations

import pytest

from checkpoints import store
from checkpoints.audit import HistoryPurged
from checkpoints.models import AuditEvent, Checkpoint, Chunk, DriftAlert, Purge, PurgeValue, SecretFinding
from checkpoints.services import Actor, CheckpointInput, fork_session, ingest_checkpoints, purges, restore_checkpoint
from checkpoints.store import purging
from checkpoints.store.secrets import fingerprint

pytestmark = pytest.mark.django_db

KEY = "ghp_" + "Zq9Xw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe9Dc8"
ALICE = Actor.system("alice")


def state(steps: int, *, key_at: int = 3) -> dict[str, object]:
    messages = [f"step {n}: ran ls" for n in range(1, steps + 1)]
    if steps >= key_at:
        messages[key_at - 1] = f"step {key_at}: token {KEY}"
    return {"messages": messages, "memory": {"n": steps}}


def session_of(make_session, name: str = "run-1", steps: int = 40, **kwargs):
    session = make_session(name, **kwargs)
    for step in range(1, steps + 1):
        ingest_checkpoints([(session, [CheckpointInput(state=state(step), step=step, name=f"s{step}")])])
    return session


def holding_chunks() -> list[bytes]:
    return [key for key, raw in purging.raw_chunks() if KEY.encode() in raw]


def purge(project, **kwargs):
    asked = purges.start_purge(project, actor=ALICE, reason=kwargs.pop("reason", "leaked"), **kwargs)
    purges.run_purge(asked.pk)
    asked.refresh_from_db()
    assert asked.state == "finished", asked.error
    return asked


def test_every_checkpoint_holding_the_value_reads_with_the_placeholder_and_the_rest_is_unchanged(
    project, make_session, settings
):
    settings.CHECKPOINT_KEYFRAME_INTERVAL = 8  # patches and keyframes both hold the value
    session = session_of(make_session)
    before = {row.seq: store.load_state(bytes(row.root)) for row in Checkpoint.objects.filter(session=session)}
    hashes_before = dict(Checkpoint.objects.filter(session=session).values_list("seq", "state_hash"))
    assert holding_chunks()

    done = purge(project, value=KEY)

    assert holding_chunks() == []
    assert done.checkpoints == 38 and done.session_count == 1 and done.other_checkpoints == 0
    placeholder = f"[purged github_token {fingerprint(KEY)[:12]}]"
    for row in Checkpoint.objects.filter(session=session).order_by("seq"):
        after = store.load_state(bytes(row.root))
        expected = before[row.seq]
        if row.seq >= 3:
            expected = {**expected, "messages": [m.replace(KEY, placeholder) for m in expected["messages"]]}
            assert bytes(row.state_hash) != bytes(hashes_before[row.seq])
            assert bytes(row.state_hash) == store.state_digest(after)
        else:
            assert bytes(row.state_hash) == bytes(hashes_before[row.seq])
        assert after == expected
    store.cache.clear()  # read back from the database alone, not from what the purge cached
    rows = list(Checkpoint.objects.filter(session=session).order_by("seq"))
    assert store.load_state(bytes(rows[-1].root))["messages"][2] == f"step 3: token {placeholder}"
    changes = store.diff_checkpoints(rows[1], rows[2]).entries
    assert any(placeholder in str(entry.new) for entry in changes) and not any(KEY in str(e.new) for e in changes)


@pytest.mark.parametrize("drop_keyframe", [False, True])
def test_patches_rebased_on_a_keyframes_leaves_that_hold_the_value_are_rewritten_and_all_read_back(
    project, make_session, settings, drop_keyframe
):
    """A keyframe compresses the patches before it again with its new leaves as dictionary (store._rebase). When a
    leaf holds the value, the patches below the one that added it hold nothing, but need that leaf to decode: the
    purge stores them again too, and every checkpoint reads back."""
    settings.CHECKPOINT_KEYFRAME_INTERVAL = 8
    session = make_session("rebased")
    padded = lambda steps: {  # noqa: E731 - messages long enough for the array to have leaves
        "messages": [m + " " + "x" * 400 for m in state(steps, key_at=12)["messages"]],
        "memory": {"n": steps},
    }
    for step in range(1, 21):
        ingest_checkpoints([(session, [CheckpointInput(state=padded(step), step=step, name=f"s{step}")])])
    rows = {row.seq: row for row in Checkpoint.objects.filter(session=session)}
    keyframes = [seq for seq, row in rows.items() if Chunk.objects.get(hash=row.root).base is None]
    first = max(seq for seq in keyframes if seq < 12) + 1  # the segment's first patch, before the one adding the value
    assert first < 12 and any(seq > 12 for seq in keyframes)
    below = bytes(rows[first].root)
    assert bytes(Chunk.objects.get(hash=below).data)[0] == store.REBASED
    assert KEY.encode() not in dict(purging.raw_chunks([below]))[below]
    if drop_keyframe:  # the keyframe that rebased them is no checkpoint's any more: the purge writes no new one
        Checkpoint.objects.filter(session=session, seq__gt=first + 5).delete()
        rows = {seq: row for seq, row in rows.items() if seq <= first + 5}
    before = {seq: store.load_state(bytes(row.root)) for seq, row in rows.items()}
    purge(project, value=KEY)

    assert holding_chunks() == []
    store.cache.clear()
    placeholder = f"[purged github_token {fingerprint(KEY)[:12]}]"
    for row in Checkpoint.objects.filter(session=session).order_by("seq"):
        expected = before[row.seq]
        expected = {**expected, "messages": [m.replace(KEY, placeholder) for m in expected["messages"]]}
        assert store.load_state(bytes(row.root)) == expected


def test_forks_restores_and_another_projects_shared_content_are_purged_too(project, other_project, make_session):
    ours = session_of(make_session, steps=6)
    theirs = session_of(make_session, "their-run", steps=6, in_project=other_project)
    alone = make_session("alone", in_project=other_project)  # the value in content nobody in our project shares
    ingest_checkpoints([(alone, [CheckpointInput(state={"only": f"theirs {KEY} alone"})])])
    fifth = Checkpoint.objects.get(session=ours, seq=5)
    forked = fork_session(fifth, actor=ALICE)
    restored = restore_checkpoint(fifth, actor=ALICE, reason="back")

    done = purge(project, value=KEY)

    assert done.other_checkpoints == 4 and done.other_sessions == 1  # theirs 3..6; never "alone"
    for session in (ours, theirs, forked):
        for row in Checkpoint.objects.filter(session=session):
            assert KEY not in str(store.load_state(bytes(row.root)))
    restored.refresh_from_db()
    assert KEY not in str(store.load_state(bytes(restored.root)))
    [alone_row] = Checkpoint.objects.filter(session=alone)
    assert KEY in store.load_state(bytes(alone_row.root))["only"]  # another project's own copy is theirs to purge
    audited = AuditEvent.objects.filter(action="purge_done", project=other_project).get()
    assert audited.target == "a purge asked in another project" and audited.reason == ""
    assert str(project.slug) not in str(audited.details)


def test_a_purge_by_finding_closes_the_findings_of_the_value_and_scrubs_names_alerts_and_audit(project, make_session):
    session = session_of(make_session, steps=4)
    Checkpoint.objects.filter(session=session, seq=4).update(name=f"got {KEY}", metadata={"env": {"T": KEY}})
    DriftAlert.objects.create(session=session, kind="repetition", message=f"called env with {KEY} 4 times")
    finding = SecretFinding.objects.get(session=session)

    done = purge(project, finding=finding, reason=f"rotated {KEY} today")

    finding.refresh_from_db()
    assert (finding.closed_as, finding.close_reason) == ("purged", f"purge {done.pk}")
    row = Checkpoint.objects.get(session=session, seq=4)
    assert KEY not in row.name and KEY not in str(row.metadata) and done.placeholder in row.name
    assert KEY not in DriftAlert.objects.get(kind="repetition").message
    assert not AuditEvent.objects.filter(reason__contains=KEY).exists()
    assert KEY not in done.reason
    assert not PurgeValue.objects.exists()


def test_a_dry_run_counts_and_changes_nothing(project, make_session):
    session = session_of(make_session, steps=5)
    roots = list(Checkpoint.objects.filter(session=session).values_list("root", flat=True))
    chunks = Chunk.objects.count()

    done = purge(project, value=KEY, dry_run=True, reason="")

    assert (done.checkpoints, done.session_count) == (3, 1)
    assert done.preview == [{"session": "run-1", "seqs": [3, 4, 5], "count": 3}]
    assert list(Checkpoint.objects.filter(session=session).values_list("root", flat=True)) == roots
    assert Chunk.objects.count() == chunks and holding_chunks()
    assert SecretFinding.objects.open().count() == 1


def test_a_purge_limited_to_sessions_leaves_the_others(project, make_session):
    first = session_of(make_session, "first", steps=4)
    second = make_session("second")
    ingest_checkpoints([(second, [CheckpointInput(state={"out": f"second {KEY}"})])])

    purge(project, value=KEY, sessions=["first"])

    assert all(KEY not in str(store.load_state(bytes(r.root))) for r in Checkpoint.objects.filter(session=first))
    assert KEY in str(store.load_state(bytes(Checkpoint.objects.get(session=second).root)))


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"value": "short"}, "value"),
        ({"value": KEY, "reason": " "}, "reason"),
        ({}, "value"),
        ({"value": KEY, "sessions": ["no-such-run"]}, "sessions"),
    ],
)
def test_a_wrong_request_is_refused_and_records_nothing(project, make_session, kwargs, field):
    session_of(make_session, steps=3)
    kwargs.setdefault("reason", "leaked")
    with pytest.raises(purges.InvalidInput) as refused:
        purges.start_purge(project, actor=ALICE, **kwargs)
    assert refused.value.field == field
    assert not Purge.objects.exists() and not PurgeValue.objects.exists()


def test_another_projects_finding_is_refused(project, other_project, make_session):
    session_of(make_session, steps=3, in_project=other_project)
    finding = SecretFinding.objects.get()
    with pytest.raises(purges.InvalidInput):
        purges.start_purge(project, actor=ALICE, reason="x", finding=finding)


def test_a_checkpoint_stored_against_a_head_purged_meanwhile_is_refused_and_the_next_one_goes_on(project, make_session):
    session = session_of(make_session, steps=4)
    stale = type(session).objects.get(pk=session.pk)  # read before the purge, as a request in flight has it
    purge(project, value=KEY)
    with pytest.raises(HistoryPurged):
        ingest_checkpoints([(stale, [CheckpointInput(state=state(5))])])
    session.refresh_from_db()
    ingest_checkpoints([(session, [CheckpointInput(state=state(5))])])
    newest = Checkpoint.objects.filter(session=session).order_by("-seq").first()
    assert newest.seq == 5 and store.load_state(bytes(newest.root))["memory"] == {"n": 5}


def test_an_operator_dismisses_a_finding_with_a_reason_audited(project, make_session):
    session_of(make_session, steps=3)
    finding = SecretFinding.objects.get()
    with pytest.raises(purges.InvalidInput):
        purges.dismiss_finding(finding, actor=ALICE, reason="")
    purges.dismiss_finding(finding, actor=ALICE, reason="a test key")
    finding.refresh_from_db()
    assert (finding.closed_as, finding.close_reason, finding.closed_by) == ("dismissed", "a test key", "alice")
    assert AuditEvent.objects.filter(action="dismiss_finding", reason="a test key").exists()
    assert not SecretFinding.objects.open().exists()
