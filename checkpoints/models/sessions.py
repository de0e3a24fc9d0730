"""Agent sessions, their immutable checkpoints, the content-addressed chunks behind them, the tallies and rollups the console reads, and the drift alerts raised on them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.db.models.fields.tuple_lookups import Tuple, TupleLessThan
from django.db.models.functions import Coalesce, RowNumber
from django.utils import timezone
from django.utils.choices import BaseChoiceIterator

from .. import limits
from ..fields import SafeCharField, SafeJSONField, SafeTextField
from ..registry.detectors import DETECTORS
from ..registry.formats import FORMATS
from .projects import Project, ProjectScopedQuerySet


class RegisteredChoices(BaseChoiceIterator):
    """A column's choices: what a registry holds when they are read, so that a declaration registered later (a
    test's toy format) is a choice too. Unlike a callable, which a migration would name, makemigrations sees
    (value, label) pairs: the same as a hand-written list, and no migration while the registry is unchanged."""

    def __init__(self, choices: Callable[[], list[tuple[str, str]]]) -> None:
        self.choices = choices  # a registry's `choices`

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self.choices())


# The built-in formats and detectors by name, for the code that names one. What a column may hold, and the labels
# shown, come from the registries (checkpoints/registry/): a format or detector is declared there, and the tests
# check that each of these is declared with the same label.
class SourceFormat(models.TextChoices):
    DREAMOS = "dreamos"
    BREAKPILOT = "breakpilot"
    ARES = "ares"
    KAIZEN = "kaizen"
    HAYTHAM = "haytham"
    LANGGRAPH = "langgraph"


class SessionStatus(models.TextChoices):
    ACTIVE = "active"
    WAITING = "waiting", "waiting for input"  # a LangGraph thread stopped at interrupt(): a person answers
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

    def forks_of(self, session: AgentSession) -> AgentSessionQuerySet:
        """The sessions forked from one of `session`'s checkpoints. `forked_from` not null lets the planner read the
        forks' index instead of every session (9.7 → 0.9 ms among 10,087 sessions in bench/scale.py's store)."""
        return self.filter(forked_from__isnull=False, forked_from__session=session)

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
        """The `limit` sessions an operator should look at first, most severe first, then by class
        (`attention`): 0 an open alert (of a kind not in `grouped`: the overview shows those as one line each),
        by its most severe open alert, newest first; 1 failed or halted (critical, as their alert is), by recent
        activity; 2 active with a heartbeat older than `stale_before`, by recent activity, after every alert.
        The most severe open alert's `alert_kind` and `alert_message` come along.

        Each class is read in its order by an index and cut at `limit`, so the cost does not grow with the
        number of sessions or alerts; only the sessions shown are joined to their heads and badges.
        """
        alerts = DriftAlert.objects.open().filter(session__in=self.values("pk")).exclude(kind__in=list(grouped))
        worst: dict[int, tuple[int, str, str]] = {}  # session → its most severe open alert's rank, kind, message
        # a session holds one open alert of a kind at most: this many alerts name `limit` sessions
        for session_id, kind, message, rank in alerts.most_severe_first().values_list(
            "session_id", "kind", "message", "severity_rank"
        )[: limit * len(DETECTORS)]:
            worst.setdefault(session_id, (rank, kind, message))
        critical = SEVERITY_RANKS[AlertSeverity.CRITICAL]
        # (severity, attention, position in its class): the smallest first
        keys = {pk: (-rank, 0, position) for position, (pk, (rank, _, _)) in enumerate(list(worst.items())[:limit])}
        failed = self.filter(status__in=[SessionStatus.FAILED, SessionStatus.HALTED])
        found = failed.order_by("-updated_at", "-pk").values_list("pk", flat=True)[: limit + len(keys)]
        for position, pk in enumerate([pk for pk in found if pk not in keys][:limit]):
            keys[pk] = (-critical, 1, position)
        room = limit - len(keys)
        if room > 0:
            silent = Q(last_seen_at__lt=stale_before) | Q(last_seen_at__isnull=True, created_at__lt=stale_before)
            quiet = self.filter(silent, status=SessionStatus.ACTIVE).order_by("-updated_at", "-pk")
            for position, pk in enumerate(
                [pk for pk in quiet.values_list("pk", flat=True)[: room + len(keys)] if pk not in keys][:room]
            ):
                keys[pk] = (1, 2, position)
        chosen = sorted(keys, key=keys.__getitem__)[:limit]
        shown = {session.pk: session for session in self.filter(pk__in=chosen).for_list()}
        for pk in chosen:
            if pk in shown:
                shown[pk].attention = keys[pk][1]
                shown[pk].severity_rank = -keys[pk][0]  # a silent session's -1 ranks below every alert
                shown[pk].alert_kind, shown[pk].alert_message = worst.get(pk, (0, "", ""))[1:]
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
    purge_generation = models.PositiveIntegerField(
        default=0,
        db_default=0,
        help_text="The newest purge that rewrote its history (ingest checks it, under the lock).",
    )
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
    source_format = models.CharField(max_length=20, choices=RegisteredChoices(FORMATS.choices), blank=True)
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
    EDIT = "edit"  # an operator's edit of a checkpoint's state, made the head (services.recovery.edit_state)


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

    def path_points(self) -> models.QuerySet[Any]:
        """`branch_points` without a LangGraph thread's subgraph hops (another partial index serves it): the
        branches of the thread's path, however many subgraph runs it made."""
        return self.branch_points().filter(subgraph_hop=False)

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


NAMED_LIKE_PAIRS = 200  # (session, name) pairs looked up one by one; past this many, by name alone
NAMED_LIKE_NAMES = 1000  # distinct names bound as a list; past this many, read by a subquery


def name_contains(text: str) -> Q:
    """Checkpoints whose name contains `text` (any case). The names are found among the sessions' name tallies
    (a few rows a session, trigram-indexed on PostgreSQL), the checkpoints then by (session, name) through
    `checkpoint_session_name`: no index on the checkpoint rows pays for a search only the admin makes."""
    names = SessionCount.objects.filter(field=TalliedField.NAME, value__icontains=text).exclude(value="")
    pairs = list(names.values_list("session_id", "value")[: NAMED_LIKE_PAIRS + 1])
    if len(pairs) > NAMED_LIKE_PAIRS:  # a common name: the admin's newest-first listing meets it soon
        # by its distinct names: compared with a subquery's (session, name) rows, each checkpoint the listing walked
        # past met every session that used the name (at 1M checkpoints 8,171 rows of one name, 1.5 s cold)
        distinct = names.order_by().values_list("value", flat=True).distinct()
        values = list(distinct[: NAMED_LIKE_NAMES + 1])
        return Q(name__in=values if len(values) <= NAMED_LIKE_NAMES else distinct)
    found = Q(pk__in=[])
    for session_id, name in pairs:
        found |= Q(session_id=session_id, name=name)
    return found


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
    subgraph_hop = models.BooleanField(
        default=False,
        db_default=False,  # processes still running the previous release insert without the column
        help_text="A branch start that is no branch of a LangGraph thread's path: a subgraph's checkpoint, or the "
        "root graph's checkpoint that continues its parent after a subgraph's run.",
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
            # the API's name filter and get_by_name, the admin's name search (through SessionCount); unnamed rows,
            # which no name query asks for, cost nothing
            models.Index(fields=["session", "name", "seq"], condition=~Q(name=""), name="checkpoint_session_name"),
            # the API's kind filter, a session's newest reset (drift), clearing its recovery checkpoints: steps, most
            # rows, stay out (a session's steps are read through (session, seq), skipping the few other kinds)
            models.Index(
                fields=["session", "kind", "seq"],
                condition=~Q(kind=CheckpointKind.STEP),
                name="checkpoint_session_kind",
            ),
            # retention of pre_operation checkpoints by operation
            models.Index(fields=["operation_id"], condition=~Q(operation_id=""), name="checkpoint_operation"),
            # the timeline's branch layout: the few checkpoints where history forks
            models.Index(fields=["session", "seq"], condition=Q(starts_branch=True), name="checkpoint_branch_start"),
            # the timeline's branch layout of a LangGraph thread: its path's branch starts, not its subgraph runs
            models.Index(
                fields=["session", "seq"],
                condition=Q(starts_branch=True, subgraph_hop=False),
                name="checkpoint_path_start",
            ),
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

    # No index on created_at: garbage collection pages through chunks by hash and tests their age on the row (an
    # entry a chunk, ~1.3 chunks a checkpoint, for a query nobody waits on). On PostgreSQL `data` stays in the row up
    # to 8 kB, stored as is (migration 0039).

    def __str__(self) -> str:
        return bytes(self.hash).hex()


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
    NODE_ERROR = "node_error"  # a LangGraph node raised: its __error__ write on the thread's latest checkpoint
    SECRET_FOUND = "secret_found"  # noqa: S105 - an alert kind, not a password: a checkpoint added a secret


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


@dataclass(frozen=True)
class AlertBurst:
    """Open alerts of one kind in many sessions, shown as one line."""

    kind: str
    sessions: int
    severity_rank: int  # of the most severe of them (SEVERITY_RANK)
    is_burst: bool = True


class DriftAlertQuerySet(ProjectScopedQuerySet):
    project_path = "session__project"

    def unresolved(self) -> DriftAlertQuerySet:
        return self.filter(UNRESOLVED)

    def open(self) -> DriftAlertQuerySet:
        return self.filter(state=AlertState.OPEN)

    def open_kinds_at_least(self, sessions: int) -> dict[str, AlertBurst]:
        """The kinds that `sessions` or more sessions have an open alert of, with how many and the most severe:
        a burst the overview shows as one line rather than one row a session (a session has one open alert of a
        kind), placed among the sessions by that severity."""
        counts = (
            self.open()
            .order_by()
            .values("kind")
            .annotate(n=models.Count("pk"), rank=models.Max(SEVERITY_RANK))
            .filter(n__gte=sessions)
        )
        return {row["kind"]: AlertBurst(row["kind"], row["n"], row["rank"]) for row in counts.order_by("-n", "kind")}

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
    kind = models.CharField(max_length=30, choices=RegisteredChoices(DETECTORS.choices))
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
