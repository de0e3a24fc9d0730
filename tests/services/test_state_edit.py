"""An operator's edit of a checkpoint's state, saved as a new head (services.recovery.edit_state): what is stored,
what is refused with nothing stored, and Undo."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkpoints import store
from checkpoints.models import AgentSession, AuditEvent, Checkpoint, CheckpointKind, LangGraphCheckpoint
from checkpoints.services import (
    Actor,
    CheckpointError,
    StateEdit,
    edit_state,
    restore_checkpoint,
    undo_restore,
)
from checkpoints.services import langgraph as lg
from checkpoints.services.typeguard import TypeNotAllowed
from checkpoints.store import jsoncodec
from tests.kits.langgraph_kit import lg_id, messages, put_body, shell_command, typed

pytestmark = pytest.mark.django_db
OPERATOR = Actor.system("test")


def edit(checkpoint, *pairs, reason="the goal was wrong"):
    return edit_state(
        checkpoint, [StateEdit(pointer, value) for pointer, value in pairs], actor=OPERATOR, reason=reason
    )


# ---- any session -----------------------------------------------------------------------------------------


def test_an_edit_is_stored_as_a_new_head_child_of_the_checkpoint_edited(make_session, make_checkpoint):
    session = make_session()
    made = [make_checkpoint(session, {"memory": {"goal": "a", "n": i}, "log": [1, 2]}) for i in range(3)]
    edited = edit(made[1], ("/memory/goal", "b"), ("/log/-", 3))
    session.refresh_from_db()
    assert session.head_id == edited.pk and session.restore_generation == 1
    assert (edited.kind, edited.parent_id, edited.seq, edited.name) == (
        CheckpointKind.EDIT,
        made[1].pk,
        4,
        "edit of #2",
    )
    assert store.load_state(bytes(edited.root)) == {"memory": {"goal": "b", "n": 1}, "log": [1, 2, 3]}
    assert store.load_state(bytes(made[1].root)) == {"memory": {"goal": "a", "n": 1}, "log": [1, 2]}  # untouched
    assert edited.metadata | {} == {
        "edited_from": made[1].pk,
        "edited_from_seq": 2,
        "edited": ["/memory/goal", "/log/-"],
        "previous_head": made[2].pk,
        "previous_status": "active",
        "restore_generation": 1,
        "reason": "the goal was wrong",
    }
    event = AuditEvent.objects.get(action="edit_state")
    assert (event.checkpoint_id, event.reason, event.session_id) == (edited.pk, "the goal was wrong", session.pk)
    assert event.details == {
        "edited_seq": 2,
        "paths": ["/memory/goal", "/log/-"],
        "changes": 2,
        "previous_head": made[2].pk,
        "new_seq": 4,
    }


def test_the_agents_next_checkpoint_continues_from_the_edit(make_session, make_checkpoint):
    session = make_session()
    first = make_checkpoint(session, {"n": 0})
    edited = edit(first, ("/n", 41))
    after = make_checkpoint(session, {"n": 42})
    assert after.parent_id == edited.pk


def test_undo_of_an_edit_gives_back_the_head_before_it(make_session, make_checkpoint):
    session = make_session()
    made = [make_checkpoint(session, {"n": i}) for i in range(3)]
    edited = edit(made[0], ("/n", 99))
    undone = undo_restore(AgentSession.objects.get(pk=session.pk), actor=OPERATOR)
    session.refresh_from_db()
    assert session.head_id == undone.pk and undone.parent_id == made[2].pk
    assert store.load_state(bytes(undone.root)) == {"n": 2}
    assert undone.metadata["undo_of"] == edited.pk and session.restore_generation == 2
    assert undone.name == f"undo of edit #{edited.seq}"
    assert AuditEvent.objects.get(action="undo").reason == f"undo edit #{edited.seq}"


def test_the_whole_state_can_be_replaced_with_the_empty_pointer(make_session, make_checkpoint):
    session = make_session()
    first = make_checkpoint(session, {"n": 0})
    edited = edit(first, ("", ["any", "json"]))
    assert store.load_state(bytes(edited.root)) == ["any", "json"]


def test_an_edit_of_a_failed_session_makes_it_active_again(make_session, make_checkpoint):
    session = make_session()
    failed = make_checkpoint(session, {"n": 0}, status="failed", status_reason="boom")
    session.refresh_from_db()
    assert session.status == "failed"
    edit(failed, ("/n", 1))
    session.refresh_from_db()
    assert session.status == "active"


def refused(checkpoint, *pairs, reason="why", match=""):
    before = (Checkpoint.objects.count(), AuditEvent.objects.count())
    head = AgentSession.objects.get(pk=checkpoint.session_id).head_id
    with pytest.raises(CheckpointError, match=match):
        edit(checkpoint, *pairs, reason=reason)
    assert (Checkpoint.objects.count(), AuditEvent.objects.count()) == before
    assert AgentSession.objects.get(pk=checkpoint.session_id).head_id == head


@pytest.mark.parametrize(
    ("pairs", "match"),
    [
        ((("/n", 1),), "changes nothing"),
        ((("/n", 5), ("/n", 1)), "changes nothing"),
        ((), "at least one"),
        ((("n", 2),), "not a JSON pointer"),
        ((("/missing/deeper", 2),), "names no place"),
        ((("/list/7", 2),), "names no place"),
        ((("/list/x", 2),), "names no place"),
        ((("/n/inside", 2),), "names no place"),
        ((("/n", float("nan")),), "edits.0"),
        (
            (
                (
                    "/n",
                    {
                        "deep": [
                            [
                                [
                                    [
                                        [
                                            [
                                                [
                                                    [
                                                        [
                                                            [
                                                                [
                                                                    [
                                                                        [
                                                                            [
                                                                                [
                                                                                    [
                                                                                        [
                                                                                            [
                                                                                                [
                                                                                                    [
                                                                                                        [
                                                                                                            [
                                                                                                                [
                                                                                                                    [
                                                                                                                        [
                                                                                                                            [
                                                                                                                                [
                                                                                                                                    [
                                                                                                                                        [
                                                                                                                                            [
                                                                                                                                                [
                                                                                                                                                    [
                                                                                                                                                        [
                                                                                                                                                            [
                                                                                                                                                                [
                                                                                                                                                                    [
                                                                                                                                                                        [
                                                                                                                                                                            [
                                                                                                                                                                                [
                                                                                                                                                                                    [
                                                                                                                                                                                        [
                                                                                                                                                                                            [
                                                                                                                                                                                                [
                                                                                                                                                                                                    [
                                                                                                                                                                                                        [
                                                                                                                                                                                                            [
                                                                                                                                                                                                                [
                                                                                                                                                                                                                    [
                                                                                                                                                                                                                        [
                                                                                                                                                                                                                            [
                                                                                                                                                                                                                                [
                                                                                                                                                                                                                                    [
                                                                                                                                                                                                                                        [
                                                                                                                                                                                                                                            [
                                                                                                                                                                                                                                                [
                                                                                                                                                                                                                                                    [
                                                                                                                                                                                                                                                        [
                                                                                                                                                                                                                                                            [
                                                                                                                                                                                                                                                                [
                                                                                                                                                                                                                                                                    [
                                                                                                                                                                                                                                                                        [
                                                                                                                                                                                                                                                                            [
                                                                                                                                                                                                                                                                                [
                                                                                                                                                                                                                                                                                    [
                                                                                                                                                                                                                                                                                        [
                                                                                                                                                                                                                                                                                            [
                                                                                                                                                                                                                                                                                                [
                                                                                                                                                                                                                                                                                                    []
                                                                                                                                                                                                                                                                                                ]
                                                                                                                                                                                                                                                                                            ]
                                                                                                                                                                                                                                                                                        ]
                                                                                                                                                                                                                                                                                    ]
                                                                                                                                                                                                                                                                                ]
                                                                                                                                                                                                                                                                            ]
                                                                                                                                                                                                                                                                        ]
                                                                                                                                                                                                                                                                    ]
                                                                                                                                                                                                                                                                ]
                                                                                                                                                                                                                                                            ]
                                                                                                                                                                                                                                                        ]
                                                                                                                                                                                                                                                    ]
                                                                                                                                                                                                                                                ]
                                                                                                                                                                                                                                            ]
                                                                                                                                                                                                                                        ]
                                                                                                                                                                                                                                    ]
                                                                                                                                                                                                                                ]
                                                                                                                                                                                                                            ]
                                                                                                                                                                                                                        ]
                                                                                                                                                                                                                    ]
                                                                                                                                                                                                                ]
                                                                                                                                                                                                            ]
                                                                                                                                                                                                        ]
                                                                                                                                                                                                    ]
                                                                                                                                                                                                ]
                                                                                                                                                                                            ]
                                                                                                                                                                                        ]
                                                                                                                                                                                    ]
                                                                                                                                                                                ]
                                                                                                                                                                            ]
                                                                                                                                                                        ]
                                                                                                                                                                    ]
                                                                                                                                                                ]
                                                                                                                                                            ]
                                                                                                                                                        ]
                                                                                                                                                    ]
                                                                                                                                                ]
                                                                                                                                            ]
                                                                                                                                        ]
                                                                                                                                    ]
                                                                                                                                ]
                                                                                                                            ]
                                                                                                                        ]
                                                                                                                    ]
                                                                                                                ]
                                                                                                            ]
                                                                                                        ]
                                                                                                    ]
                                                                                                ]
                                                                                            ]
                                                                                        ]
                                                                                    ]
                                                                                ]
                                                                            ]
                                                                        ]
                                                                    ]
                                                                ]
                                                            ]
                                                        ]
                                                    ]
                                                ]
                                            ]
                                        ]
                                    ]
                                ]
                            ]
                        ]
                    },
                ),
            ),
            "edits.0",
        ),  # fmt: skip
    ],
)
def test_bad_edits_are_refused_and_nothing_is_stored(make_session, make_checkpoint, pairs, match, settings):
    settings.CHECKPOINT_MAX_DEPTH = 32
    session = make_session()
    first = make_checkpoint(session, {"n": 1, "list": [0]})
    refused(first, *pairs, match=match)


@pytest.mark.parametrize("reason", ["", "   \n"])
def test_an_edit_without_a_reason_is_refused(make_session, make_checkpoint, reason):
    session = make_session()
    first = make_checkpoint(session, {"n": 1})
    refused(first, ("/n", 2), reason=reason, match="say why")


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=JSON)
def test_any_json_value_round_trips_faithfully_through_an_edit(make_session, make_checkpoint, value):
    session = make_session(f"run-{uuid.uuid4()}")
    first = make_checkpoint(session, {"value": "a value no example draws", "other": [1]})
    edited = edit(first, ("/value", value))
    stored = store.load_state(bytes(Checkpoint.objects.get(pk=edited.pk).root))
    assert jsoncodec.canonical(stored) == jsoncodec.canonical({"value": value, "other": [1]})


# ---- LangGraph threads -----------------------------------------------------------------------------------


def put(project, n, *, parent=None, ns="", **kwargs):
    item = lg.PutInput(**put_body("thread-1", n, parent=parent, ns=ns, **kwargs))
    return lg.put_checkpoint(project, item, actor=OPERATOR)[0]


def thread(project, count=3):
    made = [put(project, 0)]
    for n in range(1, count):
        made.append(put(project, n, parent=n - 1))
    return made


def test_a_langgraph_edit_is_written_as_langgraphs_update_state_writes_a_checkpoint(project):
    made = thread(project)
    head_before = lg.get_tuple(project, thread_id="thread-1")
    new_message = typed(messages(1)[0] | {})
    edited = edit(made[2], ("/messages/0", new_message), reason="wrong question")
    latest = lg.get_tuple(project, thread_id="thread-1")
    assert latest["checkpoint_id"] > lg_id(2) and uuid.UUID(latest["checkpoint_id"]).version == 6
    assert latest["parent_checkpoint_id"] == lg_id(2)
    assert latest["metadata"] == {
        "source": "update",
        "step": 3,
        "parents": {},
        "edited_from": lg_id(2),
        "edited": ["/messages/0"],
        "edit_reason": "wrong question",
    }
    values = latest["checkpoint"]["channel_values"]
    assert values["messages"][0] == new_message and values["messages"][1:] == messages(3)[1:]
    versions, old_versions = latest["checkpoint"]["channel_versions"], head_before["checkpoint"]["channel_versions"]
    assert versions["messages"] > old_versions["messages"]
    assert latest["checkpoint"]["versions_seen"] == head_before["checkpoint"]["versions_seen"]
    assert latest["checkpoint"]["updated_channels"] is None  # as update_state leaves it: every node is considered
    assert latest["console"]["id"] == edited.pk
    edited.refresh_from_db()
    assert (edited.step, edited.metadata["checkpoint_id"]) == (3, latest["checkpoint_id"])
    assert AgentSession.objects.get().head_id == edited.pk


def test_an_edit_bumps_only_the_changed_channels_past_every_version(project):
    body = put_body("thread-1", 0, values={"a": 1, "b": 2})
    body["checkpoint"]["channel_versions"] = {"a": f"{7:032}.0.1", "b": f"{3:032}.0.2", "branch:to:agent": f"{9:032}.1"}
    lg.put_checkpoint(project, lg.PutInput(**body), actor=OPERATOR)
    edit(Checkpoint.objects.get(), ("/b", 5))
    versions = lg.get_tuple(project, thread_id="thread-1")["checkpoint"]["channel_versions"]
    assert versions["a"] == f"{7:032}.0.1" and versions["branch:to:agent"] == f"{9:032}.1"
    assert versions["b"].startswith(f"{10:032}.")


def test_undo_of_a_langgraph_edit_makes_the_previous_head_langgraphs_latest_again(project):
    made = thread(project)
    edit(made[1], ("/messages/0", typed("replaced")))
    edited_id = lg.get_tuple(project, thread_id="thread-1")["checkpoint_id"]
    undo_restore(AgentSession.objects.get(), actor=OPERATOR)
    back = lg.get_tuple(project, thread_id="thread-1")
    assert back["checkpoint_id"] > edited_id
    assert back["checkpoint"]["channel_values"] == {"messages": messages(3)}


def test_an_edit_naming_a_type_the_project_does_not_allow_is_refused(project, tmp_path):
    made = thread(project)
    refused(made[2], ("/messages/0", shell_command(str(tmp_path / "ran"))), match="does not allow")
    with pytest.raises(TypeNotAllowed):
        edit(made[2], ("/messages/0", shell_command(str(tmp_path / "ran"))))
    assert not (tmp_path / "ran").exists()


def test_an_edit_that_is_not_typed_json_is_refused(project):
    made = thread(project)
    refused(made[2], ("/messages/0", {"__lg__": ["nonsense"]}), match="typed JSON")


def test_a_langgraph_edit_must_name_a_channel(project):
    made = thread(project)
    refused(made[2], ("", {"messages": []}), match="name a channel")


def test_an_edit_of_a_subgraph_checkpoint_is_refused_naming_the_root_checkpoint(project):
    root = thread(project, 1)[0]
    sub = put(project, 5, ns="work:task-1", metadata={"source": "loop", "step": 0, "parents": {"": lg_id(0)}})
    refused(sub, ("/messages/0", typed("x")), match=f"so edit #{root.seq}, the parent graph's checkpoint")
    assert LangGraphCheckpoint.objects.count() == 2


def test_a_restore_after_an_edit_still_goes_to_a_larger_id(project):
    made = thread(project)
    edit(made[2], ("/messages/0", typed("replaced")))
    edited_id = lg.get_tuple(project, thread_id="thread-1")["checkpoint_id"]
    restore_checkpoint(made[0], actor=OPERATOR)
    assert lg.get_tuple(project, thread_id="thread-1")["checkpoint_id"] > edited_id
