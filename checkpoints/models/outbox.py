"""Events and what they go out as: webhook endpoints, notification rules and their deliveries."""

from __future__ import annotations

import uuid
from datetime import datetime

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from ..fields import SafeCharField, SafeJSONField, SafeTextField
from .projects import Project, ProjectScopedQuerySet
from .sessions import AlertSeverity


class EventType(models.TextChoices):
    """What happened, as receivers see it: the `type` of a webhook body and what notification rules match."""

    CHECKPOINT_CREATED = "checkpoint.created"
    SESSION_RESTORED = "session.restored"
    SESSION_FORKED = "session.forked"
    ALERT_OPENED = "alert.opened"
    ALERT_ESCALATED = "alert.escalated"
    ALERT_RESOLVED = "alert.resolved"
    PHASE_WAITING = "phase.waiting"
    PHASE_FEEDBACK = "phase.feedback"
    INTERRUPT_WAITING = "interrupt.waiting"
    INTERRUPT_ANSWERED = "interrupt.answered"
    JOB_FAILED = "job.failed"
    IMPORT_FAILED = "import.failed"
    RECOVERY_FINISHED = "recovery.finished"  # a fleet recovery's batch, once
    PING = "ping"  # "Send test"


class Event(models.Model):
    """One thing that happened, once: every delivery of it (to any endpoint or rule) sends this id and body."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    project = models.ForeignKey(Project, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    type = models.CharField(max_length=40, choices=EventType.choices)
    created_at = models.DateTimeField(default=timezone.now)
    data = SafeJSONField(default=dict, blank=True)
    dedupe_key = models.CharField(
        max_length=200, blank=True, help_text="The same condition's events share it (a rule's quiet period)."
    )

    class Meta:
        # the sweep of old events; the admin list, newest first (the id breaks ties)
        indexes = [models.Index(fields=["created_at", "id"], name="event_created")]

    def __str__(self) -> str:
        return f"{self.type} {self.id}"


class WebhookEndpoint(models.Model):
    """A URL that receives the events it subscribes to, signed with its own secret."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="webhooks")
    url = models.URLField(max_length=2000)
    events = models.JSONField(default=list, help_text="Event types it receives.")
    secret = models.CharField(max_length=100, help_text="Signs every delivery (HMAC-SHA256); shown once.")
    description = SafeCharField(max_length=200, blank=True)
    created_by = SafeCharField(max_length=200, blank=True, help_text="Who, as shown: a username or token:<name>.")
    created_at = models.DateTimeField(default=timezone.now)
    secret_rotated_at = models.DateTimeField(null=True, blank=True)
    deleted_at = models.DateTimeField(null=True, blank=True, help_text="Deleted endpoints keep their deliveries.")

    objects = ProjectScopedQuerySet.as_manager()

    def __str__(self) -> str:
        return self.url


class Channel(models.TextChoices):
    """The notification channels, declared: the value rules and deliveries store, and the label the console shows.
    Each is implemented and registered by its module in checkpoints/outbox/channels/ (sender, target check, help);
    a test fails when one is declared here and not registered there (docs/extending-channels.md)."""

    WEBHOOK = "webhook", "signed webhook"
    SLACK = "slack", "Slack-compatible incoming webhook"
    EMAIL = "email", "email"
    APPRISE = "apprise", "Apprise URL (Discord, Telegram, ntfy, JSON, XML, form)"


class NotificationRule(models.Model):
    """Which events of a project go to which channel, with a quiet period so a flapping alert notifies once."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="notification_rules")
    name = SafeCharField(max_length=200)
    events = models.JSONField(default=list, help_text="Event types it sends.")
    alert_kinds = models.JSONField(default=list, blank=True, help_text="Alert kinds it sends; empty: every kind.")
    min_severity = models.CharField(max_length=20, choices=AlertSeverity.choices, default=AlertSeverity.WARNING)
    channel = models.CharField(max_length=20, choices=Channel.choices)
    target = models.CharField(max_length=2000, help_text="The URL, or email addresses separated by commas.")
    secret = models.CharField(max_length=100, blank=True, help_text="Signs a webhook channel's deliveries.")
    quiet_minutes = models.PositiveIntegerField(default=30, help_text="One notification per condition this long.")
    enabled = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    objects = ProjectScopedQuerySet.as_manager()

    class Meta:
        permissions = [("manage_notifications", "Can manage notification rules and webhooks")]

    def __str__(self) -> str:
        return f"{self.name} ({self.channel})"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending"  # waiting for its next attempt (the first, or a retry)
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # out of attempts
    SUPPRESSED = "suppressed"  # inside its rule's quiet period: kept so nothing is lost silently, not sent


class DeliveryQuerySet(ProjectScopedQuerySet):
    project_path = "event__project"

    def due(self, now: datetime) -> DeliveryQuerySet:
        return self.filter(status=DeliveryStatus.PENDING, next_attempt_at__lte=now)


class Delivery(models.Model):
    """One event to one endpoint or rule's channel; its id is sent on every attempt so receivers drop duplicates.

    Retries are scheduled here (`next_attempt_at`) and picked up by a beat sweep, not by long Celery countdowns
    (Redis redelivers those after its visibility timeout)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    event = models.ForeignKey(Event, on_delete=models.CASCADE, related_name="deliveries")
    endpoint = models.ForeignKey(
        WebhookEndpoint, null=True, blank=True, on_delete=models.SET_NULL, related_name="deliveries"
    )
    rule = models.ForeignKey(
        NotificationRule, null=True, blank=True, on_delete=models.SET_NULL, related_name="deliveries"
    )
    channel = models.CharField(max_length=20, choices=Channel.choices)
    target = models.CharField(max_length=2000, help_text="Where it went, copied when it was made.")
    status = models.CharField(max_length=20, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    response_code = models.PositiveIntegerField(null=True, blank=True)
    last_error = SafeTextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    objects = DeliveryQuerySet.as_manager()

    class Meta:
        verbose_name_plural = "deliveries"
        indexes = [
            # the sweep: pending deliveries whose time has come
            models.Index(fields=["next_attempt_at"], condition=Q(status="pending"), name="delivery_due"),
            models.Index(fields=["endpoint", "-created_at"], name="delivery_endpoint"),
            models.Index(fields=["rule", "-created_at"], name="delivery_rule"),
            # the sweep of old deliveries; the admin list, newest first (the id breaks ties)
            models.Index(fields=["created_at", "id"], name="delivery_created"),
        ]

    def __str__(self) -> str:
        return f"{self.channel} delivery {self.id}"
