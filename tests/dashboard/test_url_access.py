"""Who may do what on every console URL: one permission matrix, walked by role and method.

Every URL name in `dashboard/urls.py` needs a row in MATRIX (a new URL without one fails the walk). A row maps
each method the view takes to the roles allowed it and the status they get. For any other role and method:
a signed-out visitor is sent to sign in (whatever the method, htmx or not: `console()` checks before the
method), a role the view refuses gets 403, and one it lets use another method gets 405. A refused request
writes and queues nothing; an allowed POST writes its audit row. Each case starts from the same world (a
session of five checkpoints, an alert, a phase, an import job: tests/dashboard/conftest.py, and a user of
each role), built once for the module; what a case writes is rolled back with its savepoint, so no action
leaves anything behind for the next.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import URLPattern, reverse
from django_celery_beat.models import PeriodicTask

from checkpoints.models import AuditEvent
from checkpoints.services import create_api_token, get_or_create_project
from dashboard.urls import urlpatterns
from tests.conftest import shared_rows, users_of_every_role
from tests.dashboard.conftest import World, build_world, keep_one_step_checkpoint

ROLES = ["anonymous", "outsider", "viewer", "operator", "approver", "staff"]  # outsider: signed in, in no project
ANONYMOUS, OUTSIDER, VIEWER, OPERATOR, APPROVER, STAFF = ROLES
USERS = {OUTSIDER: "nobody", VIEWER: "bob", OPERATOR: "alice", APPROVER: "carol", STAFF: "staff_operator"}
METHODS = ["GET", "POST", "PUT", "DELETE"]

MEMBERS = frozenset({VIEWER, OPERATOR, APPROVER, STAFF})  # view_agentsession in the project (staff: in all)
OPERATORS = frozenset({OPERATOR, STAFF})  # operate_session, triage_alert
APPROVERS = frozenset({APPROVER})  # approve_phase
EVERY_PROJECT = frozenset({STAFF})  # operate_session in every project at once
NOBODY: frozenset[str] = frozenset()  # a permission no role grants (reveal_secrets, purge_secrets)


def _zip() -> SimpleUploadedFile:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in sorted((Path(__file__).parents[1] / "fixtures" / "ares").iterdir()):
            archive.write(path, f"ares/{path.name}")
    return SimpleUploadedFile("runs.zip", buffer.getvalue(), content_type="application/zip")


@dataclass(frozen=True)
class Row:
    """One URL: method → (roles allowed, their status); `at` picks the URL's arguments from the world."""

    methods: dict[str, tuple[frozenset[str], int]]
    at: Callable[[World], list[Any]] = lambda world: []
    query: Callable[[World], str] = lambda world: ""
    data: Callable[[], dict[str, Any]] = dict


def session(world: World) -> list[Any]:
    return [world.session.pk]


def checkpoint(world: World) -> list[Any]:
    return [world.checkpoint.pk]


def alert(world: World) -> list[Any]:
    return [world.alert.pk]


def phase(world: World) -> list[Any]:
    return [world.session.pk, world.phase.number]


def job(world: World) -> list[Any]:
    return [world.job.pk]


def rule(world: World) -> list[Any]:
    """A notification rule of the world's project (email: nothing leaves the test)."""
    from checkpoints.outbox.notifications import create_rule
    from checkpoints.services import Actor

    made, _ = create_rule(world.session.project, actor=Actor.system("walk"), **RULE_FORM, alert_kinds=[])
    return [world.session.project.slug, made.pk]


RULE_FORM = {"name": "walk", "events": ["alert.opened"], "min_severity": "warning", "channel": "email",
             "target": "ops@example.com", "quiet_minutes": 30, "enabled": True}  # fmt: skip


def token(world: World) -> list[Any]:
    """An API token of the world's project."""
    made, _ = create_api_token(world.session.project, name="walk")
    return [world.session.project.slug, made.pk]


TOKEN_FORM = {"name": "walk", "access": "read", "expiry": "30", "expires_on": ""}


def waiting(world: World) -> list[Any]:
    """A LangGraph thread of the world's project stopped at an interrupt ("i-1")."""
    from tests.kits.interrupts import waiting_thread

    return [waiting_thread(world.session.project).pk]


def finding(world: World) -> list[Any]:
    """An open finding of the world's project (a fingerprint of nothing in its states)."""
    from checkpoints.models import SecretFinding

    made = SecretFinding.objects.create(
        project=world.session.project, session=world.session, path="walk", detector="aws_key", fingerprint="f" * 64,
        length=20,
    )  # fmt: skip
    return [world.session.project.slug, made.pk]


def gc_task(world: World) -> list[Any]:
    return [PeriodicTask.objects.get(task="checkpoints.tasks.collect_garbage").pk]


# fmt: off
MATRIX: dict[str, Row] = {
    "overview":            Row({"GET": (MEMBERS, 200)}),
    "session_list":        Row({"GET": (MEMBERS, 200)}),
    "session_detail":      Row({"GET": (MEMBERS, 200)}, at=session),
    "session_undo":        Row({"POST": (OPERATORS, 302)}, at=session),
    "session_export":      Row({"GET": (MEMBERS, 200)}, at=session, query=lambda w: "?format=ares"),
    "session_interrupts":  Row({"GET": (MEMBERS, 200)}, at=waiting),
    "interrupt_answer":    Row({"POST": (APPROVERS, 302)}, at=waiting,
                               data=lambda: {"interrupt_id": "i-1", "decision": "approve"}),
    "phase_detail":        Row({"GET": (MEMBERS, 200)}, at=phase),
    "phase_feedback":      Row({"POST": (APPROVERS, 302)}, at=phase, data=lambda: {"action": "skip_phase"}),
    "checkpoint_detail":   Row({"GET": (MEMBERS, 200)}, at=checkpoint),
    "checkpoint_subtree":  Row({"GET": (MEMBERS, 200)}, at=checkpoint),
    "checkpoint_download": Row({"GET": (MEMBERS, 200)}, at=checkpoint),
    "checkpoint_restore":  Row({"GET": (OPERATORS, 200), "POST": (OPERATORS, 302)}, at=checkpoint,
                               data=lambda: {"reason": "walk"}),
    "checkpoint_fork":     Row({"GET": (OPERATORS, 200), "POST": (OPERATORS, 302)}, at=checkpoint,
                               data=lambda: {"title": "walk"}),
    "checkpoint_pin":      Row({"POST": (OPERATORS, 302)}, at=checkpoint, data=lambda: {"pinned": "1"}),
    "checkpoint_edit":     Row({"GET": (OPERATORS, 200), "POST": (OPERATORS, 302)}, at=checkpoint,
                               data=lambda: {"path": "/walk", "value": '"walk"', "reason": "walk", "action": "save"}),
    "compare":             Row({"GET": (MEMBERS, 200)},
                               query=lambda w: f"?a={w.session.head_id}&b={w.checkpoint.pk}"),
    "alert_list":          Row({"GET": (MEMBERS, 200)}),
    "alert_acknowledge":   Row({"POST": (OPERATORS, 302)}, at=alert),
    "alert_resolve":       Row({"POST": (OPERATORS, 302)}, at=alert, data=lambda: {"reason": "walk"}),
    "recovery_new":        Row({"GET": (OPERATORS, 200), "POST": (OPERATORS, 302)},
                               data=lambda: {"action": "restore", "rule": "last_good", "all": "on", "reason": "walk"}),
    "recovery_detail":     Row({"GET": (OPERATORS, 200)}, at=lambda w: [w.recovery.pk]),
    "recovery_undo":       Row({"POST": (OPERATORS, 302)}, at=lambda w: [w.recovery.pk]),
    "audit_log":           Row({"GET": (MEMBERS, 200)}),
    "retention":           Row({"GET": (MEMBERS, 200), "POST": (EVERY_PROJECT, 302)},
                               data=lambda: {"confirm": "yes"}),
    "retention_dry_run":   Row({"POST": (OPERATORS, 302)}),
    "import_upload":       Row({"GET": (OPERATORS, 200), "POST": (OPERATORS, 302)},
                               data=lambda: {"project": "acme", "archive": _zip()}),
    "import_job":          Row({"GET": (OPERATORS, 200)}, at=job),
    "jobs":                Row({"GET": (MEMBERS, 200)}),
    "job_run":             Row({"POST": (EVERY_PROJECT, 302)}, at=gc_task, data=lambda: {"confirm": "yes"}),
    "notification_projects": Row({"GET": (OPERATORS, 302)}),
    "notifications":       Row({"GET": (OPERATORS, 200)}, at=lambda w: [w.session.project.slug]),
    "notification_rule_create": Row({"GET": (OPERATORS, 200), "POST": (OPERATORS, 302)},
                               at=lambda w: [w.session.project.slug], data=lambda: dict(RULE_FORM)),
    "notification_rule_edit": Row({"GET": (OPERATORS, 200), "POST": (OPERATORS, 302)}, at=rule,
                               data=lambda: dict(RULE_FORM)),
    "notification_rule_delete": Row({"GET": (OPERATORS, 200), "POST": (OPERATORS, 302)}, at=rule),
    "notification_rule_test": Row({"POST": (OPERATORS, 302)}, at=rule),
    "project_settings":    Row({"GET": (OPERATORS, 200), "POST": (OPERATORS, 302)},
                               at=lambda w: [w.session.project.slug], data=lambda: {"type_allowlist": "uuid.UUID"}),
    "token_projects":      Row({"GET": (MEMBERS, 302)}),
    "tokens":              Row({"GET": (MEMBERS, 200), "POST": (OPERATORS, 200)},
                               at=lambda w: [w.session.project.slug], data=lambda: dict(TOKEN_FORM)),
    "token_revoke":        Row({"GET": (OPERATORS, 200), "POST": (OPERATORS, 302)}, at=token),
    "secrets":             Row({"GET": (MEMBERS, 200), "POST": (OPERATORS, 302)},
                               at=lambda w: [w.session.project.slug], data=lambda: {"patterns": "walk: WALK-[0-9]{4}"}),
    # reveal_secrets is in no role (staff are given it in the admin): tests/dashboard/test_secrets_everywhere.py
    "secret_reveal":       Row({"GET": (NOBODY, 200), "POST": (NOBODY, 200)}, at=lambda w: [w.session.project.slug, 1],
                               data=lambda: {"reason": "walk"}),
    "secret_dismiss":      Row({"GET": (OPERATORS, 200), "POST": (OPERATORS, 302)}, at=finding,
                               data=lambda: {"reason": "walk"}),
    # purge_secrets is in no role: every role is refused (tests/dashboard/test_purges.py walks a user holding it)
    "purge_new":           Row({"GET": (NOBODY, 200), "POST": (NOBODY, 302)}, at=lambda w: [w.session.project.slug],
                               data=lambda: {"value": "walk-value-1234", "reason": "walk", "preview": "1"}),
    "purge_detail":        Row({"GET": (NOBODY, 200)}, at=lambda w: [w.session.project.slug, 1]),
}
# fmt: on

NAMES = sorted(p.name for p in urlpatterns if isinstance(p, URLPattern) and p.name)


def expected(name: str, role: str, method: str) -> int:
    row = MATRIX[name]
    if role == ANONYMOUS:
        return 302
    if method in row.methods:
        roles, status = row.methods[method]
        return status if role in roles else 403
    may_use = set().union(*(roles for roles, _ in row.methods.values()))
    return 405 if role in may_use else 403


def test_every_console_url_has_a_row_in_the_matrix():
    assert sorted(MATRIX) == NAMES


@pytest.fixture(autouse=True)
def var_dir(settings, tmp_path) -> Path:
    """Uploads and exports go to a folder of the test's own."""
    settings.VAR_DIR = tmp_path / "var"
    settings.VAR_DIR.mkdir()
    return settings.VAR_DIR


@dataclass(frozen=True)
class Walk:
    world: World
    users: dict[str, Any]


@pytest.fixture(scope="module")
def walk(django_db_setup, django_db_blocker) -> Any:
    """The world and a user of each role, built once for the module's 700-odd cases."""
    from django.contrib.auth import get_user_model

    with shared_rows(django_db_blocker):
        with django_db_blocker.unblock():
            keep_one_step_checkpoint()
            project = get_or_create_project("acme")
            users = users_of_every_role(get_user_model(), project)
            world = build_world(project, "acme")
        yield Walk(world, {role: users[name] for role, name in USERS.items()})


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("name", NAMES)
def test_each_role_gets_the_matrix_status_for_each_url_and_method(
    walk, db, django_capture_on_commit_callbacks, name, role, method
):
    row = MATRIX.get(name)
    assert row is not None, f"add {name!r} to MATRIX"
    world = walk.world
    url = reverse(f"dashboard:{name}", args=row.at(world)) + row.query(world)
    client = Client()
    if role != ANONYMOUS:
        client.force_login(walk.users[role])
    status = expected(name, role, method)
    events = AuditEvent.objects.count()

    with django_capture_on_commit_callbacks() as queued:
        response = client.post(url, row.data()) if method == "POST" else client.generic(method, url)

    assert response.status_code == status, (method, url, role)
    if role == ANONYMOUS:
        assert response["Location"] == f"{reverse('login')}?next={quote(url)}"
        htmx = client.generic(method, url, headers={"HX-Request": "true"})
        assert (htmx.status_code, htmx["Location"]) == (302, response["Location"])
    if role == OUTSIDER:
        assert "not a member of any project yet" in response.content.decode()
    if role == ANONYMOUS or status in (403, 405):
        assert AuditEvent.objects.count() == events and not queued, "a refused request wrote or queued something"
    elif method == "POST":
        assert AuditEvent.objects.count() > events, "an action left no audit row"
