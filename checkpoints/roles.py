"""The console's roles and what each allows.

A person holds a role *in a project* (`ProjectMembership`), and the role's permissions apply to that project's
sessions, checkpoints, alerts, phases and import jobs only. Staff hold their roles as Django groups (created by
migration 0004), which apply to every project; superusers may do everything. `checkpoints.access.ProjectRoleBackend`
answers `user.has_perm(permission, obj)` from these rules.
"""

from __future__ import annotations

from typing import Any

VIEW = [
    "view_project", "view_agentsession", "view_checkpoint", "view_phase", "view_agentoutput",
    "view_phasefeedback", "view_driftalert", "view_auditevent",
]  # fmt: skip
ROLES = {
    "viewer": VIEW,
    "operator": [*VIEW, "operate_session", "triage_alert", "manage_notifications"],
    "approver": [*VIEW, "approve_phase"],
}
ROLE_PERMISSIONS = {role: frozenset(f"checkpoints.{codename}" for codename in names) for role, names in ROLES.items()}

VIEW_SESSIONS = "checkpoints.view_agentsession"
OPERATE = "checkpoints.operate_session"
TRIAGE = "checkpoints.triage_alert"
APPROVE = "checkpoints.approve_phase"
NOTIFY = "checkpoints.manage_notifications"
REVEAL_SECRETS = "checkpoints.reveal_secrets"  # in no role (docs/secrets.md): found values are masked for members
# In no role either (docs/purges.md): irreversible, and it rewrites other projects' history that shares the content.
PURGE_SECRETS = "checkpoints.purge_secrets"


class AllProjects:
    """`user.has_perm(permission, ALL_PROJECTS)`: may the user do this in every project at once (run a job
    for all projects, see system-wide figures)? Only staff's group roles and superusers answer yes."""

    def __repr__(self) -> str:
        return "ALL_PROJECTS"


ALL_PROJECTS = AllProjects()


def roles_granting(permission: str) -> list[str]:
    return [role for role, permissions in ROLE_PERMISSIONS.items() if permission in permissions]


def in_every_project(user: Any, permission: str) -> bool:
    """True for a superuser, and for staff whose groups grant `permission`: they hold it in every project."""
    return bool(user.is_active and user.has_perm(permission, ALL_PROJECTS))


def ensure_roles(group_model: Any, permission_model: Any) -> None:
    """Create or repair the role groups (models passed in, so a migration can use its historical ones)."""
    for name, codenames in ROLES.items():
        group, _ = group_model.objects.get_or_create(name=name)
        group.permissions.set(
            permission_model.objects.filter(content_type__app_label="checkpoints", codename__in=codenames)
        )
