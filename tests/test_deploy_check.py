from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from django.core.management.utils import get_random_secret_key

BASE_DIR = Path(__file__).resolve().parent.parent


def test_production_settings_pass_the_deploy_check(tmp_path):
    """The environment compose.yaml gives web, worker and beat passes `check --deploy` without a warning."""
    inherited = {name: os.environ[name] for name in ("PATH", "HOME", "LANG", "SYSTEMROOT") if name in os.environ}
    env = {
        **inherited,
        "DEBUG": "0",
        "SECRET_KEY": get_random_secret_key(),
        "HTTPS": "1",
        "BEHIND_PROXY": "1",
        "ALLOWED_HOSTS": "example.com",
        "CSRF_TRUSTED_ORIGINS": "https://example.com",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "VAR_DIR": str(tmp_path / "var"),
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout
