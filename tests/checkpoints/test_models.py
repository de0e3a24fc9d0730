from __future__ import annotations

import pytest
from django.db import connection

from checkpoints.models import AgentSession


def titled(make_session, external_id: str, title: str) -> AgentSession:
    session = make_session(external_id)
    AgentSession.objects.filter(pk=session.pk).update(title=title)
    return session


def test_session_search_finds_a_piece_of_the_id_or_title_in_any_case(make_session):
    titled(make_session, "run-0423", "Nightly Refactor")
    titled(make_session, "run-0500", "other")
    assert [s.external_id for s in AgentSession.objects.matching("UN-042")] == ["run-0423"]
    assert [s.external_id for s in AgentSession.objects.matching("ly refac")] == ["run-0423"]


@pytest.mark.postgres
@pytest.mark.parametrize("column", ["external_id", "title"])
def test_session_search_can_use_the_trigram_indexes(make_session, column):
    """icontains compares UPPER(column::text): the indexes are on that expression (checked with sequential scans
    off, as a table of thousands of sessions would choose)."""
    titled(make_session, "run-0423", "Nightly Refactor")
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
    plan = AgentSession.objects.matching("un-042").explain()
    assert f"session_{column}_trigram" in plan
