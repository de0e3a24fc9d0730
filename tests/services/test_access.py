"""Who may do what where: memberships, the permission backend, granting roles (audited), imports that name
another project, and what an upgrade does to users who had a role group before memberships existed."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
from django.apps import apps
from django.contrib.auth.models import Group, Permission
from django.db import IntegrityError
from django.urls import reverse

from checkpoints.access import project_id_of
from checkpoints.models import (
    AgentOutput,
    AgentSession,
    AuditEvent,
    Checkpoint,
    DriftAlert,
    Phase,
    PhaseFeedback,
    Project,
    ProjectMembership,
    RetentionPolicy,
)
from checkpoints.roles import ALL_PROJECTS, APPROVE, OPERATE, TRIAGE, VIEW_SESSIONS, ensure_roles
from checkpoints.services import Actor
from checkpoints.services.file_import import import_path
from checkpoints.services.memberships import revoke_membership, save_membership

pytestmark = pytest.mark.django_db


@pytest.fixture
def theirs(other_project, make_session, make_checkpoint) -> Checkpoint:
    return make_checkpoint(make_session("theirs", in_project=other_project), {"n": 1})


@pytest.fixture
def ours(make_session, make_checkpoint) -> Checkpoint:
    return make_checkpoint(make_session("ours"), {"n": 1})


def fresh(user):
    """The user as the next request loads it (permissions are cached per user object)."""
    return type(user).objects.get(pk=user.pk)


# ---- the backend ------------------------------------------------------------------------------------------


def test_a_role_applies_to_its_project_and_everything_in_it(alice, ours, theirs):
    alert = DriftAlert.objects.create(session=ours.session, kind="failed", message="x")
    phase = Phase.objects.create(session=ours.session, number=1, name="p")
    feedback = PhaseFeedback(phase=phase, action="approved")
    for obj in (ours.session.project, ours.session, ours, alert, phase, AgentOutput(phase=phase), feedback):
        assert alice.has_perm(OPERATE, obj) and alice.has_perm(TRIAGE, obj), obj
        assert not alice.has_perm(APPROVE, obj), obj
    for obj in (theirs.session.project, theirs.session, theirs):
        assert not alice.has_perm(VIEW_SESSIONS, obj), obj


def test_without_an_object_a_permission_means_in_at_least_one_project(alice, bob, nobody):
    assert alice.has_perm(OPERATE) and bob.has_perm(VIEW_SESSIONS)
    assert not bob.has_perm(OPERATE) and not nobody.has_perm(VIEW_SESSIONS)


def test_members_hold_nothing_in_every_project_at_once(alice, other_project, grant):
    grant(alice, other_project, "operator")  # even an operator of every existing project: new ones may come
    alice = fresh(alice)
    assert not alice.has_perm(OPERATE, ALL_PROJECTS)
    assert not alice.has_perm(OPERATE, RetentionPolicy(project=None))  # something of no project


def test_roles_add_up_within_a_project(bob, project, grant):
    grant(bob, project, "approver")
    bob = fresh(bob)
    assert bob.has_perm(APPROVE, project) and not bob.has_perm(OPERATE, project)


def test_staff_hold_their_group_roles_in_every_project_and_members_roles_on_top(staff_operator, project, grant):
    assert staff_operator.has_perm(OPERATE, project) and staff_operator.has_perm(OPERATE, ALL_PROJECTS)
    assert not staff_operator.has_perm(APPROVE, project)
    grant(staff_operator, project, "approver")
    staff_operator = fresh(staff_operator)
    assert staff_operator.has_perm(APPROVE, project) and not staff_operator.has_perm(APPROVE, ALL_PROJECTS)


def test_groups_of_users_who_are_not_staff_grant_nothing(nobody, project):
    ensure_roles(Group, Permission)
    nobody.groups.add(Group.objects.get(name="operator"))
    nobody = fresh(nobody)
    assert not nobody.has_perm(VIEW_SESSIONS) and not nobody.has_perm(OPERATE, project)
    assert list(Project.objects.allowing(nobody)) == []


def test_inactive_users_hold_nothing_and_superusers_everything(alice, admin_user, project):
    type(alice).objects.filter(pk=alice.pk).update(is_active=False)
    assert not fresh(alice).has_perm(VIEW_SESSIONS, project)
    assert admin_user.has_perm(APPROVE, project) and admin_user.has_perm(OPERATE, ALL_PROJECTS)


def test_project_of_an_object(ours):
    phase = Phase.objects.create(session=ours.session, number=1, name="p")
    project_id = ours.session.project_id
    assert [project_id_of(obj) for obj in (ours, phase, AgentOutput(phase=phase))] == [project_id] * 3
    assert project_id_of(RetentionPolicy(project=None)) is None and project_id_of(object()) is None


def test_querysets_keep_the_rows_of_the_projects_where_the_user_holds_the_permission(
    alice, bob, ours, theirs, project, other_project, grant
):
    grant(alice, other_project, "viewer")
    alice = fresh(alice)
    assert set(Project.objects.allowing(alice)) == {project, other_project}
    assert list(Project.objects.allowing(alice, OPERATE)) == [project]
    assert set(Checkpoint.objects.visible_to(alice)) == {ours, theirs}
    assert list(AgentSession.objects.allowing(alice, OPERATE)) == [ours.session]
    assert list(Checkpoint.objects.visible_to(bob)) == [ours]


# ---- granting and taking back roles ---------------------------------------------------------------------


def test_granting_changing_and_revoking_a_role_is_audited(bob, project, admin_user):
    actor = Actor.for_user(admin_user)
    membership = save_membership(ProjectMembership(user=bob, project=project, role="operator"), actor=actor)
    membership.role = "approver"
    save_membership(membership, actor=actor)
    save_membership(membership, actor=actor)  # nothing changed: nothing to record
    revoke_membership(membership, actor=actor)
    events = list(AuditEvent.objects.order_by("pk").values_list("action", "project", "actor", "details"))
    assert [(action, project_id, who) for action, project_id, who, _ in events] == [
        ("grant_role", project.pk, "admin"),
        ("change_role", project.pk, "admin"),
        ("revoke_role", project.pk, "admin"),
    ]
    assert events[1][3] == {"user": "bob", "role": "approver", "was": "operator"}
    assert list(ProjectMembership.objects.filter(user=bob).values_list("role", flat=True)) == ["viewer"]


def test_a_role_is_held_once_per_project(bob, project):
    with pytest.raises(IntegrityError):
        ProjectMembership.objects.create(user=bob, project=project, role="viewer")


def test_unknown_roles_are_refused_by_the_database(bob, other_project):
    with pytest.raises(IntegrityError):
        ProjectMembership.objects.create(user=bob, project=other_project, role="owner")


def test_the_admin_grants_roles_on_the_project_page_and_audits_them(admin_client, bob, other_project):
    url = reverse("admin:checkpoints_project_change", args=[other_project.pk])
    assert "Members (who sees this project" in admin_client.get(url).content.decode()
    prefix = "memberships"
    response = admin_client.post(
        url,
        {
            "slug": other_project.slug,
            "name": other_project.name,
            "type_allowlist": json.dumps(other_project.type_allowlist),  # the page posts it back as it showed it
            "created_at_0": "2026-01-01",
            "created_at_1": "00:00:00",
            f"{prefix}-TOTAL_FORMS": "1",
            f"{prefix}-INITIAL_FORMS": "0",
            f"{prefix}-0-user": bob.pk,
            f"{prefix}-0-role": "operator",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    assert ProjectMembership.objects.filter(user=bob, project=other_project, role="operator").exists()
    event = AuditEvent.objects.get(action="grant_role")
    assert (event.actor, event.project, event.target) == ("admin", other_project, "bob as operator in globex")


def test_the_admin_user_page_lists_and_revokes_project_roles(admin_client, bob, project):
    membership = ProjectMembership.objects.get(user=bob)
    url = reverse("admin:auth_user_change", args=[bob.pk])
    assert "Project roles (the projects this person sees" in admin_client.get(url).content.decode()
    response = admin_client.post(
        reverse("admin:checkpoints_projectmembership_delete", args=[membership.pk]), {"post": "yes"}
    )
    assert response.status_code == 302
    assert not ProjectMembership.objects.filter(user=bob).exists()
    assert AuditEvent.objects.get(action="revoke_role").target == "bob as viewer in acme"


# ---- imports that name another project ------------------------------------------------------------------

HAYTHAM = Path(__file__).resolve().parents[1] / "fixtures" / "haytham" / "handwritten"


def test_a_users_import_stays_in_the_chosen_project_unless_they_operate_the_one_the_files_name(alice, project, grant):
    report = import_path(HAYTHAM, project=project, actor=Actor.for_user(alice))
    assert set(AgentSession.objects.values_list("project__slug", flat=True)) == {"acme"}
    assert "where alice is not an operator: its sessions go into 'acme' instead" in report.notes[0]
    assert report.errors == []
    named = Project.objects.create(slug="project-123")
    grant(alice, named, "operator")
    import_path(HAYTHAM, project=project, actor=Actor.for_user(fresh(alice)))
    assert AgentSession.objects.filter(project=named).exists()


def test_the_command_imports_where_the_files_say(project):
    import_path(HAYTHAM, project=project, actor=Actor.system("command"))
    assert set(AgentSession.objects.values_list("project__slug", flat=True)) == {"project-123"}


# ---- upgrading --------------------------------------------------------------------------------------------


def test_upgrading_keeps_what_users_with_a_role_group_saw(django_user_model, project, other_project):
    ensure_roles(Group, Permission)
    viewer = django_user_model.objects.create_user("vera")
    viewer.groups.add(Group.objects.get(name="viewer"))
    staff = django_user_model.objects.create_user("stan", is_staff=True)
    staff.groups.add(Group.objects.get(name="operator"))
    migration = importlib.import_module("checkpoints.migrations.0012_project_memberships")
    migration.keep_what_users_saw(apps, None)
    assert sorted(ProjectMembership.objects.filter(user=viewer).values_list("project__slug", "role")) == [
        ("acme", "viewer"),
        ("globex", "viewer"),
    ]
    assert not ProjectMembership.objects.filter(user=staff).exists()  # staff keep seeing all through groups
