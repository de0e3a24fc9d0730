"""The transcript: the newest page of messages, each tool call once with its outcome."""

from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from dashboard.presenters.transcript import TRANSCRIPT_PAGE, Transcript
from tests.lg_states import typed


def test_a_tool_reply_is_shown_with_its_call_not_as_a_message_of_its_own():
    state = {
        "messages": [
            {"role": "user", "content": "Search"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "function": {"name": "search"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "3 hits"},
        ]
    }
    transcript = Transcript.of(state)
    assert transcript is not None
    assert [m.role for m in transcript.messages] == ["user", "assistant"]
    [call] = transcript.messages[1].calls
    assert (call.name, call.result, call.success) == ("search", "3 hits", None)


def test_a_failed_call_whose_reply_is_its_error_shows_the_error_once():
    state = {
        "messages": [{"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "run_tests"}]}],
        "tool_calls": [{"id": "c1", "tool_name": "run_tests", "result": "boom", "error": "boom"}],
    }
    transcript = Transcript.of(state)
    assert transcript is not None
    [call] = transcript.messages[0].calls
    assert (call.error, call.result, call.success) == ("boom", None, False)


def test_a_long_conversation_shows_its_newest_page_and_how_many_earlier_ones_load_next():
    state = {"history": [{"role": "user", "content": f"message {i}"} for i in range(TRANSCRIPT_PAGE + 10)]}
    transcript = Transcript.of(state)
    assert transcript is not None and transcript.key == "history"
    assert transcript.messages[-1].text == f"message {TRANSCRIPT_PAGE + 9}"
    assert (transcript.start, transcript.earlier) == (10, 10)
    earlier = Transcript.of(state, before=transcript.start)
    assert earlier is not None and [m.index for m in earlier.messages] == list(range(10))


def test_a_state_without_messages_has_no_transcript():
    assert Transcript.of({"notes": ["a"]}) is None and Transcript.of([{"role": "user"}]) is None


def test_langchain_messages_read_by_type_with_their_args_and_a_failed_tool_message_as_the_error():
    call = {"name": "read_file", "args": {"path": "/etc/shadow"}, "id": "c1"}
    messages = [
        HumanMessage("Read the file"),
        AIMessage([{"type": "text", "text": "Reading it."}], tool_calls=[call]),
        ToolMessage("permission denied", tool_call_id="c1", status="error"),
    ]
    transcript = Transcript.of({"messages": typed(messages)})
    assert transcript is not None
    assert [(m.role, m.text) for m in transcript.messages] == [("user", "Read the file"), ("assistant", "Reading it.")]
    [shown] = transcript.messages[1].calls
    assert (shown.name, shown.arguments, shown.result) == ("read_file", '{"path": "/etc/shadow"}', None)
    assert (shown.success, shown.error) == (False, "permission denied")


def test_a_langchain_tool_message_that_succeeded_shows_its_call_succeeded():
    call = {"name": "search", "args": {"q": "oslo"}, "id": "c1"}
    messages = [AIMessage("", tool_calls=[call]), ToolMessage("3 hits", tool_call_id="c1")]
    transcript = Transcript.of({"messages": typed(messages)})
    assert transcript is not None
    [shown] = transcript.messages[0].calls
    assert (shown.result, shown.success, shown.error) == ("3 hits", True, None)
