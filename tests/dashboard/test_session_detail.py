from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from django.urls import reverse
from lxml import html as lxml_html
from lxml.html import HtmlElement

from checkpoints.models import AgentSession, DriftAlert, Phase
from checkpoints.services import (
    Actor,
    fork_session,
    pin_checkpoint,
    restore_checkpoint,
    undo_restore,
    upsert_session,
)
from dashboard.presenters.timeline import PAGE_SIZE
from tests.conftest import shared_session
from tests.helpers import select, text

from .trees import NEW_ROOT, grow

HTMX = {"HX-Request": "true"}


def url(session) -> str:
    return reverse("dashboard:session_detail", args=[session.pk])


def rows(html: str) -> list[int]:
    """Seqs of the checkpoint rows, in page order."""
    return [int(row.get("id").removeprefix("cp-")) for row in select(html, "tr[data-keynav-item][id^=cp-]")]


def row(html: str, seq: int) -> HtmlElement:
    [found] = select(html, f"tr#cp-{seq}")
    return found


def classes(element: HtmlElement) -> set[str]:
    """The class attributes of an element and everything in it, each as written."""
    return {each.get("class") for each in element.iter() if each.get("class")}


def links(element: HtmlElement) -> set[str]:
    return {link.get("href") for link in element.cssselect("a[href]")}


def compared(element: HtmlElement) -> tuple[int, int] | None:
    """(a, b) of the row's compare link, which console.js builds from its menu's data-previous and data-id."""
    [menu] = element.cssselect("details.row-menu")
    return (int(menu.get("data-previous")), int(menu.get("data-id"))) if menu.get("data-previous") else None


def ids(html: str) -> list[str]:
    """The ids on the page, in document order."""
    return [element.get("id") for element in select(html, "[id]")]


def shown(html: str) -> list[tuple[int, int]]:
    """What the page shows, in order: a checkpoint row as (seq, seq), a folded branch as (lo, hi)."""
    seen = []
    for element in select(html, "tr[data-keynav-item][id^=cp-], tbody.branch.is-folded"):
        if element.tag == "tr":
            seq = int(element.get("id").removeprefix("cp-"))
            seen.append((seq, seq))
        else:
            lo, hi = re.search(r"#(\d+)–(\d+)", text(element)).groups()
            seen.append((int(lo), int(hi)))
    return seen


def walk(client, session) -> list[tuple[int, int]]:
    """What every page shows, from the newest page on by the Older links."""
    seen: list[tuple[int, int]] = []
    params: dict[str, str] = {}
    for _ in range(100):
        html = client.get(url(session), params, headers=HTMX).content.decode()
        seen += shown(html)
        older = select(html, "a[rel=next]")
        if not older:
            return seen
        params = {"before": older[0].get("href").split("?before=")[1]}
    raise AssertionError("the Older links never end")


def assert_each_checkpoint_once(seen: list[tuple[int, int]], last_seq: int) -> None:
    assert seen == sorted(seen, reverse=True), "newest first"
    assert [seq for lo, hi in reversed(seen) for seq in range(lo, hi + 1)] == list(range(1, last_seq + 1))


def branch(html: str, lo: int) -> HtmlElement:
    """The rows naming the side branch that starts at `lo`: its summary, or its heading when open."""
    [found] = select(html, f"tbody#branch-{lo}")
    return found


@pytest.fixture
def session(make_session, make_checkpoint):
    session = make_session("run-1")
    for i in range(6):
        make_checkpoint(session, {"step": i, "messages": ["x"] * i}, name=f"step_{i}", step=i)
    session.refresh_from_db()
    return session


@pytest.fixture
def resumed(make_session):
    """Kaizen's shape: a run interrupted after #40 (#38 failed) and resumed from #30 as #41–60."""
    return grow(make_session("resumed"), 60, {41: 30}, failed={38})


def build_many_branches(project) -> AgentSession:
    starts: dict[int, int | None] = {seq: seq - 11 for seq in range(41, 2000, 40)}
    starts.update({1001: NEW_ROOT, 1995: 1992})
    session, _ = upsert_session(project, external_id="many", agent="agent-7")
    session = grow(session, 2000, starts, restores={500: 450, 1500: 1450})
    assert session.checkpoints.filter(starts_branch=True).count() == 52
    return session


@pytest.fixture(scope="module")
def shared_many_branches(django_db_setup, django_db_blocker) -> Iterator[int]:
    yield from shared_session(django_db_blocker, build_many_branches)


@pytest.fixture
def many_branches(shared_many_branches, project) -> AgentSession:
    """2,000 checkpoints, 52 branches: time travel every 40 (back 11), two restores, a second run, and a
    short branch near the head; built once for the module (what a test changes is rolled back with it)."""
    return AgentSession.objects.get(pk=shared_many_branches, project=project)


@pytest.fixture
def restored(session):
    """Six checkpoints, then a restore of #3: #4–#6 are left on a side branch, #7 continues the head's line."""
    target = session.checkpoints.get(seq=3)
    restore_checkpoint(target, actor=Actor.system("test"), reason="back to 3")
    session.refresh_from_db()
    return session


def test_unknown_session_is_404(client, bob):
    client.force_login(bob)
    assert client.get(reverse("dashboard:session_detail", args=[999_999])).status_code == 404


def test_another_projects_session_is_404(client, bob, make_session, other_project):
    elsewhere = make_session("theirs", in_project=other_project)
    client.force_login(bob)
    assert client.get(url(elsewhere)).status_code == 404
    assert client.get(url(elsewhere), headers=HTMX).status_code == 404


def test_timeline_page_shows_the_session_and_its_checkpoints_newest_first(client, bob, session):
    client.force_login(bob)
    response = client.get(url(session))
    html = response.content.decode()
    assert response.status_code == 200
    assert "run-1" in html and "agent-7" in html and "acme" in html
    assert "Restore generation" in html
    assert rows(html) == [6, 5, 4, 3, 2, 1]
    head = session.head
    [head_row] = select(html, "tr[data-keynav-item].is-head")
    assert head_row.get("id") == "cp-6" and reverse("dashboard:checkpoint_detail", args=[head.pk]) in links(head_row)


def test_each_row_links_to_open_and_to_compare_with_the_previous_checkpoint(client, bob, session):
    client.force_login(bob)
    html = client.get(url(session)).content.decode()
    five, six = session.checkpoints.get(seq=5), session.checkpoints.get(seq=6)
    [open_link] = row(html, 6).cssselect("a[data-open]")
    assert open_link.get("href") == reverse("dashboard:checkpoint_detail", args=[six.pk])
    # the compare link is built by console.js from the row's menu and the page's one template (a browser test clicks it)
    assert compared(row(html, 6)) == (five.pk, six.pk)
    [template] = select(html, "template#row-menu")
    assert 'data-compare href="' + reverse("dashboard:compare") + '"' in lxml_html.tostring(template).decode()
    assert compared(row(html, 1)) is None  # the first checkpoint has nothing before it


def test_htmx_request_gets_only_the_timeline(client, bob, session):
    client.force_login(bob)
    response = client.get(url(session), headers=HTMX)
    html = response.content.decode()
    assert response.status_code == 200
    assert html.lstrip().startswith('<div id="timeline"')
    assert not select(html, "html") and "Activity" not in html
    assert rows(html) == [6, 5, 4, 3, 2, 1]


def test_restore_draws_the_abandoned_checkpoints_as_a_side_branch(client, bob, restored):
    client.force_login(bob)
    html = client.get(url(restored)).content.decode()
    assert rows(html) == [7, 6, 5, 4, 3, 2, 1]
    for seq in (4, 5, 6):
        assert "side branch" in text(row(html, seq))
    for seq in (7, 3, 2, 1):
        assert "side branch" not in text(row(html, seq))
    assert "restored by #7" in text(row(html, 3))
    assert "elbow from c1" in classes(row(html, 3))  # the side lane grows out of #3
    assert "elbow to c1" in classes(row(html, 3))
    assert "lane c0 down node-head" in classes(row(html, 7))  # the restore is the head
    assert "lane c0 up down" in classes(row(html, 6))  # the head's line passes beside the side branch
    assert "lane c1 up down node-dot" in classes(row(html, 6))  # the side branch's newest end, under its heading
    assert "lane c1 up down node-dot" in classes(row(html, 5))


def test_a_restore_and_its_undo_fold_into_one_event(client, bob, restored):
    """No live side branch: the undo row says what it undid, the undone restore has no row of its own."""
    undo_restore(restored, actor=Actor.system("test"))
    client.force_login(bob)
    html = client.get(url(restored)).content.decode()
    assert rows(html) == [8, 6, 5, 4, 3, 2, 1]  # #7, the restore of #3, is folded into #8
    assert "undoes restore #7 (to #3)" in text(row(html, 8))
    assert not select(html, ".tag-side") and "restore of #3" not in html  # no branch, no row, no heading
    assert "restored by" not in text(row(html, 3))
    assert not select(html, ".c1")  # one lane: the head's line
    assert "lane c0 down node-head" in classes(row(html, 8))


def test_a_restore_row_compares_with_the_head_it_replaced(client, bob, restored):
    client.force_login(bob)
    html = client.get(url(restored)).content.decode()
    six, seven = restored.checkpoints.get(seq=6), restored.checkpoints.get(seq=7)
    assert compared(row(html, 7)) == (six.pk, seven.pk)


def test_a_long_side_branch_folds_into_one_row_that_counts_it(client, bob, resumed):
    pin_checkpoint(resumed.checkpoints.get(seq=35), actor=Actor.system())
    fork_session(resumed.checkpoints.get(seq=33), actor=Actor.system(), external_id="resumed-b")
    client.force_login(bob)
    html = client.get(url(resumed)).content.decode()
    assert rows(html) == [*range(60, 40, -1), *range(30, 0, -1)]
    assert ids(html).index("cp-41") < ids(html).index("branch-31") < ids(html).index("cp-30")
    summary = branch(html, 31)
    assert "#31–40" in text(summary) and "Branch of 10 checkpoints" in text(summary)
    assert summary.cssselect("[aria-expanded=false]")
    assert "left behind by #41, branched from #30" in text(summary)
    assert "#40 step_40" in text(summary) and summary.cssselect(".status-completed")  # its newest checkpoint
    assert "1 failed or halted" in text(summary) and "1 pinned" in text(summary) and "1 fork" in text(summary)
    assert "lane c1 down node-fold" in classes(summary)  # its line goes on down to #30
    assert "lane c0 up down" in classes(summary)  # beside the head's line, on its way from #41 to #30
    assert "elbow to c1" in classes(row(html, 30))
    assert "#cp-30" in links(row(html, 41)) and "branched from #30" in text(row(html, 41))


def test_a_folded_branch_opens_by_htmx_and_without_javascript_and_folds_again(client, bob, resumed):
    client.force_login(bob)
    folded = branch(client.get(url(resumed)).content.decode(), 31)
    [toggle] = folded.cssselect(f'a[href="{url(resumed)}?open=31#toggle-31"]')
    assert (toggle.get("hx-get"), toggle.get("hx-target")) == (f"{url(resumed)}?open=31", "#timeline")
    page = client.get(url(resumed), {"open": "31"}).content.decode()
    assert rows(page) == list(range(60, 0, -1))
    heading = branch(page, 31)
    assert "Branch of 10 checkpoints" in text(heading) and heading.cssselect("[aria-expanded=true]")
    assert f"{url(resumed)}#toggle-31" in links(heading)  # folding it again is the default: nothing to keep
    assert all("side branch" in text(row(page, seq)) for seq in range(31, 41))
    assert "lane c1 up down node-dot" in classes(row(page, 40))  # hangs from its heading
    fragment = client.get(url(resumed), {"open": "31"}, headers=HTMX).content.decode()
    assert fragment.lstrip().startswith('<div id="timeline"') and rows(fragment) == rows(page)


def test_a_short_side_branch_stays_open_and_folds_on_request(client, bob, restored):
    client.force_login(bob)
    heading = branch(client.get(url(restored)).content.decode(), 4)
    assert "Branch of 3 checkpoints" in text(heading) and "left behind by #7, restore of #3" in text(heading)
    assert f"{url(restored)}?fold=4#toggle-4" in links(heading)
    folded = client.get(url(restored), {"fold": "4"}).content.decode()
    assert rows(folded) == [7, 3, 2, 1] and "is-folded" in branch(folded, 4).classes
    assert f"{url(restored)}#toggle-4" in links(branch(folded, 4))


def test_a_second_run_is_a_new_root_and_the_first_run_folds_beside_it(client, bob, make_session):
    session = grow(make_session("two-runs"), 30, {21: NEW_ROOT}, failed={20})
    client.force_login(bob)
    html = client.get(url(session)).content.decode()
    assert rows(html) == list(range(30, 20, -1))
    assert "new run" in text(row(html, 21))
    assert "lane c0 up node-dot" in classes(row(html, 21))  # a root: no line below it
    summary = branch(html, 1)
    assert "Run of 20 checkpoints" in text(summary) and "first run" in text(summary)
    assert "lane c1 node-fold" in classes(summary)  # no attach line either
    assert "#20 step_20" in text(summary) and summary.cssselect(".status-failed")


def test_going_to_a_checkpoint_in_a_folded_branch_opens_it_and_paging_keeps_it_open(client, bob, resumed):
    client.force_login(bob)
    html = client.get(url(resumed), {"at": 35}).content.decode()
    assert rows(html) == list(range(35, 0, -1))
    assert "?after=35&amp;open=31" in html
    newer = client.get(url(resumed), {"after": 35, "open": 31}).content.decode()
    assert rows(newer) == list(range(60, 35, -1))


def test_pages_leave_a_folded_branch_out_and_show_its_row_once(client, bob, big_session):
    client.force_login(bob)  # 3,000 checkpoints and a restore of #1501: #1502–3000 is a side branch
    first = client.get(url(big_session)).content.decode()
    seqs = rows(first)
    assert seqs == [3001, *range(1501, 1501 - (PAGE_SIZE - 1), -1)]
    assert "Branch of 1499 checkpoints" in text(branch(first, 1502))
    older = client.get(url(big_session), {"before": seqs[-1]}).content.decode()
    assert not select(older, "#branch-1502") and rows(older)[0] == seqs[-1] - 1
    opened = client.get(url(big_session), {"open": 1502}).content.decode()
    assert rows(opened) == list(range(3001, 3001 - PAGE_SIZE, -1))
    assert f"?before={3002 - PAGE_SIZE}&amp;open=1502" in opened


def test_the_pages_show_every_checkpoint_once_as_a_row_or_in_a_folded_branch(client, bob, many_branches):
    client.force_login(bob)
    seen = walk(client, many_branches)
    assert_each_checkpoint_once(seen, 2000)
    assert (1994, 1994) in seen and (1993, 1993) in seen  # the short branch is open: two rows
    assert (1, 1000) in seen  # the first run with the time travel inside it: one folded branch
    assert (1451, 1499) in seen  # what the restore of #1450 left, a time travel inside it too
    first = client.get(url(many_branches), headers=HTMX).content.decode()
    assert len(rows(first)) == PAGE_SIZE


def test_a_session_with_a_thousand_folded_branches_pages_through_them(client, bob, make_session):
    # an agent that goes back one step after every four, 1,200 times: as many folded branches as a page's
    # fetch could ever name one by one (SQLite refuses an expression 1,000 conditions deep)
    session = grow(make_session("retrier"), 6000, {seq: seq - 5 for seq in range(6, 6001, 5)})
    client.force_login(bob)
    first = shown(client.get(url(session)).content.decode())
    assert first[:3] == [(6000, 6000), (5999, 5999), (5998, 5998)] and (5992, 5995) in first
    assert PAGE_SIZE - 10 <= len([lo for lo, hi in first if lo < hi]) <= PAGE_SIZE  # folded branches, one row each
    assert_each_checkpoint_once(walk(client, session), 6000)


def test_runs_of_routine_checkpoints_collapse_into_one_row(client, bob, make_session, make_checkpoint):
    session = make_session("routine-run")
    make_checkpoint(session, {"n": 0}, name="task_started")
    for i in range(1, 13):
        make_checkpoint(session, {"n": i}, name="routine", kind="routine")
    make_checkpoint(session, {"n": 13}, name="step")
    client.force_login(bob)
    html = client.get(url(session)).content.decode()
    assert rows(html) == [14, 1]
    assert "12 routine checkpoints" in html
    [run] = select(html, "#run-2-13")
    assert run.cssselect(f'[hx-get="{url(session)}?expand=2-13"]')


def test_a_collapsed_run_opens_by_htmx_and_without_javascript(client, bob, make_session, make_checkpoint):
    session = make_session("routine-run")
    make_checkpoint(session, {"n": 0}, name="task_started")
    for i in range(1, 6):
        make_checkpoint(session, {"n": i}, name="routine", kind="routine")
    make_checkpoint(session, {"n": 6}, name="step")
    client.force_login(bob)
    fragment = client.get(url(session) + "?expand=2-6", headers=HTMX).content.decode()
    assert fragment.lstrip().startswith('<tbody class="expanded" id="run-2-6"')
    assert rows(fragment) == [6, 5, 4, 3, 2]
    page = client.get(url(session) + "?expand=2-6").content.decode()
    assert rows(page) == [7, 6, 5, 4, 3, 2, 1]


def test_pinned_and_failed_routine_checkpoints_stay_visible(client, bob, make_session, make_checkpoint):
    session = make_session("routine-run")
    made = [make_checkpoint(session, {"n": i}, name="routine", kind="routine") for i in range(7)]
    pin_checkpoint(made[3], actor=Actor.system())
    client.force_login(bob)
    html = client.get(url(session)).content.decode()
    assert 4 in rows(html) and 7 in rows(html)  # the pinned one and the head
    assert "3 routine checkpoints" in html  # #1–#3
    assert "2 routine" not in html  # #5–#6 is too short a run to hide


def test_pages_are_keyset_on_seq_newest_first(client, bob, big_session):
    client.force_login(bob)
    first = client.get(url(big_session)).content.decode()
    seqs = rows(first)
    assert seqs[0] == 3001 and len(seqs) == PAGE_SIZE
    older = seqs[-1]
    assert select(first, f'a[rel=next][href="{url(big_session)}?before={older}"]')
    second = client.get(url(big_session), {"before": older}, headers=HTMX).content.decode()
    assert rows(second)[0] == older - 1 and len(rows(second)) == PAGE_SIZE
    assert f"?after={older - 1}" in second
    back = client.get(url(big_session), {"after": older - 1}).content.decode()
    assert rows(back) == seqs


def test_jumping_to_a_seq_shows_the_page_that_holds_it(client, bob, big_session):
    client.force_login(bob)
    html = client.get(url(big_session), {"at": 1500}).content.decode()
    assert rows(html)[0] == 1500
    assert "« Newest" in html and "‹ Newer" in html and "Older ›" in html


def test_nonsense_paging_parameters_fall_back_to_the_newest_page(client, bob, session):
    client.force_login(bob)
    response = client.get(url(session), {"before": "soon", "after": "-3", "expand": "9-2"})
    assert response.status_code == 200
    assert rows(response.content.decode()) == [6, 5, 4, 3, 2, 1]


def test_viewer_sees_no_restore_fork_or_pin_controls(client, bob, session):
    client.force_login(bob)
    html = client.get(url(session)).content.decode()
    one = session.checkpoints.get(seq=1)
    assert reverse("dashboard:checkpoint_restore", args=[one.pk]) not in html
    assert reverse("dashboard:checkpoint_fork", args=[one.pk]) not in html
    assert reverse("dashboard:checkpoint_pin", args=[one.pk]) not in html
    assert ">Restore<" not in html and ">Fork<" not in html and ">Pin<" not in html and ">Unpin<" not in html


def test_operator_sees_restore_fork_and_pin_on_every_row(client, alice, session):
    one = session.checkpoints.get(seq=1)
    pin_checkpoint(one, actor=Actor.system())
    client.force_login(alice)
    html = client.get(url(session)).content.decode()
    # each row's menu names its checkpoint and whether it is pinned; console.js fills it from the page's template
    # with restore, fork and pin or unpin (tests/browser/test_timeline.py opens one)
    [menu] = row(html, 1).cssselect("details.row-menu")
    assert menu.get("data-id") == str(one.pk) and menu.get("data-pinned") is not None
    assert row(html, 2).cssselect("details.row-menu")[0].get("data-pinned") is None
    menus = select(html, "tr[data-keynav-item] details.row-menu")
    assert [menu.get("data-seq") for menu in menus] == [str(seq) for seq in range(6, 0, -1)]
    # the head (#6) is marked: its menu offers no restore, which would discard nothing
    assert [menu.get("data-head") is not None for menu in menus] == [True, False, False, False, False, False]
    [template] = select(html, "template#row-menu")
    assert template.get("data-checkpoint") == reverse("dashboard:checkpoint_detail", args=[0])


def test_forks_link_to_their_source_and_back(client, bob, session):
    source = session.checkpoints.get(seq=4)
    fork = fork_session(source, actor=Actor.system(), external_id="run-1-b")
    client.force_login(bob)
    html = client.get(url(session)).content.decode()
    assert select(html, f'a[href="{reverse("dashboard:session_detail", args=[fork.pk])}"]')
    assert "fork run-1-b" in text(row(html, 4))
    child = client.get(url(fork)).content.decode()
    assert "Forked from" in child
    back = {text(link): link.get("href") for link in select(child, "a")}
    assert back["run-1"] == reverse("dashboard:session_detail", args=[session.pk])
    assert back["#4"] == reverse("dashboard:checkpoint_detail", args=[source.pk])


def test_phases_strip_lists_each_phase_with_status_and_duration(client, bob, session):
    Phase.objects.create(session=session, number=1, name="Concept Expansion", status="completed", duration=754)
    Phase.objects.create(session=session, number=2, name="Market <Research>", status="in_progress")
    client.force_login(bob)
    html = client.get(url(session)).content.decode()
    assert "Phases" in html and "Concept Expansion" in html and "12 min 34 s" in html
    assert "Market &lt;Research&gt;" in html
    assert select(html, ".status-in_progress")


def test_no_phases_strip_without_phases(client, bob, session):
    client.force_login(bob)
    assert not select(client.get(url(session)), "#phases-heading")


def test_charts_are_inline_svg_with_titles_and_axis_labels(client, bob, session, make_checkpoint):
    make_checkpoint(session, {"step": 7}, name="broke", status="failed", status_reason="boom")
    client.force_login(bob)
    html = client.get(url(session)).content.decode()
    charts = select(html, "svg.chart-svg")
    assert len(charts) == 3 and all(chart.cssselect("title") for chart in charts)
    assert "State size and stored bytes" in html
    assert "Steps per hour" in html and "Error rate per hour" in html
    assert "Time" in [text(label) for label in select(html, "svg text.axis-label")]
    assert "1 of 7 checkpoints failed or halted." in html


def test_agent_text_in_names_and_reasons_is_escaped(client, bob, make_session, make_checkpoint):
    session = make_session("xss")
    make_checkpoint(session, {}, name="<script>alert(1)</script>", status="failed", status_reason="<b>bad</b>")
    client.force_login(bob)
    html = client.get(url(session)).content.decode()
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;b&gt;bad&lt;/b&gt;" in html


def test_a_session_without_checkpoints_says_how_to_add_them(client, bob, make_session):
    session = make_session("empty")
    client.force_login(bob)
    html = client.get(url(session)).content.decode()
    assert "No checkpoints yet." in html
    assert "/api/v1/sessions/empty/checkpoints" in html


def test_timeline_query_count_is_bounded_on_a_big_session(client, alice, big_session, django_assert_max_num_queries):
    client.force_login(alice)  # sign-in and permissions: 4 queries of each request
    with django_assert_max_num_queries(18):
        assert client.get(url(big_session)).status_code == 200
    with django_assert_max_num_queries(9):
        assert client.get(url(big_session), {"before": 1700}, headers=HTMX).status_code == 200
    with django_assert_max_num_queries(19):
        assert client.get(url(big_session), {"after": 1200}).status_code == 200
    with django_assert_max_num_queries(8):
        assert client.get(url(big_session), {"expand": "100-600"}, headers=HTMX).status_code == 200


def test_timeline_query_count_grows_with_neither_checkpoints_nor_branches(
    client, alice, make_session, many_branches, django_assert_max_num_queries
):
    few = grow(make_session("few"), 20, {11: 5}, restores={16: 13})  # 2 branches: #6–10 folded, #14–15 open
    many = many_branches
    assert few.checkpoints.filter(starts_branch=True).count() == 2
    client.force_login(alice)  # sign-in and permissions: 4 queries of each request
    counts: dict[tuple[int, str], int] = {}
    for session in (few, many):
        for name, params, headers in [
            ("page", {}, {}),
            ("timeline", {}, HTMX),
            ("toggled", {"open": 6, "fold": 14} if session is few else {"open": 1962}, HTMX),
            ("older", {"before": 16 if session is few else 1900}, HTMX),
        ]:
            with django_assert_max_num_queries(18) as queries:
                assert client.get(url(session), params, headers=headers).status_code == 200
            counts[session.pk, name] = len(queries)
    for name in ("page", "timeline", "toggled", "older"):
        assert counts[few.pk, name] == counts[many.pk, name], name


def test_size_chart_runs_by_seq_with_stored_bytes_on_their_own_axis(client, bob, restored):
    client.force_login(bob)
    html = client.get(url(restored)).content.decode()
    ticks = {(tick.get("text-anchor"), text(tick)) for tick in select(html, "svg text[text-anchor]")}
    assert {("start", "#1"), ("end", "#7")} <= ticks
    assert "left axis" in html and "right axis" in html
    assert select(html, "svg text.axis-label.axis-series-stored")


def test_charts_show_an_empty_state_without_data():
    from dashboard.templatetags.charts import bar_chart, line_chart, nice_ceiling

    assert "No data yet." in line_chart([{"label": "x", "points": [], "css": "c"}], title="Size")
    assert "No data yet." in bar_chart([], title="Rate", slot=None)
    assert nice_ceiling(273_000, "bytes") == 300 * 1024
    assert nice_ceiling(3, "count") == 4 and nice_ceiling(77, "percent") == 100


def test_a_flat_stretch_of_a_line_chart_is_drawn_with_its_ends_only():
    """A 100,000-checkpoint session's charts sample 200 points; where the size stays level, only the stretch's two
    ends are sent, and every turn of the line is kept."""
    from dashboard.templatetags.charts import line_chart

    flat_then_rise = [(seq, 100) for seq in range(1, 101)] + [(101, 400), (102, 400), (103, 100)]
    svg = line_chart([{"label": "Size", "points": flat_then_rise, "css": "series-raw"}], title="Size", y_format="bytes")
    points = re.search(r'<polyline class="series series-raw" points="([^"]+)"', str(svg)).group(1).split()
    assert len(points) == 5  # #1 and #100 of the level run, #101 and #102 of the plateau, #103
    ys = [float(point.split(",")[1]) for point in points]
    assert ys[0] == ys[1] == ys[4] and ys[2] == ys[3] and ys[2] < ys[0]
    one = line_chart([{"label": "Size", "points": [(1, 5), (1, 5)], "css": "c"}], title="Size")
    assert "<circle" in one and "<polyline" not in one  # every point the same: a visible mark, not an empty line


# ---- what each row says, failures at a glance, the index, retention gaps ------------------------------


CALL = {"id": "c1", "tool_name": "fetch_url", "arguments": {"url": "https://arxiv.org/abs/2310.08560"}}


@pytest.fixture
def agent_run(make_session, make_checkpoint, django_capture_on_commit_callbacks):
    """An agent's steps: a tool call that worked, one that failed (the agent went on), a message, a halt."""
    session = make_session("agent")
    ok = {**CALL, "success": True, "result": "200 OK, 5,210 chars"}
    failed = {**CALL, "id": "c2", "success": False, "error": "HTTP 429 Too Many Requests"}
    note = {"role": "user", "content": "Please include cost per 1k tokens where the papers report it."}
    make_checkpoint(session, {"tool_calls": [], "messages": []}, name="task_started")
    make_checkpoint(session, {"tool_calls": [ok], "messages": []}, name="tool_called")
    make_checkpoint(session, {"tool_calls": [ok, failed], "messages": []}, name="tool_failed")
    make_checkpoint(session, {"tool_calls": [ok, failed], "messages": [note]}, name="user_replied")
    with django_capture_on_commit_callbacks(execute=True):  # the drift detectors open the halted alert
        make_checkpoint(
            session,
            {"tool_calls": [ok, failed], "messages": [note]},
            name="loop_detected",
            status="halted",
            status_reason="the same call 4 times without progress",
        )
    session.refresh_from_db()
    return session


def test_each_row_previews_the_tool_call_the_message_or_the_status_reason(client, bob, agent_run):
    client.force_login(bob)
    html = client.get(url(agent_run)).content.decode()

    assert "fetch_url(url=https://arxiv.org/abs/2310.08560) → 200 OK, 5,210 chars" in text(row(html, 2))
    assert "fetch_url(url=https://arxiv.org/abs/2310.08560) failed: HTTP 429 Too Many Requests" in text(row(html, 3))
    assert "user: Please include cost per 1k tokens" in text(row(html, 4))
    assert "the same call 4 times without progress" in text(row(html, 5))
    assert not row(html, 5).cssselect(".preview")  # it added nothing: no preview repeating the one before


def test_a_tool_failure_shows_on_its_row_and_counts_in_the_error_chart(client, bob, agent_run):
    client.force_login(bob)
    html = client.get(url(agent_run)).content.decode()

    assert "is-tool-failed" in row(html, 3).classes and "tool failed" in text(row(html, 3))
    assert "tool failed" not in text(row(html, 4))  # the call failed once, at #3
    assert "is-bad" in row(html, 5).classes
    assert "1 of 5 checkpoints failed or halted; 1 had a tool call fail." in html
    assert "No failed" not in html


def test_the_index_jumps_to_restores_forks_failures_phases_and_alerts(client, bob, make_checkpoint, agent_run):
    restore_checkpoint(agent_run.checkpoints.get(seq=2), actor=Actor.system("test"), reason="back")
    fork_session(agent_run.checkpoints.get(seq=4), actor=Actor.system("test"))
    make_checkpoint(agent_run, {"tool_calls": []}, name="phase_1_review", kind="phase", phase=1)
    client.force_login(bob)
    html = client.get(url(agent_run)).content.decode()
    [index] = select(html, ".landmarks")
    jumps = {text(group.cssselect(".landmark-title")[0]): links(group) for group in index.cssselect(".landmark-group")}
    for title, seq in [("Restores", 6), ("Forks", 4), ("Failures", 3), ("Failures", 5), ("Phases", 7), ("Alerts", 5)]:
        assert f"{url(agent_run)}?at={seq}#cp-{seq}" in jumps[title], (title, seq)
    jumped = client.get(url(agent_run), {"at": 3}).content.decode()
    assert rows(jumped)[0] == 3
    assert "is-target" in row(jumped, 3).classes and "is-target" not in row(jumped, 2).classes


def test_a_routine_checkpoint_jumped_to_is_not_hidden_in_a_run(client, bob, make_session, make_checkpoint):
    session = make_session("routine")
    for i in range(8):
        make_checkpoint(session, {"i": i}, name="routine", kind="routine")
    client.force_login(bob)

    html = client.get(url(session), {"at": 6}).content.decode()

    assert "is-target" in row(html, 6).classes


def test_retention_gaps_show_as_marker_rows_with_their_ranges(client, bob, make_session, make_checkpoint):
    from checkpoints.services.cleanup import delete_checkpoints

    session = make_session("kept")
    for i in range(1, 21):
        make_checkpoint(session, {"i": i}, name=f"step_{i}")
    gone = session.checkpoints.filter(seq__in=[*range(5, 10), 12]).values_list("pk", flat=True)
    delete_checkpoints(gone, actor=Actor.system("retention"))
    client.force_login(bob)

    html = client.get(url(session)).content.decode()

    assert [gap.get("id") for gap in select(html, "tr.gap-row")] == ["gap-12", "gap-5"]
    assert "#12 was removed" in html and "#5–#9 removed: 5 checkpoints" in html
    order = ids(html)
    assert order.index("cp-13") < order.index("gap-12") < order.index("cp-11")
    assert order.index("cp-10") < order.index("gap-5") < order.index("cp-4")


def test_a_gap_between_two_pages_ends_one_and_starts_the_next(client, bob, make_session, make_checkpoint):
    from checkpoints.services.cleanup import delete_checkpoints

    session = make_session("boundary")
    for i in range(1, PAGE_SIZE + 21):
        make_checkpoint(session, {"i": i}, name="step", kind="step")
    gone = session.checkpoints.filter(seq__in=range(15, 21)).values_list("pk", flat=True)  # #15–20, page 1 ends at #21
    delete_checkpoints(gone, actor=Actor.system("retention"))
    client.force_login(bob)

    first = client.get(url(session)).content.decode()
    second = client.get(url(session), {"before": rows(first)[-1]}).content.decode()

    assert rows(first)[-1] == 21 and ids(first).index("cp-21") < ids(first).index("gap-15")
    assert rows(second)[0] == 14 and ids(second).index("gap-15") < ids(second).index("cp-14")


def test_folded_branches_are_not_mistaken_for_gaps(client, bob, many_branches):
    client.force_login(bob)

    for params in ({}, {"before": 1000}, {"after": 500}):
        assert not select(client.get(url(many_branches), params), ".gap-row")


def test_row_actions_sit_in_one_menu_per_row(client, alice, session):
    client.force_login(alice)
    [row] = select(client.get(url(session)), "tr#cp-5")

    [menu] = row.cssselect("details")
    assert text(menu.cssselect("summary")[0]) == "Actions for #5"
    assert not menu.cssselect("a, button, form")  # filled when it opens, from the page's one template


def test_the_row_actions_are_on_the_page_once_not_once_a_row(client, alice, bob, session):
    """A hundred rows used to carry a hundred pin forms (2.3 kB a row); the page carries one template."""
    client.force_login(alice)
    html = client.get(url(session)).content.decode()
    [template] = select(html, "template#row-menu")
    markup = lxml_html.tostring(template).decode()
    for action in ("data-compare", 'data-action="restore/"', 'data-action="fork/"', 'data-action="pin/"'):
        assert action in markup
    assert markup.count("csrfmiddlewaretoken") == 1
    assert not any("csrfmiddlewaretoken" in lxml_html.tostring(each).decode() for each in select(html, "tr"))
    client.force_login(bob)  # a viewer: compare only, nothing that changes the session
    [template] = select(client.get(url(session)).content.decode(), "template#row-menu")
    assert "data-action" not in lxml_html.tostring(template).decode()


def test_the_fork_marker_draws_its_glyph_as_svg(client, bob, session):
    fork_session(session.checkpoints.get(seq=3), actor=Actor.system("test"))
    client.force_login(bob)
    third = row(client.get(url(session)).content.decode(), 3)

    [marker] = [mark for mark in third.cssselect(".marker") if "fork " in text(mark)]
    assert "⑂" not in text(third) and marker.cssselect("svg")


def test_a_folded_branch_counts_its_tool_failures(client, bob, make_session, make_checkpoint):
    session = make_session("folded")
    calls: list[dict] = []
    for i in range(1, 11):
        calls = [*calls, {"tool_name": "search", "success": i != 6, "error": "timeout" if i == 6 else None}]
        make_checkpoint(session, {"tool_calls": calls}, name=f"step_{i}")
    restore_checkpoint(session.checkpoints.get(seq=3), actor=Actor.system("test"))  # #4–10 fold
    client.force_login(bob)

    html = client.get(url(session)).content.decode()

    assert "1 with a failed tool call" in text(branch(html, 4))
    assert not select(html, "#cp-6")


def test_a_routine_checkpoint_whose_tool_call_failed_stays_out_of_runs(client, bob, make_session, make_checkpoint):
    session = make_session("routine-failure")
    for i in range(1, 6):
        call = {"tool_name": "heartbeat", "success": i != 3}
        make_checkpoint(session, {"tool_calls": [call] * i}, name="routine", kind="routine")
    make_checkpoint(session, {"done": True}, name="finished")
    client.force_login(bob)

    html = client.get(url(session)).content.decode()

    assert "tool failed" in text(row(html, 3))


def test_a_failed_thread_says_at_the_top_which_node_raised_what(client, bob, make_session):
    session = make_session("deploy-eu-7")
    message = "Node 'deploy' raised RuntimeError('no such cluster: prod-eu')"
    DriftAlert.objects.create(session=session, kind="node_error", message=message, severity="critical")
    url = reverse("dashboard:session_detail", args=[session.pk])
    client.force_login(bob)
    assert not select(client.get(url), ".failure-notice")  # an alert on a live run stays in the alerts list
    AgentSession.objects.filter(pk=session.pk).update(status="failed")
    notice = select(client.get(url), ".failure-notice")[0]
    assert "Failed." in text(notice) and message in text(notice)
    assert notice.cssselect(f'a[href="{reverse("dashboard:alert_list")}?session={session.pk}"]')
