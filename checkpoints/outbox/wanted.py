"""The event types a project's live webhook endpoints and enabled notification rules want, cached.

`events` reads it before building an event; `webhooks` and `notifications` forget it when an endpoint or a rule
changes. It sits below all three so that none of them imports another to reach it.
"""

from __future__ import annotations

import logging

from django.core.cache import cache
from django.db import transaction
from redis.exceptions import RedisError

from ..models import NotificationRule, WebhookEndpoint

logger = logging.getLogger(__name__)

WANTED_CACHE_SECONDS = 10
# What Django's Redis cache (redis-py) and its file cache raise when they cannot be reached or written.
CACHE_ERRORS = (RedisError, OSError)


def _wanted_key(project_id: int) -> str:
    return f"events:wanted:{project_id}"


def _wanted_in_database(project_id: int) -> list[str]:
    endpoints = WebhookEndpoint.objects.filter(project_id=project_id, deleted_at__isnull=True)
    rules = NotificationRule.objects.filter(project_id=project_id, enabled=True)
    lists = [*endpoints.values_list("events", flat=True), *rules.values_list("events", flat=True)]
    return sorted({type for types in lists for type in types})


def wanted_types(project_id: int) -> frozenset[str]:
    """The event types the live endpoints and enabled rules of a project want (cached; read from the database
    when the cache cannot be reached, never guessed)."""
    key = _wanted_key(project_id)
    try:
        wanted = cache.get(key)
    except CACHE_ERRORS as exc:
        logger.warning("shared cache unreachable, wanted event types read from the database: %s", exc)
        return frozenset(_wanted_in_database(project_id))
    if wanted is None:
        wanted = _wanted_in_database(project_id)
        _forget_or_set(key, wanted)
    return frozenset(wanted)


def _forget_or_set(key: str, wanted: list[str] | None = None) -> None:
    """Write (or, without `wanted`, delete) a cached answer; a cache that fails is logged, not raised: the change
    it serves is already decided in the database."""
    try:
        if wanted is None:
            cache.delete(key)
        else:
            cache.set(key, wanted, WANTED_CACHE_SECONDS)
    except CACHE_ERRORS as exc:
        logger.warning("shared cache unreachable, %s not %s: %s", key, "forgotten" if wanted is None else "set", exc)


def forget_wanted(project_id: int) -> None:
    """An endpoint or rule of the project changed: the next event reads what is wanted afresh (also once the
    change commits, in case a concurrent event cached the old answer meanwhile)."""
    key = _wanted_key(project_id)
    _forget_or_set(key)
    transaction.on_commit(lambda: _forget_or_set(key))
