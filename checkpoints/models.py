"""The domain: projects, agent sessions, immutable checkpoints and the content-addressed chunks behind them."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.db.models.fields.tuple_lookups import Tuple, TupleLessThan
from django.db.models.functions import Coalesce, RowNumber
from django.utils import timezone

from checkpoint_console import typedjson

from . import limits
from .fields import SafeCharField, SafeJSONField, SafeTextField
from .roles import VIEW_SESSIONS, in_every_project, roles_granting


class ProjectQuerySet(models.QuerySet["Project"]):
    def allowing(self, user: Any, permission: str = VIEW_SESSIONS) -> ProjectQuerySet:
        """The projects where `user` holds `permission`: every one for superusers and for staff whose groups
        grant it, else those where one of the user's memberships grants it (any role sees its project)."""
        if in_every_project(user, permission):
            return self
        if not user.is_active:
            return self.none()
        memberships = ProjectMembership.objects.filter(user=user, role__in=roles_granting(permission))
        return self.filter(pk__in=memberships.values("project_id"))


# What LangGraph's JsonPlusSerializer rebuilds without an allow-list (its SAFE_MSGPACK_TYPES, as dotted names;
# a datetime travels as the method record datetime.datetime.fromisoformat) and LangChain's serialized messages
# and documents. An entry ending in "." is a prefix; any other names one callable exactly.
DEFAULT_TYPE_ALLOWLIST = (
    "builtins.frozenset",
    "builtins.set",
    "collections.deque",
    "datetime.date",
    "datetime.datetime",
    "datetime.datetime.fromisoformat",
    "datetime.time",
    "datetime.timedelta",
    "datetime.timezone",
    "decimal.Decimal",
    "ipaddress.IPv4Address",
    "ipaddress.IPv4Interface",
    "ipaddress.IPv4Network",
    "ipaddress.IPv6Address",
    "ipaddress.IPv6Interface",
    "ipaddress.IPv6Network",
    "langchain.schema.document.",
    "langchain.schema.messages.",
    "langchain_core.documents.base.Document",
    "langchain_core.messages.ai.AIMessage",
    "langchain_core.messages.ai.AIMessageChunk",
    "langchain_core.messages.base.BaseMessage",
    "langchain_core.messages.base.BaseMessageChunk",
    "langchain_core.messages.chat.ChatMessage",
    "langchain_core.messages.chat.ChatMessageChunk",
    "langchain_core.messages.function.FunctionMessage",
    "langchain_core.messages.function.FunctionMessageChunk",
    "langchain_core.messages.human.HumanMessage",
    "langchain_core.messages.human.HumanMessageChunk",
    "langchain_core.messages.modifier.RemoveMessage",
    "langchain_core.messages.system.SystemMessage",
    "langchain_core.messages.system.SystemMessageChunk",
    "langchain_core.messages.tool.ToolMessage",
    "langchain_core.messages.tool.ToolMessageChunk",
    "langgraph.store.base.GetOp",
    "langgraph.store.base.Item",
    "langgraph.types.Command",
    "langgraph.types.Interrupt",
    "langgraph.types.Overwrite",
    "langgraph.types.PregelTask",
    "langgraph.types.Send",
    "langgraph.types.StateSnapshot",
    "langgraph.types.TimeoutPolicy",
    "pathlib.Path",
    "pathlib.PosixPath",
    "pathlib.WindowsPath",
    "pathlib._local.Path",
    "pathlib._local.PosixPath",
    "pathlib._local.WindowsPath",
    "re.compile",
    "uuid.UUID",
    "zoneinfo.ZoneInfo",
)


def default_type_allowlist() -> list[str]:
    return list(DEFAULT_TYPE_ALLOWLIST)


def allows(allowlist: Iterable[str]) -> Callable[[str], bool]:
    """Whether a dotted callable name (see checkpoint_console.typedjson.type_names) is on the list: an entry
    equal to it, or a prefix entry ending in "." that it starts with. Built once, asked for every name."""
    entries = list(allowlist)
    exact, prefixes = set(entries), tuple(entry for entry in entries if entry.endswith("."))
    return lambda name: name in exact or name.startswith(prefixes)


def type_allowed(allowlist: Iterable[str], name: str) -> bool:
    return allows(allowlist)(name)


def refused_types(allowlist: Iterable[str], value: Any, path: str = "") -> Iterable[tuple[str, str]]:
    """(path, dotted name) of each callable a LangGraph reader would import for `value` that the list lacks."""
    allowed = allows(allowlist)
    return ((where, name) for where, name in typedjson.type_names(value, path) if not allowed(name))


class Project(models.Model):
    slug = models.SlugField(max_length=100, unique=True)
    name = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    type_allowlist = models.JSONField(
        default=default_type_allowlist,
        blank=True,
        help_text="Types LangGraph values may name (module.Name, or a prefix ending in '.'); operators edit it "
        "under Project settings.",
    )

    objects = ProjectQuerySet.as_manager()

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class ProjectScopedQuerySet(models.QuerySet[Any]):
    """Rows that belong to a project through `project_path`, kept for the projects a user may see or act in."""

    project_path = "project"

    def visible_to(self, user: Any) -> Any:
        """Rows of the projects `user` may see (any role there)."""
        return self.allowing(user, VIEW_SESSIONS)

    def allowing(self, user: Any, permission: str) -> Any:
        """Rows of the projects where `user` holds `permission`, as `Project.objects.allowing` picks them."""
        if in_every_project(user, permission):
            return self
        return self.filter(**{f"{self.project_path}__in": Project.objects.allowing(user, permission)})


class ProjectRole(models.TextChoices):
    VIEWER = "viewer", "viewer: browses"
    OPERATOR = "operator", "operator: also restores, forks, pins, undoes, triages alerts and imports"
    APPROVER = "approver", "approver: also reviews phases"


class ProjectMembership(models.Model):
    """A person's role in one project; it applies to that project's sessions and everything in them.

    Roles are not a ladder (an operator does not approve phases, an approver does not restore), so someone
    who does both holds two rows, one per role; any role lets them see the project.
    """

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships", db_index=False)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="project_memberships")
    role = models.CharField(max_length=20, choices=ProjectRole.choices)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["project", "user", "role"]
        constraints = [
            # one row per (project, user, role); also serves "the members of a project" (the admin's inline)
            models.UniqueConstraint(fields=["project", "user", "role"], name="membership_role_per_project_user"),
            models.CheckConstraint(condition=Q(role__in=ProjectRole.values), name="membership_role_known"),
        ]

    def __str__(self) -> str:
        return f"{self.user} as {self.role} in {self.project}"


class SourceFormat(models.TextChoices):
    DREAMOS = "dreamos"
    BREAKPILOT = "breakpilot"
    ARES = "ares"
    KAIZEN = "kaizen"
    HAYTHAM = "haytham"
    LANGGRAPH = "langgraph"


class SessionStatus(models.TextChoices):
    ACTIVE = "active"
    COMPLETED = "completed"
    FAILED = "failed"
    HALTED = "halted"
    ARCHIVED = "archived"


class AgentSessionQuerySet(ProjectScopedQuerySet):
    def active(self) -> AgentSessionQuerySet:
        return self.filter(status=SessionStatus.ACTIVE)

    def locked_for_ingest(self) -> AgentSessionQuerySet:
        """Sessions under the row lock ingest inserts under (NO KEY UPDATE: a LangGraph put_writes holding KEY
        SHARE goes on meanwhile), with what it reads of the head (`head_seq`, `head_calls`)."""
        locked = self.select_for_update(of=("self",), no_key=True)
        return locked.annotate(head_seq=F("head__seq"), head_calls=F("head__calls_made"))

    def matching(self, text: str) -> AgentSessionQuerySet:
        """Search by the agent's own session id or the title."""
        return self.filter(Q(external_id__icontains=text) | Q(title__icontains=text))

    def with_open_alert(self) -> AgentSessionQuerySet:
        open_alerts = DriftAlert.objects.filter(session=models.OuterRef("pk"), state=AlertState.OPEN)
        return self.filter(models.Exists(open_alerts))

    def with_open_alert_count(self) -> AgentSessionQuerySet:
        """Annotates `open_alerts`, the number on a session's alert badge (a subquery: no GROUP BY on sessions)."""
        counts = (
            DriftAlert.objects.filter(session=models.OuterRef("pk"), state=AlertState.OPEN)
            .order_by()
            .values("session")
            .annotate(n=models.Count("pk"))
            .values("n")
        )
        return self.annotate(open_alerts=Coalesce(models.Subquery(counts), 0))

    def for_list(self) -> AgentSessionQuerySet:
        """What a table of sessions shows, in its one query: project, the head's step, the alert badge. The head's
        step is a subquery, not a join: PostgreSQL then looks it up for the page's rows only, after the sort, where
        a join hashed the whole checkpoint table for sorts no index serves (174 ms at a million checkpoints)."""
        heads = Checkpoint.objects.filter(pk=models.OuterRef("head_id")).order_by().values("step")
        return (
            self.select_related("project")
            .defer("metadata", "live_root")
            .annotate(head_step=models.Subquery(heads))
            .with_open_alert_count()
        )

    def for_drift_check(self, *, idle_before: datetime) -> AgentSessionQuerySet:
        """Sessions whose drift alerts can change: active ones with checkpoints the drift job has not read or
        heard from since `idle_before` (the time-based rules move with the clock), those with new checkpoints
        and an unresolved failed or halted alert, and those with an unresolved long-running or missed-routine
        alert (it clears once the session stops or goes idle). One scan of the sessions, none of checkpoints."""
        unseen = Q(drift_checked_seq__isnull=True) | ~Q(drift_checked_seq=models.F("last_seq"))
        heard = Q(last_seen_at__gte=idle_before) | Q(last_seen_at__isnull=True)
        alerts = DriftAlert.objects.unresolved()
        status_alerts = alerts.filter(kind__in=[AlertKind.FAILED, AlertKind.HALTED]).values("session_id")
        running_alerts = alerts.filter(kind__in=[AlertKind.LONG_RUNNING, AlertKind.MISSED_ROUTINE])
        return self.filter(
            (Q(status=SessionStatus.ACTIVE) & (unseen | heard))
            | (unseen & Q(pk__in=status_alerts))
            | Q(pk__in=running_alerts.values("session_id"))
        )

    def totals(self, *, since: datetime) -> dict[str, int]:
        """Raw and stored bytes of these sessions, and how many checkpoints they made since `since` (counted by
        the hour): from their tallies, whatever the number of checkpoints."""
        totals = self.order_by().aggregate(raw_bytes=models.Sum("raw_bytes"), stored_bytes=models.Sum("stored_bytes"))
        recent = SessionRollup.objects.filter(session__in=self.order_by().values("pk"), hour__gte=since)
        totals["created_since"] = recent.aggregate(n=models.Sum("count"))["n"]
        return {key: value or 0 for key, value in totals.items()}

    def needing_attention(
        self, *, stale_before: datetime, limit: int, grouped: Iterable[str] = ()
    ) -> list[AgentSession]:
        """The `limit` sessions an operator should look at first, most urgent first (`attention`): 0 an open
        alert (of a kind not in `grouped`: the overview shows those as one line each), newest alert first,
        1 failed or halted, 2 active with a heartbeat older than `stale_before`, by recent activity. The newest
        open alert's `alert_kind` and `alert_message` come along.

        Each class is read newest first by an index and cut at `limit`, so the cost does not grow with the
        number of sessions or alerts; only the sessions shown are joined to their heads and badges.
        """
        alerts = DriftAlert.objects.open().filter(session__in=self.values("pk")).exclude(kind__in=list(grouped))
        newest: dict[int, tuple[str, str]] = {}
        # a session holds one open alert of a kind at most: this many alerts name `limit` sessions
        for session_id, kind, message in alerts.order_by("-opened_at", "-pk").values_list(
            "session_id", "kind", "message"
        )[: limit * len(AlertKind)]:
            newest.setdefault(session_id, (kind, message))
        chosen = dict.fromkeys(list(newest)[:limit], 0)
        silent = Q(last_seen_at__lt=stale_before) | Q(last_seen_at__isnull=True, created_at__lt=stale_before)
        for attention, candidates in (
            (1, self.filter(status__in=[SessionStatus.FAILED, SessionStatus.HALTED])),
            (2, self.filter(silent, status=SessionStatus.ACTIVE)),
        ):
            room = limit - len(chosen)
            if room <= 0:
                break
            found = candidates.order_by("-updated_at", "-pk").values_list("pk", flat=True)[: room + len(chosen)]
            for pk in [pk for pk in found if pk not in chosen][:room]:
                chosen[pk] = attention
        shown = {session.pk: session for session in self.filter(pk__in=list(chosen)).for_list()}
        for pk, attention in chosen.items():
            shown[pk].attention = attention
            shown[pk].alert_kind, shown[pk].alert_message = newest.get(pk, ("", ""))
        return [shown[pk] for pk in chosen if pk in shown]


class AgentSession(models.Model):
    """One agent run. Named so as not to clash with django.contrib.sessions."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="sessions", db_index=False)
    external_id = SafeCharField(max_length=200, help_text="The agent's own session id, unique per project.")
    agent = SafeCharField(max_length=200, db_index=True)
    title = SafeCharField(max_length=300, blank=True)
    status = models.CharField(max_length=20, choices=SessionStatus.choices, default=SessionStatus.ACTIVE)
    execution_mode = SafeCharField(max_length=50, blank=True)
    head = models.ForeignKey(
        "Checkpoint",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The checkpoint the agent should resume from.",
    )
    forked_from = models.ForeignKey(
        "Checkpoint", null=True, blank=True, on_delete=models.SET_NULL, related_name="forks"
    )
    last_seq = models.PositiveIntegerField(default=0, help_text="Highest seq handed out; seqs are never reused.")
    restore_generation = models.PositiveIntegerField(default=0)
    last_seen_at = models.DateTimeField(null=True, blank=True)
    drift_checked_seq = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="last_seq when drift detection last read its checkpoints: the job skips sessions with none new.",
    )
    live_root = models.BinaryField(
        max_length=32, null=True, blank=True, help_text="Store address of the latest live state sent."
    )
    live_state_at = models.DateTimeField(null=True, blank=True)
    metadata = SafeJSONField(default=dict, blank=True)
    source_path = models.CharField(max_length=1000, blank=True, help_text="The folder this session was imported from.")
    source_format = models.CharField(max_length=20, choices=SourceFormat.choices, blank=True)
    write_back = models.BooleanField(
        default=False, help_text="On restore, also write the restored state into source_path in source_format."
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    # Running tallies of its checkpoints, kept by checkpoints.store.tallies with every insert and delete (db_default:
    # the columns are added without rewriting the table).
    checkpoint_count = models.IntegerField(default=0, db_default=0)
    raw_bytes = models.BigIntegerField(default=0, db_default=0, help_text="Its checkpoints' state sizes, summed.")
    stored_bytes = models.BigIntegerField(default=0, db_default=0, help_text="What its checkpoints added to the store.")
    failed_count = models.IntegerField(default=0, db_default=0, help_text="Checkpoints that failed or halted.")
    tool_failed_count = models.IntegerField(default=0, db_default=0, help_text="Checkpoints with a failed tool call.")

    objects = AgentSessionQuerySet.as_manager()

    class Meta:
        permissions = [("operate_session", "Can restore, fork and pin checkpoints, and undo restores")]
        constraints = [
            models.UniqueConstraint(fields=["project", "external_id"], name="session_external_id_per_project"),
        ]
        indexes = [
            # sessions list: filter by project and status, newest activity first
            models.Index(fields=["project", "status", "-updated_at"], name="session_project_status"),
            # overview: sessions ordered by recent activity
            models.Index(fields=["-updated_at"], name="session_updated"),
            # name search (console, admin): icontains is UPPER(column::text) LIKE, matched by trigrams (PostgreSQL)
            # search (`matching`, the admin): pg_trgm GIN indexes on UPPER(column::text), made by migration 0018 on
            # PostgreSQL only and kept out of the model state, which SQLite would build when it remakes the table
        ]

    def __str__(self) -> str:
        return f"{self.project.slug}/{self.external_id}" if self.project_id else self.external_id


class CheckpointKind(models.TextChoices):
    ROUTINE = "routine"
    PRE_OPERATION = "pre_operation"
    RECOVERY = "recovery"
    STEP = "step"
    PHASE = "phase"
    MANUAL = "manual"
    RESTORE = "restore"
    FORK = "fork"
    IMPORTED = "imported"


class CheckpointStatus(models.TextChoices):
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    FAILED = "failed"
    HALTED = "halted"


class CheckpointQuerySet(ProjectScopedQuerySet):
    project_path = "session__project"

    def for_session(self, session: AgentSession) -> CheckpointQuerySet:
        return self.filter(session=session)

    def filtered(
        self,
        *,
        name: str | None = None,
        kind: str | None = None,
        status: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> CheckpointQuerySet:
        qs = self
        if name:
            qs = qs.filter(name=name)
        if kind:
            qs = qs.filter(kind=kind)
        if status:
            qs = qs.filter(status=status)
        if since:
            qs = qs.filter(created_at__gte=since)
        if until:
            qs = qs.filter(created_at__lte=until)
        return qs

    def for_timeline(self) -> CheckpointQuerySet:
        """The columns a timeline row shows; `metadata` (which can be large) stays behind."""
        return self.only(
            "id", "session_id", "seq", "parent_id", "name", "kind", "status", "status_reason",
            "step", "created_at", "raw_bytes", "stored_bytes", "pinned", "preview", "tool_failed",
        )  # fmt: skip

    def branch_points(self) -> models.QuerySet[Any]:
        """(seq, parent seq, kind) of each checkpoint that starts a branch (a partial index serves it).

        The parent seq is None for a new root: a second run that starts over in the same session.
        """
        return self.filter(starts_branch=True).order_by("seq").values_list("seq", "parent__seq", "kind")

    def newest_per_session(self, sessions: list[AgentSession], *, count: int = 30) -> CheckpointQuerySet:
        """The newest `count` checkpoints of each session, oldest first, in one query (ROW_NUMBER() per session).

        Only each session's last few seqs are ranked (retention leaves gaps, hence the margin): one index
        range per session, so the cost does not grow with the length of the sessions.
        """
        if not sessions:
            return self.none()
        recent = Q()
        for session in sessions:
            recent |= Q(session_id=session.pk, seq__gt=session.last_seq - count * 4)
        return (
            self.filter(recent)
            .annotate(
                rank=models.Window(RowNumber(), partition_by=models.F("session_id"), order_by=models.F("seq").desc())
            )
            .filter(rank__lte=count)
            .order_by("session_id", "seq")
        )


# A checkpoint in trouble: it failed or halted, or a tool call it added failed (the agent went on).
TROUBLE = Q(status__in=[CheckpointStatus.FAILED, CheckpointStatus.HALTED]) | Q(tool_failed=True)


class Checkpoint(models.Model):
    """An immutable snapshot. Its state lives in the store under `root`; forks and restores share roots."""

    # no index of its own: (session, seq) below leads with it
    session = models.ForeignKey(AgentSession, on_delete=models.CASCADE, related_name="checkpoints", db_index=False)
    seq = models.PositiveIntegerField()
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children")
    starts_branch = models.BooleanField(
        default=False,
        db_default=False,  # processes still running the previous release insert without the column
        help_text="Its parent is not the checkpoint that arrived just before it: history forks here.",
    )
    name = SafeCharField(max_length=200, blank=True)
    kind = models.CharField(max_length=20, choices=CheckpointKind.choices, default=CheckpointKind.STEP)
    status = models.CharField(max_length=20, choices=CheckpointStatus.choices, default=CheckpointStatus.COMPLETED)
    status_reason = SafeTextField(blank=True)
    step = models.IntegerField(null=True, blank=True)
    phase = models.IntegerField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, help_text="The agent's clock.")
    received_at = models.DateTimeField(default=timezone.now)
    root = models.BinaryField(max_length=32, help_text="Store address of the state.")
    state_hash = models.BinaryField(
        max_length=32, help_text="Digest of the state (store.digests: by top-level value, lists by item)."
    )
    raw_bytes = models.BigIntegerField(default=0, help_text="Size of the state as canonical JSON.")
    stored_bytes = models.BigIntegerField(default=0, help_text="New compressed bytes this checkpoint added.")
    calls_made = models.IntegerField(  # no CHECK: adding the column does not scan the table
        null=True,
        blank=True,
        help_text="Tool calls made on the path to it: its parent's and the ones it added, counted when stored "
        "(empty: stored before the count existed; manage.py fill_previews counts them).",
    )
    preview = SafeCharField(
        max_length=200,
        blank=True,
        db_default="",  # processes still running the previous release insert without the column
        help_text="What happened here in one line (the tool call and its result, or the message it added).",
    )
    tool_failed = models.BooleanField(
        default=False, db_default=False, help_text="A tool call this checkpoint added failed."
    )
    pinned = models.BooleanField(default=False)
    operation_id = SafeCharField(max_length=200, blank=True)
    operation_done = models.BooleanField(default=False)
    expires_at = models.DateTimeField(null=True, blank=True)
    idempotency_key = SafeCharField(max_length=200, blank=True)
    metadata = SafeJSONField(default=dict, blank=True)

    objects = CheckpointQuerySet.as_manager()

    class Meta:
        ordering = ["session", "seq"]
        constraints = [
            # timeline order and the gapless-seq invariant; also serves "a session's checkpoints by seq"
            models.UniqueConstraint(fields=["session", "seq"], name="checkpoint_seq_per_session"),
            models.UniqueConstraint(
                fields=["session", "idempotency_key"],
                condition=~Q(idempotency_key=""),
                name="checkpoint_idempotency_per_session",
            ),
            # every reader (psycopg, Python, the jobs) can load it, whatever offset the agent sent
            models.CheckConstraint(
                condition=Q(created_at__gte=limits.EARLIEST, created_at__lt=limits.LATEST),
                name="checkpoint_created_at_in_range",
            ),
        ]
        indexes = [
            # API list filters since/until: a session's checkpoints by time
            models.Index(fields=["session", "created_at"], name="checkpoint_session_time"),
            # get_by_name and "latest of each name" retention
            models.Index(fields=["session", "name", "seq"], name="checkpoint_session_name"),
            # API kind filter and per-kind retention
            models.Index(fields=["session", "kind", "seq"], name="checkpoint_session_kind"),
            # retention of pre_operation checkpoints by operation
            models.Index(fields=["operation_id"], condition=~Q(operation_id=""), name="checkpoint_operation"),
            # the timeline's branch layout: the few checkpoints where history forks
            models.Index(fields=["session", "seq"], condition=Q(starts_branch=True), name="checkpoint_branch_start"),
            # the timeline's index of failures: the few checkpoints that failed, halted or had a tool call fail
            models.Index(fields=["session", "seq"], condition=TROUBLE, name="checkpoint_trouble"),
        ]

    def __str__(self) -> str:
        return f"#{self.seq} {self.name or self.kind}"

    @property
    def root_hex(self) -> str:
        return bytes(self.root).hex()

    @property
    def state_hash_hex(self) -> str:
        return bytes(self.state_hash).hex()


ROLLUP_BLOCK = 20  # seqs per rollup block: a chart of up to 500 × this many seqs reads checkpoint rows instead


class SessionRollup(models.Model):
    """The checkpoints of one session with seqs in one block of ROLLUP_BLOCK, created in one hour (UTC): what the
    timeline's charts draw and the overview counts, read in a few thousand rows however long the session.

    Kept by checkpoints.store.tallies with every insert and delete; `manage.py recount_tallies` rebuilds them.
    """

    session = models.ForeignKey(AgentSession, on_delete=models.CASCADE, related_name="+", db_index=False)
    block = models.IntegerField(help_text="(seq - 1) // ROLLUP_BLOCK")
    hour = models.DateTimeField()
    count = models.IntegerField()
    steps = models.IntegerField(help_text="Checkpoints of kind step.")
    trouble = models.IntegerField(help_text="Checkpoints in trouble: failed, halted or with a failed tool call.")
    raw_max = models.BigIntegerField(help_text="The largest state.")
    stored_bytes = models.BigIntegerField()
    first_seq = models.IntegerField()
    last_seq = models.IntegerField()

    class Meta:
        constraints = [
            # one row per (session, block, hour); also serves a session's charts and recounting a block
            models.UniqueConstraint(fields=["session", "block", "hour"], name="rollup_per_session_block_hour"),
        ]
        indexes = [
            # the overview: checkpoints created today
            models.Index(fields=["hour"], name="rollup_hour"),
        ]

    def __str__(self) -> str:
        return f"{self.session_id} block {self.block} at {self.hour:%Y-%m-%d %H:00}"


class TalliedField(models.TextChoices):
    NAME = "name"
    KIND = "kind"
    STATUS = "status"


class SessionCount(models.Model):
    """How many checkpoints of a session have a given name, kind or status (the summary API's counts).

    Kept by checkpoints.store.tallies with every insert and delete; a value no checkpoint has any more has no row.
    """

    session = models.ForeignKey(AgentSession, on_delete=models.CASCADE, related_name="+", db_index=False)
    field = models.CharField(max_length=10, choices=TalliedField.choices)
    value = SafeCharField(max_length=200)
    count = models.IntegerField()

    class Meta:
        constraints = [
            # one row per value; also serves a session's counts
            models.UniqueConstraint(fields=["session", "field", "value"], name="count_per_session_field_value"),
        ]

    def __str__(self) -> str:
        return f"{self.session_id} {self.field}={self.value}: {self.count}"


class Chunk(models.Model):
    """A content-addressed, zstd-compressed node of the state store (see checkpoints/store/__init__.py)."""

    hash = models.BinaryField(primary_key=True, max_length=32)
    data = models.BinaryField()
    raw_size = models.PositiveIntegerField()
    base = models.BinaryField(
        max_length=32, null=True, blank=True, help_text="For a patch node: the node it applies to."
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            # garbage collection skips chunks younger than the grace period
            models.Index(fields=["created_at"], name="chunk_created"),
        ]

    def __str__(self) -> str:
        return bytes(self.hash).hex()


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
        ordering = ["phase", "-created_at", "-id"]
        permissions = [("approve_phase", "Can review phases: approve, request changes, skip or reject")]
        indexes = [
            # the agent polls the latest decision of a phase
            models.Index(fields=["phase", "-created_at"], name="feedback_latest"),
        ]

    def __str__(self) -> str:
        return f"{self.phase}: {self.action}"


class AlertKind(models.TextChoices):
    CYCLE_COUNT = "cycle_count"
    LONG_RUNNING = "long_running"
    ERROR_RATE = "error_rate"
    REPETITION = "repetition"
    STALLED = "stalled"
    MISSED_ROUTINE = "missed_routine"
    FAILED = "failed"
    HALTED = "halted"
    STATE_GROWTH = "state_growth"
    SOURCE_MISSING = "source_missing"
    # OpenHands' stuck detector
    REPEATED_ACTION = "repeated_action"
    REPEATED_ERROR = "repeated_error"
    MONOLOGUE = "monologue"
    PING_PONG = "ping_pong"
    CONTEXT_OVERFLOW = "context_overflow"
    # Gemini CLI's loop detection
    TOOL_CALL_LOOP = "tool_call_loop"
    CONTENT_LOOP = "content_loop"


class AlertSeverity(models.TextChoices):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


class AlertState(models.TextChoices):
    OPEN = "open"
    ACKNOWLEDGED = "acknowledged"
    RESOLVED = "resolved"


# Most severe first: the alert list's order (the rank in SQL leads the index that serves it) and escalation.
SEVERITY_RANKS: dict[str, int] = {AlertSeverity.INFO: 0, AlertSeverity.WARNING: 1, AlertSeverity.CRITICAL: 2}
SEVERITY_RANK = models.Case(  # the same text as in the index: PostgreSQL matches it to use the index
    models.When(severity=AlertSeverity.CRITICAL, then=models.Value(2)),
    models.When(severity=AlertSeverity.WARNING, then=models.Value(1)),
    default=models.Value(0),
    output_field=models.SmallIntegerField(),
)
UNRESOLVED = ~Q(state=AlertState.RESOLVED)


class DriftAlertQuerySet(ProjectScopedQuerySet):
    project_path = "session__project"

    def unresolved(self) -> DriftAlertQuerySet:
        return self.filter(UNRESOLVED)

    def open(self) -> DriftAlertQuerySet:
        return self.filter(state=AlertState.OPEN)

    def open_kinds_at_least(self, sessions: int) -> dict[str, int]:
        """The kinds that `sessions` or more sessions have an open alert of, with how many: a burst the
        overview shows as one line rather than one row a session (a session has one open alert of a kind)."""
        counts = self.open().order_by().values("kind").annotate(n=models.Count("pk")).filter(n__gte=sessions)
        return {row["kind"]: row["n"] for row in counts.order_by("-n", "kind")}

    def most_severe_first(self, *, after: tuple[int, datetime, int] | None = None) -> DriftAlertQuerySet:
        """Most severe first, then newest first, from after the (`severity_rank`, opened_at, id) of the last
        row of the previous page: for unresolved alerts an index range in the order of `alert_unresolved_list`.
        """
        alerts = self.annotate(severity_rank=SEVERITY_RANK)
        if after is not None:
            key = Tuple(models.F("severity_rank"), models.F("opened_at"), models.F("pk"))
            alerts = alerts.filter(TupleLessThan(key, after))
        return alerts.order_by("-severity_rank", "-opened_at", "-pk")


class DriftAlert(models.Model):
    session = models.ForeignKey(AgentSession, on_delete=models.CASCADE, related_name="alerts", db_index=False)
    checkpoint = models.ForeignKey(Checkpoint, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    kind = models.CharField(max_length=30, choices=AlertKind.choices)
    severity = models.CharField(max_length=20, choices=AlertSeverity.choices, default=AlertSeverity.WARNING)
    message = SafeTextField()
    evidence = SafeJSONField(default=dict, blank=True)
    state = models.CharField(max_length=20, choices=AlertState.choices, default=AlertState.OPEN)
    opened_at = models.DateTimeField(default=timezone.now)
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    last_good = models.ForeignKey(
        Checkpoint,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="Newest checkpoint before the drift began: the suggested restore target.",
    )

    objects = DriftAlertQuerySet.as_manager()

    class Meta:
        permissions = [("triage_alert", "Can acknowledge and resolve drift alerts")]
        constraints = [
            models.UniqueConstraint(
                fields=["session", "kind"],
                condition=UNRESOLVED,
                name="one_unresolved_alert_per_session_kind",
            )
        ]
        indexes = [
            # overview and alerts list: open alerts, newest first
            models.Index(fields=["state", "-opened_at"], name="alert_state_opened"),
            # the API's alerts list: every alert of a project, newest first
            models.Index(fields=["-opened_at", "-id"], name="alert_opened"),
            # the alerts list (unresolved by default): most severe first, newest first, a page at a time
            models.Index(
                SEVERITY_RANK.desc(),
                models.F("opened_at").desc(),
                models.F("id").desc(),
                condition=UNRESOLVED,
                name="alert_unresolved_list",
            ),  # fmt: skip
            # alert badges of a session
            models.Index(fields=["session", "state"], name="alert_session_state"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} on {self.session_id}"


class LangGraphCheckpoint(models.Model):
    """What LangGraph knows of a checkpoint besides its state (the Checkpoint beside it holds the channel values):
    its id in the thread, its namespace, its header and its exact metadata.

    A put repeating an id makes a new Checkpoint (the console keeps the old one in its history); the old row stays
    with `current` False, so LangGraph reads only current rows.
    """

    console = models.OneToOneField(Checkpoint, on_delete=models.CASCADE, primary_key=True, related_name="langgraph")
    session = models.ForeignKey(AgentSession, on_delete=models.CASCADE, related_name="+", db_index=False)
    checkpoint_ns = SafeTextField(blank=True)
    checkpoint_id = SafeCharField(max_length=200)
    parent_checkpoint_id = SafeCharField(max_length=200, blank=True)
    current = models.BooleanField(default=True)
    header = models.BinaryField(help_text="zstd'd JSON of LangGraph's checkpoint without id and channel values.")
    metadata = SafeJSONField(default=dict, blank=True, help_text="LangGraph's metadata as put (typed JSON).")
    run_id = SafeCharField(max_length=200, blank=True)

    class Meta:
        constraints = [
            # one current checkpoint per id; also serves "latest of a thread+ns" and `before` paging
            models.UniqueConstraint(
                fields=["session", "checkpoint_ns", "checkpoint_id"],
                condition=Q(current=True),
                name="langgraph_checkpoint_current_id",
            ),
        ]
        indexes = [
            # delete_for_runs
            models.Index(fields=["run_id"], condition=~Q(run_id=""), name="langgraph_checkpoint_run"),
        ]

    def __str__(self) -> str:
        return f"{self.checkpoint_ns}:{self.checkpoint_id}"


class LangGraphWrites(models.Model):
    """The pending writes of one task against one checkpoint, as LangGraph's put_writes leaves them: one row a
    task, its writes zstd'd together (idx → channel and typed JSON value), so a step costs one small row.

    A step writes each new value twice, as a pending write and in the next checkpoint's state (a message
    appended, a replaced channel's value); once that checkpoint arrives, the write names the value's place in its
    state instead of holding it."""

    session = models.ForeignKey(AgentSession, on_delete=models.CASCADE, related_name="+", db_index=False)
    checkpoint_ns = SafeTextField(blank=True)
    checkpoint_id = SafeCharField(max_length=200)
    task_id = SafeCharField(max_length=200)
    task_path = SafeTextField(blank=True)
    writes = models.BinaryField(
        help_text="zstd'd JSON [[idx, channel, value] or [idx, channel, null, positions], …], by idx: a value "
        "the next checkpoint holds in its state is kept there once, named by its positions in the channel "
        "(null: the channel's whole value)."
    )
    values_root = models.BinaryField(
        max_length=32, null=True, blank=True, help_text="Store address of the state holding the values named."
    )
    interrupted = models.BooleanField(default=False, help_text="Holds an __interrupt__ write.")
    resumed = models.BooleanField(default=False, help_text="Holds a __resume__ write.")

    class Meta:
        constraints = [
            # one row per task; also serves a checkpoint's pending writes
            models.UniqueConstraint(
                fields=["session", "checkpoint_ns", "checkpoint_id", "task_id"], name="langgraph_writes_per_task"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.checkpoint_ns}:{self.checkpoint_id} {self.task_id}"


class LangGraphTombstone(models.Model):
    """A LangGraph thread its agent deleted: a late put or write naming a checkpoint of the deleted history is
    refused (410) instead of bringing it back; a put without a parent starts the thread afresh."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+", db_index=False)
    external_id = SafeCharField(max_length=200)
    deleted_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "external_id"], name="langgraph_tombstone_per_thread"),
        ]

    def __str__(self) -> str:
        return f"{self.project_id}/{self.external_id} deleted"


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


class ApiTokenQuerySet(models.QuerySet["ApiToken"]):
    def usable(self, *, now: datetime | None = None) -> ApiTokenQuerySet:
        """Neither revoked nor expired."""
        unexpired = Q(expires_at__isnull=True) | Q(expires_at__gt=now or timezone.now())
        return self.filter(unexpired, revoked_at__isnull=True)


class Scope(models.TextChoices):
    """What an API token may do: the one registry of scopes. Each API operation names the scope it needs
    (`x-required-scope` in the OpenAPI schema) and a token holds a list of them; a feature that needs a scope of its
    own adds it here, with the sentence the admin and `create_api_token --scope` show."""

    READ = "read", "read sessions, checkpoints, diffs, live state, LangGraph threads, webhooks and their deliveries"
    WRITE = "write", "store and change: sessions, checkpoints, restores, forks, LangGraph puts and deletions, webhooks"


DEFAULT_SCOPES = [Scope.READ.value, Scope.WRITE.value]  # a token created without naming its scopes


class ApiToken(models.Model):
    """A bearer token scoped to one project. Only its SHA-256 is stored; the prefix identifies it."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="tokens")
    name = models.CharField(max_length=200)
    prefix = models.CharField(max_length=16)
    token_hash = models.CharField(max_length=64, unique=True)
    scopes = models.JSONField(default=list)
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="After this the token gets 401; empty: never.")

    objects = ApiTokenQuerySet.as_manager()

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    def has_scope(self, scope: str) -> bool:
        return scope in self.scopes


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
            # audit log, newest first
            models.Index(fields=["-created_at"], name="audit_created"),
            # audit log filtered by session
            models.Index(fields=["session", "-created_at"], name="audit_session"),
            # audit log filtered by action
            models.Index(fields=["action", "-created_at"], name="audit_action"),
        ]

    def __str__(self) -> str:
        return f"{self.actor} {self.action} {self.target}"


class WatchedSource(models.Model):
    """A folder the routine import job reads incrementally."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="watched_sources")
    path = models.CharField(max_length=1000)
    format = models.CharField(max_length=20, choices=SourceFormat.choices)
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
    JOB_FAILED = "job.failed"
    IMPORT_FAILED = "import.failed"
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
        indexes = [models.Index(fields=["created_at"], name="event_created")]

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
            models.Index(fields=["created_at"], name="delivery_created"),
        ]

    def __str__(self) -> str:
        return f"{self.channel} delivery {self.id}"
