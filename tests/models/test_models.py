from __future__ import annotations

import pytest
from django.db import connection

from checkpoints.models import AgentSession, Checkpoint


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


@pytest.mark.postgres
def test_the_admin_checkpoint_search_can_use_the_name_trigram_index(make_session, make_checkpoint):
    make_checkpoint(make_session(), {"step": 1}, name="review_requested")
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
    assert "checkpoint_name_trigram" in Checkpoint.objects.filter(name__icontains="EW_REQ").explain()


@pytest.mark.postgres
def test_the_trigram_indexes_a_checkpoint_touches_take_entries_directly_not_through_a_pending_list(db):
    """Each checkpoint updates its session's row (a new row version in every index): a GIN fast-update list would
    hold every trigram of the session's id again, per checkpoint, until VACUUM."""
    names = ["session_external_id_trigram", "session_title_trigram", "session_agent_trigram", "checkpoint_name_trigram"]
    with connection.cursor() as cursor:
        cursor.execute("SELECT relname, reloptions FROM pg_class WHERE relname = ANY(%s)", [names])
        options = dict(cursor.fetchall())
    assert options == {name: ["fastupdate=off"] for name in names}


def test_the_admin_finds_checkpoints_by_a_piece_of_their_name(admin_client, make_session, make_checkpoint):
    session = make_session()
    make_checkpoint(session, {"step": 1}, name="review_requested")
    make_checkpoint(session, {"step": 2}, name="tool_called")
    html = admin_client.get("/admin/checkpoints/checkpoint/?q=EW_REQ").content.decode()
    assert "review_requested" in html and "tool_called" not in html
