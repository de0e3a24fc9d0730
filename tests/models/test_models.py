from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from checkpoints.models import AgentSession, Checkpoint, SessionCount, TalliedField, name_contains, sessions


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
def test_the_admin_checkpoint_search_finds_names_through_the_tallies_trigram_index(make_session, make_checkpoint):
    """The names are looked up among the sessions' name counts (a trigram index there), then the checkpoints
    through the (session, name) index: no index on every checkpoint row serves the search. (20,000 names: on a
    small table the planner reads the btree of the counts instead.)"""
    session = make_session()
    make_checkpoint(session, {"step": 1}, name="review_requested")
    SessionCount.objects.bulk_create(
        SessionCount(session=session, field=TalliedField.NAME, value=f"task-{i}", count=1) for i in range(20000)
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE checkpoints_sessioncount")
        cursor.execute("SET LOCAL enable_seqscan = off")
    names = SessionCount.objects.filter(field=TalliedField.NAME, value__icontains="EW_REQ").exclude(value="")
    assert "count_name_trigram" in names.explain()
    plan = Checkpoint.objects.filter(name_contains("EW_REQ")).explain()
    assert "checkpoint_session_name" in plan


@pytest.mark.postgres
def test_no_trigram_index_on_the_checkpoint_rows(db):
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE tablename = 'checkpoints_checkpoint'")
        definitions = [row[0] for row in cursor.fetchall()]
    assert definitions and not [d for d in definitions if "gin_trgm_ops" in d]


@pytest.mark.postgres
def test_the_api_name_filter_still_reads_the_partial_name_index(make_session, make_checkpoint):
    """The name index holds named checkpoints only (docs/storage.md); a query naming a name still reads it."""
    session = make_session()
    make_checkpoint(session, {"step": 1}, name="review_requested")
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
    plan = Checkpoint.objects.for_session(session).filtered(name="review_requested").order_by().explain()
    assert "checkpoint_session_name" in plan


def test_name_search_skips_unnamed_checkpoints_and_finds_named_ones_in_any_session(make_session, make_checkpoint):
    first, second = make_session("first"), make_session("second")
    wanted = [
        make_checkpoint(first, {"step": 1}, name="review_requested"),
        make_checkpoint(second, {"step": 2}, name="Review_Requested_again"),
    ]
    make_checkpoint(first, {"step": 3}, name="")
    make_checkpoint(second, {"step": 4}, name="tool_called")
    found = Checkpoint.objects.filter(name_contains("ew_req")).order_by("pk")
    assert list(found) == wanted
    assert not Checkpoint.objects.filter(name_contains("nothing like it")).exists()


def test_a_common_name_is_searched_by_name_alone(make_session, make_checkpoint, monkeypatch):
    monkeypatch.setattr(sessions, "NAMED_LIKE_PAIRS", 1)
    named = [make_checkpoint(make_session(f"s{i}"), {"step": i}, name="step") for i in range(3)]
    make_checkpoint(make_session("other"), {"step": 9}, name="other")
    assert list(Checkpoint.objects.filter(name_contains("STE")).order_by("pk")) == named


def test_a_common_name_is_compared_as_its_distinct_names_not_as_every_session_that_used_it(
    make_session, make_checkpoint, monkeypatch
):
    """Many sessions tally one name: the search binds that one name. Compared with every (session, name) row in a
    subquery, PostgreSQL matched each checkpoint the newest-first listing walked past against all of them (1.5 s
    at 1M checkpoints, 8,171 rows of one name; docs/benchmarks.md)."""
    monkeypatch.setattr(sessions, "NAMED_LIKE_PAIRS", 2)
    named = [make_checkpoint(make_session(f"s{i}"), {"step": i}, name="review_requested") for i in range(4)]
    make_checkpoint(make_session("other"), {"step": 9}, name="tool_called")
    condition = name_contains("EW_REQ")
    with CaptureQueriesContext(connection) as listing:
        assert list(Checkpoint.objects.filter(condition).order_by("pk")) == named
    assert "sessioncount" not in listing.captured_queries[0]["sql"].lower()


def test_more_distinct_names_than_are_bound_are_read_by_a_subquery(make_session, make_checkpoint, monkeypatch):
    monkeypatch.setattr(sessions, "NAMED_LIKE_PAIRS", 1)
    monkeypatch.setattr(sessions, "NAMED_LIKE_NAMES", 1)
    named = [make_checkpoint(make_session(f"s{i}"), {"step": i}, name=f"step {i % 2}") for i in range(4)]
    make_checkpoint(make_session("other"), {"step": 9}, name="other")
    condition = name_contains("STEP")
    with CaptureQueriesContext(connection) as listing:
        assert list(Checkpoint.objects.filter(condition).order_by("pk")) == named
    assert "sessioncount" in listing.captured_queries[0]["sql"].lower()


@pytest.mark.postgres
def test_the_trigram_indexes_a_checkpoint_touches_take_entries_directly_not_through_a_pending_list(db):
    """Each checkpoint updates its session's row (a new row version in every index): a GIN fast-update list would
    hold every trigram of the session's id again, per checkpoint, until VACUUM."""
    names = ["session_external_id_trigram", "session_title_trigram", "session_agent_trigram"]
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


# Every index of the checkpoint table, and a query that reads it (docs/storage.md): an index no query reads costs
# every insert for nothing. With sequential scans off, as on a table of millions of rows.
INDEX_READERS = {
    "checkpoints_checkpoint_pkey": lambda s, t: Checkpoint.objects.filter(pk=t.pk),
    "checkpoint_seq_per_session": lambda s, t: Checkpoint.objects.for_session(s).filter(seq__gt=1).order_by("seq")[:10],
    "checkpoints_checkpoint_parent_id": lambda s, t: Checkpoint.objects.filter(parent__in=[t.pk]).order_by(),
    "checkpoint_session_time": lambda s, t: (
        Checkpoint.objects.for_session(s).filtered(since=t.created_at, until=t.created_at).order_by()
    ),
    "checkpoint_session_name": lambda s, t: Checkpoint.objects.for_session(s).filtered(name="review").order_by(),
    "checkpoint_session_kind": lambda s, t: Checkpoint.objects.for_session(s).filtered(kind="recovery").order_by(),
    "checkpoint_idempotency_per_session": lambda s, t: Checkpoint.objects.filter(session=s, idempotency_key="k-1"),
    "checkpoint_operation": lambda s, t: Checkpoint.objects.filter(operation_id="op-1").order_by(),
    "checkpoint_branch_start": lambda s, t: Checkpoint.objects.filter(session=s, starts_branch=True).order_by("seq"),
    "checkpoint_path_start": lambda s, t: Checkpoint.objects.filter(
        session=s, starts_branch=True, subgraph_hop=False
    ).order_by("seq"),
    "checkpoint_trouble": lambda s, t: Checkpoint.objects.filter(sessions.TROUBLE, session=s).order_by("seq"),
}


@pytest.mark.postgres
@pytest.mark.parametrize("index", INDEX_READERS)
def test_each_index_of_the_checkpoint_table_is_read_by_its_query(make_session, make_checkpoint, index):
    session = make_session()
    # 5 named of 100: each index's query reads a twentieth of what the next best index would, a margin the
    # planner's fixed costs (index pages, a worker's earlier tests' dead rows) do not cover as they did at 3 of 39
    for step in range(1, 101):
        target = make_checkpoint(session, {"step": step}, name="review" if step % 20 == 0 else "")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE checkpoints_checkpoint")
        cursor.execute("SET LOCAL enable_seqscan = off")
        # on 39 rows a bitmap scan of (session, created_at) rechecking the name once cost about as much as the name
        # index, and the planner took either (it failed once under load); plain index scans rank them by rows read
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        # and a random page costing what a sequential one does: otherwise the table's layout (pages left by the
        # worker's earlier tests' deleted rows) weighs into each index's estimate through its correlation, and in
        # one CI run the (session, created_at) index, read in heap order, came out cheaper than the name index
        cursor.execute("SET LOCAL random_page_cost = 1")
    assert index in INDEX_READERS[index](session, target).explain()


@pytest.mark.postgres
def test_the_checkpoint_tables_indexes_are_the_ones_accounted_for(db):
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'checkpoints_checkpoint'")
        names = {row[0].rsplit("_", 1)[0] if "parent_id" in row[0] else row[0] for row in cursor.fetchall()}
    assert names == set(INDEX_READERS)


@pytest.mark.postgres
def test_deleting_a_checkpoint_checks_its_children_through_the_parent_index(make_session, make_checkpoint):
    """The foreign key's own check (PostgreSQL's referential trigger) when a parent row goes: without the index,
    every deletion by retention would scan the table."""
    session = make_session()
    target = make_checkpoint(session, {"step": 1})
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(
            "EXPLAIN SELECT 1 FROM ONLY checkpoints_checkpoint x WHERE parent_id = %s FOR KEY SHARE", [target.pk]
        )
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "checkpoints_checkpoint_parent_id" in plan
