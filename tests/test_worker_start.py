"""What a gunicorn web worker does once it has loaded the application (gunicorn.conf.py's post_worker_init)."""

from __future__ import annotations

import gc
import runpy
from pathlib import Path

from django.urls import clear_url_caches, get_resolver

ROOT = Path(__file__).resolve().parent.parent


def test_a_web_worker_builds_the_urlconf_then_puts_what_it_holds_out_of_the_collectors_reach(monkeypatch, tmp_path):
    """Django's objects made at start are never garbage; frozen, a full collection no longer walks them (it took
    over 100 ms once in every few hundred requests), and the first request does not build the URLconf."""
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))  # the file defaults it: not for this process
    hook = runpy.run_path(str(ROOT / "gunicorn.conf.py"))["post_worker_init"]
    clear_url_caches()
    assert "url_patterns" not in vars(get_resolver()) and gc.get_freeze_count() == 0
    before = len(gc.get_objects())
    try:
        hook(None)
        assert "url_patterns" in vars(get_resolver())  # built by the hook, not by a request
        reach = len(gc.get_objects())  # what a collection walks: the frozen are not among them
        # the start's garbage was collected first, not frozen: fewer may be frozen than were tracked
        assert gc.get_freeze_count() > before / 2 > 50 * reach, (gc.get_freeze_count(), before, reach)
    finally:
        gc.unfreeze()
