"""Release 0.1's migrations, squashed and frozen: an install at 0028 upgrades through the squashed set, a new one gets
the same database from it, and the code the old migrations froze gives the live code's answers."""

from __future__ import annotations

import ast
import json
import os
import random
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from django.apps import apps as global_apps
from django.db import connection, migrations
from django.db.migrations.loader import MigrationLoader

from checkpoints import roles, store
from checkpoints.migrations import _states_0028, _tallies_0021
from checkpoints.models import AgentSession
from checkpoints.services import ingest_checkpoints
from checkpoints.store import tallies
from checkpoints.store.jsoncodec import canonical
from tests.kits.migration_kit import SQUASHED, STATES
from tests.store.test_tallies import item, stored

ROOT = Path(__file__).resolve().parents[2]


def _migrated(mode: str, folder: Path) -> dict[str, Any]:
    """Run the kit's `mode` on a database of its own, made for it and dropped after: a file beside the tests' on
    SQLite, a database on the tests' PostgreSQL server."""
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("postgres"):
        return _run(mode, f"sqlite:///{folder / f'{mode}.sqlite3'}", folder)
    parts = urlsplit(url)
    name = f"{parts.path.lstrip('/')}_migrations_{mode}_{uuid.uuid4().hex[:8]}"
    server = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            return _run(mode, urlunsplit(parts._replace(path=f"/{name}")), folder)
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _run(mode: str, url: str, folder: Path) -> dict[str, Any]:
    out = folder / f"{mode}.json"
    subprocess.run(
        [sys.executable, "-m", "tests.kits.migration_kit", mode, str(out)],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "config.settings"},
        check=True,
        timeout=600,
    )
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    folder = tmp_path_factory.mktemp("migrations")
    return {mode: _migrated(mode, folder) for mode in ("upgrade", "fresh")}


def test_a_database_of_0_1_with_rows_gets_its_tallies_and_digests_from_the_frozen_migrations(runs):
    upgrade = runs["upgrade"]
    checkpoints = upgrade["rows at 0028"]["checkpoints_checkpoint"]
    failed = sum("failed" in row for row in checkpoints)
    assert upgrade["tallied at 0028"] == [[len(checkpoints), failed, sum(len(canonical(s)) for s in STATES)]]
    assert upgrade["digests at 0028"] == upgrade["live digests"]


def test_a_database_at_0028_upgrades_through_the_squashed_set_keeping_its_rows_and_schema(runs):
    upgrade = runs["upgrade"]
    assert upgrade["squashed set applied"]
    assert upgrade["left to run"] == []
    assert upgrade["schema"] == upgrade["schema at 0028"]
    assert upgrade["rows at 0028"]["checkpoints_checkpoint"]
    # migrate's post_migrate adds the other apps' permissions; every other row is as 0.1 left it
    assert {t: r for t, r in upgrade["rows"].items() if t != "auth_permission"} == {
        t: r for t, r in upgrade["rows at 0028"].items() if t != "auth_permission"
    }


def test_a_fresh_migrate_gives_the_database_the_old_migrations_gave(runs):
    fresh, upgrade = runs["fresh"], runs["upgrade"]
    assert fresh["schema"] == upgrade["schema at 0028"]
    assert fresh["starting rows"] == upgrade["starting rows"]
    # what the live roles grant (a later change to them comes with a migration that grants it)
    assert fresh["starting rows"]["groups"] == {
        role: sorted(granted) for role, granted in roles.ROLE_PERMISSIONS.items()
    }
    assert fresh["starting rows"]["schedules"] and fresh["starting rows"]["retention"]
    if connection.vendor == "postgresql":  # what the models cannot say: the chunks' storage, the trigram indexes
        assert ["checkpoints_chunk", "data", "e"] in fresh["schema"]["native"]["storage"]
        assert any("gin_trgm_ops" in index[2] for index in fresh["schema"]["native"]["indexes"])


class _WithNextMigration(MigrationLoader):
    """The migrations on disk and one more that depends on 0028, as a migration written after 0.1 does."""

    def load_disk(self) -> None:
        super().load_disk()
        following = type("Migration", (migrations.Migration,), {})("0029_next", "checkpoints")
        following.dependencies = [("checkpoints", "0028_state_hash_by_part")]
        self.disk_migrations["checkpoints", "0029_next"] = following


def test_a_migration_depending_on_0028_follows_the_squashed_set_on_a_fresh_database():
    graph = _WithNextMigration(None).graph  # no connection: nothing applied, as on a fresh database
    assert ("checkpoints", "0029_next") in graph.leaf_nodes("checkpoints")
    for following in ("0029_next", "0029_project_type_allowlist"):  # a made-up one, and the real one
        assert {parent.key for parent in graph.node_map["checkpoints", following].parents} == {SQUASHED}
    assert ("checkpoints", "0028_state_hash_by_part") not in graph.nodes


# ---- the frozen code gives the live code's answers --------------------------------------------------------------


def _words(rng: random.Random, size: int) -> str:
    return " ".join(
        f"{rng.choice(['plan', 'read', 'tool', 'result', 'retry'])}{rng.randrange(1000)}" for _ in range(size)
    )


def _states() -> Iterator[Any]:
    """States the store keeps as keyframe trees several levels deep, patches with and without a dictionary,
    integers beyond 64 bits, lists and scalars."""
    rng = random.Random(5)
    state: dict[str, Any] = {"messages": [], "memory": {f"k{i}": _words(rng, 8) for i in range(40)}, "big": 2**70}
    for step in range(20):
        state["messages"].append({"role": "assistant", "content": _words(rng, 150), "step": step})
        state["memory"][f"k{rng.randrange(40)}"] = _words(rng, 8)
        if step == 10:
            state["log"] = [_words(rng, 120) for _ in range(1200)]  # ~1 MB: a tree of internal nodes
        if step == 14:
            del state["big"]
        yield state
    yield [1, "two", {"three": [3.5, None, True]}]
    yield {}
    yield "just text"
    yield {"n": -(2**80), "nested": {"deep": [[[]], {}]}}


def test_the_frozen_reader_and_digest_of_0028_give_the_live_stores_answers(db, settings):
    """The reader must agree with the live store for good: the store reads every format it has written. The
    digest agrees while 0028's definition is the live one; a new definition comes with a migration of its own."""
    settings.CHECKPOINT_KEYFRAME_INTERVAL = 6  # keyframes between the patches
    settings.CHECKPOINT_REBASE = False  # rebased patches (0043) came after 0028: no database it migrates has one
    saved, base = [], None
    for state in _states():
        result = store.save_state(state, base=base)
        saved.append(result)
        base = result.root
    store.cache.clear()
    with connection.cursor() as cursor:
        for result in saved:
            frozen = _states_0028.load_state(cursor, result.root)
            live = store.load_state(result.root)
            assert canonical(frozen) == canonical(live)
            assert _states_0028.state_digest(frozen) == store.state_digest(live) == result.state_hash
        with pytest.raises(_states_0028.Unreadable):
            _states_0028.load_state(cursor, b"\x07" * 16)


def test_the_frozen_recount_of_0021_gives_the_live_tallies(make_session):
    """While what is tallied stays what 0021 introduced; a change to it comes with a migration of its own."""
    sessions = [make_session(f"run-{n}") for n in range(3)]
    for n, session in enumerate(sessions):  # over several rollup blocks and hours, some failed, some not steps
        kinds = ("step", "routine")
        batch = [
            item(i, minutes=i * 17, failed=i % 9 == n, tool_failed=i % 7 == 1, kind=kinds[i % 2])
            for i in range(25 + 10 * n)
        ]
        ingest_checkpoints([(session, batch)])
    kept = [stored(session) for session in sessions]
    AgentSession.objects.update(**dict.fromkeys(tallies.SESSION_FIELDS, 0))
    _tallies_0021.recount(global_apps, "default", [session.pk for session in sessions])
    frozen = [stored(session) for session in sessions]
    tallies.recount([session.pk for session in sessions])
    assert frozen == [stored(session) for session in sessions] == kept
    assert sum(totals["failed_count"] for totals, _, _ in frozen) > 0


def _modules_imported(path: Path) -> Iterator[str]:
    """The absolute modules a file imports (`from package import module` names both), by statement or importlib."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            yield from (f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "import_module":
            yield node.args[0].value


def _uses_of_models(path: Path) -> Iterator[tuple[str, bool]]:
    """Each `checkpoints.models.NAME` a migration names, and whether it is only a field's `default=` (a callable
    Django records by reference, as it records field classes: what makemigrations writes, and what the models'
    state must match)."""
    tree = ast.parse(path.read_text())
    defaults = {
        id(keyword.value) for keyword in ast.walk(tree) if isinstance(keyword, ast.keyword) and keyword.arg == "default"
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and ast.unparse(node.value) == "checkpoints.models":
            yield node.attr, id(node) in defaults


def test_no_migration_imports_the_console_s_live_code():
    """Only the field classes the models name (kept importable, docs/decisions/0004-safe-fields.md), a field's
    default callable, and the migrations' own frozen modules: no migration runs live code on rows."""
    for path in (ROOT / "checkpoints" / "migrations").glob("*.py"):
        for module in _modules_imported(path):
            if module == "checkpoints.models":
                assert all(as_default for _, as_default in _uses_of_models(path)), (
                    path.name,
                    list(_uses_of_models(path)),
                )
            elif module.split(".")[0] in ("checkpoints", "dashboard", "config"):
                assert module.startswith(("checkpoints.fields", "checkpoints.migrations.")), (path.name, module)
