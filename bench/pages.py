"""Record what users see, and compare two records: every console page, the admin and the OpenAPI schema.

    .venv/bin/python bench/pages.py record DIR [--tree PATH] [--database-url URL] [--full] [--only TEXT …]
    .venv/bin/python bench/pages.py compare DIR_A DIR_B

`record` builds a fresh database (a temporary SQLite file unless `--database-url`), runs the migrations, seeds the
small demo (`seed_demo --small --seed 42`; `--full`: the full one) with the clock stopped at FROZEN_AT, adds the few
objects the demo lacks (a viewer, an import job, a notification rule), and renders through Django's test client,
with the clock still stopped:

- every URL name in the console's namespace (`dashboard:`), with the ids of real seeded objects (ROUTES says which
  objects; a URL name missing there fails the record), as the superuser and as a viewer, each once as a page and
  once as an htmx request (kept only where the answer differs: the view has a fragment);
- the admin's index, every registered model's changelist and the change page of its first and last rows;
- the login page and `/api/v1/openapi.json`;
- the fragments those console pages load with a query string (`hx-get`: a subtree of a state, an expanded run of
  the timeline, the next part of a diff), one URL of each shape, named `console/links/<shape>-<digest>`.

Each request runs in a transaction that is rolled back, so a GET that writes (an export's audit row) changes no
other page, and a page reads the same whatever else is recorded. Each answer is written to DIR as one text file:
method and URL, status, the headers, then the body (JSON indented, a zip as its members' names, sizes and digests),
normalised by NORMALISE: CSRF tokens, CSP nonces, session cookies, and what still varies from run to run.

Times are not blanked: the clock is stopped while seeding and rendering, so "3 minutes ago" and "12 Mar 09:27"
come out the same in every run, and a change in how a time is shown is a difference that `compare` reports.

`--tree PATH` records another checkout of the repository (a `git worktree add` of an older commit) with this
file and this virtualenv: its `config`, `checkpoints` and `dashboard` packages are imported instead of this
tree's. `compare` prints a unified diff per changed page, then "N pages, M identical, K changed", and exits 1
when anything differs. docs/contributing.md says how to use both around a refactor.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import html
import importlib
import io
import itertools
import json
import os
import random
import re
import sys
import tempfile
import time
import urllib.parse
import uuid
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1]
FROZEN_AT = datetime(2026, 3, 12, 9, 30, tzinfo=UTC)  # a Thursday: the demo's "yesterday" is a weekday too
SEED = 42
PASSWORD = "pages"  # noqa: S105 - both users' password; the hash gets a fixed salt so the admin shows one value

SCRATCH = "/dev/shm" if Path("/dev/shm").is_dir() else None  # noqa: S108 - a throwaway database in memory, in a new mkdtemp folder

# (pattern, replacement): what differs between two runs of the same code, and nothing else
NORMALISE: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r'(name="csrfmiddlewaretoken" value=")[^"]*(")'), r"\1<csrf-token>\2"),
    (re.compile(r'("X-CSRFToken": ")[^"]*(")'), r"\1<csrf-token>\2"),
    (re.compile(r'(nonce=")[^"]*(")'), r"\1<nonce>\2"),
    (re.compile(r"('nonce-)[^']*(')"), r"\1<nonce>\2"),
    (re.compile(r"\b(csrftoken|sessionid)=[^;\s]*"), r"\1=<cookie>"),
]


# Ids numbered by a counter that lives as long as the process (the charts' `chart-N`): renumbered per page in the
# order they appear, so a page reads the same whatever was rendered before it, and two charts given one id still show.
RENUMBER = [re.compile(r"\b(chart-)(\d+)\b")]


def normalise(text: str) -> str:
    for pattern, replacement in NORMALISE:
        text = pattern.sub(replacement, text)
    for pattern in RENUMBER:
        text = _renumber(pattern, text)
    return text


def _renumber(pattern: re.Pattern[str], text: str) -> str:
    numbers: dict[str, int] = {}

    def number(match: re.Match[str]) -> str:
        return f"{match[1]}<{numbers.setdefault(match[2], len(numbers) + 1)}>"

    return pattern.sub(number, text)


# ---- which objects each console URL is rendered for ----------------------------------------------------------


@dataclass
class World:
    """The seeded objects the pages are rendered for, picked by a stable order (ids, sequence numbers)."""

    sessions: list[Any]
    checkpoints: list[Any]
    phases: list[Any]
    alerts: list[Any]
    projects: list[Any]
    import_job: Any
    rule: Any
    token: Any
    gc_task: Any
    recovery: Any = None


@dataclass(frozen=True)
class Page:
    """One request: URL arguments and query string, and the headers its htmx request adds."""

    args: tuple[Any, ...] = ()
    query: str = ""
    htmx: dict[str, str] = field(default_factory=dict)


def _sessions(world: World) -> list[Page]:
    return [Page((session.pk,)) for session in world.sessions]


def _one_session(world: World) -> list[Page]:
    return [Page((world.sessions[0].pk,))]


def _checkpoints(world: World) -> list[Page]:
    return [Page((checkpoint.pk,)) for checkpoint in world.checkpoints]


def _one_checkpoint(world: World) -> list[Page]:
    """The first session's first checkpoint, not its head: restore and fork offer more for it."""
    return [Page((world.checkpoints[0].pk,))]


def _roots(world: World) -> list[Page]:
    return [Page((checkpoint.pk,)) for checkpoint in world.checkpoints if checkpoint.parent_id is None][:4]


def _phases(world: World) -> list[Page]:
    return [Page((phase.session_id, phase.number)) for phase in world.phases]


def _one_phase(world: World) -> list[Page]:
    return [Page((phase.session_id, phase.number)) for phase in world.phases[:1]]


def _one_alert(world: World) -> list[Page]:
    return [Page((world.alerts[0].pk,))]


def _projects(world: World) -> list[Page]:
    return [Page((project.slug,)) for project in world.projects]


def _rule(world: World) -> list[Page]:
    return [Page((world.rule.project.slug, world.rule.pk))]


def _token(world: World) -> list[Page]:
    return [Page((world.token.project.slug, world.token.pk))]


def _finding(world: World) -> list[Page]:
    """The reveal (or dismiss) form of the first finding; the demo plants no secret, so without one the page answers
    404 (people without reveal_secrets, every role: 403; the dismiss form is the operators')."""
    from checkpoints.models import SecretFinding

    found = SecretFinding.objects.select_related("project").order_by("pk").first()
    return [Page((found.project.slug, found.pk) if found else (world.projects[0].slug, 1))]


def _compare(world: World) -> list[Page]:
    """Nothing chosen, two checkpoints of one session, a fork against its source, and one id that is not there."""
    pages = [Page(), Page(query="?a=999999&b=1")]
    for session in world.sessions[:3]:
        first = session.checkpoints.order_by("seq").first()
        pages.append(Page(query=f"?a={first.pk}&b={session.head_id}"))
    for session in world.sessions:
        if session.forked_from_id:
            pages.append(Page(query=f"?a={session.forked_from_id}&b={session.head_id}"))
            break
    return pages


def _export(world: World) -> list[Page]:
    from checkpoints.sources import formats  # the names the export offers (the view answers 400 to others)

    session = world.sessions[0]
    return [
        Page((session.pk,), query=f"?format={name}")
        for name in (formats.names() if hasattr(formats, "names") else formats.NAMES)
    ] + [Page((session.pk,))]


def _none(world: World) -> list[Page]:
    return [Page()]


# URL name (in dashboard/urls.py) → the requests recorded for it. POST-only actions are recorded too: a GET shows
# what a user who follows such a link gets (405, or a confirmation).
ROUTES: dict[str, Callable[[World], list[Page]]] = {
    "overview": _none,
    "session_list": lambda world: [Page(), Page(query="?status=failed"), Page(query="?q=nightly")],
    "session_detail": _sessions,
    "session_undo": _one_session,
    "session_interrupts": _one_session,  # the demo has no LangGraph interrupt: the page says none is waiting
    "interrupt_answer": _one_session,
    "session_export": _export,
    "phase_detail": _phases,
    "phase_feedback": _one_phase,
    "checkpoint_detail": _checkpoints,
    "checkpoint_subtree": _roots,
    "checkpoint_download": lambda world: _checkpoints(world)[:2],
    "checkpoint_restore": _one_checkpoint,
    "checkpoint_fork": _one_checkpoint,
    "checkpoint_pin": _one_checkpoint,
    "checkpoint_edit": _one_checkpoint,
    "compare": _compare,
    "alert_list": lambda world: [Page(), Page(query="?state=resolved")],
    "alert_acknowledge": _one_alert,
    "alert_resolve": _one_alert,
    "recovery_new": lambda world: [Page(), Page(query="?all=on&action=restore&rule=last_good&state=unresolved")],
    "recovery_detail": lambda world: [Page((world.recovery.pk,))],
    "recovery_undo": lambda world: [Page((world.recovery.pk,))],
    "audit_log": _none,
    "retention": _none,
    "retention_dry_run": _none,
    "import_upload": _none,
    "import_job": lambda world: [Page((world.import_job.pk,))],
    "jobs": lambda world: [Page(htmx={"HX-Trigger": "job-table"})],
    "job_run": lambda world: [Page((world.gc_task.pk,))],
    "notification_projects": _none,
    "project_settings": _projects,
    "notifications": _projects,
    "notification_rule_create": lambda world: _projects(world)[:1],
    "notification_rule_edit": _rule,
    "notification_rule_delete": _rule,
    "notification_rule_test": _rule,
    "token_projects": _none,
    "tokens": _projects,
    "secrets": _projects,
    "secret_reveal": _finding,
    "secret_dismiss": _finding,
    "purge_new": _projects,
    # the demo asks for no purge: the page of one that is not there (a purge's own page is two queries)
    "purge_detail": lambda world: [Page((world.projects[0].slug, 1))],
    "token_revoke": _token,
}

# ---- building the world -------------------------------------------------------------------------------------


@contextmanager
def counted_uuids() -> Iterator[None]:
    """uuid4 in a fixed sequence (the admin shows the ids of events and deliveries), restored on the way out.

    Fields declared `default=uuid.uuid4` hold the function itself, so patching the module is not enough."""
    from django.apps import apps

    counter = itertools.count(1)

    def make() -> uuid.UUID:
        return uuid.UUID(int=(0x5EED << 112) | next(counter), version=4)

    patched = [
        model_field
        for model in apps.get_models()
        for model_field in model._meta.concrete_fields
        if model_field.default is uuid.uuid4
    ]
    original = uuid.uuid4
    uuid.uuid4 = make  # type: ignore[assignment]  # and code that calls uuid.uuid4() itself
    for model_field in patched:
        model_field.default = make
    try:
        yield
    finally:
        uuid.uuid4 = original  # type: ignore[assignment]
        for model_field in patched:
            model_field.default = original


def build_world(full: bool = False) -> World:
    """Seed the demo and add what it lacks; call with the clock stopped (time_machine) for the same data each run."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.hashers import make_password
    from django.core.management import call_command
    from django_celery_beat.models import PeriodicTask

    from checkpoints import models as domain
    from checkpoints.models import (
        AgentSession,
        ApiToken,
        Checkpoint,
        DriftAlert,
        ImportJob,
        NotificationRule,
        Phase,
        Project,
        ProjectMembership,
    )

    call_command("seed_demo", *([] if full else ["--small"]), "--seed", str(SEED), stdout=io.StringIO())
    users = get_user_model()
    password = make_password(PASSWORD, salt="pagespagespages0")
    users.objects.create(username="admin", email="admin@localhost", is_staff=True, is_superuser=True, password=password)
    viewer = users.objects.create(username="viewer", email="viewer@localhost", password=password)
    projects = list(Project.objects.order_by("slug"))
    for project in projects:
        ProjectMembership.objects.create(project=project, user=viewer, role="viewer")
    sessions = list(AgentSession.objects.order_by("pk"))
    job = ImportJob.objects.create(
        project=projects[0],
        archive="/nowhere/runs.zip",
        original_name="runs.zip",
        status="done",
        imported=3,
        report={"imported": 3, "skipped": 0, "errors": [], "sessions": [sessions[0].external_id]},
        started_at=FROZEN_AT,
        finished_at=FROZEN_AT,
    )
    recoveries = getattr(domain, "Recovery", None)  # a commit before fleet recovery (--tree) has none
    recovery = recoveries and recoveries.objects.create(  # a finished fleet recovery of nothing: its page, its undo
        project=projects[0],
        action="restore",
        rule="last_good",
        reason="search API outage",
        actor="admin",
        state="finished",
        created_at=FROZEN_AT,
        finished_at=FROZEN_AT,
    )
    rule = NotificationRule.objects.create(
        project=projects[0],
        name="On-call",
        events=["alert.opened"],
        channel="email",
        target="oncall@example.com",
    )
    token = ApiToken.objects.create(  # fixed prefix and hash: create_api_token's are random, and pages show the prefix
        project=projects[0],
        name="ci-agent",
        prefix="0badc0de",
        token_hash="0" * 64,
        scopes=["read", "write"],
        created_at=FROZEN_AT,
    )
    checkpoints: dict[int, Any] = {}
    for session in sessions:  # its first and its head: the timeline's two ends
        for checkpoint in (session.checkpoints.order_by("seq").first(), session.head):
            if checkpoint is not None:
                checkpoints.setdefault(checkpoint.pk, checkpoint)
    for kind in Checkpoint.objects.order_by("kind").values_list("kind", flat=True).distinct():
        first = Checkpoint.objects.filter(kind=kind).order_by("pk").first()
        checkpoints.setdefault(first.pk, first)
    return World(
        sessions=sessions,
        checkpoints=[checkpoints[pk] for pk in sorted(checkpoints)],
        phases=list(Phase.objects.order_by("session_id", "number")),
        alerts=list(DriftAlert.objects.order_by("pk")),
        projects=projects,
        import_job=job,
        rule=rule,
        token=token,
        gc_task=PeriodicTask.objects.filter(task__endswith="collect_garbage").order_by("pk").first()
        or PeriodicTask.objects.order_by("pk").first(),
        recovery=recovery,
    )


# ---- rendering ----------------------------------------------------------------------------------------------


def console_names() -> list[str]:
    """The URL names of the console (the `dashboard` namespace), read from the resolver, not from a module."""
    from django.urls import URLPattern, get_resolver

    _, resolver = get_resolver().namespace_dict["dashboard"]
    return sorted(p.name for p in resolver.url_patterns if isinstance(p, URLPattern) and p.name)


def requests(world: World) -> Iterator[tuple[str, str, dict[str, str]]]:
    """(file name, URL, extra htmx headers) for every page, console first, then admin, login and schema."""
    from django.contrib import admin
    from django.contrib.admin.utils import quote
    from django.urls import reverse

    names = console_names()
    unknown = [name for name in names if name not in ROUTES]
    if unknown:
        raise SystemExit(f"bench/pages.py: no pages for console URL(s) {', '.join(unknown)}: add them to ROUTES")
    for name in names:
        for index, page in enumerate(ROUTES[name](world)):
            yield f"console/{name}/{index:02d}", reverse(f"dashboard:{name}", args=page.args) + page.query, page.htmx
    yield "admin/index", reverse("admin:index"), {}
    for model in sorted(admin.site._registry, key=lambda model: model._meta.label_lower):
        meta = model._meta
        base = f"admin:{meta.app_label}_{meta.model_name}"
        yield f"admin/{meta.label_lower}/changelist", reverse(f"{base}_changelist"), {}
        rows = model._default_manager.order_by("pk")
        first, last = rows.first(), rows.last()
        for label, row in (("first", first), ("last", last)):
            if row is not None and not (label == "last" and last.pk == first.pk):
                pk = quote(meta.pk.value_to_string(row))  # as the admin writes it: a binary key in base64
                yield f"admin/{meta.label_lower}/change-{label}", reverse(f"{base}_change", args=[pk]), {}
    yield "auth/login", reverse("login"), {}
    yield "api/openapi", "/api/v1/openapi.json", {}


def describe(response: Any, method: str, url: str) -> str:
    """The response as text: request line, status, headers (sorted; length and date left out), body."""
    head = [f"{method} {url}", f"{response.status_code} {response.reason_phrase}"]
    for name, value in sorted(response.items()):
        if name.lower() not in ("content-length", "date", "expires", "last-modified"):
            head.append(f"{name}: {value}")
    for cookie in sorted(response.cookies.values(), key=lambda morsel: morsel.key):
        head.append(f"Set-Cookie: {cookie.OutputString()}")
    content_type = response.get("Content-Type", "")
    body = b"".join(response.streaming_content) if response.streaming else response.content
    if "json" in content_type:
        try:
            text = json.dumps(json.loads(body), indent=2, ensure_ascii=False)
        except ValueError:
            text = body.decode("utf-8", "replace")
    elif "zip" in content_type:
        with zipfile.ZipFile(io.BytesIO(body)) as archive:
            text = "\n".join(
                f"{info.filename}  {info.file_size} bytes  sha256:{hashlib.sha256(archive.read(info)).hexdigest()}"
                for info in archive.infolist()
            )
    elif content_type.startswith("text/") or not body:
        text = body.decode("utf-8", "replace")
    else:
        text = f"{len(body)} bytes  sha256:{hashlib.sha256(body).hexdigest()}"
    return normalise("\n".join(head) + "\n\n" + text.rstrip("\n") + "\n")


def render(world: World, only: list[str] | None = None) -> dict[str, str]:
    """Every page as text, keyed by its file name under the record (a subset: names containing any of `only`)."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    users = get_user_model()
    clients = {}
    for username in ("admin", "viewer"):
        clients[username] = Client()
        clients[username].force_login(users.objects.get(username=username))
    pages: dict[str, str] = {}
    for name, url, htmx in requests(world):
        if not only or any(part in name for part in only):
            _render_both(pages, clients, name, url, htmx)
    for name, url in htmx_links(pages):
        if not only or any(part in name for part in only):
            _render_both(pages, clients, name, url, {})
    return pages


def _render_both(pages: dict[str, str], clients: dict[str, Any], name: str, url: str, htmx: dict[str, str]) -> None:
    """The page and its htmx request as each user (as the superuser only outside the console)."""
    for username, client in clients.items():
        if username == "viewer" and not name.startswith("console/"):
            continue  # the admin is for staff, and a viewer's schema is everyone's
        full = _get(client, url, {})
        pages[f"{name}.{username}.txt"] = full
        fragment = _get(client, url, {"HX-Request": "true", "HX-Current-URL": f"http://testserver{url}", **htmx})
        if fragment.split("\n", 1)[1] != full.split("\n", 1)[1]:
            pages[f"{name}.{username}.htmx.txt"] = fragment


HX_GET = re.compile(r'hx-get="([^"#]*\?[^"#]*)"')
LAZY = re.compile(r'class="lazy(?:-text)?"><a href="([^"#]*\?[^"#]*)"')  # the state tree's: console.js loads them


def htmx_links(pages: dict[str, str]) -> list[tuple[str, str]]:
    """The fragments the console's pages load with a query string (a subtree, an expanded run, a diff's next
    part): one URL of each shape (its numbers aside), from the first page that has it, named by the shape."""
    shapes: dict[str, str] = {}
    for name in sorted(pages):
        if name.startswith("console/") and name.endswith(".admin.txt"):
            for url in HX_GET.findall(pages[name]) + LAZY.findall(pages[name]):
                url = html.unescape(url)
                shapes.setdefault(re.sub(r"[0-9]+", "N", urllib.parse.unquote(url)), url)
    links = []
    for shape, url in sorted(shapes.items()):
        readable = re.sub(r"[^A-Za-z0-9]+", "-", shape).strip("-")[:80]
        links.append((f"console/links/{readable}-{hashlib.sha256(shape.encode()).hexdigest()[:8]}", url))
    return links


def _get(client: Any, url: str, headers: dict[str, str]) -> str:
    """One GET with only the signed-in session's cookie: no CSRF cookie or message left by the page before."""
    from django.conf import settings
    from django.db import transaction

    client.cookies = SimpleCookie({settings.SESSION_COOKIE_NAME: client.cookies[settings.SESSION_COOKIE_NAME].value})
    with transaction.atomic():
        response = client.get(url, headers=headers)
        transaction.set_rollback(True)
    return describe(response, "GET", url)


# ---- the command line ---------------------------------------------------------------------------------------


def setup_django(tree: Path, database_url: str | None, scratch: Path) -> None:
    """Import the tree's packages (before this virtualenv's editable install of this tree) and set Django up."""
    sys.path[:0] = [str(tree), str(tree / "clients" / "python")]
    os.chdir(tree)  # Celery's Django fix-up puts the working directory first on sys.path
    os.environ.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        DATABASE_URL=database_url or f"sqlite:///{scratch / 'pages.sqlite3'}",
        VAR_DIR=str(scratch / "var"),
        SECRET_KEY="bench-pages",  # noqa: S106 - signs nothing that outlives the record
        DEBUG="0",
        TIME_ZONE="UTC",
        CELERY_BROKER_URL="memory://",
    )
    for name in ("CACHE_URL", "REDIS_URL", "HTTPS", "CONSOLE_BASE_URL"):
        os.environ.pop(name, None)
    import django

    django.setup()
    for package in ("config", "checkpoints", "dashboard"):
        where = Path(importlib.import_module(package).__file__ or "").resolve()
        if not where.is_relative_to(tree.resolve()):
            raise SystemExit(f"bench/pages.py: imported {package} from {where}, not from the tree {tree}")
    from django.test.utils import override_settings, setup_test_environment

    setup_test_environment()  # the test client's host, the in-memory mail outbox
    # Plain static names: hashed ones need collectstatic, and a hash is not something a user reads
    override_settings(
        STORAGES={
            "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
            "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
        }
    ).enable()


def fresh_postgres(url: str) -> None:
    """Drop and create the database the URL names: the ids of the seeded objects start at 1."""
    import psycopg
    from psycopg import sql

    name = url.rsplit("/", 1)[1].split("?")[0]
    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def record(args: argparse.Namespace) -> int:
    import time_machine

    started = time.monotonic()
    out = Path(args.dir).resolve()  # before setup_django changes the working directory
    if out.exists() and any(out.iterdir()):
        raise SystemExit(f"bench/pages.py: {out} is not empty")
    if args.database_url and args.database_url.startswith("postgres"):
        fresh_postgres(args.database_url)
    with (
        tempfile.TemporaryDirectory(prefix="pages-", dir=SCRATCH) as scratch,
        time_machine.travel(FROZEN_AT, tick=False),
    ):
        setup_django(Path(args.tree).resolve(), args.database_url, Path(scratch))
        from django.core.management import call_command

        random.seed(SEED)
        with counted_uuids():
            call_command("migrate", verbosity=0)
            world = build_world(full=args.full)
            seeded = time.monotonic()
            pages = render(world, args.only)
    for name, text in pages.items():
        path = out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    print(
        f"{len(pages)} pages in {out}: {time.monotonic() - started:.1f} s "
        f"({seeded - started:.1f} s to migrate and seed, {time.monotonic() - seeded:.1f} s to render)",
        file=sys.stderr,
    )
    return 0


def compare(args: argparse.Namespace) -> int:
    a, b = Path(args.a), Path(args.b)
    names_a = {str(path.relative_to(a)) for path in a.rglob("*") if path.is_file()}
    names_b = {str(path.relative_to(b)) for path in b.rglob("*") if path.is_file()}
    identical = changed = 0
    for name in sorted(names_a | names_b):
        lines_a = (a / name).read_text(encoding="utf-8").splitlines(keepends=True) if name in names_a else []
        lines_b = (b / name).read_text(encoding="utf-8").splitlines(keepends=True) if name in names_b else []
        if name in names_a and name in names_b and lines_a == lines_b:
            identical += 1
            continue
        changed += 1
        label_a = f"{a}/{name}" if name in names_a else "/dev/null"
        label_b = f"{b}/{name}" if name in names_b else "/dev/null"
        sys.stdout.writelines(difflib.unified_diff(lines_a, lines_b, label_a, label_b))
    only_a, only_b = len(names_a - names_b), len(names_b - names_a)
    extra = f" ({only_a} only in {a}, {only_b} only in {b})" if only_a or only_b else ""
    print(f"{len(names_a | names_b)} pages, {identical} identical, {changed} changed{extra}")
    return 1 if changed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    commands = parser.add_subparsers(dest="command", required=True)
    rec = commands.add_parser("record", help="render every page into DIR (an empty or new folder)")
    rec.add_argument("dir")
    rec.add_argument("--tree", default=str(HERE), help="the checkout to record (default: this one)")
    rec.add_argument("--database-url", help="PostgreSQL: the database is dropped and created (default: SQLite)")
    rec.add_argument("--full", action="store_true", help="seed the full demo instead of --small")
    rec.add_argument("--only", nargs="+", help="only the pages whose name (console/compare/01) contains one of these")
    cmp = commands.add_parser("compare", help="diff two records; exit 1 if any page differs")
    cmp.add_argument("a")
    cmp.add_argument("b")
    args = parser.parse_args(argv)
    return record(args) if args.command == "record" else compare(args)


if __name__ == "__main__":
    if os.environ.get("PYTHONHASHSEED") != "0":  # set and dict orders of strings: the same in every run
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "PYTHONHASHSEED": "0"})  # noqa: S606 - ourselves again
    sys.exit(main())
