"""Purges (docs/purges.md): a value removed from every checkpoint that holds it, recorded by who asked, why and how
many — never the value, which waits in `PurgeValue` only while its job runs."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from ..fields import SafeCharField, SafeJSONField, SafeTextField
from .projects import ApiToken, Project, ProjectScopedQuerySet
from .secrets import SecretFinding


class PurgeState(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"  # a dry run finishes with its preview, a purge with the value gone
    FAILED = "failed"


class PurgeQuerySet(ProjectScopedQuerySet):
    pass


class Purge(models.Model):
    """One purge (or its dry run) asked in a project. Counts are split: `checkpoints`/`sessions` in the project that
    asked (what its members and tokens see), `other_checkpoints`/`other_sessions` in projects that shared the
    stored content (staff only: another project's figures must not reach a token)."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="purges")
    finding = models.ForeignKey(SecretFinding, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    detector = models.CharField(max_length=120, help_text="Named in the placeholder the value is replaced with.")
    fingerprint = models.CharField(max_length=64, help_text="HMAC-SHA256 of the value, keyed (never the value).")
    length = models.PositiveIntegerField(help_text="The value's length in characters.")
    sessions = SafeJSONField(default=list, blank=True, help_text="External ids the purge was limited to; empty: all.")
    dry_run = models.BooleanField(default=False)
    reason = SafeTextField()
    state = models.CharField(max_length=10, choices=PurgeState.choices, default=PurgeState.QUEUED)
    phase = models.CharField(max_length=40, blank=True, help_text="What the job is doing now, for the progress page.")
    total = models.PositiveIntegerField(default=0, help_text="Checkpoints to rewrite, every project.")
    done = models.PositiveIntegerField(default=0, help_text="Checkpoints rewritten so far.")
    checkpoints = models.PositiveIntegerField(default=0)
    session_count = models.PositiveIntegerField(default=0)
    other_checkpoints = models.PositiveIntegerField(default=0)
    other_sessions = models.PositiveIntegerField(default=0)
    chunks_deleted = models.PositiveIntegerField(default=0)
    rows_scrubbed = models.PositiveIntegerField(default=0)
    preview = SafeJSONField(default=list, blank=True, help_text="The project's sessions holding it, with seqs.")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    token = models.ForeignKey(ApiToken, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    actor = SafeCharField(max_length=200, help_text="Who asked, as the audit log names them.")
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    error = SafeTextField(blank=True)
    worker = models.CharField(max_length=200, blank=True, help_text="The worker running it (host:pid:token).")
    heartbeat_at = models.DateTimeField(null=True, blank=True, help_text="Refreshed while its worker is alive.")
    attempts = models.PositiveSmallIntegerField(default=0, help_text="Runs started: more than one after a worker died.")
    rewritten_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When the rewrite committed: a run after that only deletes the value and vacuums.",
    )

    objects = PurgeQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        # in no role (docs/purges.md): irreversible, and it rewrites other projects' history that shares the value
        permissions = [("purge_secrets", "Can purge a value from every checkpoint that holds it")]
        indexes = [
            # the job's claim and the stalled sweep: purges not finished
            models.Index(fields=["created_at"], condition=Q(state__in=["queued", "running"]), name="purge_unfinished"),
        ]

    def __str__(self) -> str:
        return f"purge {self.pk} ({self.detector}, {self.state})"

    @property
    def finished(self) -> bool:
        return self.state in (PurgeState.FINISHED, PurgeState.FAILED)

    @property
    def placeholder(self) -> str:
        return f"[purged {self.detector} {self.fingerprint[:12]}]"


class PurgeValue(models.Model):
    """The value a queued purge removes, held only until its job ends (then deleted, and the table vacuumed with
    the rest): the job runs in another process, and the value must not travel through the broker."""

    purge = models.OneToOneField(Purge, on_delete=models.CASCADE, primary_key=True, related_name="+")
    value = models.TextField()

    def __str__(self) -> str:
        return f"value of purge {self.purge_id}"
