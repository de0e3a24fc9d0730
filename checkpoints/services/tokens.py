"""API tokens: created with their audit row, checked on each request, revoked."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from ..audit import Actor, InvalidInput, record_audit
from ..models import DEFAULT_SCOPES, ApiToken, Project, Scope

UNNAMED = Actor.system("create_api_token")  # who created a token when the caller names no one


@transaction.atomic
def create_api_token(
    project: Project,
    *,
    name: str,
    read_only: bool = False,
    scopes: Iterable[str] | None = None,
    expires_in: timedelta | None = None,
    expires_at: datetime | None = None,
    actor: Actor = UNNAMED,
    now: datetime | None = None,
) -> tuple[ApiToken, str]:
    """Return the token row and its secret; the secret is shown once and only its hash is kept. Always audited,
    in the token's transaction (by the system when no one is named). `scopes` names them (Scope); without it a
    token reads and writes, and `read_only` is `scopes=["read"]`. It expires `expires_in` from now or at
    `expires_at` (not both), which must be later than now: a token born expired is a mistake, not a token."""
    now = now or timezone.now()
    if expires_in is not None and expires_at is not None:
        raise InvalidInput("expires_at", "give expires_in or expires_at, not both")
    if expires_in is not None:
        expires_at = now + expires_in
    if expires_at is not None and expires_at <= now:
        raise InvalidInput("expires_at", f"{expires_at:%Y-%m-%d %H:%M} UTC is not in the future")
    chosen = checked_scopes(scopes) if scopes is not None else [Scope.READ.value] if read_only else DEFAULT_SCOPES
    prefix = secrets.token_hex(4)
    secret = f"cpk_{prefix}_{secrets.token_urlsafe(32)}"
    token = ApiToken.objects.create(
        project=project,
        name=name,
        prefix=prefix,
        token_hash=hash_token(secret),
        scopes=chosen,
        created_at=now,
        expires_at=expires_at,
    )
    expires = token.expires_at.isoformat() if token.expires_at else None
    record_audit(
        actor,
        "token_created",
        project=project,
        target=str(token),
        details={"scopes": token.scopes, "expires_at": expires},
    )
    return token, secret


@transaction.atomic
def set_token_scopes(token: ApiToken, *, scopes: Iterable[str], actor: Actor) -> bool:
    """Give the token exactly these scopes; False when it had them already (nothing written)."""
    chosen = checked_scopes(scopes)
    if chosen == token.scopes:
        return False
    before, token.scopes = token.scopes, chosen
    token.save(update_fields=["scopes"])
    record_audit(
        actor,
        "token_scopes_changed",
        project=token.project,
        target=str(token),
        details={"before": before, "after": chosen},
    )
    return True


def checked_scopes(scopes: Iterable[str]) -> list[str]:
    """The scopes in the registry's order, each once; an unknown one is InvalidInput naming the known ones."""
    wanted = set(scopes)
    if unknown := sorted(wanted - set(Scope.values)):
        known = ", ".join(Scope.values)
        raise InvalidInput("scopes", f"unknown scope{'s' * (len(unknown) > 1)} {', '.join(unknown)}; known: {known}")
    return [scope for scope in Scope.values if scope in wanted]


def hash_token(secret: str) -> str:
    # Tokens carry 256 random bits: a fast hash is enough, as for GitHub's tokens.
    return hashlib.sha256(secret.encode()).hexdigest()


def authenticate_token(secret: str, *, now: datetime | None = None) -> ApiToken | None:
    now = now or timezone.now()
    token = ApiToken.objects.usable(now=now).select_related("project").filter(token_hash=hash_token(secret)).first()
    if token is not None and (token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60):
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token


@transaction.atomic
def revoke_token(token: ApiToken, *, actor: Actor, now: datetime | None = None) -> bool:
    """Revoke an API token; returns False when it was revoked already."""
    now = now or timezone.now()
    changed = ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=now)
    if changed:
        token.revoked_at = now
        record_audit(actor, "revoke_token", project=token.project, target=str(token), now=now)
    return bool(changed)
