"""Secrets found in what checkpoints added (docs/secrets.md): where, by which detector, and a keyed fingerprint of
the value. The value itself is stored nowhere but in the state it came in."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from ..fields import SafeCharField, SafeTextField
from .projects import Project, ProjectScopedQuerySet
from .sessions import AgentSession, Checkpoint


class SecretFindingQuerySet(ProjectScopedQuerySet):
    project_path = "project"

    def open(self) -> SecretFindingQuerySet:
        """Neither dismissed by an operator nor purged (docs/purges.md)."""
        return self.filter(closed_at__isnull=True)


class FindingClosed(models.TextChoices):
    DISMISSED = "dismissed"  # an operator's call, with a reason (a test key, a false positive)
    PURGED = "purged"  # the value was purged from every checkpoint of the session


class SecretFinding(models.Model):
    """One value one detector found in one session, where it first came in: the checkpoint that added it and the
    JSON path in its state. The same value arriving again in the session moves `last_seen_at`; in another
    session it is another finding, with the same fingerprint."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+", db_index=False)
    session = models.ForeignKey(AgentSession, on_delete=models.CASCADE, related_name="+", db_index=False)
    checkpoint = models.ForeignKey(
        Checkpoint,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The checkpoint that added the value (empty once retention deleted it).",
    )
    checkpoint_seq = models.PositiveIntegerField(
        null=True, blank=True, help_text="Its number in the session, kept when it is deleted."
    )
    path = SafeTextField(help_text="Where in the state, as the console writes paths; empty for the root.")
    detector = models.CharField(max_length=120)
    fingerprint = models.CharField(max_length=64, help_text="HMAC-SHA256 of the value, keyed (never the value).")
    length = models.PositiveIntegerField(help_text="The value's length in characters.")
    first_seen_at = models.DateTimeField(default=timezone.now)
    last_seen_at = models.DateTimeField(default=timezone.now)
    closed_at = models.DateTimeField(null=True, blank=True)
    closed_as = models.CharField(max_length=10, choices=FindingClosed.choices, blank=True)
    closed_by = SafeCharField(max_length=200, blank=True, help_text="Who closed it, as the audit log names them.")
    close_reason = SafeTextField(blank=True)

    objects = SecretFindingQuerySet.as_manager()

    class Meta:
        # in no role: members see found values masked; superusers, and staff given it in the admin, see them
        permissions = [("reveal_secrets", "Can see the values of secrets found in states")]
        constraints = [
            models.UniqueConstraint(fields=["session", "detector", "fingerprint"], name="one_secret_finding_per_value")
        ]
        indexes = [
            # the Secrets page: a project's findings by detector, newest first
            models.Index(fields=["project", "detector", "-last_seen_at"], name="secret_finding_project"),
        ]

    def __str__(self) -> str:
        return f"{self.detector} in session {self.session_id} at {self.path or '(root)'}"
