from __future__ import annotations

import re
from urllib.parse import urlencode

import pytest
from django.urls import reverse

from checkpoints import store
from checkpoints.models import Checkpoint
from checkpoints.services import Actor, fork_session


def url(a: object, b: object) -> str:
    return f"{reverse('dashboard:compare')}?a={a}&b={b}"


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


def test_compare_requires_sign_in(client, pair):
    response = client.get(url(pair[0].pk, pair[1].pk))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_compare_needs_a_role(client, nobody, pair):
    client.force_login(nobody)
    assert client.get(url(pair[0].pk, pair[1].pk)).status_code == 403


def test_compare_names_both_checkpoints_and_summarises(client, bob, pair):
    a, b = pair
    client.force_login(bob)
    response = client.get(url(a.pk, b.pk))
    assert response.status_code == 200
    html = response.content.decode()
    assert "#1 task_started" in html and "#2 search_done" in html
    summary = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html.split('id="diff-summary"')[1].split("</p>")[0]))
    assert "2 changed" in summary and "2 added" in summary and "1 removed" in summary
    assert "1 list item appended" in summary and "1 message" in summary
    assert "task.progress" in html and "obsolete" in html
    assert f'href="{reverse("dashboard:compare")}?a={b.pk}&amp;b={a.pk}"' in html  # swap


def test_compare_shows_a_side_by_side_line_diff_for_long_strings(client, bob, pair):
    client.force_login(bob)
    html = client.get(url(pair[0].pk, pair[1].pk)).content.decode()
    assert 'class="sbs"' in html
    assert "<del>12</del>" in html  # the changed word, marked in text, not by colour alone
    assert "<ins>twelve, rewritten</ins>" in html
    assert "unchanged lines" in html  # context collapsed


def test_compare_shows_appended_messages_as_messages(client, bob, pair):
    client.force_login(bob)
    html = client.get(url(pair[0].pk, pair[1].pk)).content.decode()
    assert "appended" in html
    assert '<span class="msg-role">assistant</span>' in html
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


def test_compare_refuses_post(client, bob, pair):
    client.force_login(bob)
    assert client.post(url(pair[0].pk, pair[1].pk)).status_code == 405


def test_compare_htmx_returns_the_result_fragment(client, bob, pair):
    client.force_login(bob)
    response = client.get(url(pair[0].pk, pair[1].pk), headers={"HX-Request": "true"})
    html = response.content.decode()
    assert response.status_code == 200
    assert html.lstrip().startswith('<div id="compare-result">')
    assert "<html" not in html


def test_compare_truncates_long_values_behind_a_toggle(client, bob, make_session, make_checkpoint):
    session = make_session()
    a = make_checkpoint(session, {"blob": None})
    b = make_checkpoint(session, {"blob": {f"key{i}": "x" * 40 for i in range(200)}})
    client.force_login(bob)
    html = client.get(url(a.pk, b.pk)).content.decode()
    assert 'class="value-toggle"' in html and "Show all" in html


def test_compare_caps_the_rendered_entries(client, bob, make_session, make_checkpoint):
    session = make_session()
    a = make_checkpoint(session, {f"k{i}": i for i in range(620)})
    b = make_checkpoint(session, {f"k{i}": i + 1 for i in range(620)})
    client.force_login(bob)
    html = client.get(url(a.pk, b.pk)).content.decode()
    assert "Showing the first 500 of 620 changes" in html
    assert html.count('class="diff-row ') == 500


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
    assert 'name="a" value="#1"' in html and 'name="b" value="#2"' in html
    assert f'name="session" value="{first.session_id}"' in html


def test_a_seq_that_is_no_checkpoint_replaces_the_old_comparison_with_a_message(client, bob, pair):
    first, _ = pair
    client.force_login(bob)
    response = client.get(typed(first.session_id, "1", "#99"), headers={"HX-Request": "true"})
    html = response.content.decode()
    assert response.status_code == 200  # htmx swaps it in: the previous comparison goes
    assert html.lstrip().startswith('<div id="compare-result">')
    assert "No checkpoint #99 in run-1." in html and "diff-summary" not in html
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
