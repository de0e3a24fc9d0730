"""The array inserts' values (`store.arrays`): a plain field's value of its own Python type is taken as it is, and
every value is what Django's own preparation (bulk_create's) gives, whatever the field and the value's type."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import DataError, connection, transaction

from checkpoints.models import Checkpoint, CheckpointKind, Chunk
from checkpoints.store import arrays

pytestmark = pytest.mark.django_db


def prepared_by_django(model, rows, *, with_ids=True):
    fields = [f for f in model._meta.concrete_fields if with_ids or not f.primary_key]
    return unwrapped([[f.get_db_prep_save(f.pre_save(row, True), connection) for row in rows] for f in fields])


def unwrapped(columns):
    """psycopg's Binary and Jsonb wrappers compare by identity: their values, with their types."""
    return [[(type(v).__name__, getattr(v, "obj", v)) for v in column] for column in columns]


def test_every_value_is_what_djangos_preparation_gives(make_session):
    session = make_session()
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    rows = [
        Checkpoint(
            session=session, seq=1, parent_id=None, name="a\x00b\ue000", kind=CheckpointKind.STEP, status="completed",
            status_reason="", step=-1, phase=None, created_at=at, received_at=at, root=b"\x01" * 16,
            state_hash=b"\x02" * 32, raw_bytes=10, stored_bytes=None, calls_made=3, preview="p\x00",
            tool_failed=False, operation_id="", idempotency_key="k\x00", metadata={"n": 1e300, "s": "\x00"},
        ),
        Checkpoint(
            session=session, seq=True, parent_id=7, name="b", kind="step", status="failed", status_reason="r",
            step=2, phase=3, created_at=at, received_at=at, root=b"\x03" * 16, state_hash=b"\x04" * 32,
            raw_bytes=2**40, stored_bytes=5, calls_made=None, preview="", tool_failed=1, pinned=True,
            operation_id="op", idempotency_key="", metadata={},
        ),
    ]  # fmt: skip
    for model, made, with_ids in (
        (Checkpoint, rows, False),
        (Chunk, [Chunk(hash=b"\x05" * 16, data=b"d", raw_size=1)], True),
    ):
        sql, values = arrays.statement(model, made, with_ids=with_ids)
        if len(made) == 1:  # one row: its values, not one-element arrays
            assert "VALUES" in sql and "unnest" not in sql
            values = [[value] for value in values]
        assert unwrapped(values) == prepared_by_django(model, made, with_ids=with_ids)
    # the plain fields are taken as they are when of their own type; a bool in an integer column is prepared
    _, values = arrays.statement(Checkpoint, rows, with_ids=False)
    columns = dict(zip([f.attname for f in Checkpoint._meta.concrete_fields if not f.primary_key], values, strict=True))
    assert [int(value) for value in columns["seq"]] == [1, 1] and type(columns["seq"][0]) is type(columns["seq"][1])
    assert columns["tool_failed"] == [False, True] and type(columns["tool_failed"][1]) is bool
    assert columns["name"] != ["a\x00b\ue000", "b"]  # a Safe* field escapes: never taken as it is


@pytest.mark.postgres
@pytest.mark.parametrize("count", [3, 1])  # one row goes as a VALUES list of its values
def test_rows_sent_as_binary_arrays_are_stored_as_bulk_create_stores_them(
    make_session, django_assert_num_queries, count
):
    """The arrays travel in binary and are bound on the server: every value of every column type (bytes with NULs
    and high bytes, text with quotes, backslashes and braces, NULs the Safe* fields escape, None, large integers,
    JSON) reads back as bulk_create's copy of the same rows, and the statement is one Django logs like its own."""
    at = datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)

    def rows(session):
        return [
            Checkpoint(
                session=session, seq=seq, name=name, kind=CheckpointKind.STEP, status="completed",
                status_reason='{"a",\\b}', step=step, phase=None, created_at=at, received_at=at,
                root=bytes(range(256))[seq::3], state_hash=b"\x00\xff" * 16, raw_bytes=2**40 + seq, stored_bytes=0,
                calls_made=None if seq % 2 else 7, preview="é\x00'", tool_failed=bool(seq % 2),
                operation_id="", idempotency_key=f"k{seq}", metadata={"n": [1e300, None, {"s": "\x00\\"}]},
            )
            for seq, (name, step) in enumerate([("a\x00b\ue000", -1), ("", None), ("NULL", 2**31 - 1)], start=1)
        ]  # fmt: skip

    ours, theirs = make_session("ours"), make_session("theirs")
    with django_assert_num_queries(1):
        arrays.insert(Checkpoint, rows(ours)[:count], with_ids=False)
    Checkpoint.objects.bulk_create(rows(theirs)[:count])
    columns = [f.attname for f in Checkpoint._meta.concrete_fields if f.attname not in ("id", "session_id")]

    def stored(session):
        return list(Checkpoint.objects.filter(session=session).order_by("seq").values_list(*columns))

    assert stored(ours) == stored(theirs) and len(stored(ours)) == count
    chunks = [Chunk(hash=bytes([i]) * 32, data=b"\x00" + bytes(range(256)), raw_size=i) for i in range(count)]
    arrays.insert(Chunk, chunks, ignore_conflicts=True)
    arrays.insert(Chunk, chunks, ignore_conflicts=True)  # stored already: skipped, not an error
    assert [
        bytes(d) for d in Chunk.objects.filter(hash__in=[c.hash for c in chunks]).values_list("data", flat=True)
    ] == [b"\x00" + bytes(range(256))] * count


@pytest.mark.postgres
@pytest.mark.parametrize("count", [1, 2])
def test_a_text_longer_than_its_column_is_refused_not_cut(make_session, count):
    """The casts name no length (an explicit cast to varchar(400), the column's type, would cut the text): the
    column refuses it."""
    session = make_session()
    at = datetime(2026, 1, 2, tzinfo=UTC)
    rows = [
        Checkpoint(
            session=session, seq=seq, name="n" * 401, kind=CheckpointKind.STEP, status="completed",
            status_reason="", step=seq, phase=None, created_at=at, received_at=at, root=b"\x01" * 16,
            state_hash=b"\x02" * 32, raw_bytes=1, stored_bytes=0, calls_made=None, preview="", tool_failed=False,
            pinned=False, operation_id="", idempotency_key="", metadata={},
        )
        for seq in range(1, count + 1)
    ]  # fmt: skip
    with pytest.raises(DataError), transaction.atomic():
        arrays.insert(Checkpoint, rows, with_ids=False)
    assert not Checkpoint.objects.filter(session=session).exists()
