"""Phases an agent works through, what it hands in, and the reviewers' feedback."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from .. import limits
from ..fields import SafeCharField, SafeJSONField, SafeTextField
from .projects import ProjectScopedQuerySet
from .sessions import AgentSession


class PhaseStatus(models.TextChoices):
    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    FAILED = "failed"
    SKIPPED = "skipped"
    REQUIRES_RETRY = "requires_retry"


class PhaseQuerySet(ProjectScopedQuerySet):
    project_path = "session__project"


class Phase(models.Model):
    session = models.ForeignKey(AgentSession, on_delete=models.CASCADE, related_name="phases", db_index=False)
    number = models.PositiveIntegerField()
    name = SafeCharField(max_length=200)
    status = models.CharField(max_length=20, choices=PhaseStatus.choices, default=PhaseStatus.PENDING)
    started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    duration = models.FloatField(null=True, blank=True, help_text="Seconds.")
    retry_count = models.PositiveIntegerField(default=0)
    tokens_in = models.PositiveBigIntegerField(default=0)
    tokens_out = models.PositiveBigIntegerField(default=0)
    cost = models.DecimalField(max_digits=12, decimal_places=6, default=0)
    errors = SafeJSONField(default=list, blank=True)
    metadata = SafeJSONField(default=dict, blank=True)

    objects = PhaseQuerySet.as_manager()

    class Meta:
        ordering = ["session", "number"]
        constraints = [
            models.UniqueConstraint(fields=["session", "number"], name="phase_number_per_session"),
            models.CheckConstraint(
                condition=(
                    Q(started_at__isnull=True) | Q(started_at__gte=limits.EARLIEST, started_at__lt=limits.LATEST)
                )
                & (Q(completed_at__isnull=True) | Q(completed_at__gte=limits.EARLIEST, completed_at__lt=limits.LATEST)),
                name="phase_times_in_range",
            ),
        ]

    def __str__(self) -> str:
        return f"Phase {self.number}: {self.name}"


class AgentOutput(models.Model):
    phase = models.ForeignKey(Phase, on_delete=models.CASCADE, related_name="outputs")
    agent_name = SafeCharField(max_length=200)
    status = SafeCharField(max_length=50, blank=True)
    content = SafeTextField(blank=True, help_text="Markdown.")
    model = SafeCharField(max_length=200, blank=True)
    tokens_in = models.PositiveBigIntegerField(default=0)
    tokens_out = models.PositiveBigIntegerField(default=0)
    tools_used = SafeJSONField(default=list, blank=True)
    duration = models.FloatField(null=True, blank=True, help_text="Seconds.")
    error = SafeTextField(blank=True)
    error_details = SafeJSONField(default=dict, blank=True)
    attempt = models.PositiveIntegerField(
        default=1, help_text="Which run of this agent in the phase; a re-run adds an output, the latest counts."
    )
    created_at = models.DateTimeField(default=timezone.now, help_text="When the agent produced it (its own clock).")

    class Meta:
        ordering = ["phase", "created_at", "id"]

    def __str__(self) -> str:
        return self.agent_name


class FeedbackAction(models.TextChoices):
    APPROVED = "approved"
    RETRY_WITH_CHANGES = "retry_with_changes"
    SKIP_PHASE = "skip_phase"
    REJECTED = "rejected"


class PhaseFeedback(models.Model):
    """A reviewer's decision on a phase; history is kept and the latest counts."""

    phase = models.ForeignKey(Phase, on_delete=models.CASCADE, related_name="feedback", db_index=False)
    reviewed = models.BooleanField(default=True)
    approved = models.BooleanField(default=False)
    comments = SafeTextField(blank=True)
    requested_changes = SafeJSONField(default=list, blank=True)
    action = models.CharField(max_length=30, choices=FeedbackAction.choices)
    retry_count = models.PositiveIntegerField(default=0)
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    reviewer_name = SafeCharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name_plural = "phase feedback"
        ordering = ["phase", "-created_at", "-id"]
        permissions = [("approve_phase", "Can review phases: approve, request changes, skip or reject")]
        indexes = [
            # the agent polls the latest decision of a phase
            models.Index(fields=["phase", "-created_at"], name="feedback_latest"),
        ]

    def __str__(self) -> str:
        return f"{self.phase}: {self.action}"
