"""The suite's own scheduling: under `make test` (pytest-xdist, `--dist loadgroup`) the tests of a module-scoped
fixture run on one worker, which builds the fixture once. pytest 9 and xdist 3.8 disagreed on where a node id
lives, and the groups were silently ignored for months: this test fails if that happens again."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def built_once() -> object:
    return object()


def test_a_module_fixtures_tests_are_one_xdist_group_in_the_conftests_order(request, built_once):
    under_loadgroup = bool(getattr(request.config.option, "loadgroup", False))
    group = f"@{Path(__file__).relative_to(request.config.rootpath).as_posix()}::in-transaction"
    assert request.node.nodeid.endswith(group) == under_loadgroup
    if under_loadgroup:  # xdist's default sends the largest groups first, out of the conftest's order
        assert request.config.option.loadscopereorder is False
