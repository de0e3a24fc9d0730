"""Light pages (#23 item 7): a console page's first view is at most 100 kB of HTML on the seeded demo, and the
alert list reads a page of alerts along its index instead of sorting every open alert before its LIMIT."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models.expressions import OrderBy
from django.test import Client
from django.utils import timezone

from bench import pages
from checkpoints.models import AgentSession, DriftAlert
from dashboard.views.alerts import PAGE_SIZE as ALERT_PAGE_SIZE

LIMIT = 100_000  # bytes of HTML a first view downloads


@pytest.fixture
def demo(db):
    """The full demo (`seed_demo`) with bench/pages.py's additions, the clock stopped as bench/pages.py stops it."""
    with time_machine.travel(pages.FROZEN_AT, tick=False), pages.counted_uuids():
        yield pages.build_world(full=True)


def test_every_console_page_of_the_seeded_demo_is_at_most_100_kb(demo):
    client = Client()
    client.force_login(get_user_model().objects.get(username="admin"))
    weights = {}
    with time_machine.travel(pages.FROZEN_AT, tick=False):
        for name, url, _ in pages.requests(demo):
            if name.startswith("console/"):
                response = client.get(url)
                if response.get("Content-Type", "").startswith("text/html"):
                    weights[f"{name} {url}"] = len(response.content)
    assert any("session_detail" in name for name in weights), "the timelines are weighed"
    assert any("checkpoint_detail" in name for name in weights), "the checkpoint pages are weighed"
    over = {name: size for name, size in weights.items() if size > LIMIT}
    assert not over, f"pages over {LIMIT:,} bytes: {over}"


def test_a_timeline_row_carries_no_form_and_no_menu_of_its_own(demo):
    """What made a timeline page weigh 236–273 kB: four actions and a pin form in each of its hundred rows."""
    client = Client()
    client.force_login(get_user_model().objects.get(username="admin"))
    session = max(demo.sessions, key=lambda session: session.last_seq)
    with time_machine.travel(pages.FROZEN_AT, tick=False):
        html = client.get(f"/sessions/{session.pk}/").content.decode()
    assert html.count('class="row-menu"') >= 50
    assert html.count("<form") < 10 and html.count('data-action="restore/"') == 1


@pytest.mark.postgres
def test_the_alert_list_reads_a_page_along_its_index_with_ten_thousand_open_alerts(project):
    sessions = AgentSession.objects.bulk_create(
        AgentSession(project=project, external_id=f"run-{i}", agent="agent-7") for i in range(2_000)
    )
    now = timezone.now()
    severities = ["info", "warning", "critical"]
    DriftAlert.objects.bulk_create(
        DriftAlert(
            session=session,
            kind=f"kind_{k}",
            severity=severities[(i + k) % 3],
            message="drift",
            opened_at=now - timedelta(seconds=i * 5 + k),
        )
        for i, session in enumerate(sessions)
        for k in range(5)
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE checkpoints_driftalert")
    # the view's query (dashboard/views/alerts.py `_alerts`, unfiltered) with its LIMIT
    query = (
        DriftAlert.objects.unresolved()
        .select_related("session__project", "acknowledged_by")
        .defer("session__metadata", "session__live_root")
        .most_severe_first()[: ALERT_PAGE_SIZE + 1]
    )
    plan = query.explain(analyze=True)
    assert "alert_unresolved_list" in plan, plan
    assert "Sort" not in plan, plan  # no sort of all open alerts before the LIMIT
    scanned = [line for line in plan.splitlines() if "alert_unresolved_list" in line]
    assert f"rows={ALERT_PAGE_SIZE + 1} " in scanned[0], plan  # reads a page, not 10,000 rows


def _bare(sql: str) -> str:
    """SQL without quotes, brackets, table names before a column and spaces: what an ORDER BY and an index both
    spell."""
    return re.sub(r'[\s"()]+', "", re.sub(r'"?checkpoints_driftalert"?\.', "", sql)).lower()


def test_the_alert_lists_order_by_is_the_unresolved_alerts_index(db):
    """The list's ORDER BY spells the expressions of `alert_unresolved_list`, key for key and direction for
    direction, so the database can read a page along the index instead of sorting every open alert first."""
    [index] = [index for index in DriftAlert._meta.indexes if index.name == "alert_unresolved_list"]
    created = str(index.create_sql(DriftAlert, connection.schema_editor()))  # only spelled, never run
    columns = _bare(created[created.index("(") + 1 : created.rindex(")", 0, created.upper().rindex("WHERE"))])
    query = DriftAlert.objects.unresolved().most_severe_first()[: ALERT_PAGE_SIZE + 1].query
    compiler = query.get_compiler(connection=connection)
    compiler.setup_query()
    keys = []
    for order, _ in compiler.get_order_by():
        inner = getattr(order.expression, "source", order.expression)  # an annotation's own expression
        sql, params = compiler.compile(OrderBy(inner, descending=order.descending))
        keys.append(sql % tuple(f"'{p}'" if isinstance(p, str) else p for p in params))
    assert _bare(",".join(keys)) == columns, (keys, created)


def test_a_full_page_of_the_alert_list_is_at_most_100_kb(alice, make_session, make_checkpoint):
    """Each row's actions submit the page's one triage form: no form, CSRF token or return address per row."""
    for i in range(ALERT_PAGE_SIZE + 5):
        session = make_session(f"support-agent-run-{i:05d}")
        good = make_checkpoint(session, {"step": 1, "messages": ["a"]}, name="tool_result")
        make_checkpoint(session, {"step": 2, "messages": ["a", "b"]}, name="tool_called")
        bad = make_checkpoint(session, {"step": 3, "messages": ["a", "b", "c"]}, name="review_requested")
        DriftAlert.objects.create(
            session=session,
            checkpoint=bad,
            kind="repetition",
            severity=("critical", "warning")[i % 2],
            message="The same action (get_order) ran 4 times without progress.",
            evidence={"tool": "get_order", "count": 4, "seqs": [1, 2, 3]},
            last_good=good,
        )
    client = Client()
    client.force_login(alice)
    html = client.get("/alerts/").content.decode()
    assert html.count('class="alert-row') == ALERT_PAGE_SIZE, "a full page"
    assert html.count("Acknowledge") >= ALERT_PAGE_SIZE and "Restore last good" in html, "with its actions"
    assert len(html.encode()) <= LIMIT, f"{len(html.encode()):,} bytes"
