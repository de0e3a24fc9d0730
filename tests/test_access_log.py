"""Access logs are off by default: each web process logs one line a minute of its request counts instead."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

from config.access import TALLY


def test_requests_are_counted_into_one_line_a_minute_not_logged_one_by_one(client, caplog, settings):
    assert "config.access.RequestCounts" in settings.MIDDLEWARE
    assert not logging.getLogger("django.server").isEnabledFor(logging.INFO)  # runserver's line per request
    TALLY.flush()
    client.get("/health/live")
    client.get("/health/live")
    client.get("/no-such-page/")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="checkpoint_console.requests"):
        line = TALLY.flush()
    assert line == "3 requests in the last minute (2xx 2, 4xx 1)"
    assert [r.getMessage() for r in caplog.records if r.name == "checkpoint_console.requests"] == [line]


def test_a_quiet_minute_logs_nothing(caplog):
    TALLY.flush()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="checkpoint_console.requests"):
        assert TALLY.flush() is None
    assert not caplog.records


def test_access_log_on_logs_every_request_and_drops_the_tally(tmp_path):
    """ACCESS_LOG=1 (the image sets it, gunicorn logs each request): settings read in a fresh interpreter."""
    code = (
        "import django, logging; django.setup(); from django.conf import settings; "
        "print('config.access.RequestCounts' in settings.MIDDLEWARE, "
        "logging.getLogger('django.server').isEnabledFor(logging.INFO))"
    )
    env = {**os.environ, "ACCESS_LOG": "1", "DJANGO_SETTINGS_MODULE": "config.settings", "VAR_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "True"]
