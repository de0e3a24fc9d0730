from __future__ import annotations

from datetime import timedelta

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
