from __future__ import annotations

import base64
import json
from datetime import timedelta

import pytest
from django.template import Context, Template
from django.urls import reverse
from django.utils import timezone

from checkpoints.models import AgentSession, DriftAlert
from checkpoints.services import Actor
from checkpoints.services.cleanup import delete_checkpoints
from tests.helpers import select, text

URL = reverse("dashboard:session_list")
HTMX = {"HX-Request": "true"}


def add_sessions(project, count: int, *, checkpoints: int = 3) -> list[AgentSession]:
    """`count` sessions of a few checkpoints each, ingested in one batch (so they share one updated_at)."""
    from checkpoints.services import CheckpointInput, ingest_checkpoints, upsert_session

    groups = []
    for i in range(count):
        session, _ = upsert_session(project, external_id=f"run-{i:03d}", agent=f"agent-{i % 3}", title=f"Run {i:03d}")
        items = [
            CheckpointInput(state={"run": i, "items": list(range(step))}, step=step) for step in range(checkpoints)
        ]
        groups.append((session, items))
    ingest_checkpoints(groups)
    return [session for session, _ in groups]


def open_alert(session, kind: str = "repetition", message: str = "Same tool call 5 times") -> DriftAlert:
    return DriftAlert.objects.create(session=session, kind=kind, message=message)


def shown(response) -> list[str]:
    return [session.external_id for session in response.context["page"].rows]


def walk(client, params: dict[str, str]) -> list[str]:
    """Every external id, following the Next links to the end."""
    seen: list[str] = []
    response = client.get(URL, params)
    while True:
        seen += shown(response)
        cursor = response.context["page"].next_cursor
        if not cursor:
            return seen
        response = client.get(URL, {**params, "after": cursor})


# ---- the page -------------------------------------------------------------------------------------


def test_page_lists_sessions_with_link_badges_step_count_and_sparkline(client, bob, make_session, make_checkpoint):
    session = make_session("run-1", agent="agent-7")
    AgentSession.objects.filter(pk=session.pk).update(title="Nightly load")
    for step in range(4):
        make_checkpoint(session, {"messages": ["hi"] * step}, step=step * 10)
    open_alert(session)
    client.force_login(bob)
    response = client.get(URL)
    assert response.status_code == 200
    assert [text(heading) for heading in select(response, "h1")] == ["Sessions"]
    [row] = select(response, "#session-results tbody tr[data-keynav-item]")
    [link] = row.cssselect("a[data-open]")
    assert (link.get("href"), text(link)) == (reverse("dashboard:session_detail", args=[session.pk]), "Nightly load")
    assert all(word in text(row) for word in ("run-1", "acme", "agent-7", "1 alert"))
    assert row.cssselect(".status-active")
    cells = {cell.get("data-label"): text(cell) for cell in row.cssselect("td[data-label]")}
    assert (cells["Step"], cells["Checkpoints"]) == ("30", "4")  # the head's step, the checkpoints
    assert text(row.cssselect("svg title")[0]).startswith("State size over the last 4 checkpoints")


def test_filter_form_works_without_javascript_and_swaps_results_with_htmx(client, bob, make_session):
    make_session()
    client.force_login(bob)
    [form] = select(client.get(URL), f'form[method=get][action="{URL}"]')
    assert form.get("hx-get") is not None
    assert (form.get("hx-target"), form.get("hx-push-url")) == ("#session-results", "true")
    labels = {label.get("for"): text(label) for label in form.cssselect("label")}
    for name, label in (("q", "Search"), ("project", "Project"), ("agent", "Agent"), ("status", "Status"),
                        ("sort", "Sort by"), ("alert", "Has open alert")):  # fmt: skip
        assert labels[f"id_{name}"] == label and form.cssselect(f"#id_{name}")


def test_htmx_request_gets_only_the_results(client, bob, make_session):
    make_session()
    client.force_login(bob)
    response = client.get(URL, headers=HTMX)
    assert response.status_code == 200
    assert response.content.decode().lstrip().startswith('<section id="session-results"')
    assert not select(response, "html, form")
    assert "HX-Request" in response["Vary"]


def test_history_restore_after_a_cache_miss_gets_the_whole_page(client, bob, make_session):
    make_session()
    client.force_login(bob)
    response = client.get(URL, headers={**HTMX, "HX-History-Restore-Request": "true"})
    assert select(response, "html")


def test_empty_console_says_how_sessions_arrive(client, bob):
    client.force_login(bob)
    html = client.get(URL).content.decode()
    assert "No sessions yet" in html and "seed_demo" in html and "/api/v1/sessions" in html


# ---- filters, search, sort ------------------------------------------------------------------------


def test_filters_by_project_agent_and_status(client, bob, make_session, other_project, grant):
    grant(bob, other_project, "viewer")
    make_session("a", agent="scout")
    make_session("b", agent="etl")
    failed = make_session("c", agent="etl")
    AgentSession.objects.filter(pk=failed.pk).update(status="failed")
    make_session("d", agent="etl", in_project=other_project)
    client.force_login(bob)
    assert sorted(shown(client.get(URL, {"project": "globex"}))) == ["d"]
    assert sorted(shown(client.get(URL, {"agent": "etl"}))) == ["b", "c", "d"]
    assert sorted(shown(client.get(URL, {"agent": "etl", "status": "failed"}))) == ["c"]
    assert sorted(shown(client.get(URL, {"project": "acme", "agent": "etl", "status": "active"}))) == ["b"]


def test_lists_counts_and_offers_only_the_users_projects(client, bob, make_session, other_project):
    make_session("a", agent="scout")
    make_session("secret-run", agent="secret-agent", in_project=other_project)
    client.force_login(bob)
    response = client.get(URL)
    html = response.content.decode()
    assert shown(response) == ["a"] and response.context["total"] == 1
    assert "secret" not in html and "globex" not in html  # not in the rows, the agent or the project choices
    response = client.get(URL, {"project": "globex"})
    assert "Project: Select a valid choice" in response.content.decode() and shown(response) == ["a"]


def test_has_open_alert_ignores_acknowledged_and_resolved_alerts(client, bob, make_session):
    alerting, acknowledged, resolved, _quiet = (make_session(name) for name in ("alerting", "ack", "resolved", "quiet"))
    open_alert(alerting)
    DriftAlert.objects.create(session=acknowledged, kind="stalled", message="flat", state="acknowledged")
    DriftAlert.objects.create(session=resolved, kind="stalled", message="flat", state="resolved")
    client.force_login(bob)
    assert shown(client.get(URL, {"alert": "on"})) == ["alerting"]


def test_search_matches_external_id_or_title_case_insensitively(client, bob, make_session):
    make_session("etl-nightly")
    titled = make_session("x-1")
    AgentSession.objects.filter(pk=titled.pk).update(title="The NIGHTLY load")
    make_session("scout-1")
    client.force_login(bob)
    assert sorted(shown(client.get(URL, {"q": "nightly"}))) == ["etl-nightly", "x-1"]
    response = client.get(URL, {"q": "nothing-like-this"})
    assert "No session matches these filters" in response.content.decode()


def test_unknown_filter_value_is_reported_and_ignored(client, bob, make_session):
    make_session("a")
    client.force_login(bob)
    response = client.get(URL, {"project": "no-such-project", "status": "sleeping"})
    assert shown(response) == ["a"]
    assert "The filter was ignored" in response.content.decode()


def test_sorts_by_activity_created_checkpoints_and_title(client, bob, make_session, make_checkpoint):
    now = timezone.now()
    b = make_session("b")
    a = make_session("a")
    c = make_session("c")
    for _ in range(3):
        make_checkpoint(c)
    make_checkpoint(a)
    for session, age in ((a, 3), (b, 1), (c, 2)):
        AgentSession.objects.filter(pk=session.pk).update(
            updated_at=now - timedelta(hours=age),
            created_at=now - timedelta(days=age),
            title=f"T-{session.external_id}",
        )
    client.force_login(bob)
    assert shown(client.get(URL)) == ["b", "c", "a"]
    assert shown(client.get(URL, {"sort": "created"})) == ["b", "c", "a"]
    assert shown(client.get(URL, {"sort": "checkpoints"})) == ["c", "a", "b"]
    assert shown(client.get(URL, {"sort": "title"})) == ["a", "b", "c"]


def test_most_checkpoints_ranks_by_what_is_kept_not_by_steps_taken(client, bob, make_session, make_checkpoint):
    pruned, kept = make_session("pruned"), make_session("kept")
    made = [make_checkpoint(pruned) for _ in range(5)]
    for _ in range(3):
        make_checkpoint(kept)
    delete_checkpoints([checkpoint.pk for checkpoint in made[:3]], actor=Actor.system("retention"))
    client.force_login(bob)

    assert shown(client.get(URL, {"sort": "checkpoints"})) == ["kept", "pruned"]


# ---- keyset pagination ----------------------------------------------------------------------------


@pytest.mark.parametrize("sort", ["activity", "created", "checkpoints", "title"])
def test_pages_walk_every_session_exactly_once(client, bob, project, sort):
    sessions = add_sessions(project, 60)
    client.force_login(bob)
    seen = walk(client, {"sort": sort})
    assert sorted(seen) == sorted(s.external_id for s in sessions)
    assert len(seen) == len(set(seen))


def test_next_page_uses_a_cursor_not_an_offset_and_previous_goes_back(client, bob, project):
    add_sessions(project, 60)
    client.force_login(bob)
    first = client.get(URL, {"sort": "title"})
    second = client.get(URL, {"sort": "title", "after": first.context["page"].next_cursor})
    assert shown(first) == [f"run-{i:03d}" for i in range(25)]
    assert shown(second) == [f"run-{i:03d}" for i in range(25, 50)]
    html = second.content.decode()
    assert 'rel="next"' in html and 'rel="prev"' in html and "sort=title" in html
    back = client.get(URL, {"sort": "title", "before": second.context["page"].prev_cursor})
    assert shown(back) == shown(first)
    assert back.context["page"].prev_cursor is None


def test_a_damaged_cursor_shows_the_first_page(client, bob, project):
    add_sessions(project, 30)
    client.force_login(bob)
    response = client.get(URL, {"sort": "title", "after": "not-a-cursor"})
    assert response.status_code == 200
    assert shown(response)[0] == "run-000"


@pytest.mark.parametrize(
    ("sort", "value", "pk", "rows"),
    [
        ("title", "run-010\x00", 1, 25),  # PostgreSQL text cannot hold NUL: the first page
        ("created", "0001-01-01T00:00:00+14:00", 1, 25),  # before year 1 in UTC: the first page
        ("activity", "2026-01-01T00:00:00", 2**64, 25),  # no such id: the first page
        ("activity", "2000-01-01T00:00:00+23:59", 1, 0),  # an offset PostgreSQL refuses, read in UTC: older rows
    ],
)
def test_a_cursor_the_database_cannot_compare_as_sent_gets_an_answer(client, bob, project, sort, value, pk, rows):
    add_sessions(project, 30)
    client.force_login(bob)
    cursor = base64.urlsafe_b64encode(json.dumps([value, pk]).encode()).decode()
    response = client.get(URL, {"sort": sort, "after": cursor})
    assert response.status_code == 200 and len(shown(response)) == rows


def test_filters_are_kept_across_pages(client, bob, project):
    add_sessions(project, 60)  # agents agent-0, agent-1, agent-2: 20 each
    client.force_login(bob)
    seen = walk(client, {"agent": "agent-1", "sort": "title"})
    assert len(seen) == 20 and all(int(name[-3:]) % 3 == 1 for name in seen)


# ---- sparklines and the query bound ---------------------------------------------------------------


def test_sparkline_shows_the_size_of_the_last_30_checkpoints(client, bob, make_session, make_checkpoint):
    session = make_session()
    checkpoints = [make_checkpoint(session, {"items": list(range(i * 10))}) for i in range(40)]
    client.force_login(bob)
    row = client.get(URL).context["rows"][0]
    assert row.sizes == [c.raw_bytes for c in checkpoints[-30:]]
    assert row.last_checkpoint_at == checkpoints[-1].created_at


def test_sparkline_tag_draws_an_svg_with_a_title_and_a_dash_when_empty():
    template = Template("{% load sparkline %}{% sparkline values %}")
    svg = template.render(Context({"values": [100, 2048, 1000]}))
    assert svg.startswith("<svg") and 'role="img"' in svg
    assert "<title>State size over the last 3 checkpoints: 100\xa0bytes to 1000\xa0bytes, peak 2.0\xa0KB</title>" in svg
    assert "<polyline" in svg
    assert "no checkpoints" in template.render(Context({"values": []}))
    assert "<svg" in template.render(Context({"values": [5]}))


def test_query_count_is_bounded_on_thousands_of_checkpoints(
    client, bob, project, big_session, django_assert_max_num_queries
):
    sessions = add_sessions(project, 60, checkpoints=40)
    for session in sessions[::7]:
        open_alert(session)
    client.force_login(bob)
    first = client.get(URL, {"sort": "title"})
    for params in ({}, {"sort": "checkpoints"}, {"alert": "on", "q": "run", "agent": "agent-0"}):
        with django_assert_max_num_queries(10):
            response = client.get(URL, params)
        assert response.context["page"].rows
    with django_assert_max_num_queries(10):
        response = client.get(URL, {"sort": "title", "after": first.context["page"].next_cursor}, headers=HTMX)
    assert response.status_code == 200
    big = client.get(URL, {"q": "marathon"}).context["rows"][0]
    assert len(big.sizes) == 30 and big.session.head_step is not None
