from __future__ import annotations

import pytest

from checkpoints.humanize import plain_duration, short_value


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


@pytest.mark.parametrize(
    ("value", "width", "text"),
    [
        ("plain text", 10, "plain text"),
        ("plain text!", 10, "plain tex…"),
        ({"name": "é", "n": 1}, 40, '{"name": "é", "n": 1}'),
        ([1, 2, 3, 4], 8, "[1, 2,…"),
        (None, 10, "null"),
        (True, 10, "true"),
    ],
)
def test_short_values_are_strings_as_they_are_or_json_cut_to_their_width(value, width, text):
    assert short_value(value, width) == text


def test_a_cut_value_ends_in_the_mark_without_the_spaces_before_it():
    assert short_value("read the file   and then", 9) == "read the…"
