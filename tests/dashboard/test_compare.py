from __future__ import annotations

from urllib.parse import urlencode

import pytest
from django.urls import reverse

from checkpoints import store
from checkpoints.models import Checkpoint
from checkpoints.services import Actor, fork_session
from tests.helpers import select, text

HTMX = {"HX-Request": "true"}


def url(a: object, b: object, **query: object) -> str:
    return f"{reverse('dashboard:compare')}?{urlencode({'a': a, 'b': b, **query})}"


def paths(page) -> list[str]:
    """The state paths the diff lists, in order."""
    return [text(path) for path in select(page, "li.diff-item .diff-path")]


@pytest.fixture
def pair(make_session, make_checkpoint):
    session = make_session()
    first = make_checkpoint(
        session,
        {
            "task": {"progress": 10, "title": "Survey"},
            "messages": [{"role": "user", "content": "Find papers on compression"}],
            "notes": "\n".join(f"line {i}" for i in range(30)),
            "obsolete": True,
        },
        name="task_started",
    )
    second = make_checkpoint(
        session,
        {
            "task": {"progress": 40, "title": "Survey"},
            "messages": [
                {"role": "user", "content": "Find papers on compression"},
                {"role": "assistant", "content": "Searching arXiv for context compression"},
            ],
            "notes": "\n".join(f"line {i}" if i != 12 else "line twelve, rewritten" for i in range(30)),
            "found": ["paper-1"],
        },
        name="search_done",
    )
    return first, second


def test_compare_names_both_checkpoints_and_summarises(client, bob, pair):
    a, b = pair
    client.force_login(bob)
    response = client.get(url(a.pk, b.pk))
    assert response.status_code == 200
    html = response.content.decode()
    assert "#1 task_started" in html and "#2 search_done" in html
    summary = text(select(html, "#diff-summary")[0])
    assert "5 changes in 5 keys: 2 changed · 2 added · 1 removed, of them 1 message appended" in summary
    assert "task.progress" in html and "obsolete" in html
    assert select(html, f'a[href="{reverse("dashboard:compare")}?a={b.pk}&b={a.pk}"]')  # swap


def test_compare_shows_a_side_by_side_line_diff_for_long_strings(client, bob, pair):
    client.force_login(bob)
    html = client.get(url(pair[0].pk, pair[1].pk)).content.decode()
    [lines] = select(html, "table.sbs")
    assert "12" in [text(word) for word in lines.cssselect("del")]  # marked in text, not by colour alone
    assert "twelve, rewritten" in [text(words) for words in lines.cssselect("ins")]
    assert "unchanged lines" in html  # context collapsed


def test_compare_shows_appended_messages_as_messages(client, bob, pair):
    client.force_login(bob)
    html = client.get(url(pair[0].pk, pair[1].pk)).content.decode()
    assert "appended" in html
    assert "assistant" in [text(role) for role in select(html, ".msg-role")]
    assert "Searching arXiv for context compression" in html


def test_compare_works_across_a_fork(client, alice, pair, make_checkpoint):
    a, _ = pair
    forked = fork_session(a, actor=Actor.for_user(alice))
    later = make_checkpoint(forked, {"task": {"progress": 99, "title": "Survey"}})
    client.force_login(alice)
    response = client.get(url(a.pk, later.pk))
    assert response.status_code == 200
    assert "across sessions (fork)" in response.content.decode()


def test_compare_of_identical_states_says_so(client, bob, pair):
    client.force_login(bob)
    html = client.get(url(pair[0].pk, pair[0].pk)).content.decode()
    assert "Identical states." in html


@pytest.mark.parametrize("query", ["", "?a=1", "?a=x&b=2", "?a=-1&b=2"])
def test_compare_without_two_ids_is_a_400_with_a_message(client, bob, query):
    client.force_login(bob)
    response = client.get(reverse("dashboard:compare") + query)
    assert response.status_code == 400
    assert "Choose two checkpoints to compare" in response.content.decode()


def test_compare_of_an_unknown_checkpoint_is_404(client, bob, pair):
    client.force_login(bob)
    assert client.get(url(pair[0].pk, 999_999)).status_code == 404


def test_compare_with_another_projects_checkpoint_is_404(
    client, bob, pair, make_session, make_checkpoint, other_project
):
    elsewhere = make_checkpoint(make_session("theirs", in_project=other_project), {"secret": 1})
    client.force_login(bob)
    assert client.get(url(pair[0].pk, elsewhere.pk)).status_code == 404
    assert client.get(url(elsewhere.pk, pair[0].pk)).status_code == 404


def test_compare_htmx_returns_the_result_fragment(client, bob, pair):
    client.force_login(bob)
    response = client.get(url(pair[0].pk, pair[1].pk), headers={"HX-Request": "true"})
    html = response.content.decode()
    assert response.status_code == 200
    assert html.lstrip().startswith('<div id="compare-result">')
    assert not select(html, "html")


def test_compare_truncates_long_values_behind_a_toggle(client, bob, make_session, make_checkpoint):
    session = make_session()
    a = make_checkpoint(session, {"blob": None})
    b = make_checkpoint(session, {"blob": {f"key{i}": "x" * 40 for i in range(200)}})
    client.force_login(bob)
    html = client.get(url(a.pk, b.pk)).content.decode()
    assert any(text(label).startswith("Show all") for label in select(html, "details.value-toggle .toggle-label"))


def test_compare_on_a_big_session_runs_a_bounded_number_of_queries(
    client, bob, big_session, django_assert_max_num_queries
):
    first = Checkpoint.objects.get(session=big_session, seq=10)
    last = Checkpoint.objects.get(session=big_session, seq=2999)
    client.force_login(bob)
    store.cache.clear()  # cold: both states are read from the chunk table
    # 4 for the signed-in user and roles, 2 checkpoints, one patch-chain read per state
    with django_assert_max_num_queries(9):
        response = client.get(url(first.pk, last.pk))
    assert response.status_code == 200


def message(i: int, words: int = 8) -> dict:
    return {"role": "assistant" if i % 2 else "user", "content": f"message {i}: " + "lorem ipsum " * words}


def test_changes_are_grouped_by_top_level_key_with_their_counts(client, bob, make_session, make_checkpoint):
    session = make_session()
    a = make_checkpoint(session, {"memory": {"goal": "a", "old": 1}, "messages": [message(0)], "step": 1})
    b = make_checkpoint(session, {"memory": {"goal": "b", "new": 2}, "messages": [message(0), message(1)], "step": 2})
    client.force_login(bob)
    html = client.get(url(a.pk, b.pk)).content.decode()
    index = [text(entry) for entry in select(html, "nav.diff-index li")]
    assert index == ["memory ±1 +1 −1", "messages +1", "step ±1"]
    titles = [text(title) for title in select(html, ".diff-group-title")]
    assert titles == [
        "memory 3 changes: 1 changed 1 added 1 removed",
        "messages 1 change: 1 added",
        "step 1 change: 1 changed",
    ]


def test_appended_messages_collapse_into_one_row_that_opens_a_page_at_a_time(
    client, bob, make_session, make_checkpoint
):
    session = make_session()
    a = make_checkpoint(session, {"messages": [message(0)]})
    b = make_checkpoint(session, {"messages": [message(i) for i in range(313)]})
    client.force_login(bob)
    html = client.get(url(a.pk, b.pk)).content.decode()
    assert "+ 312 messages" in text(html)
    assert "message 200" not in html  # collapsed: none of them is rendered
    opener = url(a.pk, b.pk, expand="r:messages@1")
    [link] = select(html, f'a[hx-get="{opener}"]')
    assert link.get("href").startswith(f"{opener}#diff-r-")  # works without JavaScript

    response = client.get(url(a.pk, b.pk, expand="r:messages@1"), headers=HTMX)
    first = response.content.decode()
    assert not select(response, "html")  # the rows only
    assert len(select(response, ".diff-item")) == 50
    assert "messages[1]" in first and "messages[50]" in first and "messages[51]" not in first
    assert "Show 50 more" in first and "262 more in messages[1–312]" in first

    last = client.get(url(a.pk, b.pk, expand="r:messages@1", offset=300), headers=HTMX).content.decode()
    assert len(select(last, ".diff-item")) == 12
    assert "messages[312]" in last and "more in" not in last

    page = client.get(url(a.pk, b.pk, expand="r:messages@1", offset=50)).content.decode()  # without JavaScript
    assert select(page, "html") and "messages[51]" in page and "showing 51–100" in page


def test_a_few_appended_items_are_shown_as_they_are(client, bob, make_session, make_checkpoint):
    session = make_session()
    a = make_checkpoint(session, {"messages": [message(0)]})
    b = make_checkpoint(session, {"messages": [message(i) for i in range(4)]})
    client.force_login(bob)
    html = client.get(url(a.pk, b.pk)).content.decode()
    assert len(select(html, ".diff-item.diff-item-added")) == 3 and "Show them" not in html


def test_a_group_shows_its_first_rows_and_the_rest_on_demand(client, bob, make_session, make_checkpoint):
    session = make_session()
    a = make_checkpoint(session, {"memory": {f"k{i:03}": i for i in range(120)}})
    b = make_checkpoint(session, {"memory": {f"k{i:03}": i + 1 for i in range(120)}})
    client.force_login(bob)
    html = client.get(url(a.pk, b.pk)).content.decode()
    assert len(select(html, ".diff-item")) == 8
    assert "112 more in memory" in text(html)
    more = client.get(url(a.pk, b.pk, expand="g:memory", offset=8), headers=HTMX).content.decode()
    assert len(select(more, ".diff-item")) == 50 and "memory.k008" in more and "62 more in memory" in more


def test_groups_past_the_first_screen_open_on_demand(client, bob, make_session, make_checkpoint):
    session = make_session()
    a = make_checkpoint(session, {f"key{i:02}": {"a": 1, "b": 1} for i in range(30)})
    b = make_checkpoint(session, {f"key{i:02}": {"a": 2, "b": 2} for i in range(30)})
    client.force_login(bob)
    html = client.get(url(a.pk, b.pk)).content.decode()
    assert len(select(html, ".diff-item")) == 40  # PAGE_ROWS: 20 groups of 2
    assert len(select(html, ".diff-group")) == 30  # every group is listed and reachable from the index
    assert "Show the changes in key29" in [text(link) for link in select(html, ".diff-group .diff-more a")]
    rows = client.get(url(a.pk, b.pk, expand="g:key29"), headers=HTMX)
    assert paths(rows) == ["key29.a", "key29.b"]


def test_the_path_filter_keeps_the_paths_that_contain_it(client, bob, make_session, make_checkpoint):
    session = make_session()
    a = make_checkpoint(session, {"memory": {"goal": "a", "plan": "x"}, "task": {"goal": "a"}, "step": 1})
    b = make_checkpoint(session, {"memory": {"goal": "b", "plan": "y"}, "task": {"goal": "b"}, "step": 2})
    client.force_login(bob)
    html = client.get(url(a.pk, b.pk, path="GOAL")).content.decode()
    assert paths(html) == ["memory.goal", "task.goal"]
    assert text(select(html, "#diff-summary")[0]).startswith("2 changes in 2 keys on paths containing “GOAL” (of 4)")
    assert select(html, "input[name=path][value=GOAL]")
    nothing = client.get(url(a.pk, b.pk, path="nowhere")).content.decode()
    assert "No change on a path containing “nowhere” (4 changes elsewhere)" in text(nothing)


def test_the_path_filter_is_kept_by_the_links_that_open_more(client, bob, make_session, make_checkpoint):
    session = make_session()
    a = make_checkpoint(session, {"messages": [message(0)], "notes": []})
    b = make_checkpoint(session, {"messages": [message(i) for i in range(40)], "notes": list(range(40))})
    client.force_login(bob)
    html = client.get(url(a.pk, b.pk, path="messages")).content.decode()
    assert "notes" not in text(select(html, "#diff")[0])
    assert select(html, f'a[hx-get="{url(a.pk, b.pk, path="messages", expand="r:messages@1")}"]')


def test_an_addition_shows_its_new_value_alone_and_a_change_both_sides(client, bob, make_session, make_checkpoint):
    session = make_session()
    a = make_checkpoint(session, {"progress": 10})
    b = make_checkpoint(session, {"progress": 40, "found": ["paper-1"]})
    client.force_login(bob)
    html = client.get(url(a.pk, b.pk)).content.decode()
    items = {text(item.cssselect(".diff-path")[0]): item for item in select(html, "li.diff-item")}
    added = items["found"]
    assert added.cssselect(".diff-val.diff-add") and not added.cssselect(".diff-del") and "absent" not in text(added)
    assert text(items["progress"]) == "progress ± changed A · #1: 10 → B · #2: 40"  # short values: on one line


def test_a_longer_change_shows_a_beside_b(client, bob, make_session, make_checkpoint):
    session = make_session()
    a = make_checkpoint(session, {"note": "The build failed on the retry path; rerunning the flaky test first."})
    b = make_checkpoint(
        session, {"note": "The build passed after skipping the flaky test; paged the on-call engineer."}
    )
    client.force_login(bob)
    html = client.get(url(a.pk, b.pk)).content.decode()
    [pair] = select(html, ".diff-pair")
    old, new = pair.cssselect(".diff-val")
    assert "diff-del" in old.classes and text(old).startswith("A · #1") and "retry path" in text(old)
    assert "diff-add" in new.classes and text(new).startswith("B · #2") and "skipping" in text(new)


@pytest.fixture
def branches(make_session, make_checkpoint):
    """#1 … #4 on one line, then the agent went back to #2 and went on: #5, #6."""
    session = make_session()
    line = [make_checkpoint(session, {"plan": "a", "done": list(range(i))}) for i in range(1, 5)]
    retry = make_checkpoint(session, {"plan": "b", "done": [0]}, parent=line[1].pk)
    retry_next = make_checkpoint(session, {"plan": "b", "done": [0, "x"]})
    return line, retry, retry_next


def test_checkpoints_on_two_branches_are_compared_from_their_common_ancestor(client, bob, branches):
    line, _, tip = branches
    client.force_login(bob)
    html = client.get(url(line[3].pk, tip.pk)).content.decode()
    lineage = text(select(html, "#lineage")[0])
    assert "A and B are on different branches. Their common ancestor is #2" in lineage
    assert "Showing what changed on B's branch since then." in lineage
    assert "#2 · common ancestor" in text(select(html, "#diff")[0])
    assert paths(html) == ["done[1]", "plan"]  # B's branch: done [0] → [0, "x"], plan a → b; not A's done[2], [3]
    assert select(html, f'#lineage a[href="{url(tip.pk, line[3].pk)}"]')  # A's branch since #2
    direct = client.get(url(line[3].pk, tip.pk, base="a")).content.decode()
    assert "Showing A and B directly." in text(direct)
    assert "done[3]" in paths(direct)


def test_checkpoints_on_one_line_are_compared_directly(client, bob, branches):
    line, retry, tip = branches
    client.force_login(bob)
    html = client.get(url(line[0].pk, tip.pk)).content.decode()
    assert "A is an ancestor of B" in html and "common ancestor" not in html
    back = client.get(url(tip.pk, retry.pk)).content.decode()
    assert "B is an ancestor of A" in back


def test_across_a_fork_the_diff_starts_where_the_fork_left_its_source(client, alice, branches, make_checkpoint):
    line, _, _ = branches
    forked = fork_session(line[2], actor=Actor.system())
    later = make_checkpoint(forked, {"plan": "fork", "done": [0, 1, 2]})
    client.force_login(alice)
    html = client.get(url(line[3].pk, later.pk)).content.decode()
    lineage = text(select(html, "#lineage")[0])
    assert "on different branches (across a fork). Their common ancestor is #3" in lineage
    assert "1 change" in text(select(html, "#diff-summary")[0]) and paths(html) == ["plan"]


def test_two_roots_are_compared_directly_and_say_they_share_no_history(client, bob, make_session, make_checkpoint):
    session = make_session()
    a = make_checkpoint(session, {"run": 1})
    b = make_checkpoint(session, {"run": 2}, new_root=True)
    client.force_login(bob)
    assert "share no history" in client.get(url(a.pk, b.pk)).content.decode()


def growing_session(make_session, make_checkpoint, name: str, scale: int):
    """Two checkpoints far apart: messages appended, memory keys changed, a long text rewritten; `scale` times
    as many of each."""
    session = make_session(name)
    lines = [f"line {i} of the notes" for i in range(50 * scale)]
    a = make_checkpoint(
        session,
        {"messages": [message(0, 40)], "memory": {f"k{i}": i for i in range(20 * scale)}, "notes": "\n".join(lines)},
    )
    lines[::7] = [f"line {i} rewritten" for i in range(0, len(lines), 7)]
    b = make_checkpoint(
        session,
        {
            "messages": [message(i, 40) for i in range(50 * scale)],
            "memory": {f"k{i}": {"value": i, "note": "x" * 200} for i in range(20 * scale)},
            "notes": "\n".join(lines),
        },
    )
    return a, b


def test_the_page_weighs_a_screenful_while_the_state_grows_a_hundred_times(client, bob, make_session, make_checkpoint):
    client.force_login(bob)
    small_a, small_b = growing_session(make_session, make_checkpoint, "small", 1)
    big_a, big_b = growing_session(make_session, make_checkpoint, "big", 100)
    assert big_b.raw_bytes > 90 * small_b.raw_bytes
    small = len(client.get(url(small_a.pk, small_b.pk)).content)
    big = len(client.get(url(big_a.pk, big_b.pk)).content)
    assert big < 1.5 * small and big < 150_000


def test_huge_values_stay_within_the_pages_budget(client, bob, make_session, make_checkpoint):
    session = make_session()
    quoted = '"' * 100_000  # every character escapes to six
    a = make_checkpoint(session, {f"k{i:02}": quoted + "a" for i in range(40)})
    b = make_checkpoint(session, {f"k{i:02}": quoted + "b" for i in range(40)})
    client.force_login(bob)
    response = client.get(url(a.pk, b.pk))
    html = response.content.decode()
    assert len(response.content) < 1_000_000
    assert select(html, "table.sbs")  # the first ones line by line
    assert "not shown: this page already shows enough" in html
    assert f"/checkpoints/{b.pk}/tree/?path=%5B%22k39%22%5D" in html  # where the whole value is


@pytest.mark.parametrize(
    "query",
    [{"expand": "g:memory", "offset": "99999"}, {"expand": "r:nowhere@3"}, {"expand": "g:memory", "offset": "x"}],
)
def test_a_show_more_link_that_does_not_fit_the_diff_still_answers(client, bob, make_session, make_checkpoint, query):
    session = make_session()
    a = make_checkpoint(session, {"memory": {f"k{i:02}": i for i in range(20)}})
    b = make_checkpoint(session, {"memory": {f"k{i:02}": -i for i in range(1, 21)}})
    client.force_login(bob)
    response = client.get(url(a.pk, b.pk, **query), headers=HTMX)
    assert response.status_code == 200 and select(response, ".diff-item")


# ---- what the form takes: the numbers the console shows ------------------------------------------


def typed(session: object, a: str, b: str) -> str:
    """What the Compare form sends: the session it is about and A and B as typed."""
    return f"{reverse('dashboard:compare')}?{urlencode({'session': session, 'a': a, 'b': b})}"


def test_the_form_takes_the_seqs_the_console_shows(client, bob, pair):
    first, second = pair
    client.force_login(bob)
    for a, b in (("#1", "#2"), ("1", "2"), (" #1 ", "2")):
        html = client.get(typed(first.session_id, a, b)).content.decode()
        assert "A · #1" in html and "B · #2" in html, (a, b)
        assert "changed" in html


def test_the_form_names_any_checkpoint_by_id_with_a_prefix(client, bob, pair, make_session, make_checkpoint):
    first, _ = pair
    other = make_checkpoint(make_session("run-2"), {"task": {"progress": 99}})
    client.force_login(bob)
    response = client.get(typed(first.session_id, "#1", f"id:{other.pk}"))
    assert response.status_code == 200 and "across sessions" in response.content.decode()


def test_the_form_shows_the_comparison_as_seqs_of_its_session(client, bob, pair):
    first, second = pair
    client.force_login(bob)
    html = client.get(url(first.pk, second.pk)).content.decode()  # a link: ids
    values = {field.get("name"): field.get("value") for field in select(html, "form input[name]")}
    assert (values["a"], values["b"], values["session"]) == ("#1", "#2", str(first.session_id))


def test_a_seq_that_is_no_checkpoint_replaces_the_old_comparison_with_a_message(client, bob, pair):
    first, _ = pair
    client.force_login(bob)
    response = client.get(typed(first.session_id, "1", "#99"), headers={"HX-Request": "true"})
    html = response.content.decode()
    assert response.status_code == 200  # htmx swaps it in: the previous comparison goes
    assert html.lstrip().startswith('<div id="compare-result">')
    assert "No checkpoint #99 in run-1." in html and not select(html, "#diff-summary")
    assert client.get(typed(first.session_id, "1", "#99")).status_code == 404


def test_a_seq_needs_a_session(client, bob, pair):
    client.force_login(bob)
    response = client.get(typed("", "1", "2"))
    assert response.status_code == 400
    assert "#1 is a checkpoint of which session?" in response.content.decode()


def test_seqs_of_another_projects_session_are_not_found(
    client, bob, pair, make_session, make_checkpoint, other_project
):
    theirs = make_session("theirs", in_project=other_project)
    make_checkpoint(theirs, {"secret": 1})
    make_checkpoint(theirs, {"secret": 2})
    client.force_login(bob)
    response = client.get(typed(theirs.pk, "1", "2"))
    assert response.status_code == 404 and "secret" not in response.content.decode()
