"""What ConsoleSaver's put leaves out: unchanged channels, and the old part of a growing list."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from checkpoint_console import typedjson
from checkpoint_console.lgwire import Memory, Sent, plan_put

SERDE = JsonPlusSerializer()


class CountingEncoder:
    """The saver's encoding, counting how many values (list items included) it was asked to encode."""

    def __init__(self) -> None:
        self.encoded = 0

    def __call__(self, value: Any) -> Any:
        self.encoded += len(value) if isinstance(value, list) else 1
        return typedjson.from_typed(*SERDE.dumps_typed(value))


def chat(n: int) -> list[Any]:
    return [
        HumanMessage(f"question {i}", id=f"h{i}") if i % 2 == 0 else AIMessage(f"answer {i}", id=f"a{i}")
        for i in range(n)
    ]


def first_put(values: dict[str, Any], versions: dict[str, Any], encode: Any = None) -> Sent:
    return plan_put(values, versions, versions, "cp-1", None, encode or CountingEncoder()).sent


def test_a_put_without_a_base_sends_every_channel_whole():
    encode = CountingEncoder()
    plan = plan_put({"a": 1, "messages": chat(2)}, {"a": "1", "messages": "1"}, {"a": "1"}, "cp-1", None, encode)

    assert plan.values == {"a": 1, "messages": [encode(m) for m in chat(2)]}
    assert (plan.appends, plan.channels, plan.base_checkpoint_id) == ({}, None, None)
    assert plan.sent.versions == {"a": "1", "messages": "1"}


def test_a_channel_at_the_base_version_and_not_in_new_versions_is_named_only():
    base = first_put({"a": "big value", "b": 1}, {"a": "1", "b": "1"})

    plan = plan_put({"a": "big value", "b": 2}, {"a": "1", "b": "2"}, {"b": "2"}, "cp-2", base, CountingEncoder())

    assert plan.values == {"b": 2}
    assert plan.channels == ["a", "b"]
    assert plan.base_checkpoint_id == "cp-1"
    assert plan.sent.checkpoint_id == "cp-2"


def test_a_channel_whose_version_differs_from_the_base_is_sent_even_when_new_versions_omits_it():
    base = first_put({"a": "old"}, {"a": "1"})

    plan = plan_put({"a": "other branch"}, {"a": "7"}, {}, "cp-2", base, CountingEncoder())

    assert plan.values == {"a": "other branch"}
    assert (plan.channels, plan.base_checkpoint_id) == (None, None)


def test_a_grown_message_list_is_sent_as_its_new_items_and_only_they_are_encoded():
    messages = chat(200)
    base = first_put({"messages": messages}, {"messages": "1"})
    grown = [*messages, *chat(202)[200:]]
    encode = CountingEncoder()

    plan = plan_put({"messages": grown}, {"messages": "2"}, {"messages": "2"}, "cp-2", base, encode)

    assert plan.values == {}
    assert plan.appends == {"messages": {"base_len": 200, "items": [encode(m) for m in grown[200:]]}}
    assert encode.encoded == 2 + 2  # the two new items, then the two encoded again by the assertion
    assert plan.base_checkpoint_id == "cp-1"
    assert plan.channels == ["messages"]


def test_the_base_list_with_its_appended_items_encodes_exactly_as_the_whole_list():
    values: list[Any] = [*chat(3), b"\x00raw", {"a", "b"}, None]
    base = first_put({"log": values[:2]}, {"log": "1"})
    encode = CountingEncoder()

    plan = plan_put({"log": values}, {"log": "2"}, {"log": "2"}, "cp-2", base, encode)

    base_items = base.lists["log"][1]
    assert base_items + plan.appends["log"]["items"] == encode(values)
    assert SERDE.loads_typed(typedjson.to_typed(base_items + plan.appends["log"]["items"])) == values


def test_appends_chain_across_puts_through_the_memory_of_the_last_one():
    messages = chat(10)
    sent = first_put({"messages": messages[:4]}, {"messages": "1"})
    for step in range(5, 11):
        plan = plan_put(
            {"messages": messages[:step]},
            {"messages": str(step)},
            {"messages": str(step)},
            "cp",
            sent,
            CountingEncoder(),
        )
        assert plan.appends["messages"]["base_len"] == step - 1
        sent = plan.sent
    assert sent.lists["messages"][1] == CountingEncoder()(messages)


def test_an_unchanged_list_keeps_its_cache_so_a_later_put_can_still_append():
    messages = chat(3)
    base = first_put({"messages": messages, "n": 1}, {"messages": "1", "n": "1"})
    same = plan_put(
        {"messages": messages, "n": 2}, {"messages": "1", "n": "2"}, {"n": "2"}, "cp-2", base, CountingEncoder()
    )
    grown = plan_put(
        {"messages": [*messages, AIMessage("more", id="m")], "n": 2},
        {"messages": "2", "n": "2"},
        {"messages": "2"},
        "cp-3",
        same.sent,
        CountingEncoder(),
    )

    assert "messages" not in same.values and same.appends == {}
    assert grown.appends["messages"]["base_len"] == 3


def test_a_list_with_an_element_replaced_or_removed_is_sent_whole():
    messages = chat(4)
    base = first_put({"messages": messages}, {"messages": "1"})
    replaced = [*messages[:2], AIMessage("edited", id="a3"), messages[3]]

    for value in (replaced, messages[:3], list(reversed(messages))):
        plan = plan_put({"messages": value}, {"messages": "2"}, {"messages": "2"}, "cp-2", base, CountingEncoder())
        assert plan.appends == {}
        assert plan.values == {"messages": CountingEncoder()(value)}


def test_a_serde_that_does_not_encode_lists_as_lists_never_appends():
    def opaque(value: Any) -> Any:
        return {typedjson.TAG: ["typed", "msgpack+aes"], "b64": "AAAA"}

    base = first_put({"messages": chat(2)}, {"messages": "1"}, opaque)
    plan = plan_put({"messages": chat(3)}, {"messages": "2"}, {"messages": "2"}, "cp-2", base, opaque)

    assert base.lists == {}
    assert plan.appends == {} and "messages" in plan.values


def test_memory_keeps_the_most_recently_used_threads_up_to_its_size():
    memory = Memory(size=2)
    memory.remember("t1", "", Sent("1", {}))
    memory.remember("t2", "", Sent("2", {}))
    assert memory.get("t1", "") is not None  # t1 is now the most recent
    memory.remember("t3", "", Sent("3", {}))

    assert memory.get("t2", "") is None
    assert [memory.get(t, "").checkpoint_id for t in ("t1", "t3")] == ["1", "3"]


def test_forgetting_a_thread_drops_all_its_namespaces_only():
    memory = Memory()
    for thread, ns in [("t1", ""), ("t1", "child:1"), ("t2", "")]:
        memory.remember(thread, ns, Sent(thread + ns, {}))

    memory.forget(["t1"])
    assert (memory.get("t1", ""), memory.get("t1", "child:1")) == (None, None)
    assert memory.get("t2", "") is not None

    memory.forget()
    assert len(memory) == 0
