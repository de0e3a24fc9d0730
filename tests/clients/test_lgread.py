"""ConsoleSaver's read path without a server: typed JSON decoded directly gives what LangGraph's own reader gives
(hostile values included), and a clone shares nothing a caller could change with what the saver holds."""

from __future__ import annotations

import copy
import importlib
from datetime import UTC, datetime
from typing import Any

import ormsgpack
from hypothesis import HealthCheck, given, settings
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.types import Interrupt, Send
from pydantic import BaseModel

from checkpoint_console import typedjson
from checkpoint_console.lgread import Decoder, Held, Reads, channel_copier, clone, held_of, uncollected
from tests.clients.test_langgraph_safety import CALLS, SAFE, hostile_values

STRICT = JsonPlusSerializer(allowed_msgpack_modules=None)


def wire(value: Any) -> Any:
    return typedjson.from_typed(*STRICT.dumps_typed(value))


def langgraphs_own(serde: JsonPlusSerializer, value: Any) -> Any:
    """What the saver decoded before: typed JSON packed back to msgpack and read by LangGraph's serializer."""
    return serde.loads_typed(typedjson.to_typed(value))


def chat() -> dict[str, Any]:
    call = {"name": "search", "args": {"q": "x", "pages": [1, 2]}, "id": "c1", "type": "tool_call"}
    return {
        "messages": [
            HumanMessage("hi", id="h1"),
            AIMessage("", id="a1", tool_calls=[call], response_metadata={"model": "m", "usage": {"in": 3}}),
            ToolMessage("found", tool_call_id="c1", id="t1", artifact={"rows": [[1, 2]]}),
        ],
        "when": datetime(2026, 11, 27, tzinfo=UTC),
        "send": Send("node", {"x": [1]}),
        "interrupt": Interrupt(value={"ask": "ok?"}, id="i1"),
        "keys": {1: "one", (2, 3): "pair"},
        "blob": b"\x00\x01",
    }


def test_a_state_decodes_directly_to_what_langgraphs_reader_gives():
    decoder = Decoder(STRICT)
    for channel, value in chat().items():
        encoded = wire(value)
        assert decoder.decode(copy.deepcopy(encoded)) == langgraphs_own(STRICT, encoded) == value, channel  # used up
    items = wire(chat()["messages"])
    assert [decoder.decode_item(item) for item in items] == chat()["messages"]


def test_a_serializer_of_its_own_decodes_everything_itself():
    class Counting(JsonPlusSerializer):
        def loads_typed(self, data: tuple[str, bytes]) -> Any:
            self.calls = getattr(self, "calls", 0) + 1
            return super().loads_typed(data)

    serde = Counting(allowed_msgpack_modules=None)
    decoder = Decoder(serde)

    assert not decoder.direct
    assert decoder.decode(wire(chat()["messages"])) == chat()["messages"] and serde.calls == 1


def test_a_permissive_serializer_leaves_every_value_to_langgraph_which_warns_per_type():
    permissive = JsonPlusSerializer(allowed_msgpack_modules=True)

    assert not Decoder(permissive).direct


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=hostile_values)
def test_generated_hostile_values_decode_as_langgraph_decodes_them_importing_only_the_allow_list(value, monkeypatch):
    imported: list[str] = []
    real_import = importlib.import_module
    monkeypatch.setattr(
        importlib, "import_module", lambda name, package=None: imported.append(name) or real_import(name, package)
    )
    encoded = typedjson.from_msgpack(ormsgpack.packb(value, option=ormsgpack.OPT_NON_STR_KEYS))
    CALLS.clear()

    direct = Decoder(STRICT).decode(copy.deepcopy(encoded))  # decoding uses its input up
    as_item = Decoder(STRICT).decode_item(copy.deepcopy(encoded))

    assert set(imported) <= {module for module, _ in SAFE} and CALLS == []
    assert direct == as_item == langgraphs_own(STRICT, encoded)


def identities(value: Any, seen: set[int]) -> set[int]:
    """The ids of every mutable object reachable from `value`."""
    if isinstance(value, dict | list | BaseModel):
        seen.add(id(value))
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
        if isinstance(value, BaseModel):
            children = [*value.__dict__.values(), *(value.__pydantic_extra__ or {}).values()]
        for child in children:
            identities(child, seen)
    return seen


def test_a_clone_is_equal_and_shares_no_message_list_or_dict():
    held = Decoder(STRICT).decode(wire(chat()["messages"]))

    copied = clone(held)

    assert copied == held
    assert not identities(copied, set()) & identities(held, set())
    copied[1].tool_calls[0]["args"]["pages"].append(3)
    copied[2].artifact["rows"][0].append(9)
    copied[0].content = "changed"
    assert held == chat()["messages"]


def test_a_patch_against_a_tuple_not_held_is_refused():
    patch = {"console": {"id": 2}, "checkpoint": {}, "channel_patch": {"base": 1, "same": ["a"]}}
    decoder = Decoder(STRICT)

    for base in (None, Held(3, copiers={})):
        try:
            held_of(patch, base, decoder)
        except ValueError as exc:
            assert "does not hold" in str(exc)
        else:
            raise AssertionError("a patch against another base was read")


def test_what_is_held_is_for_one_serializer_and_one_token():
    reads = Reads(STRICT, "Bearer a", 4)

    assert reads.serves(STRICT, "Bearer a")
    assert not reads.serves(STRICT.with_msgpack_allowlist([("my", "Type")]), "Bearer a")
    assert not reads.serves(STRICT, "Bearer b")


def test_a_large_state_is_copied_without_a_collection_and_the_collector_runs_again_after():
    import gc

    messages = [AIMessage(f"answer {n}", id=f"a{n}", tool_calls=[]) for n in range(2000)]
    made = channel_copier(Decoder(STRICT).decode(wire(messages)))
    collections: list[str] = []

    def seen(phase: str, info: dict[str, Any]) -> None:
        collections.append(phase)

    gc.callbacks.append(seen)
    try:
        with uncollected():
            copies = [made.make() for _ in range(3)]  # some 24,000 new containers
            during = len(collections)
        assert during == 0
        assert gc.isenabled()
    finally:
        gc.callbacks.remove(seen)
    assert copies[0] == messages and copies[0][0] is not copies[1][0]


def test_decoding_turns_the_answers_json_into_the_value_and_a_held_state_parses_its_own_again():
    encoded = wire(chat()["messages"])
    decoded = Decoder(STRICT).decode(encoded)
    assert decoded == chat()["messages"] and decoded is encoded  # nothing rebuilt: the answer's lists are reused

    parsed: list[int] = []

    def again() -> dict[str, Any]:
        parsed.append(1)
        return {"messages": wire(chat()["messages"])}

    item = {"console": {"id": 7}, "checkpoint": {"channel_values": {"messages": wire(chat()["messages"])}}}
    held, values = held_of(item, None, Decoder(STRICT), again)
    assert values["messages"] == chat()["messages"] and parsed == []  # a single read decodes once
    values["messages"][0].content = "changed by the caller"
    patch = {"console": {"id": 8}, "checkpoint": {}, "channel_patch": {"base": 7, "same": ["messages"]}}
    _, next_values = held_of(patch, held, Decoder(STRICT))
    assert next_values["messages"] == chat()["messages"] and parsed == [1]


def test_copies_of_a_held_state_share_its_strings_and_nothing_a_caller_could_change():
    made = channel_copier(Decoder(STRICT).decode(wire(chat()["messages"])))

    first, second = made.make(), made.make()

    assert first == second == chat()["messages"]
    assert not identities(first, set()) & identities(second, set())
    assert first[1].model_fields_set is not second[1].model_fields_set
    assert first[0].content is second[0].content and first[2].id is second[2].id  # immutable, so shared
    first[0].additional_kwargs["seen"] = True
    first[1].tool_calls[0]["args"]["pages"].append(3)
    first[1].response_metadata["usage"]["in"] = 4
    first[1].invalid_tool_calls.append({"name": "x"})
    first[2].artifact["rows"][0].append(9)
    first[2].id = "renamed"  # as add_messages names a message: pydantic adds it to the copy's fields set
    assert second == chat()["messages"] and made.make() == chat()["messages"]
    assert "id" in first[2].model_fields_set
