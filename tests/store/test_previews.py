from __future__ import annotations

import io

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from checkpoints.services import Actor, restore_checkpoint
from checkpoints.store.previews import PREVIEW_MAX, preview_of
from tests.lg_states import typed

CALL = {"id": "c1", "tool_name": "web_search", "arguments": {"query": "kv cache"}, "success": True}


def test_a_new_tool_call_reads_as_the_call_and_its_result():
    before = {"tool_calls": [], "messages": []}
    after = {"tool_calls": [{**CALL, "result": "10 results; top: MemGPT"}], "messages": []}

    preview = preview_of(after, before)

    assert preview.text == "web_search(query=kv cache) → 10 results; top: MemGPT"
    assert not preview.tool_failed


def test_a_failed_tool_call_says_it_failed_and_why():
    failed = {**CALL, "success": False, "result": None, "error": "HTTP 429 Too Many Requests"}

    preview = preview_of({"tool_calls": [CALL, failed]}, {"tool_calls": [CALL]})

    assert preview.text == "web_search(query=kv cache) failed: HTTP 429 Too Many Requests"
    assert preview.tool_failed
    silent = {**CALL, "success": False, "result": None}
    assert (
        preview_of({"tool_calls": [CALL, silent]}, {"tool_calls": [CALL]}).text == "web_search(query=kv cache) failed"
    )


def test_a_call_made_earlier_is_not_counted_again():
    failed = {**CALL, "success": False, "error": "timeout"}
    state = {"tool_calls": [failed], "messages": [{"role": "user", "content": "Carry on please"}]}

    preview = preview_of(state, {"tool_calls": [failed], "messages": []})

    assert preview.text == "user: Carry on please"
    assert not preview.tool_failed


def test_a_log_kept_as_a_sliding_window_counts_the_calls_it_appended():
    """The agent keeps its last four calls: two new ones push two old ones out."""
    log = [{**CALL, "id": f"c{n}", "arguments": {"query": f"q{n}"}} for n in range(1, 7)]

    preview = preview_of({"tool_calls": log[2:]}, {"tool_calls": log[:4]})

    assert (preview.text, preview.tool_calls) == ("web_search(query=q6)", 2)
    assert preview_of({"tool_calls": log[2:]}, {"tool_calls": log[2:]}).tool_calls == 0


def test_a_new_message_reads_as_its_role_and_first_words():
    state = {"messages": [{"role": "assistant", "content": "Done.   The survey\nis written."}]}

    assert preview_of(state, {"messages": []}).text == "assistant: Done. The survey is written."


def test_openai_style_tool_calls_in_messages_are_previewed():
    message = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "x", "function": {"name": "get_order", "arguments": '{"order_id": "A-1"}'}}],
    }

    assert preview_of({"messages": [message]}).text == 'assistant: calls get_order({"order_id": "A-1"})'


def test_kaizen_conversation_history_and_langgraph_message_types_are_read():
    state = {"conversation_history": [{"type": "ai", "content": [{"type": "text", "text": "Plan ready"}]}]}

    assert preview_of(state).text == "ai: Plan ready"


def test_a_state_that_added_nothing_has_no_preview():
    state = {"messages": [{"role": "user", "content": "hi"}], "tool_calls": [CALL]}

    assert preview_of(state, state).text == ""
    assert preview_of({"counter": 3}).text == ""
    assert preview_of([1, 2, 3]).text == ""


def test_a_long_result_is_cut_to_one_line():
    state = {"tool_calls": [{**CALL, "result": "word " * 200}]}

    text = preview_of(state).text

    assert len(text) <= PREVIEW_MAX
    assert text.endswith("…")


@pytest.mark.django_db
def test_ingest_keeps_the_preview_and_the_tool_failure_on_the_row(make_session, make_checkpoint):
    session = make_session()
    make_checkpoint(session, {"tool_calls": [CALL]}, name="tool_called")
    failed = {**CALL, "id": "c2", "success": False, "error": "search backend timeout after 30s"}
    checkpoint = make_checkpoint(session, {"tool_calls": [CALL, failed]}, name="tool_failed")
    routine = make_checkpoint(session, {"tool_calls": [CALL, failed]}, name="routine", kind="routine")

    assert checkpoint.status == "completed"
    assert checkpoint.tool_failed
    assert checkpoint.preview == "web_search(query=kv cache) failed: search backend timeout after 30s"
    assert not routine.tool_failed and routine.preview == ""


@pytest.mark.django_db
def test_a_restore_adds_no_preview_of_its_own(make_session, make_checkpoint):
    session = make_session()
    first = make_checkpoint(session, {"tool_calls": [CALL]})
    make_checkpoint(session, {"tool_calls": [CALL, CALL]})

    restore = restore_checkpoint(first, actor=Actor.system("test"))

    assert restore.preview == "" and not restore.tool_failed


@pytest.mark.django_db
def test_fill_previews_works_out_the_rows_stored_before_previews_existed(make_session, make_checkpoint):
    from django.core.management import call_command

    from checkpoints.models import Checkpoint

    session = make_session()
    failed = {**CALL, "id": "c2", "success": False, "error": "timeout"}
    make_checkpoint(session, {"tool_calls": [CALL]})
    make_checkpoint(session, {"tool_calls": [CALL, failed]})
    make_checkpoint(session, {"tool_calls": [CALL, failed]}, kind="routine")
    expected = list(session.checkpoints.order_by("seq").values_list("preview", "tool_failed", "calls_made"))
    Checkpoint.objects.update(preview="", tool_failed=False, calls_made=None)  # as the migrations leave older rows

    call_command("fill_previews", "--session", str(session.pk), stdout=io.StringIO())

    assert list(session.checkpoints.order_by("seq").values_list("preview", "tool_failed", "calls_made")) == expected
    assert expected[1] == ("web_search(query=kv cache) failed: timeout", True, 2)


def test_the_demos_failed_tool_calls_are_marked_on_their_checkpoints(demo):
    from checkpoints.models import Checkpoint

    named_failed = Checkpoint.objects.filter(name="tool_failed")

    assert named_failed.exists()
    assert not named_failed.filter(tool_failed=False).exists()
    assert named_failed.exclude(preview__contains=" failed: ").count() == 0


def test_a_langgraph_tool_call_and_its_failed_reply_read_as_other_formats_do():
    asked = [HumanMessage("Find me a flight")]
    call = AIMessage("", tool_calls=[{"name": "search", "args": {"q": "Oslo"}, "id": "call_1"}])
    failed = ToolMessage("HTTP 503", tool_call_id="call_1", status="error")

    called = preview_of({"messages": typed([*asked, call])}, {"messages": typed(asked)})
    replied = preview_of({"messages": typed([*asked, call, failed])}, {"messages": typed([*asked, call])})

    assert called.text == "ai: calls search(q=Oslo)"
    assert (called.tool_calls, called.tool_failed) == (1, False)
    assert replied.text == "tool: HTTP 503"
    assert (replied.tool_calls, replied.tool_failed) == (0, True)
