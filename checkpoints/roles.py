"""The console's roles: Django groups an admin assigns to people (created by migration 0004)."""

from __future__ import annotations

from typing import Any

VIEW = [
    "view_project", "view_agentsession", "view_checkpoint", "view_phase", "view_agentoutput",
    "view_phasefeedback", "view_driftalert", "view_auditevent",
]  # fmt: skip
ROLES = {
    "viewer": VIEW,
    "operator": [*VIEW, "operate_session", "triage_alert"],
    "approver": [*VIEW, "approve_phase"],
}


def ensure_roles(group_model: Any, permission_model: Any) -> None:
    """Create or repair the role groups (models passed in, so a migration can use its historical ones)."""
    for name, codenames in ROLES.items():
        group, _ = group_model.objects.get_or_create(name=name)
        group.permissions.set(
            permission_model.objects.filter(content_type__app_label="checkpoints", codename__in=codenames)
        )
