"""ConsoleSaver's reads in O(change): a tuple read after one the saver decoded travels as a patch against it and
decodes only what changed, yet every caller gets objects of its own (LangGraph's add_messages mutates messages in
place), and what one serializer decoded is never handed out under another."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from checkpoint_console.langgraph import ConsoleSaver
from checkpoints.models import Project, default_type_allowlist
from tests.clients.test_langgraph import latest, put

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

CONFIG = {"configurable": {"thread_id": "chat", "checkpoint_ns": ""}}


class Answers:
    """The JSON the server answered to get_tuple and list, as the saver's httpx client received it."""

    def __init__(self, saver: ConsoleSaver) -> None:
        self.bodies: list[dict[str, Any]] = []
        saver.client.event_hooks["response"].append(self._seen)

    def _seen(self, response: httpx.Response) -> None:
        if response.request.url.path.endswith(("/checkpoint/get", "/checkpoints/list")):
            response.read()
            self.bodies.append(json.loads(response.content))

    def items(self) -> list[dict[str, Any]]:
        return [item for body in self.bodies for item in body.get("items", [body])]


def turn(number: int) -> list[Any]:
    call = {"name": "search", "args": {"q": f"q{number}", "page": [1, 2]}, "id": f"c{number}", "type": "tool_call"}
    return [
        HumanMessage(f"question {number}", id=f"h{number}"),
        AIMessage(f"answer {number}", id=f"a{number}", tool_calls=[call]),
        ToolMessage(f"result {number}", tool_call_id=f"c{number}", id=f"t{number}"),
    ]


def chat(saver: ConsoleSaver, turns: int) -> list[Any]:
    """A thread whose `messages` grow by a turn per checkpoint while `memory` is replaced and `topic` stays."""
    messages: list[Any] = []
    parent = None
    for number in range(turns):
        messages = [*messages, *turn(number)]
        values = {"messages": messages, "memory": {"turn": number, "seen": [number]}, "topic": "billing"}
        changed = {"messages": str(number + 1), "memory": str(number + 1)} if number else {}
        parent = put(saver, "chat", values, parent=parent, **changed)
    return messages


def test_a_read_after_one_the_saver_decoded_carries_only_what_changed_and_equals_a_cold_read(live_server, token_secret):
    with ConsoleSaver(live_server.url, token_secret) as saver, ConsoleSaver(live_server.url, token_secret) as cold:
        chat(saver, 3)
        answers = Answers(saver)
        messages = chat_more(saver, latest(saver, "chat"))
        warm = latest(saver, "chat")
        fresh = latest(cold, "chat")

    first, second = answers.items()
    assert "channel_patch" not in first  # nothing held yet: the whole state
    patch = second["channel_patch"]
    assert patch["base"] == first["console"]["id"]
    assert patch["same"] == ["topic"]
    assert patch["lists"]["messages"]["keep"] == 9 and len(patch["lists"]["messages"]["items"]) == 3
    assert set(patch["values"]) == {"memory"}
    assert warm.checkpoint == fresh.checkpoint
    assert warm.checkpoint["channel_values"]["messages"] == messages


def chat_more(saver: ConsoleSaver, held: Any) -> list[Any]:
    """The next turn of a graph that resumed from `held`."""
    messages = [*held.checkpoint["channel_values"]["messages"], *turn(3)]
    values = {**held.checkpoint["channel_values"], "messages": messages, "memory": {"turn": 3, "seen": [3]}}
    put(saver, "chat", values, parent=held.config["configurable"]["checkpoint_id"], messages="4", memory="4")
    return messages


def mutate(values: dict[str, Any]) -> None:
    """What a graph may do to a state it was handed: add_messages gives ids and edits messages in place."""
    for message in values["messages"]:
        message.id = None
        message.content = "changed"
        if isinstance(message, AIMessage):
            message.tool_calls[0]["args"]["page"].append(99)
            message.tool_calls.append({"name": "x", "args": {}, "id": "x", "type": "tool_call"})
    values["messages"].append(HumanMessage("appended"))
    values["memory"]["seen"].append(-1)


def test_a_caller_changing_a_returned_state_never_changes_the_next_tuple(live_server, token_secret):
    with ConsoleSaver(live_server.url, token_secret) as saver, ConsoleSaver(live_server.url, token_secret) as cold:
        chat(saver, 4)
        expected = latest(cold, "chat").checkpoint
        for _ in range(3):  # whole, then relative to what the saver holds, twice
            found = latest(saver, "chat")
            assert found.checkpoint == expected
            mutate(found.checkpoint["channel_values"])
        listed = list(saver.list(CONFIG))
        for newer, older in zip(listed, listed[1:], strict=False):
            mutate(newer.checkpoint["channel_values"])
            assert older.checkpoint == get(cold, older.config).checkpoint
        # two callers of one saver: what one changes, the other (and the next list) never sees
        one, other = latest(saver, "chat"), latest(saver, "chat")
        mutate(one.checkpoint["channel_values"])
        assert other.checkpoint == expected
        assert [found.checkpoint for found in saver.list(CONFIG)] == [found.checkpoint for found in listed_by(cold)]


def listed_by(saver: ConsoleSaver) -> list[Any]:
    return list(saver.list(CONFIG))


def test_reads_decode_and_copy_with_the_collector_paused_and_leave_it_as_they_found_it(
    live_server, token_secret, monkeypatch
):
    import gc

    from checkpoint_console import langgraph as module

    seen: list[bool] = []

    def recorded(*args: Any) -> Any:
        seen.append(gc.isenabled())
        return held_of(*args)

    held_of = module.held_of
    monkeypatch.setattr(module, "held_of", recorded)
    with ConsoleSaver(live_server.url, token_secret) as saver:
        chat(saver, 3)
        latest(saver, "chat")
        list(saver.list(CONFIG))
        assert gc.isenabled()
        gc.disable()
        try:
            latest(saver, "chat")
            assert not gc.isenabled()  # a process that runs without the collector stays so
        finally:
            gc.enable()
    assert seen == [False] * 5


def get(saver: ConsoleSaver, config: dict[str, Any]) -> Any:
    return saver.get_tuple(config)


def test_list_sends_each_tuple_against_the_one_before_and_gives_what_get_tuple_gives(live_server, token_secret):
    with ConsoleSaver(live_server.url, token_secret) as saver, ConsoleSaver(live_server.url, token_secret) as cold:
        chat(saver, 25)  # past the server's page of 20: the second page starts against the first page's last
        answers = Answers(saver)
        listed = list(saver.list(CONFIG))
        singly = [get(cold, found.config) for found in listed]

    assert [found.checkpoint for found in listed] == [found.checkpoint for found in singly]
    assert [found.pending_writes for found in listed] == [found.pending_writes for found in singly]
    items = answers.items()
    assert len(items) == 25 and "channel_patch" not in items[0]
    for newer, older in zip(items, items[1:], strict=False):
        assert older["channel_patch"]["base"] == newer["console"]["id"]
        assert older["channel_patch"]["lists"]["messages"]["items"] == []  # older: the newer one's prefix


def test_list_asks_for_the_next_page_while_the_caller_takes_this_one_sync_and_async(live_server, token_secret):
    from tests.clients.test_langgraph import run_async

    with ConsoleSaver(live_server.url, token_secret) as saver, ConsoleSaver(live_server.url, token_secret) as cold:
        chat(saver, 25)  # two pages
        asked: list[str] = []
        cold.client.event_hooks["request"].append(lambda request: asked.append(request.url.path))
        listing = cold.list(CONFIG)
        first = next(listing)
        deadline = time.monotonic() + 10
        while len(asked) < 2 and time.monotonic() < deadline:  # the second page's request, in a thread of its own
            time.sleep(0.01)
        assert asked == ["/api/v1/langgraph/checkpoints/list"] * 2
        listed = [first, *listing]

        async def alisted() -> list[Any]:
            async with ConsoleSaver(live_server.url, token_secret) as reader:
                return [found async for found in reader.alist(CONFIG)]

        by_async = run_async(alisted())
        abandoned = cold.list(CONFIG)
        next(abandoned)
        abandoned.close()  # the page asked for ahead is not waited for and breaks nothing
        assert latest(cold, "chat").checkpoint == listed[0].checkpoint
        by_writer = listed_by(saver)
    assert len(listed) == 25
    assert [found.checkpoint for found in listed] == [found.checkpoint for found in by_writer]
    assert [found.checkpoint for found in by_async] == [found.checkpoint for found in listed]
    assert [found.pending_writes for found in by_async] == [found.pending_writes for found in listed]


def test_the_async_reads_are_relative_too_and_hand_out_their_own_objects(live_server, token_secret):
    from tests.clients.test_langgraph import run_async

    with ConsoleSaver(live_server.url, token_secret) as saver:
        chat(saver, 3)

    async def read() -> Any:
        async with ConsoleSaver(live_server.url, token_secret) as reader:
            first = await reader.aget_tuple(CONFIG)
            mutate(first.checkpoint["channel_values"])
            second = await reader.aget_tuple(CONFIG)
            return second, [found async for found in reader.alist(CONFIG)]

    second, listed = run_async(read())

    assert [message.content for message in second.checkpoint["channel_values"]["messages"][:3]] == [
        "question 0",
        "answer 0",
        "result 0",
    ]
    assert listed[0].checkpoint == second.checkpoint
    assert len(listed[-1].checkpoint["channel_values"]["messages"]) == 3


@dataclass
class Note:
    text: str


def test_what_a_strict_saver_decoded_is_not_handed_out_by_its_copy_that_allows_more(live_server, project, token_secret):
    Project.objects.filter(pk=project.pk).update(type_allowlist=[*default_type_allowlist(), f"{__name__}.Note"])
    with ConsoleSaver(live_server.url, token_secret, allowed_modules=[Note]) as writer:
        put(writer, "notes", {"note": Note("call back"), "turn": 1})
    config = {"configurable": {"thread_id": "notes", "checkpoint_ns": ""}}
    with ConsoleSaver(live_server.url, token_secret) as strict:
        blocked = strict.get_tuple(config)
        widened = strict.with_allowlist([Note])
        rebuilt = widened.get_tuple(config)
        again = strict.get_tuple(config)

    assert blocked.checkpoint["channel_values"]["note"] == {"text": "call back"}
    assert rebuilt.checkpoint["channel_values"]["note"] == Note("call back")
    assert again.checkpoint["channel_values"]["note"] == {"text": "call back"}
