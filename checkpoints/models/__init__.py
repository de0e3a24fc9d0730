"""The domain: projects, agent sessions, immutable checkpoints and the content-addressed chunks behind them,
in one module per part (the floors below are in that order: a later module may import an earlier one, never the
reverse). Callers import from `checkpoints.models`; Django finds every model through this package."""

from .audit import (
    AuditEvent as AuditEvent,
)
from .audit import (
    AuditEventQuerySet as AuditEventQuerySet,
)
from .langgraph import (
    InterruptAnswer as InterruptAnswer,
)
from .langgraph import (
    LangGraphCheckpoint as LangGraphCheckpoint,
)
from .langgraph import (
    LangGraphTombstone as LangGraphTombstone,
)
from .langgraph import (
    LangGraphWrites as LangGraphWrites,
)
from .langgraph import (
    checkpoint_id_order as checkpoint_id_order,
)
from .operations import (
    ImportJob as ImportJob,
)
from .operations import (
    ImportJobQuerySet as ImportJobQuerySet,
)
from .operations import (
    ImportJobStatus as ImportJobStatus,
)
from .operations import (
    JobLock as JobLock,
)
from .operations import (
    JobRun as JobRun,
)
from .operations import (
    JobRunQuerySet as JobRunQuerySet,
)
from .operations import (
    JobRunStatus as JobRunStatus,
)
from .operations import (
    Recovery as Recovery,
)
from .operations import (
    RecoveryAction as RecoveryAction,
)
from .operations import (
    RecoveryItem as RecoveryItem,
)
from .operations import (
    RecoveryQuerySet as RecoveryQuerySet,
)
from .operations import (
    RecoveryResult as RecoveryResult,
)
from .operations import (
    RecoveryRule as RecoveryRule,
)
from .operations import (
    RecoveryState as RecoveryState,
)
from .operations import (
    RetentionPolicy as RetentionPolicy,
)
from .operations import (
    RetentionScope as RetentionScope,
)
from .operations import (
    WatchedSource as WatchedSource,
)
from .outbox import (
    Channel as Channel,
)
from .outbox import (
    Delivery as Delivery,
)
from .outbox import (
    DeliveryQuerySet as DeliveryQuerySet,
)
from .outbox import (
    DeliveryStatus as DeliveryStatus,
)
from .outbox import (
    Event as Event,
)
from .outbox import (
    EventType as EventType,
)
from .outbox import (
    NotificationRule as NotificationRule,
)
from .outbox import (
    WebhookEndpoint as WebhookEndpoint,
)
from .phases import (
    AgentOutput as AgentOutput,
)
from .phases import (
    FeedbackAction as FeedbackAction,
)
from .phases import (
    Phase as Phase,
)
from .phases import (
    PhaseFeedback as PhaseFeedback,
)
from .phases import (
    PhaseQuerySet as PhaseQuerySet,
)
from .phases import (
    PhaseStatus as PhaseStatus,
)
from .projects import (
    DEFAULT_SCOPES as DEFAULT_SCOPES,
)
from .projects import (
    DEFAULT_TYPE_ALLOWLIST as DEFAULT_TYPE_ALLOWLIST,
)
from .projects import (
    SCOPE_GRANTED_BY as SCOPE_GRANTED_BY,
)
from .projects import (
    ApiToken as ApiToken,
)
from .projects import (
    ApiTokenQuerySet as ApiTokenQuerySet,
)
from .projects import (
    Project as Project,
)
from .projects import (
    ProjectMembership as ProjectMembership,
)
from .projects import (
    ProjectQuerySet as ProjectQuerySet,
)
from .projects import (
    ProjectRole as ProjectRole,
)
from .projects import (
    ProjectScopedQuerySet as ProjectScopedQuerySet,
)
from .projects import (
    Scope as Scope,
)
from .projects import (
    allows as allows,
)
from .projects import (
    default_type_allowlist as default_type_allowlist,
)
from .projects import (
    refused_types as refused_types,
)
from .projects import (
    tokens_updated as tokens_updated,
)
from .projects import (
    type_allowed as type_allowed,
)
from .purges import (
    Purge as Purge,
)
from .purges import (
    PurgeState as PurgeState,
)
from .purges import (
    PurgeValue as PurgeValue,
)
from .secrets import (
    FindingClosed as FindingClosed,
)
from .secrets import (
    SecretFinding as SecretFinding,
)
from .secrets import (
    SecretFindingQuerySet as SecretFindingQuerySet,
)
from .sessions import (
    ROLLUP_BLOCK as ROLLUP_BLOCK,
)
from .sessions import (
    SEVERITY_RANK as SEVERITY_RANK,
)
from .sessions import (
    SEVERITY_RANKS as SEVERITY_RANKS,
)
from .sessions import (
    TROUBLE as TROUBLE,
)
from .sessions import (
    UNRESOLVED as UNRESOLVED,
)
from .sessions import (
    AgentSession as AgentSession,
)
from .sessions import (
    AgentSessionQuerySet as AgentSessionQuerySet,
)
from .sessions import (
    AlertKind as AlertKind,
)
from .sessions import (
    AlertSeverity as AlertSeverity,
)
from .sessions import (
    AlertState as AlertState,
)
from .sessions import (
    Checkpoint as Checkpoint,
)
from .sessions import (
    CheckpointKind as CheckpointKind,
)
from .sessions import (
    CheckpointQuerySet as CheckpointQuerySet,
)
from .sessions import (
    CheckpointStatus as CheckpointStatus,
)
from .sessions import (
    Chunk as Chunk,
)
from .sessions import (
    DriftAlert as DriftAlert,
)
from .sessions import (
    DriftAlertQuerySet as DriftAlertQuerySet,
)
from .sessions import (
    SessionCount as SessionCount,
)
from .sessions import (
    SessionRollup as SessionRollup,
)
from .sessions import (
    SessionStatus as SessionStatus,
)
from .sessions import (
    SourceFormat as SourceFormat,
)
from .sessions import (
    TalliedField as TalliedField,
)
from .sessions import (
    name_contains as name_contains,
)
