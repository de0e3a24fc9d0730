"""Migrations run on a database of their own, for tests/models/test_migrations.py.

`python -m tests.kits.migration_kit MODE OUT` migrates the (empty) database DATABASE_URL names and writes
what it finds to OUT as JSON, in a process of its own: the migrations' data steps write through the default
connection, so the database they migrate has to be the process's default one.

* `fresh`: `migrate`, as a new install runs it (the squashed set).
* `upgrade`: release 0.1's migration files up to 0020, rows as 0.1 stored them then, its files on to its last
  migration (0021's backfill and 0028's rehash run on those rows), then `migrate` with the squashed set present,
  as an install of 0.1 upgrades.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

SQUASHED = ("checkpoints", "0001_squashed_0028_state_hash_by_part")


def old_executor(connection: Any) -> Any:
    """A MigrationExecutor over release 0.1's migration files: the squashed set left out of its graph."""
    from django.db.migrations.executor import MigrationExecutor
    from django.db.migrations.loader import MigrationLoader

    class OldFilesLoader(MigrationLoader):
        def load_disk(self) -> None:
            super().load_disk()
            for key in [key for key, migration in self.disk_migrations.items() if migration.replaces]:
                del self.disk_migrations[key]

    executor = MigrationExecutor(connection)
    executor.loader = OldFilesLoader(connection)
    return executor


# ---- what a database holds -----------------------------------------------------------------------------------


def _top_level_items(definition: str) -> list[str]:
    """The comma-separated items of a CREATE TABLE's parentheses (columns, constraints), in any order."""
    body = definition[definition.index("(") + 1 : definition.rindex(")")]
    items, depth, start = [], 0, 0
    for i, char in enumerate(body):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            items.append(body[start:i].strip())
            start = i + 1
    return sorted([*items, body[start:].strip()])


def _postgres_schema(cursor: Any) -> dict[str, Any]:
    queries = {
        "columns": "SELECT table_name, column_name, data_type, character_maximum_length, numeric_precision,"
        " is_nullable, column_default, is_identity FROM information_schema.columns WHERE table_schema = 'public'",
        "storage": "SELECT c.relname, a.attname, a.attstorage FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"
        " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relkind = 'r'"
        " AND a.attnum > 0 AND NOT a.attisdropped",
        "constraints": "SELECT rel.relname, con.conname, pg_get_constraintdef(con.oid) FROM pg_constraint con"
        " JOIN pg_class rel ON rel.oid = con.conrelid JOIN pg_namespace n ON n.oid = rel.relnamespace"
        " WHERE n.nspname = 'public'",
        "indexes": "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'",
        "extensions": "SELECT extname FROM pg_extension",
    }
    found = {}
    for name, sql in queries.items():
        cursor.execute(sql)
        found[name] = sorted([list(row) for row in cursor.fetchall()], key=repr)
    return found


def _sqlite_schema(cursor: Any) -> dict[str, Any]:
    cursor.execute("SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")
    return {
        f"{kind} {name}": [table, _top_level_items(sql) if kind == "table" else sql]
        for kind, name, table, sql in cursor.fetchall()
    }


def schema(connection: Any) -> dict[str, Any]:
    """Every table, column, index and constraint: through Django's introspection on any database, and as the
    database itself describes them (catalogues on PostgreSQL, the statements on SQLite). Column order is left out:
    a column added by a later migration comes last, in a table the squashed set creates whole."""
    tables: dict[str, Any] = {}
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names(cursor):
            columns = sorted(
                [
                    [str(value) for value in column]
                    for column in connection.introspection.get_table_description(cursor, table)
                ]
            )
            constraints = connection.introspection.get_constraints(cursor, table)
            named = {name: repr(c) for name, c in constraints.items() if not name.startswith("__unnamed_constraint")}
            unnamed = sorted(repr(c) for name, c in constraints.items() if name.startswith("__unnamed_constraint"))
            tables[table] = {"columns": columns, "constraints": named, "unnamed constraints": unnamed}
        native = _postgres_schema(cursor) if connection.vendor == "postgresql" else _sqlite_schema(cursor)
    return {"tables": tables, "native": native}


def starting_rows() -> dict[str, Any]:
    """What a new install starts with: role groups and their permissions, every permission, retention policies,
    beat schedules."""
    from django.contrib.auth.models import Group, Permission
    from django_celery_beat.models import PeriodicTask

    from checkpoints.models import RetentionPolicy

    policy_fields = [field.name for field in RetentionPolicy._meta.concrete_fields if field.name != "id"]
    return {
        "groups": {
            group.name: sorted(f"{p.content_type.app_label}.{p.codename}" for p in group.permissions.all())
            for group in Group.objects.all()
        },
        "permissions": sorted(
            [p.content_type.app_label, p.content_type.model, p.codename, p.name] for p in Permission.objects.all()
        ),
        "retention": sorted(
            (RetentionPolicy.objects.values_list(*policy_fields)),
            key=repr,
        ),
        "schedules": sorted(
            [task.name, task.task, task.interval.every, task.interval.period, task.enabled, task.crontab_id]
            for task in PeriodicTask.objects.select_related("interval")
        ),
    }


def rows(connection: Any) -> dict[str, list[Any]]:
    """Every row of the console's tables and the users', as text."""
    found = {}
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names(cursor):
            if table.startswith("checkpoints_") or table.startswith("auth_"):
                cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)} ORDER BY 1")  # noqa: S608 - a quoted table name
                found[table] = [[_text(value) for value in row] for row in cursor.fetchall()]
    return found


def _text(value: Any) -> Any:
    if isinstance(value, bytes | memoryview):
        return bytes(value).hex()
    return value if value is None or isinstance(value, bool | int | str) else str(value)


# ---- the two runs ----------------------------------------------------------------------------------------------


STATES = [{"messages": ["plan"], "n": 1}, {"messages": ["plan", "act"], "n": 2**70}]


def _add_rows(apps: Any) -> None:
    """As 0.1 stored them before its tallies (0021) and digests by part (0028): a project with a member, a session
    with two checkpoints whose states are in the store under the digest of their whole JSON, an alert."""
    from checkpoints import store
    from checkpoints.store import digests, jsoncodec

    user = apps.get_model("auth", "User").objects.create(username="ada", password="!")
    user.groups.add(apps.get_model("auth", "Group").objects.get(name="operator"))
    project = apps.get_model("checkpoints", "Project").objects.create(slug="acme", name="Acme")
    apps.get_model("checkpoints", "ProjectMembership").objects.create(user=user, project=project, role="viewer")
    session = apps.get_model("checkpoints", "AgentSession").objects.create(
        project=project, external_id="run-1", agent="coder", last_seq=2
    )
    checkpoint_model, parent = apps.get_model("checkpoints", "Checkpoint"), None
    for seq, state in enumerate(STATES, 1):
        saved = store.save_state(state, base=parent.root if parent else None)
        parent = checkpoint_model.objects.create(
            session=session, seq=seq, parent=parent, name=f"step\x00{seq}", status=("completed", "failed")[seq - 1],
            root=saved.root, state_hash=digests.digest(jsoncodec.canonical(state)), raw_bytes=saved.raw_bytes,
            stored_bytes=saved.stored_bytes, created_at=datetime(2026, 11, 1, seq, tzinfo=UTC), metadata={"n": 1e300},
        )  # fmt: skip
    apps.get_model("checkpoints", "DriftAlert").objects.create(
        session=session, kind="stalled", severity="warning", message="no progress"
    )


def upgrade() -> dict[str, Any]:
    from django.core.management import call_command
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    from checkpoints import store

    old = old_executor(connection)
    old.migrate([("checkpoints", "0020_drift_scale")])
    _add_rows(old.loader.project_state([("checkpoints", "0020_drift_scale")]).apps)
    store.cache.clear()  # 0028 reads the states back from the database
    old = old_executor(connection)
    at_0028 = old.loader.graph.leaf_nodes()
    old.migrate(at_0028)  # 0021's backfill and 0028's rehash run on those rows
    apps = old.loader.project_state(at_0028).apps
    found: dict[str, Any] = {
        "schema at 0028": schema(connection),
        "rows at 0028": rows(connection),
        "tallied at 0028": list(
            apps.get_model("checkpoints", "AgentSession").objects.values_list(
                "checkpoint_count", "failed_count", "raw_bytes"
            )
        ),
        "digests at 0028": [
            bytes(digest).hex()
            for digest in apps.get_model("checkpoints", "Checkpoint")
            .objects.order_by("seq")
            .values_list("state_hash", flat=True)
        ],
        "live digests": [store.state_digest(state).hex() for state in STATES],
    }
    call_command("migrate", verbosity=0)
    executor = MigrationExecutor(connection)
    found |= {
        "schema": schema(connection),
        "rows": rows(connection),
        "starting rows": starting_rows(),
        "left to run": [list(key) for key, _ in executor.migration_plan(executor.loader.graph.leaf_nodes())],
        "squashed set applied": SQUASHED in executor.loader.applied_migrations,
    }
    return found


def fresh() -> dict[str, Any]:
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    return {"schema": schema(connection), "starting rows": starting_rows()}


if __name__ == "__main__":
    import django

    mode, out = sys.argv[1:]
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    django.setup()
    Path(out).write_text(json.dumps({"upgrade": upgrade, "fresh": fresh}[mode](), default=_text))
