"""Every change to data, by subdomain; each operation is one transaction that records its AuditEvent in it.

Views, the API, admin actions, commands and Celery tasks call these and never write models or audit rows
themselves. What a checkpoint, a session or an alert can do is the list below.
"""

from __future__ import annotations

from ..audit import (
    Actor,
    BaseMoved,
    CheckpointError,
    IdempotencyConflict,
    InvalidInput,
    InvalidState,
    NothingToUndo,
    audit_event,
    record_audit,
    request_job_run,
)
from .alerts import acknowledge_alert, resolve_alert
from .checkpoints import (
    CheckpointInput,
    check_json_field,
    checkpoint_differences,
    create_checkpoint,
    get_or_create_project,
    ingest_checkpoints,
    record_live_state,
    upsert_session,
)
from .recovery import (
    EditPreview,
    RestorePreview,
    StateEdit,
    check_editable,
    edit_state,
    fork_session,
    pin_checkpoint,
    preview_edit,
    restore_checkpoint,
    restore_preview,
    undo_restore,
)
from .tokens import (
    authenticate_token,
    create_api_token,
    forget_tokens,
    hash_token,
    revoke_token,
    set_token_scopes,
    token_remembered,
)

__all__ = [
    "Actor",
    "BaseMoved",
    "CheckpointError",
    "CheckpointInput",
    "EditPreview",
    "IdempotencyConflict",
    "InvalidInput",
    "InvalidState",
    "NothingToUndo",
    "RestorePreview",
    "StateEdit",
    "acknowledge_alert",
    "audit_event",
    "authenticate_token",
    "check_editable",
    "check_json_field",
    "checkpoint_differences",
    "create_api_token",
    "create_checkpoint",
    "edit_state",
    "forget_tokens",
    "fork_session",
    "get_or_create_project",
    "hash_token",
    "ingest_checkpoints",
    "pin_checkpoint",
    "preview_edit",
    "record_audit",
    "record_live_state",
    "request_job_run",
    "resolve_alert",
    "restore_checkpoint",
    "restore_preview",
    "revoke_token",
    "set_token_scopes",
    "token_remembered",
    "undo_restore",
    "upsert_session",
]
