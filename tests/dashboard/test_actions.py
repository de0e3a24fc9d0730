from __future__ import annotations

import json

import pytest
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse

from checkpoints import store
from checkpoints.models import AgentSession, AuditEvent, Checkpoint, CheckpointKind
from checkpoints.services import Actor, restore_checkpoint
from tests.helpers import select, text


def call(step: int, tool: str, ok: bool = True) -> dict:
    return {
        "id": f"call_{step}",
        "step": step,
        "tool_name": tool,
        "arguments": {"query": f"q{step}"},
        "result": f"result {step}" if ok else None,
        "error": None if ok else "timeout",
        "success": ok,
    }


def state(steps: int) -> dict:
    messages = [{"role": "user", "content": "Summarise the incident"}]
    for step in range(1, steps + 1):
        messages.append(
            {"role": "assistant", "content": f"step {step}", "tool_calls": [{"id": f"call_{step}", "name": "search"}]}
        )
    return {
        "step": steps,
        "messages": messages,
        "tool_calls": [call(step, "search", ok=step != 3) for step in range(1, steps + 1)],
    }


@pytest.fixture
def run(make_session, make_checkpoint):
    """A session of four checkpoints; the head (#4) has three tool calls that #1 lacks."""
    session = make_session()
    checkpoints = [make_checkpoint(session, state(step), name=f"step_{step}", step=step) for step in range(1, 5)]
    session.refresh_from_db()
    return session, checkpoints


def restore_url(checkpoint: Checkpoint) -> str:
    return reverse("dashboard:checkpoint_restore", args=[checkpoint.pk])


def fork_url(checkpoint: Checkpoint) -> str:
    return reverse("dashboard:checkpoint_fork", args=[checkpoint.pk])


def pin_url(checkpoint: Checkpoint) -> str:
    return reverse("dashboard:checkpoint_pin", args=[checkpoint.pk])


def undo_url(session: AgentSession) -> str:
    return reverse("dashboard:session_undo", args=[session.pk])


def operator_posts(session: AgentSession, target: Checkpoint) -> list[tuple[str, dict]]:
    return [
        (restore_url(target), {"reason": "x"}),
        (undo_url(session), {}),
        (fork_url(target), {"title": "copy"}),
        (pin_url(target), {"pinned": "1"}),
    ]


def unchanged(session: AgentSession, head_id: int) -> bool:
    session.refresh_from_db()
    return (
        session.head_id == head_id
        and not Checkpoint.objects.filter(kind__in=[CheckpointKind.RESTORE, CheckpointKind.FORK]).exists()
        and not Checkpoint.objects.filter(pinned=True).exists()
        and AgentSession.objects.count() == 1
        and not AuditEvent.objects.exists()
    )


# ---- unknown ids, other projects, CSRF ------------------------------------------------------------


def test_actions_on_unknown_ids_are_404(client, alice, run):
    client.force_login(alice)
    assert client.get(reverse("dashboard:checkpoint_restore", args=[999_999])).status_code == 404
    assert client.post(reverse("dashboard:checkpoint_restore", args=[999_999])).status_code == 404
    assert client.get(reverse("dashboard:checkpoint_fork", args=[999_999])).status_code == 404
    assert client.post(reverse("dashboard:checkpoint_pin", args=[999_999]), {"pinned": "1"}).status_code == 404
    assert client.post(reverse("dashboard:session_undo", args=[999_999])).status_code == 404


def test_actions_on_another_projects_checkpoints_are_404_and_change_nothing(
    client, alice, make_session, make_checkpoint, other_project
):
    theirs = make_session("theirs", in_project=other_project)
    first, second = make_checkpoint(theirs, state(1)), make_checkpoint(theirs, state(2))
    restore_checkpoint(first, actor=Actor.system("test"))  # so there is a restore to undo
    client.force_login(alice)
    events = AuditEvent.objects.count()
    assert client.get(restore_url(second)).status_code == 404
    assert client.post(restore_url(second), {"reason": "mine now"}).status_code == 404
    assert client.post(fork_url(second), {"title": "stolen"}).status_code == 404
    assert client.post(pin_url(second), {"pinned": "1"}).status_code == 404
    assert client.post(undo_url(theirs)).status_code == 404
    assert AuditEvent.objects.count() == events
    assert Checkpoint.objects.filter(session=theirs).count() == 3 and not Checkpoint.objects.get(pk=second.pk).pinned


def test_operator_posts_without_a_csrf_token_are_refused(alice, run):
    session, checkpoints = run
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    for url, data in operator_posts(session, checkpoints[0]):
        assert client.post(url, data).status_code == 403, url
    assert unchanged(session, checkpoints[-1].pk)


def test_operator_posts_with_the_csrf_token_go_through(alice, run):
    session, checkpoints = run
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    page = client.get(restore_url(checkpoints[0]))
    token = page.cookies["csrftoken"].value
    response = client.post(restore_url(checkpoints[0]), {"reason": ""}, headers={"X-CSRFToken": token})
    assert response.status_code == 302


# ---- restore --------------------------------------------------------------------------------------


def test_no_restore_of_the_head_is_offered_and_one_posted_anyway_changes_nothing(client, alice, run):
    """Restoring the head discards nothing: the timeline, the checkpoint page and the restore page offer it not."""
    session, checkpoints = run
    head = checkpoints[-1]
    client.force_login(alice)
    timeline = client.get(reverse("dashboard:session_detail", args=[session.pk]))
    # the row menus are filled from the page's one template (console.js), which leaves out Restore for the head
    # row (data-head) and keeps Fork: a fork from the head still makes sense (tests/browser/test_timeline.py)
    assert not select(timeline, f"#cp-{checkpoints[0].seq} details.row-menu")[0].get("data-head")
    assert select(timeline, f"#cp-{head.seq} details.row-menu")[0].get("data-head") is not None
    page = client.get(reverse("dashboard:checkpoint_detail", args=[head.pk]))
    assert not select(page, f'a[href="{restore_url(head)}"]') and select(page, f'a[href="{fork_url(head)}"]')
    preview = client.get(restore_url(head))
    assert "already the head" in preview.content.decode() and not select(preview, "form.restore-form")

    refused = client.post(restore_url(head), {"reason": "again"})

    assert refused.status_code == 409 and "already the head" in refused.content.decode()
    assert unchanged(session, head.pk)


def test_restore_preview_shows_what_changes(client, alice, run):
    session, checkpoints = run
    client.force_login(alice)
    response = client.get(restore_url(checkpoints[0]))
    html = response.content.decode()
    assert response.status_code == 200
    assert select(response, "html")  # the whole page
    assert [text(button) for button in select(response, "form button[type=submit].btn-primary")] == ["Restore"]
    assert select(response, "form [name=reason]")
    assert "tool calls the agent will no longer remember" in html
    # steps 2, 3 and 4 are forgotten, each once though each appears twice in the state
    assert len(select(response, "td.num")) == 3
    assert "timeout" in html  # step 3 failed
    assert "Restoring #1 discards 3 checkpoints, 3 tool calls from the agent's path" in html
    assert "tool_calls[1]" in html  # the structural diff head → target


def test_restore_preview_opens_more_of_its_diff_from_the_compare_page(client, alice, make_session, make_checkpoint):
    session = make_session()
    target = make_checkpoint(session, state(1))
    head = make_checkpoint(session, state(12))
    client.force_login(alice)
    html = client.get(restore_url(target)).content.decode()
    assert "− 11 messages" in html and "− 11 items of tool_calls" in html  # what the restore takes away
    opener = f"{reverse('dashboard:compare')}?a={head.pk}&amp;b={target.pk}&amp;base=a&amp;expand=r%3Amessages%402"
    assert f'hx-get="{opener}"' in html
    rows = client.get(opener.replace("&amp;", "&"), headers={"HX-Request": "true"})
    assert len(select(rows, ".diff-item.diff-item-removed")) == 11 and "step 12" in rows.content.decode()


def test_restore_preview_for_htmx_is_a_modal_fragment(client, alice, run):
    client.force_login(alice)
    response = client.get(restore_url(run[1][0]), headers={"HX-Request": "true"})
    assert response.content.decode().lstrip().startswith('<div id="restore-dialog" class="modal-backdrop"')
    assert select(response, "#restore-dialog [role=dialog]") and not select(response, "html")


def test_restore_moves_the_head_and_records_who_and_why(client, alice, run):
    session, checkpoints = run
    client.force_login(alice)
    response = client.post(restore_url(checkpoints[0]), {"reason": "looping since step 2"})
    assert response.status_code == 302
    assert response["Location"] == reverse("dashboard:session_detail", args=[session.pk])
    session.refresh_from_db()
    restored = session.head
    assert restored.kind == CheckpointKind.RESTORE and restored.parent_id == checkpoints[0].pk
    assert restored.seq == 5 and bytes(restored.root) == bytes(checkpoints[0].root)
    assert session.restore_generation == 1
    assert Checkpoint.objects.filter(session=session).count() == 5  # nothing deleted
    audit = AuditEvent.objects.get(action="restore")
    assert audit.actor == "alice" and audit.actor_user == alice
    assert audit.reason == "looping since step 2"


def test_restore_notice_offers_undo_once(client, alice, run):
    session, checkpoints = run
    client.force_login(alice)
    response = client.post(restore_url(checkpoints[0]), {"reason": ""}, follow=True)
    undo = f'form[action="{undo_url(session)}"]'
    assert len(select(response, undo)) == 1 and "to #1: the agent resumes" in response.content.decode()
    again = client.get(reverse("dashboard:session_detail", args=[session.pk]))
    assert not select(again, undo) and "to #1: the agent resumes" not in again.content.decode()


def test_two_restores_before_a_page_is_shown_each_offer_undo_there(client, alice, run, make_session, make_checkpoint):
    session, checkpoints = run
    other = make_session("run-2")
    target = make_checkpoint(other, state(1), name="step_1", step=1)
    make_checkpoint(other, state(2), name="step_2", step=2)
    client.force_login(alice)
    client.post(restore_url(checkpoints[0]), {"reason": ""})
    client.post(restore_url(target), {"reason": ""})
    page = client.get(reverse("dashboard:overview"))
    assert select(page, f'form[action="{undo_url(session)}"]') and select(page, f'form[action="{undo_url(other)}"]')
    assert len(select(page, "[autofocus]")) == 1


def test_the_restore_notice_with_undo_is_the_first_thing_in_main_and_takes_focus(client, alice, run):
    session, checkpoints = run
    client.force_login(alice)
    page = client.post(restore_url(checkpoints[0]), {"reason": ""}, follow=True)
    [notice] = select(page, "main#main > #messages:first-child > .notice-success:first-child[role=status]")
    assert text(notice).startswith("Restored") and notice.get("tabindex") == "-1"
    assert notice.get("autofocus") is not None and len(select(page, "[autofocus]")) == 1
    assert notice.cssselect(f'form[action="{undo_url(session)}"]')  # the Undo, before the page's heading


def test_restore_from_htmx_navigates_with_a_client_redirect(client, alice, run):
    session, checkpoints = run
    client.force_login(alice)
    response = client.post(restore_url(checkpoints[1]), {"reason": ""}, headers={"HX-Request": "true"})
    assert response.status_code == 200
    assert response["HX-Redirect"] == reverse("dashboard:session_detail", args=[session.pk])


def test_restore_with_a_too_long_reason_shows_the_error_and_changes_nothing(client, alice, run):
    session, checkpoints = run
    client.force_login(alice)
    response = client.post(restore_url(checkpoints[0]), {"reason": "x" * 501}, headers={"HX-Request": "true"})
    assert response.status_code == 200
    html = response.content.decode()
    assert select(html, "#restore-dialog .errorlist")
    assert unchanged(session, checkpoints[-1].pk)


def test_restore_preview_on_a_big_session_runs_a_bounded_number_of_queries(
    client, alice, big_session, django_assert_max_num_queries
):
    target = Checkpoint.objects.get(session=big_session, seq=100)
    client.force_login(alice)
    store.cache.clear()  # cold: both states are read from the chunk table
    # 4 for the signed-in user and roles, target and head, one chain read per state, 4 for what it discards
    with django_assert_max_num_queries(13):
        response = client.get(restore_url(target))
    assert response.status_code == 200
    # the head's path: the restore #3001, then #1501 back to #101; #1502 … #3000 are a side branch now
    assert "Restoring #100 discards 1402 checkpoints" in response.content.decode()


# ---- undo -----------------------------------------------------------------------------------------


def test_undo_returns_to_the_head_before_the_restore(client, alice, run):
    session, checkpoints = run
    client.force_login(alice)
    client.post(restore_url(checkpoints[0]), {"reason": "try again"})
    response = client.post(undo_url(session))
    assert response.status_code == 302
    assert response["Location"] == reverse("dashboard:session_detail", args=[session.pk])
    session.refresh_from_db()
    assert session.head.kind == CheckpointKind.RESTORE and session.head.parent_id == checkpoints[-1].pk
    assert session.restore_generation == 2
    assert list(AuditEvent.objects.values_list("action", "actor").order_by("id")) == [
        ("restore", "alice"),
        ("undo", "alice"),
    ]
    [message] = [m for m in get_messages(response.wsgi_request) if "undone" in m.message]
    assert message.message == (
        "Restore #5 undone: the agent resumes from new checkpoint #6 with the state of #4, as before the restore."
    )


def test_undo_without_a_restore_changes_nothing_and_says_so(client, alice, run):
    session, checkpoints = run
    client.force_login(alice)
    response = client.post(undo_url(session))
    assert response.status_code == 302
    [message] = list(get_messages(response.wsgi_request))
    assert message.level_tag == "error" and "Nothing to undo" in message.message
    assert unchanged(session, checkpoints[-1].pk)


def test_undo_from_htmx_navigates_with_a_client_redirect(client, alice, run):
    session, checkpoints = run
    restore_checkpoint(checkpoints[0], actor=Actor.for_user(alice))
    client.force_login(alice)
    response = client.post(undo_url(session), headers={"HX-Request": "true"})
    assert response["HX-Redirect"] == reverse("dashboard:session_detail", args=[session.pk])


# ---- fork -----------------------------------------------------------------------------------------


def test_fork_form_suggests_a_title(client, alice, run):
    client.force_login(alice)
    response = client.get(fork_url(run[1][1]))
    html = response.content.decode()
    assert response.status_code == 200 and select(html, "html")
    assert select(html, "#fork-form input[name=title]")[0].get("value") == "Fork of run-1 at #2"
    assert [text(button) for button in select(html, "#fork-form button[type=submit].btn-primary")] == ["Fork"]


def test_fork_form_for_htmx_is_the_form_fragment(client, alice, run):
    client.force_login(alice)
    html = client.get(fork_url(run[1][1]), headers={"HX-Request": "true"}).content.decode()
    assert html.lstrip().startswith('<form id="fork-form"') and not select(html, "html")


@pytest.mark.parametrize("url", [restore_url, fork_url])
def test_restore_and_fork_pages_are_whole_after_a_history_cache_miss_and_vary_on_htmx(client, alice, run, url):
    client.force_login(alice)
    headers = {"HX-Request": "true", "HX-History-Restore-Request": "true"}
    response = client.get(url(run[1][1]), headers=headers)
    assert select(response, "html") and not select(response, "[role=dialog]")  # a page, not a modal over nothing
    assert "HX-Request" in response["Vary"]


def test_fork_creates_a_session_and_opens_it(client, alice, run):
    session, checkpoints = run
    client.force_login(alice)
    response = client.post(fork_url(checkpoints[1]), {"title": "Try the other branch"})
    fork = AgentSession.objects.get(forked_from=checkpoints[1])
    assert response.status_code == 302
    assert response["Location"] == reverse("dashboard:session_detail", args=[fork.pk])
    assert fork.title == "Try the other branch" and fork.head.kind == CheckpointKind.FORK
    assert bytes(fork.head.root) == bytes(checkpoints[1].root)
    session.refresh_from_db()
    assert session.head_id == checkpoints[-1].pk  # the source is untouched
    audit = AuditEvent.objects.get(action="fork")
    assert audit.actor == "alice" and audit.details["fork_session_id"] == fork.pk


def test_fork_from_htmx_navigates_with_a_client_redirect(client, alice, run):
    client.force_login(alice)
    response = client.post(fork_url(run[1][0]), {"title": "x"}, headers={"HX-Request": "true"})
    fork = AgentSession.objects.get(forked_from=run[1][0])
    assert response["HX-Redirect"] == reverse("dashboard:session_detail", args=[fork.pk])


def test_fork_without_a_title_shows_the_error(client, alice, run):
    session, checkpoints = run
    client.force_login(alice)
    response = client.post(fork_url(checkpoints[0]), {"title": "  "}, headers={"HX-Request": "true"})
    assert response.status_code == 200
    assert select(response, "#fork-form .errorlist")
    assert AgentSession.objects.count() == 1


# ---- pin ------------------------------------------------------------------------------------------


def test_pin_and_unpin_toggle_and_return_to_the_checkpoint(client, alice, run):
    target = run[1][0]
    client.force_login(alice)
    response = client.post(pin_url(target), {"pinned": "1"})
    assert response.status_code == 302
    assert response["Location"] == reverse("dashboard:checkpoint_detail", args=[target.pk])
    target.refresh_from_db()
    assert target.pinned
    client.post(pin_url(target), {"pinned": "0"})
    target.refresh_from_db()
    assert not target.pinned
    assert list(AuditEvent.objects.order_by("id").values_list("action", "actor")) == [
        ("pin", "alice"),
        ("unpin", "alice"),
    ]


def test_pin_for_htmx_returns_the_control_and_triggers_an_event(client, alice, run):
    target = run[1][0]
    client.force_login(alice)
    response = client.post(
        pin_url(target), {"pinned": "1"}, headers={"HX-Request": "true", "HX-Current-URL": "http://testserver/x/"}
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert html.startswith('<div id="pin-control" class="pin-control">')
    assert select(html, "input[name=pinned][value='0']") and select(html, "input[name=next][value='/x/']")
    assert "checkpoint-pinned" in response["HX-Trigger"]
    # the new button keeps the focus and names its checkpoint; the live notice says what changed
    assert [text(button) for button in select(html, "button[autofocus]")] == [f"Unpin #{target.seq}"]
    notice = json.loads(response["HX-Trigger-After-Settle"])["notice"]
    assert notice == {"text": f"#{target.seq} pinned: retention keeps it.", "level": "success"}


def test_pin_returns_to_next_only_when_it_is_safe(client, alice, run):
    target = run[1][0]
    client.force_login(alice)
    response = client.post(pin_url(target), {"pinned": "1", "next": "/sessions/?page=2"})
    assert response["Location"] == "/sessions/?page=2"
    response = client.post(pin_url(target), {"pinned": "0", "next": "https://evil.example/"})
    assert response["Location"] == reverse("dashboard:checkpoint_detail", args=[target.pk])


def test_pin_with_a_bad_value_is_a_400(client, alice, run):
    client.force_login(alice)
    assert client.post(pin_url(run[1][0]), {"pinned": "maybe"}).status_code == 400


def test_viewer_sees_the_pin_state_but_no_control(rf, bob, alice, run):
    from django.template.loader import render_to_string

    target = run[1][0]
    target.pinned = True
    for user, has_control in ((bob, False), (alice, True)):
        request = rf.get("/")
        request.user = user
        html = render_to_string("dashboard/partials/pin_control.html", {"checkpoint": target}, request=request)
        assert "pinned" in html
        assert bool(select(html, "form")) is has_control
