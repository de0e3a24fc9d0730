"""Revealing a found secret to a person who holds `reveal_secrets` (docs/secrets.md#revealing-a-value): one finding
at a time, with a reason, audited — the audit row names the finding, never the value. Everyone else, and these
people too until they ask, see found values masked (`store.masking`)."""

from __future__ import annotations

from django.db import transaction

from .. import store
from ..audit import Actor, CheckpointError, InvalidInput, record_audit
from ..models import SecretFinding
from ..store import masking

REASON_MAX = 500


class ValueGone(CheckpointError):
    """The value is in no state the console still stores under the finding's checkpoint (retention deleted the
    checkpoint, the value was purged, or it came in a LangGraph task's writes)."""


@transaction.atomic
def reveal_secret(finding: SecretFinding, *, actor: Actor, reason: str) -> str:
    """The finding's value, read back from the checkpoint that added it (its state, then its metadata), with an
    audit row `reveal_secret` naming the finding and the reason. InvalidInput without a reason; ValueGone when
    the value cannot be read back (nothing is audited then: nothing was shown)."""
    reason = reason.strip()
    if not reason:
        raise InvalidInput("reason", "say why you need to see the value: the reason is kept in the audit log")
    if len(reason) > REASON_MAX:
        raise InvalidInput("reason", f"at most {REASON_MAX} characters")
    value = _value_of(finding)
    if value is None:
        raise ValueGone("the value is no longer in the checkpoint that added it")
    details = {
        "finding": finding.pk,
        "detector": finding.detector,
        "fingerprint": finding.fingerprint[:12],
        "path": finding.path,
    }
    record_audit(
        actor,
        "reveal_secret",
        project=finding.project,
        session=finding.session,
        checkpoint=finding.checkpoint,
        target=f"{finding.detector} at {finding.path}",
        reason=reason,
        details=details,
    )
    return value


def _value_of(finding: SecretFinding) -> str | None:
    checkpoint = finding.checkpoint
    if checkpoint is None:
        return None
    patterns = finding.project.secret_patterns
    for where in (store.load_shared(bytes(checkpoint.root)), checkpoint.metadata):
        value = masking.find_value(where, finding.fingerprint, patterns)
        if value is not None:
            return value
    return None
