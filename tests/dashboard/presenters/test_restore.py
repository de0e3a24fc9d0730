"""The restore dialog's list of the tool calls an agent forgets."""

from __future__ import annotations

import pytest

from checkpoints.store.previews import preview_of
from dashboard.presenters.restore import forgotten_calls


def test_forgotten_calls_are_named_from_whichever_field_the_format_uses():
    calls = forgotten_calls([{"tool": "grep", "args": {"b": 1, "a": "é"}, "success": False, "step": 4}, "ping"])
    assert [(c.name, c.arguments, c.success, c.step) for c in calls] == [
        ("grep", '{"a": "é", "b": 1}', False, 4),
        ("tool call", "", None, None),
    ]


@pytest.mark.parametrize(
    "call",
    [{"tool_name": "grep", "name": "x", "tool": "y"}, {"name": "grep", "tool": "y"}, {"tool": "grep"}, {"name": 7}],
)
def test_a_forgotten_call_has_the_name_the_timeline_preview_gives_it(call):
    [forgotten] = forgotten_calls([call])
    assert preview_of({"tool_calls": [call]}).text == f"{forgotten.name}()"


def test_a_forgotten_call_that_names_no_tool_is_a_tool_call():
    assert [call.name for call in forgotten_calls([{"arguments": {}}, {"name": ""}])] == ["tool call", "tool call"]
