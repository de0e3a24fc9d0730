"""The role groups and the permissions each grants, as migrations 0004, 0025 and the squashed set create them, frozen.

Never edit this module: migrations that have run on databases call it, and what they create must not move with
the live definition (checkpoints.roles). A later change of a role's permissions takes a migration of its own, with
its own copy of what it grants (docs/decisions/0010-frozen-migrations.md).
"""

from __future__ import annotations

from typing import Any

_VIEW = [
    "view_project", "view_agentsession", "view_checkpoint", "view_phase", "view_agentoutput",
    "view_phasefeedback", "view_driftalert", "view_auditevent",
]  # fmt: skip
ROLES = {
    "viewer": _VIEW,
    "operator": [*_VIEW, "operate_session", "triage_alert", "manage_notifications"],
    "approver": [*_VIEW, "approve_phase"],
}


def repair_roles(apps: Any, schema_editor: Any) -> None:
    """Create or repair the role groups. Permissions are normally created after all migrations: the groups need
    the ones the migrations so far have added, so they are created here first (a permission a migration has not
    added yet is granted by the migration that adds it)."""
    from django.contrib.auth.management import create_permissions
    from django.contrib.contenttypes.management import create_contenttypes

    using = schema_editor.connection.alias
    app_config = apps.get_app_config("checkpoints")
    app_config.models_module = True
    create_contenttypes(app_config, verbosity=0, using=using, apps=apps)
    create_permissions(app_config, verbosity=0, using=using, apps=apps)
    app_config.models_module = None
    group_model, permission_model = apps.get_model("auth", "Group"), apps.get_model("auth", "Permission")
    for name, codenames in ROLES.items():
        group, _ = group_model.objects.using(using).get_or_create(name=name)
        group.permissions.set(
            permission_model.objects.using(using).filter(content_type__app_label="checkpoints", codename__in=codenames)
        )


def remove_roles(apps: Any, schema_editor: Any) -> None:
    apps.get_model("auth", "Group").objects.using(schema_editor.connection.alias).filter(name__in=ROLES).delete()
