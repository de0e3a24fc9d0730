from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import orjson
import pytest
from django.db import connection, transaction
from django.test import Client

# Playwright runs an event loop in the test thread; Django's ORM must still be usable there.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

REQUIRE_SERVICES = os.environ.get("REQUIRE_SERVICES") == "1"


def worker_redis_url(url: str, worker: str | None) -> str:
    """REDIS_URL's database for one pytest-xdist worker: gw0 keeps it, gwN takes the N-th below (modulo Redis's 16).

    The Redis tests empty their database before and after; with a database each, they run on any worker at any
    time (`--dist load`) and none empties another's queue."""
    if not worker or not worker.startswith("gw"):
        return url
    parts = urlsplit(url)
    database = int(parts.path.strip("/") or 0)
    return urlunsplit(parts._replace(path=f"/{(database - int(worker[2:])) % 16}"))


if os.environ.get("REDIS_URL"):
    os.environ["REDIS_URL"] = worker_redis_url(os.environ["REDIS_URL"], os.environ.get("PYTEST_XDIST_WORKER"))


def pytest_configure(config: pytest.Config) -> None:
    """What pytest-xdist's workers (make test runs three) must not share.

    SQLite's test database is named in-memory, as Django's default is: pytest-django would otherwise give each
    worker a file named after the database path (it does not know django-prometheus' SQLite engine). Each
    worker keeps its own file cache: the tests clear the cache between them, which must not empty the other
    worker's mid-test (its API rate-limit counts, say)."""
    from django.conf import settings

    database = settings.DATABASES["default"]
    if database["ENGINE"].endswith(".sqlite3") and not database.get("TEST", {}).get("NAME"):
        database["TEST"] = {**database.get("TEST", {}), "NAME": ":memory:"}
    if database["ENGINE"].endswith("postgresql"):  # a test database's commits need not wait for the disk
        options = database.setdefault("OPTIONS", {})
        options["options"] = f"{options.get('options', '')} -c synchronous_commit=off".strip()
    _emptying_by_delete()
    _live_server_keeps_its_connections()
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    cache = settings.CACHES["default"]
    if worker and cache["BACKEND"].endswith(".FileBasedCache"):
        cache["LOCATION"] = f"{cache['LOCATION']}-{worker}"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Stop the web process's per-minute request tally before pytest closes the stream its log handler writes to."""
    from config import access

    access.STOP.set()


KEPT_BY_FLUSH = {"django_content_type", "auth_permission"}


def _emptying_by_delete() -> None:
    """After each transactional test (live_server, transaction=True) Django empties every table with one TRUNCATE,
    which on PostgreSQL makes a new file for each of the ~250 tables and indexes and syncs them: 0.4–2 s a test,
    most of the suite's time in the browser and client tests. A DELETE of the few rows a test wrote costs
    milliseconds; the foreign keys Django makes on PostgreSQL are checked at commit, so the order does not matter,
    except for those checked at once (`ON DELETE RESTRICT`, migration 0044): the tables naming a checkpoint are
    emptied first, then the checkpoints' (one statement for a checkpoint and its children).
    Content types and permissions stay: the flush's post_migrate would only write the same rows again.
    Only the tests' flush is changed (`manage.py flush` is the only other caller); sequence resets keep TRUNCATE."""
    from django.db.backends.postgresql.operations import DatabaseOperations

    truncating = DatabaseOperations.sql_flush

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):  # type: ignore[no-untyped-def]
        if reset_sequences or allow_cascade:
            return truncating(self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
        with self.connection.cursor() as cursor:
            cursor.execute(
                "SELECT conrelid::regclass::text, confrelid::regclass::text FROM pg_constraint WHERE confdeltype = 'r'"
            )
            restricting = cursor.fetchall()
        referencing = {table for table, _ in restricting}
        referenced = {table for _, table in restricting}

        def turn(table: str) -> int:  # a table naming one that refuses, then the refusing ones, then the rest
            return 0 if table in referencing - referenced else 1 if table in referenced else 2

        deletes = [
            f"{style.SQL_KEYWORD('DELETE FROM')} {style.SQL_FIELD(self.quote_name(table))};"
            for table in sorted(tables, key=turn)
            if table not in KEPT_BY_FLUSH
        ]
        return ["\n".join(deletes)] if deletes else []  # one round trip for the ~50 tables: 1.5 ms instead of 5-9

    DatabaseOperations.sql_flush = sql_flush  # type: ignore[method-assign]


def _live_server_keeps_its_connections() -> None:
    """Django's live server answers each HTTP connection in a new thread, which opens a new database connection
    and closes it after: a PostgreSQL backend started for each request (~7 ms here, a fifth of what an API request
    costs the server), and the schema test alone sends ~4,000. Here a thread that ends hands its connection to the
    next one, as the production server (gunicorn with CONN_MAX_AGE) keeps its connections: Django still closes one
    that errored or outlived CONN_MAX_AGE when a request finishes, and a thread still serves each HTTP connection
    (a client keeping its connection alive holds a thread, never the others). The server closes them when it stops,
    before the test databases are dropped."""
    import threading

    from django.core.servers.basehttp import ThreadedWSGIServer
    from django.db import DEFAULT_DB_ALIAS, connections
    from django.test.testcases import LiveServerThread

    class HandingOnWSGIServer(ThreadedWSGIServer):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.lock = threading.Lock()
            self.idle: list[Any] = []  # connections no thread uses
            self.closed = False
            LIVE_SERVERS.append(self)

        def process_request_thread(self, request: Any, client_address: Any) -> None:
            if not self.connections_override:  # SQLite's in-memory database: one shared connection already
                with self.lock:
                    handed = self.idle.pop() if self.idle else None
                if handed is not None:
                    handed._thread_ident = threading.get_ident()  # Django checks a connection stays in its thread
                    connections[DEFAULT_DB_ALIAS] = handed
            super().process_request_thread(request, client_address)

        def _close_connections(self) -> None:
            with self.lock:
                if not self.connections_override and not self.closed:
                    self.idle.append(connections[DEFAULT_DB_ALIAS])
                    return
            super()._close_connections()  # a client kept its connection past the server's end: closed, as Django does

        def server_close(self) -> None:
            super().server_close()
            with self.lock:
                self.closed = True
            self.close_idle()

        def close_idle(self) -> None:
            with self.lock:
                idle, self.idle = self.idle, []
            for wrapper in idle:
                wrapper._thread_ident = threading.get_ident()
                wrapper.close()

    LiveServerThread.server_class = HandingOnWSGIServer


def _unique_node_ids(items: list[pytest.Item]) -> None:
    """schemathesis names each API operation's test `test_…[GET /api/v1/…]`, but pytest 9 builds a node id from
    the function's name and a parametrize callspec, which those tests lack: all 31 had one node id, and
    pytest-xdist, which knows a test by its node id, ran one of them. Each gets its name's parameters back."""
    seen = Counter(item.nodeid for item in items)
    for item in items:
        base, bracket, params = item.name.partition("[")
        if seen[item.nodeid] > 1 and bracket and item.parent is not None and hasattr(item, "_id"):
            item._id = item.parent.id.child(base).with_params(params.removesuffix("]"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keeps pytest-django's order (tests in a transaction, then transactional ones, whose flush also empties
    what the migrations installed: roles, retention policies, schedules), with two moves inside it.

    Tests of a module-scoped fixture (rows shared by the module, fixtures named shared_*, see `shared_rows`; a
    server; migrated databases) run after the module's other tests of their kind, which so never see those rows:
    the rows stay until the module's last test. The Redis tests run just before the transactional tests (the ones
    in a transaction first).

    pytest-xdist's `--dist load` (make test) hands each worker tests in this order, so on every worker no test in
    a transaction follows a flush (`in_collection_order` checks it). A worker builds a module fixture for the
    tests of its module it is given (`loadgroup` kept each fixture's tests on one worker, which built it once,
    but handed groups out one at a time: the suite took 13 min instead of 11)."""

    _unique_node_ids(items)

    def module(item: pytest.Item) -> str:
        return item.nodeid.split("::")[0]

    def shares(item: pytest.Item) -> bool:
        info = getattr(item, "_fixtureinfo", None)
        return info is not None and any(  # ours, not a plugin's (pytest-django's class-scoped autouse one)
            definitions[-1].baseid and definitions[-1].scope in {"module", "class", "package"}
            for definitions in info.name2fixturedefs.values()
        )

    run, runs = 0, {}  # a module's consecutive tests (pytest-django may have split a module in two)
    for index, item in enumerate(items):
        if index and module(item) != module(items[index - 1]):
            run += 1
        runs[id(item)] = run
    position = {id(item): index for index, item in enumerate(items)}
    # transactional() first: a module run alone is one run holding both kinds, and its shared tests in a
    # transaction must not move past its transactional ones
    items.sort(key=lambda item: (runs[id(item)], transactional(item), shares(item), position[id(item)]))
    redis = [item for item in items if item.get_closest_marker("redis")]
    rest = [item for item in items if not item.get_closest_marker("redis")]
    cut = next((index for index, item in enumerate(rest) if transactional(item)), len(rest))
    redis.sort(key=transactional)
    items[:] = rest[:cut] + redis + rest[cut:]


def transactional(item: pytest.Item) -> bool:
    """A test whose database changes are committed, and removed after it by a flush."""
    marker = item.get_closest_marker("django_db")
    if marker and (
        marker.args[:1] == (True,) or marker.kwargs.get("transaction") or marker.kwargs.get("reset_sequences")
    ):
        return True
    return bool({"transactional_db", "live_server"} & set(getattr(item, "fixturenames", ())))


FLUSHED: list[str] = []  # the first transactional test this process ran


LIVE_SERVERS: list[Any] = []  # the live servers this process started (`_live_server_keeps_its_connections`)


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """pytest-django's, and before the test databases are dropped, the live server's idle connections closed: the
    server may outlive the databases (a test can ask for it before its database), and a connection left open
    makes DROP DATABASE fail."""
    yield
    for server in LIVE_SERVERS:
        server.close_idle()
    if connection.vendor == "postgresql":  # and what a thread still serving a client kept open
        with django_db_blocker.unblock(), connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )


@pytest.fixture(autouse=True)
def in_collection_order(request: pytest.FixtureRequest) -> None:
    """Fails a test in a transaction that runs after a transactional test in the same process: that test's flush
    emptied the roles and schedules the migrations installed, and the test would fail for a reason not its own
    (xdist's `worksteal` or `loadscope`, or a plugin that shuffles, would do it)."""
    item = request.node
    if transactional(item):
        FLUSHED[:] = FLUSHED or [item.nodeid]
    elif FLUSHED and (item.get_closest_marker("django_db") or "db" in getattr(item, "fixturenames", ())):
        pytest.fail(f"a test in a transaction runs after the transactional {FLUSHED[0]}", pytrace=False)


def _redis_available() -> str | None:
    url = os.environ.get("REDIS_URL")
    if not url:
        return "needs Redis: set REDIS_URL (make test does when redis-cli ping answers)"
    import redis

    try:
        redis.Redis.from_url(url, socket_connect_timeout=1).ping()
    except redis.RedisError as exc:
        return f"needs Redis at {url}: {exc}"
    return None


def pytest_runtest_setup(item: pytest.Item) -> None:
    if transactional(item):
        while OPEN_SHARED:
            OPEN_SHARED.pop()()
    reasons = []
    if item.get_closest_marker("postgres") and connection.vendor != "postgresql":
        reasons.append("needs PostgreSQL: set DATABASE_URL=postgres://… (make test does when pg_isready answers)")
    if item.get_closest_marker("redis"):
        reason = _redis_available()
        if reason:
            reasons.append(reason)
    if item.get_closest_marker("browser"):
        from tests.browser.conftest import CHROMIUM

        if not Path(CHROMIUM).exists():
            reasons.append(f"needs Chromium at {CHROMIUM}: apt-get install chromium (.ci/run does)")
    if reasons:
        if REQUIRE_SERVICES:
            pytest.fail("REQUIRE_SERVICES=1 but " + "; ".join(reasons), pytrace=False)
        pytest.skip("; ".join(reasons))


@pytest.fixture(autouse=True)
def _fresh_state_cache() -> Iterator[None]:
    """The store's in-process cache must not carry states between tests' databases, nor the shared cache what
    a project of a rolled-back test wanted (events.wanted_types: another test's project may get its id)."""
    from django.core.cache import cache

    from checkpoints import store
    from checkpoints.services.secrets import forget_patterns

    store.cache.clear()
    forget_patterns()  # a project's secret patterns: another test's project may get its id
    cache.clear()
    yield
    store.cache.clear()


@contextmanager
def shared_rows(django_db_blocker) -> Iterator[None]:
    """Rows a whole module (or class) of tests reads, made once inside a transaction that is rolled back after
    its last test. Each test's own transaction (the `db` fixture) nests in it as a savepoint: whatever a test
    writes is undone before the next, so every test still starts from the same rows. Only for tests that
    run in a transaction, never with `transaction=True` (a flush would take the shared rows too)."""
    with django_db_blocker.unblock():
        outer = transaction.atomic()
        outer.__enter__()
    closed = False

    def close() -> None:
        nonlocal closed
        if not closed:
            closed = True
            with django_db_blocker.unblock():
                transaction.set_rollback(True)
                outer.__exit__(None, None, None)

    OPEN_SHARED.append(close)
    try:
        yield
    finally:
        close()
        if close in OPEN_SHARED:
            OPEN_SHARED.remove(close)


# Rolls back each open `shared_rows` transaction, newest first. A module's shared tests run before its
# transactional ones, but pytest keeps a module's fixtures until its last test: run alone, a module's transactional
# tests would run inside its shared rows' open transaction (nothing they commit is committed, other connections
# see none of it, and their flush empties the shared rows).
OPEN_SHARED: list[Callable[[], None]] = []


@pytest.fixture
def demo(db):
    """The small demo: three projects, a dozen sessions with restores, forks, phases and alerts."""
    from django.core.management import call_command

    call_command("seed_demo", "--small", verbosity=0)


@pytest.fixture
def project(db):
    from checkpoints.services import get_or_create_project

    return get_or_create_project("acme")


@pytest.fixture
def other_project(db):
    from checkpoints.services import get_or_create_project

    return get_or_create_project("globex")


@pytest.fixture
def make_session(project):
    from checkpoints.services import upsert_session

    def make(external_id: str = "run-1", *, agent: str = "agent-7", in_project: Any = None):
        session, _ = upsert_session(in_project or project, external_id=external_id, agent=agent)
        return session

    return make


@pytest.fixture
def make_checkpoint():
    from checkpoints.services import CheckpointInput, create_checkpoint

    def make(session, state: Any = None, **fields: Any):
        checkpoint, _ = create_checkpoint(session, CheckpointInput(state=state if state is not None else {}, **fields))
        return checkpoint

    return make


class ApiClient:
    """Django's test client speaking JSON with a bearer token."""

    def __init__(self, token: str | None) -> None:
        self.client = Client()
        self.token = token

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def get(self, path: str, params: dict[str, Any] | None = None):
        return self.client.get(f"/api/v1{path}", params or {}, headers=self._headers())

    def send(self, method: str, path: str, data: Any = None, *, raw: bytes | str | None = None):
        body = raw if raw is not None else orjson.dumps(data) if data is not None else b""
        call = getattr(self.client, method)
        return call(f"/api/v1{path}", body, content_type="application/json", headers=self._headers())

    def post(self, path: str, data: Any = None, *, raw: bytes | str | None = None):
        return self.send("post", path, data, raw=raw)

    def put(self, path: str, data: Any = None, *, raw: bytes | str | None = None):
        return self.send("put", path, data, raw=raw)

    def delete(self, path: str):
        return self.client.delete(f"/api/v1{path}", headers=self._headers())


@pytest.fixture
def api_as():
    """An API client for any token secret."""
    return ApiClient


@pytest.fixture
def token_secret(project) -> str:
    from checkpoints.services import create_api_token

    return create_api_token(project, name="agent")[1]


@pytest.fixture
def api(token_secret) -> ApiClient:
    return ApiClient(token_secret)


@pytest.fixture
def read_only_api(project) -> ApiClient:
    from checkpoints.services import create_api_token

    return ApiClient(create_api_token(project, name="viewer", read_only=True)[1])


@pytest.fixture
def receiver(settings) -> Iterator[Any]:
    """A real HTTP receiver of webhooks on 127.0.0.1 (tests/kits/webhook_kit.py)."""
    from tests.kits.webhook_kit import serve

    yield from serve(settings)


# ---- console users -------------------------------------------------------------------------------


def _user_in(django_user_model, username: str, *, is_staff: bool = False):
    return django_user_model.objects.create_user(username, password=f"{username}-password-1", is_staff=is_staff)


def _grant(user, project, role: str):
    from checkpoints.models import ProjectMembership

    ProjectMembership.objects.get_or_create(user=user, project=project, role=role)
    return user


@pytest.fixture
def grant():
    """`grant(user, project, "operator")`: a role in one more project."""
    return _grant


@pytest.fixture
def alice(project, django_user_model):
    """An operator in `project`: browses, restores, forks, pins, triages alerts, imports."""
    return _grant(_user_in(django_user_model, "alice"), project, "operator")


@pytest.fixture
def bob(project, django_user_model):
    """A viewer in `project`: browses only."""
    return _grant(_user_in(django_user_model, "bob"), project, "viewer")


@pytest.fixture
def carol(project, django_user_model):
    """An approver in `project`: browses and reviews phases."""
    return _grant(_user_in(django_user_model, "carol"), project, "approver")


@pytest.fixture
def nobody(db, django_user_model):
    """Signed in, but a member of no project."""
    return _user_in(django_user_model, "nobody")


def make_staff_operator(django_user_model):
    from django.contrib.auth.models import Group, Permission

    from checkpoints.roles import ensure_roles

    if not Group.objects.filter(name="operator").exists():  # flushed by a transactional test
        ensure_roles(Group, Permission)
    user = _user_in(django_user_model, "olga", is_staff=True)
    user.groups.add(Group.objects.get(name="operator"))
    return user


@pytest.fixture
def staff_operator(db, django_user_model):
    """Staff in the operator group: an operator in every project (also runs jobs for all of them)."""
    return make_staff_operator(django_user_model)


def users_of_every_role(django_user_model, project) -> dict[str, Any]:
    """The users of the fixtures above, by fixture name, made outside a test (for rows shared by a module)."""
    return {
        "alice": _grant(_user_in(django_user_model, "alice"), project, "operator"),
        "bob": _grant(_user_in(django_user_model, "bob"), project, "viewer"),
        "carol": _grant(_user_in(django_user_model, "carol"), project, "approver"),
        "nobody": _user_in(django_user_model, "nobody"),
        "staff_operator": make_staff_operator(django_user_model),
    }


@pytest.fixture
def poison():
    """Makes every checkpoint of a session unreadable, as a bad row written before the API checked would.

    Its `created_at` becomes a value the database keeps but the driver cannot read back: PostgreSQL keeps
    `0001-01-01 00:00:00+14` as a BC timestamp psycopg refuses (the range check of migration 0009 is lifted
    for the test, as on an install from before it); SQLite keeps a date that does not exist.
    """
    from checkpoints.models import Checkpoint

    table = connection.ops.quote_name(Checkpoint._meta.db_table)
    lifted: list[bool] = []

    def apply(session: Any) -> None:
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql" and not lifted:
                cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # no ALTER TABLE with deferred checks pending
                cursor.execute(f"ALTER TABLE {table} DROP CONSTRAINT {RANGE_CHECK}")
                cursor.execute("SET CONSTRAINTS ALL DEFERRED")
                lifted.append(True)
            cursor.execute(
                f"UPDATE {table} SET created_at = %s WHERE session_id = %s",  # noqa: S608 - the table's quoted name
                [UNREADABLE[connection.vendor], session.pk],
            )
        with pytest.raises(Exception):  # noqa: B017 - whatever the driver raises, reading the session now fails
            list(Checkpoint.objects.filter(session=session))

    yield apply
    if lifted:  # NOT VALID: kept for new rows; a transactional test's rows are flushed after this
        with connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            cursor.execute(
                f"ALTER TABLE {table} ADD CONSTRAINT {RANGE_CHECK} CHECK (created_at >= '1970-01-01T00:00:00Z'"
                " AND created_at < '9000-01-01T00:00:00Z') NOT VALID"
            )


RANGE_CHECK = "checkpoint_created_at_in_range"
UNREADABLE = {"postgresql": "0001-01-01 00:00:00+14", "sqlite": "2024-02-30 00:00:00"}


def build_big_session(project):
    """A session of 3,000 checkpoints (with a restore in the middle), for query-count bounds."""
    from checkpoints.services import Actor, CheckpointInput, ingest_checkpoints, restore_checkpoint, upsert_session

    session, _ = upsert_session(project, external_id="marathon", agent="agent-9", title="Long run")
    kinds = ["step", "step", "routine", "step", "recovery"]
    items = [
        CheckpointInput(
            state={"step": i, "messages": [f"message {j}" for j in range(i % 40)], "ok": i % 17 != 0},
            name=f"step_{i % 25}",
            kind=kinds[i % len(kinds)],
            status="failed" if i % 97 == 0 else "completed",
            step=i,
        )
        for i in range(3000)
    ]
    checkpoints = [c for c, _ in ingest_checkpoints([(session, items)])]
    restore_checkpoint(checkpoints[1500], actor=Actor.system("test"), reason="midway")
    session.refresh_from_db()
    return session


def shared_session(django_db_blocker, build: Any) -> Iterator[int]:
    """For a module-scoped fixture: the id of the session `build(project)` makes in `project` (acme), built
    once for the module's tests that ask for it, in `shared_rows`."""
    from checkpoints.services import get_or_create_project

    with shared_rows(django_db_blocker):
        with django_db_blocker.unblock():
            session = build(get_or_create_project("acme"))
        yield session.pk


@pytest.fixture(scope="module")
def shared_big_session(django_db_setup, django_db_blocker) -> Iterator[int]:
    """`build_big_session`, once a module (about 5 s each time)."""
    yield from shared_session(django_db_blocker, build_big_session)


@pytest.fixture
def big_session(shared_big_session, project):
    """A session of 3,000 checkpoints (with a restore in the middle) in `project`, for query-count bounds;
    built once a module (what a test changes in it is rolled back with the test)."""
    from checkpoints.models import AgentSession

    return AgentSession.objects.get(pk=shared_big_session, project=project)


@pytest.fixture(autouse=True)
def _celery_runs_tasks_inline():
    """Unit tests run tasks in-process; tests with a real worker override this."""
    from config.celery import app

    app.conf.task_always_eager = True
    app.conf.task_eager_propagates = True
    yield
    app.conf.task_always_eager = False


@pytest.fixture
def migrated_back(transactional_db) -> Iterator[Any]:
    """Roll the checkpoints app back to migration `name`: its models then, and a function that migrates on.

    The database is migrated on to the latest afterwards in any case, so a failing test leaves no old schema.
    """
    from django.db.migrations.executor import MigrationExecutor

    from tests.kits.migration_kit import old_executor

    def forward() -> None:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())

    def back(name: str) -> tuple[Any, Any]:
        # `name` is one of the migrations the squashed set replaces: back through release 0.1's files
        old_executor(connection).migrate([("checkpoints", name)])
        return old_executor(connection).loader.project_state([("checkpoints", name)]).apps, forward

    yield back
    forward()


@pytest.fixture
def app_broker():
    """`app_broker(url)`: the Celery app talks to another broker for this test (it read the settings at start)."""
    from config.celery import app

    saved = app.conf.broker_url, app.conf.broker_transport_options

    def point(url: str, options: dict[str, Any] | None = None) -> None:
        app.conf.broker_url, app.conf.broker_transport_options = url, options or {}
        app._after_fork()  # drops the connection pools opened on the old broker (replies go through them)

    yield point
    point(*saved)


@pytest.fixture
def redis_broker(app_broker):
    """The Celery app on REDIS_URL's database, emptied before and after; tasks are sent, not run inline."""
    import redis
    from django.conf import settings

    from config.celery import app

    url = os.environ["REDIS_URL"]
    server = redis.Redis.from_url(url)
    server.flushdb()
    app_broker(url, settings.REDIS_BROKER_TRANSPORT_OPTIONS)  # the socket timeouts production uses
    app.conf.task_always_eager = False
    yield url
    server.flushdb()


CLOSED_PORT_REDIS = "redis://127.0.0.1:1/0"  # nothing listens on port 1: every connection is refused at once


@pytest.fixture
def cache_down(settings) -> str:
    """The shared cache is a Redis on a closed port for this test (Django's Redis backend raises on each call)."""
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": CLOSED_PORT_REDIS}
    }
    return CLOSED_PORT_REDIS


@pytest.fixture
def broker_down(app_broker) -> str:
    """The Celery app's broker is a Redis on a closed port: every task send fails."""
    from config.celery import app

    app_broker(CLOSED_PORT_REDIS)
    app.conf.task_always_eager = False
    return CLOSED_PORT_REDIS


@pytest.fixture
def database_unreachable(transactional_db) -> Any:
    """`with database_unreachable():` this test's database connection is closed and reopens on 127.0.0.1's closed
    port 1; restored after. PostgreSQL only (mark the test `postgres`): SQLite's in-memory test database would not
    survive the close."""
    from contextlib import contextmanager

    @contextmanager
    def unreachable() -> Iterator[None]:
        saved = dict(connection.settings_dict)
        connection.close()
        connection.settings_dict.update(HOST="127.0.0.1", PORT="1")
        try:
            yield
        finally:
            connection.close()
            connection.settings_dict.clear()
            connection.settings_dict.update(saved)

    return unreachable
