from __future__ import annotations

import pytest

from checkpoints.humanize import plain_duration


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.4, "under 1 s"),
        (42, "42 s"),
        (187, "3 min 7 s"),
        (180, "3 min"),
        (7500, "2 h 5 min"),
        (7342 * 60, "5 d 2 h"),
        (86400, "1 d"),
    ],
)
def test_durations_read_in_their_two_largest_units(seconds, text):
    assert plain_duration(seconds) == text
