"""Keyset pagination: a page costs the same however deep it is, unlike OFFSET.

The session list and the audit log page here, by one column and the id. The alert list keeps its own
(`DriftAlertQuerySet.most_severe_first`): its order has three keys, the first an expression (the severity rank,
a CASE written as in the `alert_unresolved_list` index so PostgreSQL matches the two), compared as one row value
`(rank, opened_at, id) < cursor` that starts a range on that three-column index. This module's two-key cursor and
its `column >= value AND (column > value OR …)` condition would need a third key and a field for the rank.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db.models import Model, Q, QuerySet

PAGE_SIZE = 25


@dataclass
class KeysetPage:
    rows: list[Any]
    next_cursor: str | None
    prev_cursor: str | None


def _cursor(row: Model, column: str) -> str:
    value = getattr(row, column)
    raw = json.dumps([value.isoformat() if hasattr(value, "isoformat") else value, row.pk])
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _storable(value: Any) -> Any:
    """A cursor's value as the database can compare it: times in UTC (an offset of +23:59 is Python's, not
    PostgreSQL's; year 1 at +14:00 is before year 1 in UTC and raises), text without NUL."""
    if isinstance(value, datetime):
        return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, str) and "\x00" in value:
        raise ValueError("NUL in a cursor")
    return value


def _beyond(queryset: QuerySet[Any], order: tuple[str, str], cursor: str, *, backwards: bool) -> QuerySet[Any]:
    """Rows after the cursor's row in `order` (before it when `backwards`); a bad cursor raises ValueError."""
    column = order[0].lstrip("-")
    descending = order[0].startswith("-")
    try:
        value, pk = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        value = _storable(queryset.model._meta.get_field(column).to_python(value))
        pk = int(pk)
        if not 0 < pk < 2**63:
            raise ValueError(pk)
    except Exception as exc:  # any garbage in the URL: start from the first page
        raise ValueError(cursor) from exc
    op = "lt" if descending != backwards else "gt"
    # The first condition repeats what the OR implies: it is the one an index range can start from, so a deep
    # page reads its own rows instead of every row before the cursor.
    return queryset.filter(**{f"{column}__{op}e": value}).filter(
        Q(**{f"{column}__{op}": value}) | Q(**{column: value, f"pk__{op}": pk})
    )


def keyset_page(
    queryset: QuerySet[Any], order: tuple[str, str], *, after: str = "", before: str = "", size: int = PAGE_SIZE
) -> KeysetPage:
    """One page of `queryset` in `order` (a column and the pk), starting after (or ending before) a cursor.

    WHERE (column, pk) beyond the cursor's row, LIMIT size + 1: the cost of a page does not depend on how
    deep it is, unlike OFFSET.
    """
    column = order[0].lstrip("-")
    reverse = tuple(name[1:] if name.startswith("-") else f"-{name}" for name in order)
    try:
        if before:
            rows = list(_beyond(queryset, order, before, backwards=True).order_by(*reverse)[: size + 1])
            more_before = len(rows) > size
            rows = rows[:size][::-1]
            return KeysetPage(
                rows,
                next_cursor=_cursor(rows[-1], column) if rows else None,
                prev_cursor=_cursor(rows[0], column) if more_before else None,
            )
        if after:
            queryset = _beyond(queryset, order, after, backwards=False)
    except ValueError:
        return keyset_page(queryset, order, size=size)
    rows = list(queryset.order_by(*order)[: size + 1])
    more_after = len(rows) > size
    rows = rows[:size]
    return KeysetPage(
        rows,
        next_cursor=_cursor(rows[-1], column) if more_after else None,
        prev_cursor=_cursor(rows[0], column) if after and rows else None,
    )
