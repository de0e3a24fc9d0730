"""The tombstone's order of LangGraph checkpoint ids: time order for uuid1 and uuid6, whatever their spelling."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from checkpoints.models import LangGraphTombstone, checkpoint_id_order

TIMESTAMPS = st.integers(min_value=0, max_value=2**60 - 1)  # 100 ns ticks since 1582, as uuid1 and uuid6 count
BITS = st.tuples(st.integers(0, 2**14 - 1), st.integers(0, 2**48 - 1))  # clock sequence, node


def uuid6(timestamp: int, clock_seq: int = 0, node: int = 0) -> str:
    """As langgraph.checkpoint.base.id.uuid6 lays one out, at a given time (Python 3.11's UUID makes no v6)."""
    value = ((timestamp >> 12) << 80) | (6 << 76) | ((timestamp & 0xFFF) << 64) | (0x8000 | clock_seq) << 48 | node
    return str(uuid.UUID(int=value))


def uuid1(timestamp: int, clock_seq: int = 0, node: int = 0) -> str:
    return str(
        uuid.UUID(
            fields=(
                timestamp & 0xFFFFFFFF,
                (timestamp >> 32) & 0xFFFF,
                timestamp >> 48,
                clock_seq >> 8,
                clock_seq & 0xFF,
                node,
            ),
            version=1,
        )
    )


@settings(deadline=None)  # pure computation: a slow first example is the machine, not the code
@given(TIMESTAMPS, TIMESTAMPS, BITS, BITS)
def test_uuid6_and_uuid1_ids_sort_by_the_time_they_were_made(first, second, bits_a, bits_b):
    for make_a, make_b in ((uuid6, uuid6), (uuid1, uuid6), (uuid6, uuid1)):
        a, b = make_a(first, *bits_a), make_b(second, *bits_b)
        if first < second:
            assert checkpoint_id_order(a) < checkpoint_id_order(b)
        elif first > second:
            assert checkpoint_id_order(a) > checkpoint_id_order(b)


@settings(deadline=None)  # pure computation: a slow first example is the machine, not the code
@given(TIMESTAMPS, BITS)
def test_an_id_sorts_the_same_however_it_is_spelled(timestamp, bits):
    canonical = uuid6(timestamp, *bits)
    for spelling in (canonical.upper(), "{" + canonical + "}", canonical.replace("-", ""), f"urn:uuid:{canonical}"):
        assert checkpoint_id_order(spelling) == checkpoint_id_order(canonical)


@settings(deadline=None)  # pure computation: a slow first example is the machine, not the code
@given(st.text(max_size=200), TIMESTAMPS)
def test_any_other_id_sorts_as_text_after_every_uuid(text, timestamp):
    key = checkpoint_id_order(text)  # never raises
    try:
        uuid.UUID(text)
    except ValueError:
        assert key == (1, 0, text) and key > checkpoint_id_order(uuid6(timestamp))


def test_a_tombstone_refuses_ids_at_or_below_its_newest_and_takes_newer_ones():
    tombstone = LangGraphTombstone(newest_checkpoint_id=uuid6(1_000))
    assert tombstone.refuses(uuid6(999, 2**14 - 1, 2**48 - 1)) and tombstone.refuses(uuid6(1_000))
    assert tombstone.refuses(uuid6(1_000).upper())
    assert not tombstone.refuses(uuid6(1_001)) and not tombstone.refuses(uuid6(1_000, 0, 1))


def test_a_tombstone_from_before_the_newest_id_was_kept_goes_by_when_the_thread_was_deleted():
    deleted_at = datetime(2026, 11, 1, tzinfo=UTC)
    tick = int((deleted_at - datetime(1582, 10, 15, tzinfo=UTC)) / timedelta(microseconds=1)) * 10
    tombstone = LangGraphTombstone(deleted_at=deleted_at)
    assert tombstone.refuses(uuid6(tick - 10_000_000)) and tombstone.refuses("not-a-uuid")
    assert not tombstone.refuses(uuid6(tick + 10_000_000))
