"""Response headers (Content-Security-Policy) and the session cookie's lifetime, and the env vars that set them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.urls import reverse

BASE_DIR = Path(__file__).resolve().parent.parent
LOGIN = reverse("login")


def policy(response) -> dict[str, list[str]]:
    directives = [part.strip().split() for part in response["Content-Security-Policy"].split(";") if part.strip()]
    return {name: values for name, *values in directives}


@pytest.mark.parametrize("path", ["/", "/accounts/login/", "/admin/login/", "/api/v1/docs"])
def test_pages_allow_only_their_own_scripts_and_styles(client, bob, path):
    client.force_login(bob)
    csp = policy(client.get(path))
    assert csp["default-src"] == ["'self'"]
    assert csp["script-src"] == ["'self'"]
    assert csp["style-src"] == ["'self'"]
    assert csp["object-src"] == ["'none'"]
    assert csp["frame-ancestors"] == ["'none'"]
    assert csp["form-action"] == ["'self'"]
    assert csp["base-uri"] == ["'self'"]
    assert not any("unsafe" in value for values in csp.values() for value in values)


def test_the_session_cookie_lasts_twelve_hours_by_default(client, bob):
    response = client.post(LOGIN, {"username": "bob", "password": "bob-password-1"})
    cookie = response.cookies["sessionid"]
    assert cookie["max-age"] == 12 * 60 * 60
    assert cookie["httponly"]


def test_the_session_cookie_can_end_with_the_browser(client, bob, settings):
    settings.SESSION_EXPIRE_AT_BROWSER_CLOSE = True
    cookie = client.post(LOGIN, {"username": "bob", "password": "bob-password-1"}).cookies["sessionid"]
    assert cookie.value
    assert cookie["max-age"] == "" and cookie["expires"] == ""


def test_the_front_door_limits_come_from_the_environment(tmp_path):
    """What docs/configuration.md promises: each variable reaches its setting."""
    env = {
        "PATH": os.environ.get("PATH", ""),
        "VAR_DIR": str(tmp_path),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "SESSION_COOKIE_AGE": "3600",
        "SESSION_EXPIRE_AT_BROWSER_CLOSE": "1",
        "LOGIN_FAILURE_LIMIT": "5",
        "LOGIN_COOLOFF_MINUTES": "30",
        "BEHIND_PROXY": "1",
        "PROXY_COUNT": "2",
        "DATA_UPLOAD_MAX_MEMORY_SIZE": "1000000",
    }
    script = (
        "import json, django; from django.conf import settings; django.setup(); print(json.dumps(["
        "settings.SESSION_COOKIE_AGE, settings.SESSION_EXPIRE_AT_BROWSER_CLOSE, settings.AXES_FAILURE_LIMIT, "
        "settings.AXES_COOLOFF_TIME.total_seconds(), settings.BEHIND_PROXY, settings.PROXY_COUNT, "
        "settings.DATA_UPLOAD_MAX_MEMORY_SIZE]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=BASE_DIR,
        env={**env, "DJANGO_SETTINGS_MODULE": "config.settings"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == [3600, True, 5, 1800.0, True, 2, 1_000_000]
