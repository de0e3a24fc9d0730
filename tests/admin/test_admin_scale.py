"""The admin's lists of tables that grow with use, as they behave at a million checkpoints (#23 item 7): an unfiltered
list is not counted row by row (PostgreSQL's estimate of the table stands for the count), and each list's ordering
is one an index reads in order, so a page reads its rows and stops instead of sorting the table."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from checkpoints.admin import CappedCountPaginator
from checkpoints.models import AlertKind, DriftAlert
from checkpoints.services import Actor, pin_checkpoint

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

# model name → its table; the lists BigTableAdmin serves
BIG = {
    "checkpoint": "checkpoints_checkpoint",
    "agentsession": "checkpoints_agentsession",
    "driftalert": "checkpoints_driftalert",
    "auditevent": "checkpoints_auditevent",
    "chunk": "checkpoints_chunk",
    "event": "checkpoints_event",
    "delivery": "checkpoints_delivery",
}


def _changelist(name: str) -> str:
    return reverse(f"admin:checkpoints_{name}_changelist")


@pytest.fixture
def rows(make_session, make_checkpoint, monkeypatch):
    """A few rows in each counted table, analyzed, with the cap below them: the tables count as big."""
    monkeypatch.setattr(CappedCountPaginator, "cap", 2)
    for n in range(3):
        session = make_session(f"run-{n}")
        checkpoint = make_checkpoint(session, {"n": n})
        pin_checkpoint(checkpoint, actor=Actor.system())
        DriftAlert.objects.create(
            session=session, checkpoint=checkpoint, kind=AlertKind.STALLED, message="drift", opened_at=timezone.now()
        )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")


def _queries_on(captured: CaptureQueriesContext, table: str) -> list[str]:
    return [q["sql"] for q in captured.captured_queries if f'FROM "{table}"' in q["sql"]]


@pytest.mark.parametrize("name", ["checkpoint", "agentsession", "driftalert", "auditevent"])
def test_an_unfiltered_big_list_takes_its_count_from_the_tables_estimate(admin_client, rows, name):
    with CaptureQueriesContext(connection) as captured:
        assert admin_client.get(_changelist(name)).status_code == 200
    counts = [sql for sql in _queries_on(captured, BIG[name]) if "COUNT(" in sql]
    assert not counts, counts  # no COUNT(*), not even a capped one: pg_class.reltuples answers
    assert any("reltuples" in q["sql"] for q in captured.captured_queries)


def test_a_filtered_big_list_still_counts_up_to_the_cap(admin_client, rows):
    with CaptureQueriesContext(connection) as captured:
        admin_client.get(_changelist("checkpoint") + "?kind__exact=step")
    counts = [sql for sql in _queries_on(captured, BIG["checkpoint"]) if "COUNT(" in sql]
    assert counts and all("LIMIT 3" in sql for sql in counts), counts


def _page_plan(admin_client, name: str, query: str = "") -> str:
    """The plan of the query reading a list's page, with sorting and whole-table scans priced out."""
    with CaptureQueriesContext(connection) as captured:
        assert admin_client.get(_changelist(name) + query).status_code == 200
    table = BIG[name]
    # the rows of the page (a filter's choices are SELECT DISTINCT; the date drill-down's too)
    [page] = [sql for sql in _queries_on(captured, table) if sql.startswith(f'SELECT "{table}".') and "ORDER BY" in sql]
    page = page if " LIMIT " in page else f"{page} LIMIT 100"  # one page of rows: the admin leaves it out here
    with connection.cursor() as cursor:
        # with sorting priced out, a plan still sorts when no index gives the order: what remains is the proof
        cursor.execute("SET LOCAL enable_sort = off")
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(f"EXPLAIN {page}")
        return "\n".join(row[0] for row in cursor.fetchall())


@pytest.mark.parametrize("name", list(BIG))
def test_a_big_lists_ordering_is_read_along_an_index(admin_client, rows, name):
    plan = _page_plan(admin_client, name)
    assert "Index" in plan, plan
    assert "Sort" not in plan, plan


def test_one_sessions_checkpoints_are_read_along_the_session_seq_index(admin_client, rows):
    """The sessions list links each session's checkpoints: newest first by seq, read off (session, seq), so a
    session of 100,000 checkpoints and one of 80 cost the same page."""
    from checkpoints.models import AgentSession

    session = AgentSession.objects.order_by("pk").first()
    plan = _page_plan(admin_client, "checkpoint", f"?session__id__exact={session.pk}")
    assert "Index Scan Backward using checkpoint_seq_per_session" in plan, plan
    assert "Sort" not in plan, plan


# ---- page weight: a first view of each big list stays under 100 kB (#23 item 7) ------------------------------

PAGE_LIMIT = 100_000
LONG = "x" * 2_000  # an operator's reason or an alert's message of a few paragraphs


@pytest.fixture
def full_pages(project, other_project):
    """More rows than a page holds in each list, their texts as long as real ones get (names and ids near their
    columns' sizes, an agent each, long reasons): a page's weight is its rows', not the
    table's."""
    from checkpoints.models import AgentSession, AuditEvent, Checkpoint
    from checkpoints.services import CheckpointInput, ingest_checkpoints, upsert_session

    sessions: list[AgentSession] = []
    for n in range(60):
        session, _ = upsert_session(
            project if n % 2 else other_project, external_id=f"{n:03d}-" + "r" * 60, agent=f"agent-{n:02d}-" + "a" * 30
        )
        sessions.append(session)
    items = [CheckpointInput(state={"i": i}, name=f"{i:03d}-" + "n" * 70, kind="step") for i in range(60)]
    for session in sessions[:3]:
        ingest_checkpoints([(session, items)])
    DriftAlert.objects.bulk_create(
        DriftAlert(session=session, kind=AlertKind.STALLED, message=LONG, opened_at=timezone.now())
        for session in sessions
    )
    AuditEvent.objects.bulk_create(
        AuditEvent(actor="alice-" + "u" * 40, action="restore", project=project, target="t" * 300, reason=LONG)
        for _ in range(120)
    )
    assert Checkpoint.objects.count() >= 150


@pytest.mark.parametrize("name", ["checkpoint", "agentsession", "driftalert", "auditevent"])
def test_a_full_page_of_a_big_list_weighs_under_100_kb(admin_client, full_pages, name):
    response = admin_client.get(_changelist(name))
    assert response.status_code == 200
    assert len(response.content) < PAGE_LIMIT
