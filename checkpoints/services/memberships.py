"""Granting and taking back a role in a project (the admin's membership forms call these); audited."""

from __future__ import annotations

from django.db import transaction

from ..audit import Actor, record_audit
from ..models import ProjectMembership


@transaction.atomic
def save_membership(membership: ProjectMembership, *, actor: Actor) -> ProjectMembership:
    """Grant a role in a project, or change which role a membership row grants; audited either way."""
    before = (
        ProjectMembership.objects.filter(pk=membership.pk).values_list("role", flat=True).first()
        if membership.pk
        else None
    )
    membership.save()
    if before != membership.role:
        record_audit(
            actor,
            "grant_role" if before is None else "change_role",
            project=membership.project,
            target=f"{membership.user} as {membership.role} in {membership.project}",
            details={"user": membership.user.get_username(), "role": membership.role, "was": before},
        )
    return membership


@transaction.atomic
def revoke_membership(membership: ProjectMembership, *, actor: Actor) -> None:
    """Take a role in a project back; audited."""
    record_audit(
        actor,
        "revoke_role",
        project=membership.project,
        target=f"{membership.user} as {membership.role} in {membership.project}",
        details={"user": membership.user.get_username(), "role": membership.role},
    )
    membership.delete()
