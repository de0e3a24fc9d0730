from __future__ import annotations

import json
from urllib.parse import quote

import orjson
import pytest
from django.urls import reverse

from checkpoints import store
from checkpoints.models import AgentSession, Phase
from checkpoints.services import Actor, fork_session, restore_checkpoint
from checkpoints.services.cleanup import delete_checkpoints
from dashboard.presenters.state_tree import CHILD_CAP
from dashboard.presenters.transcript import TRANSCRIPT_PAGE
from tests.helpers import select, text

HTMX = {"HX-Request": "true"}

CONVERSATION = {
    "task": {"title": "Fix the flaky tests", "progress": 40},
    "messages": [
        {"role": "system", "content": "You are a careful coding agent."},
        {"role": "user", "content": "Make the test suite green."},
        {
            "role": "assistant",
            "content": "Running the tests first.",
            "tool_calls": [{"id": "call_1", "name": "run_tests", "arguments": {"target": "tests/store"}}],
        },
        {"role": "tool", "tool_call_id": "call_1", "name": "run_tests", "content": "3 failed, 40 passed"},
    ],
    "tool_calls": [
        {
            "id": "call_1",
            "tool_name": "run_tests",
            "arguments": {"target": "tests/store"},
            "result": None,
            "error": "3 failed, 40 passed",
            "success": False,
        }
    ],
}


def shown(html: str) -> list[int]:
    """The indexes of the transcript's messages on the page, in order."""
    return [int(message.get("id").removeprefix("msg-")) for message in select(html, "li.msg[id^=msg-]")]


def tool_io(call) -> dict[str, str]:
    """A tool call's arguments, result and error, by their label."""
    return {text(term): text(term.getnext()) for term in call.cssselect("dl.tool-io dt")}


def url(checkpoint, name: str = "dashboard:checkpoint_detail") -> str:
    return reverse(name, args=[checkpoint.pk])


def subtree_url(checkpoint, path: list, offset: int | None = None) -> str:
    query = f"?path={quote(json.dumps(path, separators=(',', ':')))}"
    return url(checkpoint, "dashboard:checkpoint_subtree") + query + (f"&offset={offset}" if offset is not None else "")


@pytest.fixture
def session(make_session):
    return make_session("run-1")


@pytest.fixture
def checkpoint(session, make_checkpoint):
    make_checkpoint(session, {"messages": []}, name="task_started", step=0)
    return make_checkpoint(
        session, CONVERSATION, name="tests_failed", status="failed", status_reason="3 tests failed", step=1, phase=2
    )


VIEWS = ["dashboard:checkpoint_detail", "dashboard:checkpoint_subtree", "dashboard:checkpoint_download"]


@pytest.mark.parametrize("name", VIEWS)
def test_unknown_checkpoint_is_404(client, bob, name):
    client.force_login(bob)
    assert client.get(reverse(name, args=[999_999])).status_code == 404


@pytest.mark.parametrize("name", VIEWS)
def test_another_projects_checkpoint_is_404(client, bob, make_session, make_checkpoint, other_project, name):
    elsewhere = make_checkpoint(make_session("theirs", in_project=other_project), {"secret": 1})
    client.force_login(bob)
    assert client.get(url(elsewhere, name)).status_code == 404


def test_checkpoint_page_shows_its_metadata(client, bob, session, checkpoint):
    Phase.objects.create(session=session, number=2, name="Repair", status="in_progress")
    client.force_login(bob)
    response = client.get(url(checkpoint))
    html = response.content.decode()
    assert response.status_code == 200
    assert "#2" in html and "tests_failed" in html and "3 tests failed" in html
    assert select(html, ".status-failed") and "2 · Repair" in html
    assert checkpoint.state_hash_hex in html and checkpoint.root_hex in html
    parent = checkpoint.parent
    assert "#1 task_started" in [text(link) for link in select(html, f'a[href="{url(parent)}"]')]
    assert select(html, f'a[href="{url(checkpoint, "dashboard:checkpoint_download")}"]')
    assert select(html, f'a[href$="?a={parent.pk}&b={checkpoint.pk}"]')  # compare with previous
    assert select(html, 'a[href$="?at=2#cp-2"]')  # back to its place in the timeline


def test_htmx_request_gets_the_checkpoint_without_the_layout(client, bob, checkpoint):
    client.force_login(bob)
    html = client.get(url(checkpoint), headers=HTMX).content.decode()
    assert html.lstrip().startswith('<div id="checkpoint">')
    assert not select(html, "html") and "tests_failed" in html


def test_transcript_shows_roles_messages_and_tool_calls_with_their_outcome(client, bob, checkpoint):
    client.force_login(bob)
    html = client.get(url(checkpoint)).content.decode()
    [transcript] = select(html, "#transcript")
    roles = {role for message in transcript.cssselect("li.msg") for role in message.classes if role != "msg"}
    assert roles == {"msg-system", "msg-user", "msg-assistant"}  # the tool's reply is shown with its call
    assert "Make the test suite green." in text(transcript)
    [call] = transcript.cssselect(".tool-call")
    assert text(call.cssselect(".tool-name")[0]) == "run_tests"
    assert tool_io(call) == {"Arguments": '{"target": "tests/store"}', "Error": "3 failed, 40 passed"}  # once
    assert call.cssselect("dt + dd > pre.diff-del") and text(call.cssselect(".badge")[0]) == "✕ failed"


def test_tool_calls_that_carry_their_own_result_and_success(client, bob, session, make_checkpoint):
    state = {
        "messages": [
            {"role": "user", "content": "What is in the fridge?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"tool_name": "list_items", "arguments": '{"shelf": 2}', "result": "milk, eggs", "success": True}
                ],
            },
        ]
    }
    checkpoint = make_checkpoint(session, state)
    client.force_login(bob)
    [call] = select(client.get(url(checkpoint)), ".tool-call")
    assert text(call.cssselect(".tool-name")[0]) == "list_items"
    assert tool_io(call) == {"Arguments": '{"shelf": 2}', "Result": "milk, eggs"}
    assert text(call.cssselect(".badge")[0]) == "✓ succeeded"


def test_long_conversations_show_the_latest_messages_and_load_earlier_ones(client, bob, session, make_checkpoint):
    messages = [{"role": "user" if i % 2 else "assistant", "content": f"message number {i}"} for i in range(150)]
    checkpoint = make_checkpoint(session, {"messages": messages})
    client.force_login(bob)
    html = client.get(url(checkpoint)).content.decode()
    assert shown(html) == list(range(150 - TRANSCRIPT_PAGE, 150))
    assert f"Show {TRANSCRIPT_PAGE} earlier messages" in html
    earlier = client.get(url(checkpoint), {"before": 90}, headers=HTMX).content.decode()
    assert not select(earlier, "html")
    assert shown(earlier) == list(range(30, 90))
    [more] = select(earlier, 'a[href*="before=30"]')
    assert text(more) == "Show 30 earlier messages"


def test_a_state_without_messages_has_no_transcript(client, bob, session, make_checkpoint):
    checkpoint = make_checkpoint(session, {"mailbox": {"pending": 3}})
    client.force_login(bob)
    html = client.get(url(checkpoint)).content.decode()
    assert not select(html, "#transcript") and select(html, "#state")


def test_agent_text_is_escaped_everywhere(client, alice, session, make_checkpoint):
    evil = "<img src=x onerror=alert(1)>"
    state = {
        evil: evil,
        "messages": [
            {"role": "assistant", "content": evil, "tool_calls": [{"id": "c", "name": evil, "arguments": {"q": evil}}]},
            {"role": "tool", "tool_call_id": "c", "content": evil},
        ],
    }
    checkpoint = make_checkpoint(session, state, name=evil, status_reason=evil)
    client.force_login(alice)
    html = client.get(url(checkpoint)).content.decode()
    assert evil not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    tree = client.get(subtree_url(checkpoint, ["messages"]), headers=HTMX).content.decode()
    assert evil not in tree and "&lt;img" in tree


def test_state_tree_renders_the_top_levels_and_leaves_big_or_deep_parts_to_load(client, bob, session, make_checkpoint):
    state = {
        "items": [{"n": i, "label": f"item {i}"} for i in range(300)],
        "deep": {"a": {"b": {"c": {"d": {"e": 1}}}}},
        "flag": True,
        "nothing": None,
    }
    checkpoint = make_checkpoint(session, state)
    client.force_login(bob)
    html = client.get(url(checkpoint)).content.decode()
    assert "items" in [text(key) for key in select(html, ".t-key")] and "300 items" in html
    assert [text(value) for value in select(html, ".t-bool, .t-null")] == ["true", "null"]
    assert f"Show {CHILD_CAP} more ({CHILD_CAP} of 300 shown)" in html
    # a branch left to load carries its URL once, in the link console.js follows when it opens (#23: page weight);
    # how deep the chain comes with the page depends on the inline budget the 300 items share
    links = {a.get("href"): a.text_content() for a in select(html, "#state details > ul > li.lazy > a")}
    [deep] = [
        subtree_url(checkpoint, ["deep", "a", "b", "c"][:n])
        for n in (2, 3, 4)
        if subtree_url(checkpoint, ["deep", "a", "b", "c"][:n]) in links
    ]
    assert links[deep] == "Load 1 entry"
    assert all(el.getparent().get("class") == "more" for el in select(html, "#state [hx-get]"))  # "show more" only


def test_subtree_loads_the_entries_at_a_path_and_pages_through_them(client, bob, session, make_checkpoint):
    state = {"items": [{"n": i} for i in range(120)], "deep": {"a": {"b": {"c": {"d": {"e": "bottom"}}}}}}
    checkpoint = make_checkpoint(session, state)
    client.force_login(bob)
    deep = client.get(subtree_url(checkpoint, ["deep", "a", "b", "c"]), headers=HTMX)
    assert deep.status_code == 200
    assert '"bottom"' in text(deep.content.decode()) and not select(deep, "html")
    page = client.get(subtree_url(checkpoint, ["items"], offset=100), headers=HTMX).content.decode()
    assert [text(index) for index in select(page, ".t-index")][:2] == ["[100]", "[101]"]
    assert "[119]" in page and "Show" not in page
    first = client.get(subtree_url(checkpoint, ["items"]), headers=HTMX).content.decode()
    assert "offset=50" in first


def test_subtree_without_htmx_is_a_page_of_its_own(client, bob, session, make_checkpoint):
    checkpoint = make_checkpoint(session, {"memory": {"facts": ["a", "b"]}})
    client.force_login(bob)
    html = client.get(subtree_url(checkpoint, ["memory", "facts"])).content.decode()
    assert select(html, "html") and "memory.facts" in html and "Back to the checkpoint" in html


def test_long_strings_come_in_full_when_opened(client, bob, session, make_checkpoint):
    essay = "<p>" + "word " * 2000 + "</p>"
    checkpoint = make_checkpoint(session, {"essay": essay})
    client.force_login(bob)
    html = client.get(url(checkpoint)).content.decode()
    assert "word " * 100 not in html  # only a preview with the page
    assert "Load the whole text" in html
    full = client.get(subtree_url(checkpoint, ["essay"]), headers=HTMX).content.decode()
    assert full.startswith('<pre class="code">&lt;p&gt;word word')


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("not json", "path must be a JSON list"),
        ('{"a": 1}', "path must be a JSON list"),
        ('["nope"]', 'no key "nope"'),
        ('["items", 5]', "no index 5 in items (3 items)"),
        ('["items", "0"]', 'no index "0"'),
        ("[true]", "not true"),
        ('["title", 0]', "title is a value"),
        (json.dumps(["items"] * 80), "deeper than"),
    ],
)
def test_a_bad_subtree_path_is_refused_with_a_message(client, bob, session, make_checkpoint, path, message):
    checkpoint = make_checkpoint(session, {"items": [1, 2, 3], "title": "x"})
    client.force_login(bob)
    response = client.get(url(checkpoint, "dashboard:checkpoint_subtree"), {"path": path}, headers=HTMX)
    assert response.status_code == 400
    assert message in response.content.decode()
    assert response["Content-Type"].startswith("text/plain")


def test_a_bad_subtree_offset_is_refused(client, bob, checkpoint):
    client.force_login(bob)
    response = client.get(url(checkpoint, "dashboard:checkpoint_subtree"), {"path": '["messages"]', "offset": "-1"})
    assert response.status_code == 400


def test_download_is_the_canonical_json_of_the_state(client, bob, checkpoint):
    client.force_login(bob)
    response = client.get(url(checkpoint, "dashboard:checkpoint_download"))
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response["Content-Disposition"] == 'attachment; filename="run-1-2.json"'
    assert response.content == store.load_state_json(bytes(checkpoint.root))
    assert orjson.loads(response.content) == CONVERSATION


def test_download_name_keeps_only_safe_characters_of_the_session_id(client, bob, checkpoint):
    AgentSession.objects.filter(pk=checkpoint.session_id).update(external_id='../the "run"\r\nü')
    client.force_login(bob)
    response = client.get(url(checkpoint, "dashboard:checkpoint_download"))
    assert response["Content-Disposition"] == "attachment; filename*=utf-8''..the_run%C3%BC-2.json"


def test_viewer_sees_no_restore_fork_or_pin_controls(client, bob, checkpoint):
    client.force_login(bob)
    html = client.get(url(checkpoint)).content.decode()
    assert url(checkpoint, "dashboard:checkpoint_restore") not in html
    assert url(checkpoint, "dashboard:checkpoint_fork") not in html
    assert url(checkpoint, "dashboard:checkpoint_pin") not in html


def test_operator_sees_restore_fork_and_pin(client, alice, checkpoint, make_checkpoint):
    make_checkpoint(checkpoint.session, {"messages": []}, name="retried")  # the head has no Restore: see test_actions
    client.force_login(alice)
    html = client.get(url(checkpoint)).content.decode()
    assert [text(a) for a in select(html, f'a[href="{url(checkpoint, "dashboard:checkpoint_restore")}"]')] == [
        "Restore"
    ]
    assert [text(a) for a in select(html, f'a[href="{url(checkpoint, "dashboard:checkpoint_fork")}"]')] == ["Fork"]
    [pin] = select(html, f'form[action="{url(checkpoint, "dashboard:checkpoint_pin")}"]')
    assert pin.cssselect("input[name=pinned][value='1']")
    # Pin swaps its own control over htmx (the notice shows where the operator is) and moves no focus on load
    assert (pin.get("hx-post"), pin.get("hx-target")) == (
        url(checkpoint, "dashboard:checkpoint_pin"),
        "closest .pin-control",
    )
    assert not select(html, "[autofocus]")


def test_history_names_restores_and_forks_of_a_checkpoint(client, bob, session, checkpoint):
    target = checkpoint.parent
    restored = restore_checkpoint(target, actor=Actor.system())
    fork = fork_session(target, actor=Actor.system(), external_id="run-1-alt")
    client.force_login(bob)
    html = client.get(url(target)).content.decode()
    history = {text(item): item.cssselect("a")[-1].get("href") for item in select(html, "li:has(> a)")}
    assert history[f"↺ Restored by #3 {restored.name or restored.kind}"] == url(restored)
    assert history["Next on its branch: #2 tests_failed"] == url(checkpoint)
    assert history["Forked into run-1-alt"] == reverse("dashboard:session_detail", args=[fork.pk])
    restore_page = client.get(url(restored))
    assert select(restore_page, f'a[href$="?a={checkpoint.pk}&b={restored.pk}"]')  # with the head it replaced
    fork_first = fork.checkpoints.get(seq=1)
    assert "The start of a fork of" in client.get(url(fork_first)).content.decode()


def test_what_changed_here_comes_first_with_the_diff_from_the_parent(client, bob, checkpoint):
    client.force_login(bob)
    html = client.get(url(checkpoint)).content.decode()
    ids = [element.get("id") for element in select(html, "[id]")]
    assert ids.index("changes") < ids.index("meta-heading") < ids.index("transcript")
    [changes] = select(html, "#changes")
    assert text(changes.cssselect(".section-head p")[0]).startswith("From its parent, #1 task_started")
    assert changes.cssselect(f'.section-head a[href="{url(checkpoint.parent)}"]')
    assert "+ 4 messages" in text(changes) and "task" in [text(path) for path in changes.cssselect(".diff-path")]
    compare = f"{reverse('dashboard:compare')}?a={checkpoint.parent_id}&b={checkpoint.pk}&base=a"
    assert [text(link) for link in changes.cssselect(f'a[href="{compare}"]')] == ["Open in Compare"]


def test_what_changed_here_shows_a_screenful_of_a_big_change(client, bob, session, make_checkpoint):
    make_checkpoint(session, {"memory": {f"k{i}": i for i in range(500)}})
    big = make_checkpoint(session, {"memory": {f"k{i}": -i for i in range(1, 501)}})
    client.force_login(bob)
    [changes] = select(client.get(url(big)), "#changes")
    assert len(changes.cssselect(".diff-item")) == 8 and "493 more in memory" in text(changes)


def test_a_root_says_there_is_nothing_to_compare_it_with(client, bob, session, make_checkpoint):
    first = make_checkpoint(session, {"n": 1})
    again = make_checkpoint(session, {"n": 2}, new_root=True)
    client.force_login(bob)
    assert "A root: the first checkpoint of the session." in client.get(url(first)).content.decode()
    assert "A root: a new start within the session" in client.get(url(again)).content.decode()


def test_after_its_parent_was_deleted_the_change_is_from_the_kept_ancestor(client, bob, session, make_checkpoint):
    first = make_checkpoint(session, {"n": 1})
    gone = make_checkpoint(session, {"n": 2})
    after = make_checkpoint(session, {"n": 3})
    delete_checkpoints([gone.pk], actor=Actor.system())
    client.force_login(bob)
    [changes] = select(client.get(url(after)), "#changes")
    [source] = changes.cssselect(".section-head p")
    assert text(source).startswith("From its parent, #1") and source.cssselect(f'a[href="{url(first)}"]')
    assert "1 change" in text(changes.cssselect("#diff-summary")[0])


def test_a_restore_shows_what_it_changed_from_the_head_it_replaced(client, bob, session, checkpoint):
    restored = restore_checkpoint(checkpoint.parent, actor=Actor.system())
    client.force_login(bob)
    [changes] = select(client.get(url(restored)), "#changes")
    [source] = changes.cssselect(".section-head p")
    assert text(source).startswith("From the head it replaced, #2 tests_failed")
    assert source.cssselect(f'a[href="{url(checkpoint)}"]') and "− 4 messages" in text(changes)


def test_the_start_of_a_fork_is_the_same_state_as_its_source(client, bob, checkpoint):
    fork = fork_session(checkpoint, actor=Actor.system(), external_id="run-1-alt")
    client.force_login(bob)
    html = client.get(url(fork.checkpoints.get(seq=1))).content.decode()
    assert "at <a" in html and ": the same state, nothing changed." in html


def test_the_newest_message_is_one_jump_from_the_top(client, bob, session, make_checkpoint):
    messages = [{"role": "user", "content": f"message {i}"} for i in range(200)]
    long_run = make_checkpoint(session, {"messages": messages})
    client.force_login(bob)
    html = client.get(url(long_run)).content.decode()
    first = select(html, "a[href='#msg-199'], #changes")[0]
    assert text(first).startswith("Newest message")  # above What changed here
    assert select(html, "#msg-199")


def test_checkpoint_query_count_is_bounded_on_a_big_session(client, alice, big_session, django_assert_max_num_queries):
    restore = big_session.head
    middle = big_session.checkpoints.get(seq=2345)
    client.force_login(alice)  # sign-in and permissions: 4 queries of each request
    for checkpoint in (restore, middle):
        store.cache.clear()  # cold: the state is read from the database
        with django_assert_max_num_queries(12):
            assert client.get(url(checkpoint)).status_code == 200
        store.cache.clear()
        with django_assert_max_num_queries(8):
            assert client.get(subtree_url(checkpoint, ["messages"]), headers=HTMX).status_code == 200
        store.cache.clear()
        with django_assert_max_num_queries(8):
            assert client.get(url(checkpoint, "dashboard:checkpoint_download")).status_code == 200
