from __future__ import annotations

import base64
import random
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from checkpoints import store
from checkpoints.models import Chunk
from checkpoints.services.chunks import delete_chunks


def test_only_the_given_chunks_still_older_than_the_cutoff_are_deleted(db):
    old = store.save_state({"old": "x" * 2000}).root
    young = store.save_state({"young": "y" * 2000}).root
    kept = store.save_state({"kept": "z" * 2000}).root
    now = timezone.now()
    Chunk.objects.exclude(hash=young).update(created_at=now - timedelta(hours=2))

    gone = delete_chunks([old, young], created_before=now - timedelta(hours=1))

    assert gone == [old]
    hashes = {bytes(h) for h in Chunk.objects.values_list("hash", flat=True)}
    assert old not in hashes and {young, kept} <= hashes


@pytest.mark.postgres
def test_a_chunk_of_a_few_kilobytes_stays_in_its_row_and_reads_back(db):
    # zstd frames do not compress: TOAST's 2 kB pieces (each a row with an index entry) only cost bytes
    value = base64.b64encode(random.Random(1).randbytes(6000)).decode()
    with connection.cursor() as cursor:
        cursor.execute("SELECT reltoastrelid::regclass::text FROM pg_class WHERE relname = 'checkpoints_chunk'")
        [toast] = cursor.fetchone()
        pieces = f"SELECT count(*) FROM {toast}"  # noqa: S608 - the TOAST table's name from pg_class
        cursor.execute(pieces)
        [before] = cursor.fetchone()
        root = store.save_state({"blob": value}).root
        cursor.execute(pieces)
        [after] = cursor.fetchone()
        cursor.execute("SELECT max(octet_length(data)) FROM checkpoints_chunk")  # the blob's node
        [size] = cursor.fetchone()
    assert 2100 < size < 8000 and after == before
    store.cache.clear()
    assert store.load_state(root) == {"blob": value}
