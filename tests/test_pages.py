"""bench/pages.py keeps working: the pages it records come out the same twice, it knows every console URL, and
`compare` tells a changed page from an identical one (docs/contributing.md says what it is for)."""

from __future__ import annotations

import pytest
import time_machine
from django.core.cache import cache

from bench import pages

# A page of each kind: the overview, a timeline and its htmx fragment, a checkpoint and the subtrees its page
# loads, a page a viewer may not open, an admin changelist and change page of rows with uuid4 keys, the API's schema.
SUBSET = [
    "console/overview/",
    "console/session_detail/00",
    "console/checkpoint_detail/01",
    "console/project_settings/00",
    "console/links/checkpoints-N-tree-path",
    "admin/checkpoints.event/",
    "admin/auth.user/change-first",
    "api/openapi",
]


@pytest.fixture
def world(db):
    with time_machine.travel(pages.FROZEN_AT, tick=False), pages.counted_uuids():
        yield pages.build_world()


def record(world) -> dict[str, str]:
    with time_machine.travel(pages.FROZEN_AT, tick=False):
        cache.clear()  # what the first render cached would change nothing here, and the second must not read it
        return pages.render(world, SUBSET)


def test_the_same_pages_recorded_twice_are_identical(world):
    first, second = record(world), record(world)

    assert first == second
    assert {name.split("/")[0] for name in first} == {"console", "admin", "api"}
    assert "console/session_detail/00.admin.htmx.txt" in first, "the timeline's fragment is recorded beside it"
    assert any(name.startswith("console/links/checkpoints-N-tree-path") for name in first)
    assert "403 Forbidden" in first["console/project_settings/00.viewer.txt"].splitlines()[1]
    # what made the two renders differ before they were normalised
    assert 'name="csrfmiddlewaretoken" value="<csrf-token>"' in first["admin/auth.user/change-first.admin.txt"]
    assert '"X-CSRFToken": "<csrf-token>"' in first["console/overview/00.viewer.txt"]


def test_every_console_url_is_recorded_for_real_objects(world):
    assert sorted(pages.ROUTES) == pages.console_names()
    for name, pages_of in pages.ROUTES.items():
        assert pages_of(world), f"{name}: no page to record"


def test_normalise_keeps_what_a_user_reads_and_blanks_what_changes_each_request():
    html = (
        '<body hx-headers=\'{"X-CSRFToken": "aB3"}\'><script nonce="q1w2">x</script>'
        '<input type="hidden" name="csrfmiddlewaretoken" value="zZ9"><time>3 min ago</time>'
        '<svg aria-labelledby="chart-7-t chart-7-d"><title id="chart-7-t"></svg><svg aria-labelledby="chart-8-t">'
    )
    header = "Set-Cookie: csrftoken=abc123; Path=/\nContent-Security-Policy: script-src 'self' 'nonce-q1w2'"

    assert pages.normalise(html) == (
        '<body hx-headers=\'{"X-CSRFToken": "<csrf-token>"}\'><script nonce="<nonce>">x</script>'
        '<input type="hidden" name="csrfmiddlewaretoken" value="<csrf-token>"><time>3 min ago</time>'
        '<svg aria-labelledby="chart-<1>-t chart-<1>-d"><title id="chart-<1>-t"></svg><svg aria-labelledby="chart-<2>-t">'
    )
    assert pages.normalise(header) == (
        "Set-Cookie: csrftoken=<cookie>; Path=/\nContent-Security-Policy: script-src 'self' 'nonce-<nonce>'"
    )


def test_compare_prints_the_diff_and_a_summary_and_fails_on_a_difference(tmp_path, capsys):
    before, after = tmp_path / "before", tmp_path / "after"
    for folder, title in ((before, "Sessions"), (after, "Agent sessions")):
        (folder / "console").mkdir(parents=True)
        (folder / "console" / "same.txt").write_text("GET /\n200 OK\n")
        (folder / "console" / "list.txt").write_text(f"GET /sessions/\n200 OK\n\n<h1>{title}</h1>\n")
    (after / "console" / "new.txt").write_text("GET /new/\n200 OK\n")

    assert pages.main(["compare", str(before), str(after)]) == 1
    out = capsys.readouterr().out
    assert "-<h1>Sessions</h1>\n+<h1>Agent sessions</h1>\n" in out
    assert f"--- /dev/null\n+++ {after}/console/new.txt" in out
    assert out.endswith(f"3 pages, 1 identical, 2 changed (0 only in {before}, 1 only in {after})\n")

    assert pages.main(["compare", str(before), str(before)]) == 0
    assert capsys.readouterr().out == "2 pages, 2 identical, 0 changed\n"


def test_a_page_parses_its_templates_once_not_on_every_request(client, alice, monkeypatch):
    """The cached loader inside the partials loader (DEBUG off, as in production): a second view of a page reads
    no template file."""
    from django.template.loaders.filesystem import Loader as FilesystemLoader  # app_directories' too

    client.force_login(alice)
    assert client.get("/").status_code == 200
    reads: list[str] = []
    real = FilesystemLoader.get_contents
    monkeypatch.setattr(
        FilesystemLoader, "get_contents", lambda self, origin: reads.append(origin.name) or real(self, origin)
    )
    assert client.get("/").status_code == 200
    assert reads == []
