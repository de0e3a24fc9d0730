"""API tokens: created with their audit row, checked on each request, revoked."""

from __future__ import annotations

import copy
import hashlib
import secrets
import threading
import time
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models.signals import post_delete, post_save
from django.utils import timezone

from ..audit import Actor, InvalidInput, record_audit
from ..models import DEFAULT_SCOPES, SCOPE_GRANTED_BY, ApiToken, Project, Scope, tokens_updated
from ..models.written import Columns

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
    if actor.user is not None:  # a person gives a token only what they may do themselves in its project
        refused = [scope for scope in chosen if not actor.user.has_perm(SCOPE_GRANTED_BY[scope], project)]
        if refused:
            raise InvalidInput(
                "scopes", f"your role in {project.slug} does not let you give a token {', '.join(refused)}"
            )
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


# A process keeps each token it looked up, with its project, for REMEMBER_SECONDS: an agent's run sends a request
# every few ms (a LangGraph step: a put and a put_writes), and each would otherwise start with the same query.
# Expiry is checked on every request. Any change to a token through the ORM (revoking, scopes, save, update,
# delete) and any save or delete of a project (the type allow-list) forgets them all in the process that made it,
# at once and again when its transaction commits; other processes (gunicorn's other workers) see it within
# REMEMBER_SECONDS. On PostgreSQL the API looks the token up anyway: that query is the connection's health check.
REMEMBER_SECONDS = 1.0
REMEMBER_MAX = 1000  # tokens; past it the process starts afresh (unknown secrets are never kept)
_remembered: dict[str, tuple[float, ApiToken]] = {}  # token hash → (time.monotonic() of the lookup, the row)
_remembered_lock = threading.Lock()


def authenticate_token(secret: str, *, now: datetime | None = None, recall: bool = True) -> ApiToken | None:
    """The usable (neither revoked nor expired) token of `secret`, with its project; its own copy each call.
    `recall=False` looks it up whatever the process remembers (the API's lookup that is also a health check)."""
    now = now or timezone.now()
    digest = hash_token(secret)
    token = _recalled(digest) if recall else None
    if token is None:
        token = _by_hash(digest)
        if token is None:
            return None
        if _usable(token, now) and (token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60):
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
            token.last_used_at = now
        _remember(digest, token)
    if not _usable(token, now):
        return None
    mine = copy.copy(token)  # the request's own: gunicorn's threads share what is remembered
    mine.project = copy.copy(token.project)
    return mine


_TOKEN, _PROJECT = Columns(ApiToken, "t"), Columns(Project, "p")


def _by_hash(digest: str) -> ApiToken | None:
    """The token whose hash is `digest`, with its project: what `select_related("project")` reads, in one
    statement written out (every API request on PostgreSQL runs it; the ORM spent ~1 ms compiling it each time)."""
    quote = connection.ops.quote_name
    sql = (
        f"SELECT {_TOKEN.sql(connection)}, {_PROJECT.sql(connection)} FROM {quote(ApiToken._meta.db_table)} t"  # noqa: S608 - quoted names; the hash is a parameter
        f" INNER JOIN {quote(Project._meta.db_table)} p ON p.{quote('id')} = t.{quote('project_id')}"
        f" WHERE t.{quote('token_hash')} = %s"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [digest])
        row = cursor.fetchone()
    if row is None:
        return None
    token = _TOKEN.build(connection, row[: _TOKEN.width])
    token.project = _PROJECT.build(connection, row[_TOKEN.width :])
    return token


def _usable(token: ApiToken, now: datetime) -> bool:
    return token.revoked_at is None and (token.expires_at is None or token.expires_at > now)


def token_remembered(secret: str) -> bool:
    """Whether `authenticate_token` answers `secret` without a query."""
    return _recalled(hash_token(secret)) is not None


def forget_tokens() -> None:
    """Forget every remembered token, now and when the current transaction commits (a lookup by another thread
    meanwhile reads the rows as they were before it)."""
    with _remembered_lock:
        _remembered.clear()
    transaction.on_commit(_forget_now)


def _forget_now() -> None:
    with _remembered_lock:
        _remembered.clear()


def _recalled(digest: str) -> ApiToken | None:
    entry = _remembered.get(digest)
    if entry is None or time.monotonic() - entry[0] >= REMEMBER_SECONDS:
        return None
    return entry[1]


def _remember(digest: str, token: ApiToken) -> None:
    with _remembered_lock:
        if len(_remembered) >= REMEMBER_MAX:
            _remembered.clear()
        _remembered[digest] = (time.monotonic(), token)


def _forget_on_change(sender: type, **kwargs: Any) -> None:
    forget_tokens()


for _model in (ApiToken, Project):
    post_save.connect(_forget_on_change, sender=_model, dispatch_uid=f"forget-tokens-save-{_model.__name__}")
    post_delete.connect(_forget_on_change, sender=_model, dispatch_uid=f"forget-tokens-delete-{_model.__name__}")
tokens_updated.connect(_forget_on_change, dispatch_uid="forget-tokens-update")


@transaction.atomic
def revoke_token(token: ApiToken, *, actor: Actor, now: datetime | None = None) -> bool:
    """Revoke an API token; returns False when it was revoked already."""
    now = now or timezone.now()
    changed = ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=now)  # forgets
    if changed:
        token.revoked_at = now
        record_audit(actor, "revoke_token", project=token.project, target=str(token), now=now)
    return bool(changed)
