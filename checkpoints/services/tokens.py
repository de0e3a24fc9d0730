"""API tokens: created with their audit row, checked on each request, revoked."""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from ..models import ApiToken, Project
from .audit import Actor, record_audit

UNNAMED = Actor.system("create_api_token")  # who created a token when the caller names no one


@transaction.atomic
def create_api_token(
    project: Project,
    *,
    name: str,
    read_only: bool = False,
    expires_in: timedelta | None = None,
    actor: Actor = UNNAMED,
    now: datetime | None = None,
) -> tuple[ApiToken, str]:
    """Return the token row and its secret; the secret is shown once and only its hash is kept. Always audited,
    in the token's transaction (by the system when no one is named)."""
    now = now or timezone.now()
    prefix = secrets.token_hex(4)
    secret = f"cpk_{prefix}_{secrets.token_urlsafe(32)}"
    token = ApiToken.objects.create(
        project=project,
        name=name,
        prefix=prefix,
        token_hash=hash_token(secret),
        scopes=["read"] if read_only else ["read", "write"],
        created_at=now,
        expires_at=now + expires_in if expires_in else None,
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
