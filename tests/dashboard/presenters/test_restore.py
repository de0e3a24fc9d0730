"""The restore dialog's list of the tool calls an agent forgets."""

from __future__ import annotations

from dashboard.presenters.restore import forgotten_calls


def test_forgotten_calls_are_named_from_whichever_field_the_format_uses():
    calls = forgotten_calls([{"tool": "grep", "args": {"b": 1, "a": "é"}, "success": False, "step": 4}, "ping"])
    assert [(c.name, c.arguments, c.success, c.step) for c in calls] == [
        ("grep", '{"a": "é", "b": 1}', False, 4),
        ("tool call", "", None, None),
    ]
