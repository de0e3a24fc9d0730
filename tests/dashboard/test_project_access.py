"""Every console URL, walked as a member of project A over the objects of project B.

A URL that addresses an object (a path id, or `?a=`/`?b=` on Compare) answers 404 for B's objects, also to
POSTs, and changes nothing; a list, count, filter or download shows nothing of B. A console URL this file does
not know makes the walk fail: a view added later has to say here what it addresses.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import URLPattern, reverse
from django_celery_beat.models import PeriodicTask

from checkpoints.models import (
    AgentSession,
    ApiToken,
    AuditEvent,
    Checkpoint,
    DriftAlert,
    PhaseFeedback,
    Project,
    Purge,
    SecretFinding,
)
from checkpoints.outbox.notifications import create_rule
from checkpoints.services import Actor, create_api_token
from checkpoints.tasks import apply_retention
from dashboard.urls import urlpatterns
from tests.dashboard.conftest import World

MARK = "zq-hidden"  # in every name of project B ("globex"): none of it may show to a member of A only


@pytest.fixture
def member(alice, project, grant):
    """A member of A with every role there (alice operates; here she also approves), of nothing else."""
    return grant(alice, project, "approver")


@pytest.fixture
def worlds(project, other_project, make_world) -> tuple[World, World]:
    """Project A ("acme", where alice operates) and project B ("globex"), each with one of everything."""
    return make_world(project, "ours"), make_world(other_project, MARK)


def _patterns() -> list[URLPattern]:
    return [p for p in urlpatterns if isinstance(p, URLPattern)]


# URL name → the object of B its path addresses ("phase": session pk and phase number)
ADDRESSED = {
    "session_detail": "session",
    "session_undo": "session",
    "session_export": "session",
    "phase_detail": "phase",
    "phase_feedback": "phase",
    "checkpoint_detail": "checkpoint",
    "checkpoint_subtree": "checkpoint",
    "checkpoint_download": "checkpoint",
    "checkpoint_restore": "checkpoint",
    "checkpoint_fork": "checkpoint",
    "checkpoint_pin": "checkpoint",
    "alert_acknowledge": "alert",
    "alert_resolve": "alert",
    "import_job": "job",
    "notifications": "project",
    "project_settings": "project",
    "notification_rule_create": "project",
    "notification_rule_edit": "rule",
    "notification_rule_delete": "rule",
    "notification_rule_test": "rule",
    "tokens": "project",
    "token_revoke": "token",
    "secrets": "project",
    "secret_dismiss": "finding",
    "purge_new": "project",
    "purge_detail": "purge",
    "session_interrupts": "session",
    "interrupt_answer": "session",
    "checkpoint_edit": "checkpoint",
    "recovery_detail": "recovery",
    "recovery_undo": "recovery",
}
SYSTEM_WIDE = {"job_run"}  # addresses a schedule, which belongs to no project: staff only
# plans every project, and each user sees only their projects' share (tests/dashboard/test_retention_page.py)
EVERY_PROJECT = {"retention_dry_run"}
LISTS = {
    "overview", "session_list", "compare", "alert_list", "audit_log", "retention", "import_upload", "jobs",
    "recovery_new",
}  # fmt: skip
PROJECT_LISTS = {"notification_projects", "token_projects"}  # lists projects themselves, by slug
# needs reveal_secrets, which no project role grants: its other project's finding answers 404 to staff given it
# (tests/dashboard/test_secrets_everywhere.py)
NO_ROLE = {"secret_reveal"}
# what a POST carries, so a view that validates its form before looking the object up still gets that far
POSTED = {
    "checkpoint_pin": {"pinned": "1"},
    "checkpoint_fork": {"title": "stolen"},
    "checkpoint_restore": {"reason": "stolen"},
    "phase_feedback": {"action": "approved"},
    "alert_resolve": {"reason": "stolen"},
    "tokens": {"name": "stolen", "access": "write", "expiry": "never"},
    "secrets": {"patterns": "stolen: STOLEN"},
    "secret_dismiss": {"reason": "stolen"},
    "purge_new": {"value": "stolen-value-1234", "reason": "stolen", "confirm": "1"},
    "interrupt_answer": {"interrupt_id": "i-1", "decision": "approve", "comment": "stolen"},
    "checkpoint_edit": {"path": "/step", "value": "7", "reason": "stolen", "action": "save"},
    "recovery_undo": {"reason": "stolen"},
}
QUERY = {"session_export": "?format=ares", "checkpoint_subtree": "?path=[]"}


def _args(name: str, world: World) -> list[Any]:
    target = ADDRESSED[name]
    if target == "phase":
        return [world.phase.session_id, world.phase.number]
    project = world.session.project
    if target == "project":
        return [project.slug]
    if target == "rule":
        fields = {"events": ["alert.opened"], "alert_kinds": [], "min_severity": "warning", "quiet_minutes": 30}
        rule, _ = create_rule(
            project, actor=Actor.system("walk"), name=MARK, channel="email", target="a@example.com", **fields
        )
        return [project.slug, rule.pk]
    if target == "token":
        return [project.slug, create_api_token(project, name=MARK)[0].pk]
    if target == "finding":
        found = SecretFinding.objects.create(
            project=project, session=world.session, path=MARK, detector="aws_key", fingerprint="e" * 64, length=20
        )
        return [project.slug, found.pk]
    if target == "purge":
        purge = Purge.objects.create(project=project, detector="value", fingerprint="0" * 64, length=9, reason=MARK)
        return [project.slug, purge.pk]
    return [getattr(world, target).pk]


def _fingerprint() -> tuple:
    return (
        AuditEvent.objects.count(),
        AgentSession.objects.count(),
        Checkpoint.objects.count(),
        PhaseFeedback.objects.count(),
        sorted(Checkpoint.objects.filter(pinned=True).values_list("pk", flat=True)),
        sorted(DriftAlert.objects.values_list("pk", "state")),
        sorted(AgentSession.objects.values_list("pk", "head_id")),
        sorted(ApiToken.objects.values_list("pk", "revoked_at")),
        sorted(Project.objects.values_list("pk", "secret_patterns")),
        Purge.objects.filter(dry_run=False).count(),
    )


def test_the_walk_knows_every_console_url():
    names = {p.name for p in _patterns()}
    unknown = names - set(ADDRESSED) - SYSTEM_WIDE - EVERY_PROJECT - LISTS - PROJECT_LISTS - NO_ROLE
    assert not unknown, f"say in this file what these console URLs address: {sorted(unknown)}"
    assert not (set(ADDRESSED) | SYSTEM_WIDE | EVERY_PROJECT | LISTS | PROJECT_LISTS | NO_ROLE) - names, (
        "this file names URLs that no longer exist"
    )


@pytest.mark.parametrize("name", sorted(ADDRESSED))
def test_another_projects_object_answers_404_to_every_method(name, worlds, member):
    _, theirs = worlds
    client = Client()
    client.force_login(member)
    url = reverse(f"dashboard:{name}", args=_args(name, theirs))
    before = _fingerprint()
    statuses = [
        client.get(url + QUERY.get(name, "")).status_code,
        client.get(url, headers={"HX-Request": "true"}).status_code,
        client.post(url, POSTED.get(name, {})).status_code,
    ]
    assert set(statuses) <= {404, 405} and 404 in statuses  # 405: a method the view does not take at all
    assert _fingerprint() == before


@pytest.mark.parametrize("name", sorted(ADDRESSED))
def test_ids_beyond_64_bits_answer_404(name, worlds, admin_client):
    client = admin_client  # a superuser may do anything anywhere: nothing but the id can make it a 404
    huge = 99_999_999_999_999_999_999
    args = [huge, huge] if ADDRESSED[name] in ("phase", "rule", "token", "purge", "finding") else [huge]
    url = reverse(f"dashboard:{name}", args=args)
    statuses = [client.get(url).status_code, client.post(url, POSTED.get(name, {})).status_code]
    if ADDRESSED[name] == "phase":
        url = reverse(f"dashboard:{name}", args=[worlds[0].session.pk, huge])
        statuses += [client.get(url).status_code, client.post(url, POSTED.get(name, {})).status_code]
    assert set(statuses) <= {404, 405} and 404 in statuses


def test_a_schedule_is_run_only_by_staff_and_unknown_ones_are_404(worlds, alice, staff_operator):
    task = PeriodicTask.objects.first()
    client = Client()
    client.force_login(alice)
    assert client.post(reverse("dashboard:job_run", args=[task.pk])).status_code == 403
    client.force_login(staff_operator)
    assert client.post(reverse("dashboard:job_run", args=[99_999_999_999_999_999_999])).status_code == 404


@pytest.mark.parametrize("name", sorted(LISTS))
@pytest.mark.parametrize("htmx", [False, True], ids=["page", "fragment"])
def test_lists_counts_and_filters_show_nothing_of_another_project(name, htmx, worlds, member):
    ours, theirs = worlds
    if name == "retention":  # the page previews the newest recorded dry run, which plans every project
        apply_retention.delay(dry_run=True, triggered_by="test").get()
    client = Client()
    client.force_login(member)
    query = {
        "compare": f"?a={ours.checkpoint.parent_id}&b={ours.checkpoint.pk}",
        "audit_log": "?action=",
        "alert_list": "?state=",
        "recovery_new": "?all=on&state=",  # the preview of every session the member may see
    }.get(name, "")
    response = client.get(reverse(f"dashboard:{name}") + query, headers={"HX-Request": "true"} if htmx else {})
    html = response.content.decode()
    assert response.status_code == 200
    assert MARK not in html and "globex" not in html
    if name not in ("compare", "jobs"):
        assert "ours" in html  # the page did list project A's things


def test_the_notification_projects_list_shows_only_the_members_projects(worlds, member, other_project, grant):
    grant(member, other_project, "viewer")  # sees B, manages notifications in A only
    client = Client()
    client.force_login(member)
    assert client.get(reverse("dashboard:notification_projects"))["Location"] == "/notifications/acme/"
    listed = client.get(reverse("dashboard:token_projects")).content.decode()  # views both: both listed
    assert "/projects/acme/tokens/" in listed and "/projects/globex/tokens/" in listed


def test_compare_with_another_projects_checkpoint_is_404(worlds, alice):
    ours, theirs = worlds
    client = Client()
    client.force_login(alice)
    url = reverse("dashboard:compare")
    assert client.get(f"{url}?a={ours.checkpoint.pk}&b={theirs.checkpoint.pk}").status_code == 404
    assert client.get(f"{url}?a={theirs.checkpoint.pk}&b={ours.checkpoint.pk}").status_code == 404


def test_filtering_for_another_projects_things_shows_an_error_not_their_rows(worlds, alice):
    _, theirs = worlds
    client = Client()
    client.force_login(alice)
    for name, query in [
        ("session_list", {"project": "globex"}),
        ("alert_list", {"project": "globex", "state": ""}),
        ("alert_list", {"session": theirs.session.pk, "state": ""}),
        ("audit_log", {"session": theirs.session.pk}),
    ]:
        html = client.get(reverse(f"dashboard:{name}"), query).content.decode()
        assert MARK not in html
    html = client.get(reverse("dashboard:session_list"), {"project": "globex"}).content.decode()
    assert "Project: Select a valid choice" in html and "The filter was ignored" in html


# ---- roles apply per project ----------------------------------------------------------------------------

# what an operator does; none of it is allowed to someone who only views the project
OPERATIONS = [
    ("get", "checkpoint_restore", "checkpoint"),
    ("post", "checkpoint_restore", "checkpoint"),
    ("get", "checkpoint_fork", "checkpoint"),
    ("post", "checkpoint_fork", "checkpoint"),
    ("post", "checkpoint_pin", "checkpoint"),
    ("post", "session_undo", "session"),
    ("post", "alert_acknowledge", "alert"),
    ("post", "alert_resolve", "alert"),
    ("get", "import_job", "job"),
    ("get", "recovery_detail", "recovery"),
    ("post", "recovery_undo", "recovery"),
    ("post", "phase_feedback", "phase"),
    ("get", "notifications", "project"),
    ("get", "project_settings", "project"),
    ("post", "project_settings", "project"),
    ("post", "notification_rule_create", "project"),
    ("get", "notification_rule_edit", "rule"),
    ("post", "notification_rule_delete", "rule"),
    ("post", "notification_rule_test", "rule"),
    ("post", "tokens", "project"),
    ("post", "secrets", "project"),
    ("get", "token_revoke", "token"),
    ("post", "token_revoke", "token"),
]


@pytest.mark.parametrize(("method", "name", "target"), OPERATIONS)
def test_an_operator_elsewhere_who_only_views_this_project_cannot_act_here(
    method, name, target, worlds, alice, carol, grant
):
    """alice operates A and views B; carol approves in A and views B: in B they may only look."""
    _, theirs = worlds
    user = carol if name == "phase_feedback" else alice
    grant(user, theirs.session.project, "viewer")
    client = Client()
    client.force_login(user)
    url = reverse(f"dashboard:{name}", args=_args(name, theirs))
    before = _fingerprint()
    response = getattr(client, method)(url, POSTED.get(name, {}))
    assert response.status_code == 403
    assert "in this project" in response.content.decode()
    assert _fingerprint() == before


def test_a_viewer_of_this_project_sees_no_operator_buttons_here(worlds, alice, grant):
    ours, theirs = worlds
    grant(alice, theirs.session.project, "viewer")
    client = Client()
    client.force_login(alice)
    for world, shown in ((ours, True), (theirs, False)):
        at = {"at": world.checkpoint.seq}  # on the branch the world's restore left behind: opened by going there
        timeline = client.get(reverse("dashboard:session_detail", args=[world.session.pk]), at).content.decode()
        detail = client.get(reverse("dashboard:checkpoint_detail", args=[world.checkpoint.pk])).content.decode()
        restore = reverse("dashboard:checkpoint_restore", args=[world.checkpoint.pk])
        pin = reverse("dashboard:checkpoint_pin", args=[world.checkpoint.pk])
        # the timeline's row menus are filled from one template, which holds the operator's actions only for them
        operates = 'data-action="restore/"' in timeline
        assert (operates, restore in detail, pin in detail) == (shown, shown, shown)
    alerts = client.get(reverse("dashboard:alert_list")).content.decode()
    assert reverse("dashboard:alert_acknowledge", args=[ours.alert.pk]) in alerts
    assert reverse("dashboard:alert_acknowledge", args=[theirs.alert.pk]) not in alerts
    assert f"{MARK} alert" in alerts  # seen, not acted on


def test_an_operator_in_both_projects_acts_in_both(worlds, alice, grant):
    ours, theirs = worlds
    grant(alice, theirs.session.project, "operator")
    client = Client()
    client.force_login(alice)
    for world in (ours, theirs):
        response = client.post(reverse("dashboard:checkpoint_pin", args=[world.checkpoint.pk]), {"pinned": "1"})
        assert response.status_code == 302
    assert Checkpoint.objects.filter(pk__in=[ours.checkpoint.pk, theirs.checkpoint.pk], pinned=True).count() == 2


def test_staff_see_every_project_with_their_group_role(worlds, staff_operator):
    ours, theirs = worlds
    client = Client()
    client.force_login(staff_operator)
    sessions = client.get(reverse("dashboard:session_list")).content.decode()
    assert "ours-run" in sessions and f"{MARK}-run" in sessions
    response = client.post(reverse("dashboard:checkpoint_pin", args=[theirs.checkpoint.pk]), {"pinned": "1"})
    assert response.status_code == 302
