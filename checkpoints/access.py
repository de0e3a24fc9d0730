"""Who may do what where: the authentication backend behind `user.has_perm(permission, obj)` (granting and
taking back a role is `services.memberships`).

`has_perm(permission, obj)` answers for the project `obj` belongs to (a project, a session, a checkpoint,
an alert, a phase, an import job…): yes when one of the user's memberships there grants the permission, or
the user is staff and one of their groups grants it (staff hold their group roles in every project).
`has_perm(permission)` without an object means "in at least one project"; `has_perm(permission,
ALL_PROJECTS)` means "in every project at once" (staff and superusers only). Groups of users who are not
staff grant nothing: their access is their memberships.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.backends import ModelBackend

from .models import Project, ProjectMembership
from .roles import ALL_PROJECTS, OPERATE, ROLE_PERMISSIONS

_CACHE = "_project_role_cache"


def project_id_of(obj: Any) -> int | None:
    """The project an object belongs to, or None for an object of no project."""
    if isinstance(obj, Project):
        return obj.pk
    if hasattr(obj, "project_id"):  # sessions, import jobs, audit events, tokens, policies, watched sources
        return obj.project_id
    for parent in ("session", "phase"):  # checkpoints, alerts, phases; outputs and feedback of a phase
        if hasattr(obj, f"{parent}_id"):
            return project_id_of(getattr(obj, parent))
    return None


def may_import_into(user: Any, slug: str) -> bool:
    """An operator of the project may import into it; a project that does not exist yet may only be created by
    someone who operates every project."""
    project = Project.objects.filter(slug=slug).first()
    return bool(user.has_perm(OPERATE, project if project is not None else ALL_PROJECTS))


class ProjectRoleBackend(ModelBackend):
    """Signs people in as ModelBackend does; permissions come from project memberships (see the module)."""

    def get_user_permissions(self, user_obj: Any, obj: Any = None) -> set[str]:
        return super().get_user_permissions(user_obj, obj) if user_obj.is_staff else set()

    def get_group_permissions(self, user_obj: Any, obj: Any = None) -> set[str]:
        return super().get_group_permissions(user_obj, obj) if user_obj.is_staff else set()

    def get_all_permissions(self, user_obj: Any, obj: Any = None) -> set[str]:
        if not user_obj.is_active or user_obj.is_anonymous:
            return set()
        everywhere = super().get_all_permissions(user_obj)  # staff's groups; empty for everyone else
        if obj is ALL_PROJECTS:
            return everywhere
        by_project = self._memberships(user_obj)
        if obj is None:
            return everywhere.union(*by_project.values())
        project_id = project_id_of(obj)
        if project_id is None:
            return everywhere
        return everywhere | by_project.get(project_id, set())

    def _memberships(self, user: Any) -> dict[int, set[str]]:
        """Project id → the permissions the user's roles there grant; one query per user object (request)."""
        if not hasattr(user, _CACHE):
            by_project: dict[int, set[str]] = {}
            for project_id, role in ProjectMembership.objects.filter(user=user).values_list("project_id", "role"):
                by_project.setdefault(project_id, set()).update(ROLE_PERMISSIONS.get(role, ()))
            setattr(user, _CACHE, by_project)
        return getattr(user, _CACHE)
