"""The audit log: one row per operator or agent action, written in the action's transaction."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from ..fields import SafeCharField, SafeJSONField, SafeTextField
from .projects import ApiToken, Project, ProjectScopedQuerySet
from .sessions import AgentSession, Checkpoint


class AuditEventQuerySet(ProjectScopedQuerySet):
    """Events of a project count as that project's (with or without a session); events of no project
    (a retention run over all projects, a deleted project's) are system-wide: staff see them."""


class AuditEvent(models.Model):
    """Append-only record of every operator and agent action that changes state."""

    actor_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_token = models.ForeignKey(ApiToken, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    actor = SafeCharField(max_length=200, help_text="Who, as shown: a username, token:<name> or system.")
    action = models.CharField(max_length=50)
    project = models.ForeignKey(Project, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    session = models.ForeignKey(AgentSession, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    checkpoint = models.ForeignKey(Checkpoint, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    target = SafeCharField(max_length=300, blank=True)
    reason = SafeTextField(blank=True)
    details = SafeJSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            # audit log and its admin list, newest first (the id breaks ties, as both order)
            models.Index(fields=["-created_at", "-id"], name="audit_created"),
            # audit log filtered by session
            models.Index(fields=["session", "-created_at"], name="audit_session"),
            # audit log filtered by action
            models.Index(fields=["action", "-created_at"], name="audit_action"),
        ]

    def __str__(self) -> str:
        return f"{self.actor} {self.action} {self.target}"
