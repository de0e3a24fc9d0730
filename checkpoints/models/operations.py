"""What operators and the scheduler run: retention policies, watched sources, import jobs, job runs and their locks."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from ..fields import SafeCharField, SafeJSONField, SafeTextField
from ..registry.formats import FORMATS
from .projects import ApiToken, Project, ProjectScopedQuerySet
from .sessions import AgentSession, Checkpoint, CheckpointKind, RegisteredChoices


class RetentionScope(models.TextChoices):
    AGENT = "agent"
    SESSION = "session"


class RetentionPolicy(models.Model):
    """Which checkpoints of a kind to keep; a project row overrides the global (project-less) row."""

    project = models.ForeignKey(Project, null=True, blank=True, on_delete=models.CASCADE)
    kind = models.CharField(max_length=20, choices=CheckpointKind.choices)
    keep_last = models.PositiveIntegerField(null=True, blank=True)
    keep_last_scope = models.CharField(max_length=10, choices=RetentionScope.choices, default=RetentionScope.SESSION)
    max_age = models.DurationField(null=True, blank=True)
    keep_first = models.BooleanField(default=False)
    keep_latest_per_name = models.BooleanField(default=False)
    until_operation_done = models.BooleanField(default=False)
    applies_to_langgraph = models.BooleanField(
        default=False,
        help_text="Also apply to LangGraph threads; without it they are kept whole until the agent prunes them "
        "(LangGraph's get_state_history reads every checkpoint).",
    )
    enabled = models.BooleanField(default=True)

    class Meta:
        verbose_name_plural = "retention policies"
        constraints = [
            models.UniqueConstraint(fields=["project", "kind"], name="retention_policy_per_project_kind"),
            models.UniqueConstraint(
                fields=["kind"], condition=Q(project__isnull=True), name="retention_policy_global_kind"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.project or 'global'}: {self.kind}"


class WatchedSource(models.Model):
    """A folder the routine import job reads incrementally."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="watched_sources")
    path = models.CharField(max_length=1000)
    format = models.CharField(max_length=20, choices=RegisteredChoices(FORMATS.choices))
    enabled = models.BooleanField(default=True)
    seen = models.JSONField(default=dict, blank=True, help_text="File path → (size, mtime) already imported.")
    last_scan_at = models.DateTimeField(null=True, blank=True)
    last_error = SafeTextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "path"], name="watched_source_path_per_project")]

    def __str__(self) -> str:
        return f"{self.format}:{self.path}"


class ImportJobStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class ImportJobQuerySet(ProjectScopedQuerySet):
    pass


class ImportJob(models.Model):
    """An uploaded archive of checkpoint files, imported by a Celery task; its report is kept."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="import_jobs")
    archive = models.CharField(max_length=1000, help_text="Where the upload is kept until imported.")
    original_name = SafeCharField(max_length=300)
    status = models.CharField(max_length=20, choices=ImportJobStatus.choices, default=ImportJobStatus.QUEUED)
    imported = models.PositiveIntegerField(default=0)
    skipped = models.PositiveIntegerField(default=0)
    error_count = models.PositiveIntegerField(default=0)
    report = SafeJSONField(default=dict, blank=True)
    error = SafeTextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = ImportJobQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"import of {self.original_name} ({self.status})"

    @property
    def finished(self) -> bool:
        return self.status in (ImportJobStatus.DONE, ImportJobStatus.FAILED)


class JobRunStatus(models.TextChoices):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"  # another run held the job's lock
    SUCCEEDED_WITH_ERRORS = "succeeded_with_errors"  # done, but some sessions (listed in its result) failed


class JobRunQuerySet(models.QuerySet["JobRun"]):
    def for_job(self, job: str) -> JobRunQuerySet:
        return self.filter(job=job)

    def completed(self) -> JobRunQuerySet:
        """Runs that finished their work (some sessions may have failed): their result holds its figures."""
        return self.filter(status__in=[JobRunStatus.SUCCEEDED, JobRunStatus.SUCCEEDED_WITH_ERRORS])


class JobRun(models.Model):
    """One run of a background job (retention, routine checkpoints, drift detection, GC…): when, what, how many."""

    job = models.CharField(max_length=50)
    status = models.CharField(max_length=30, choices=JobRunStatus.choices, default=JobRunStatus.RUNNING)
    dry_run = models.BooleanField(default=False)
    triggered_by = models.CharField(max_length=200, default="beat")
    worker = models.CharField(max_length=200, blank=True, help_text="host:pid:token of the process running it.")
    started_at = models.DateTimeField(default=timezone.now)
    heartbeat_at = models.DateTimeField(null=True, blank=True, help_text="Refreshed while the worker is alive.")
    finished_at = models.DateTimeField(null=True, blank=True)
    result = SafeJSONField(default=dict, blank=True)
    error = SafeTextField(blank=True)

    objects = JobRunQuerySet.as_manager()

    class Meta:
        ordering = ["-started_at", "-id"]
        indexes = [
            # Jobs page: each job's latest runs
            models.Index(fields=["job", "-started_at"], name="jobrun_job_started"),
            # run_job: runs still marked running whose worker stopped responding
            models.Index(fields=["heartbeat_at"], condition=Q(status="running"), name="jobrun_running_heartbeat"),
        ]

    def __str__(self) -> str:
        return f"{self.job} {self.status} at {self.started_at:%Y-%m-%d %H:%M}"

    @property
    def duration(self) -> float | None:
        return (self.finished_at - self.started_at).total_seconds() if self.finished_at else None

    @property
    def last_sign_of_life(self) -> datetime:
        return self.heartbeat_at or self.started_at


class JobLock(models.Model):
    """One run of a job at a time across all workers: a row per job, claimed with a conditional update."""

    name = models.CharField(max_length=50, primary_key=True)
    holder = models.CharField(max_length=200, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name} held by {self.holder or 'nobody'}"


class RecoveryAction(models.TextChoices):
    RESTORE = "restore"
    FORK = "fork"


class RecoveryRule(models.TextChoices):
    """How each session's target is picked (services.targets: the rule the single-alert button uses too)."""

    LAST_GOOD = "last_good", "last good"
    BEFORE = "before", "before a time"
    NAMED = "named", "a named checkpoint"


class RecoveryState(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"


class RecoveryQuerySet(ProjectScopedQuerySet):
    pass


class Recovery(models.Model):
    """A fleet recovery: one reviewed action restoring (or forking) many sessions, run by a Celery job.

    Its items are the plan the preview showed; each item changes in the transaction that restores its session,
    so a worker killed midway leaves every session restored once or untouched, and a rerun does the rest."""

    project = models.ForeignKey(
        Project,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="recoveries",
        help_text="The project of every session in it; empty when the batch spans several (a console selection).",
    )
    action = models.CharField(max_length=10, choices=RecoveryAction.choices)
    rule = models.CharField(max_length=10, choices=RecoveryRule.choices)
    at = models.DateTimeField(null=True, blank=True, help_text="The time of the 'before' rule.")
    name = SafeCharField(max_length=200, blank=True, help_text="The checkpoint name of the 'named' rule.")
    selection = SafeJSONField(default=dict, blank=True, help_text="The filter or the sessions ticked, as given.")
    reason = SafeTextField()
    state = models.CharField(max_length=10, choices=RecoveryState.choices, default=RecoveryState.QUEUED)
    total = models.PositiveIntegerField(default=0)
    done = models.PositiveIntegerField(default=0)
    skipped = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    token = models.ForeignKey(ApiToken, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    actor = SafeCharField(max_length=200, help_text="Who asked, as the audit log names them.")
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    worker = models.CharField(max_length=200, blank=True, help_text="host:pid:token of the worker running it.")
    heartbeat_at = models.DateTimeField(null=True, blank=True, help_text="Refreshed while its worker is alive.")
    attempts = models.PositiveIntegerField(default=0, help_text="Runs started: more than one after a requeue.")
    error = SafeTextField(blank=True)
    undone_at = models.DateTimeField(null=True, blank=True)
    undone_by = SafeCharField(max_length=200, blank=True)

    objects = RecoveryQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "recoveries"
        indexes = [
            # the sweep: recoveries still queued or running whose worker stopped responding
            models.Index(
                fields=["heartbeat_at"], condition=Q(state__in=["queued", "running"]), name="recovery_unfinished"
            ),
        ]

    def __str__(self) -> str:
        return f"recovery {self.pk} ({self.action}, {self.state})"

    @property
    def finished(self) -> bool:
        return self.state in (RecoveryState.FINISHED, RecoveryState.FAILED)

    @property
    def processed(self) -> int:
        return self.done + self.skipped + self.failed


class RecoveryResult(models.TextChoices):
    PENDING = "pending"
    RESTORED = "restored"
    FORKED = "forked"
    SKIPPED = "skipped"
    FAILED = "failed"


class RecoveryItem(models.Model):
    """One session of a recovery: the target and head the preview showed, then what the run did."""

    recovery = models.ForeignKey(Recovery, on_delete=models.CASCADE, related_name="items")
    session = models.ForeignKey(AgentSession, on_delete=models.CASCADE, related_name="+")
    target = models.ForeignKey(Checkpoint, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    target_seq = models.PositiveIntegerField(null=True, blank=True)
    planned_head = models.ForeignKey(
        Checkpoint,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The head the preview saw: the run restores only while the head is still on its path.",
    )
    discarded_checkpoints = models.PositiveIntegerField(default=0)
    discarded_tool_calls = models.PositiveIntegerField(null=True, blank=True)
    result = models.CharField(max_length=10, choices=RecoveryResult.choices, default=RecoveryResult.PENDING)
    reason = SafeTextField(blank=True, help_text="Why it was skipped or failed.")
    previous_head = models.ForeignKey(Checkpoint, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    new_head = models.ForeignKey(
        Checkpoint,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The restore checkpoint made, or the fork's first checkpoint.",
    )
    undo = SafeCharField(max_length=300, blank=True, help_text="What Undo batch did to it.")

    class Meta:
        ordering = ["recovery", "id"]
        constraints = [models.UniqueConstraint(fields=["recovery", "session"], name="recovery_item_per_session")]
        indexes = [models.Index(fields=["recovery", "result"], name="recovery_item_result")]

    def __str__(self) -> str:
        return f"{self.recovery_id}: {self.session_id} {self.result}"
