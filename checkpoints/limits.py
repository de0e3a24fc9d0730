"""The ranges every stored value must fit, shared by the API's schemas, the services and the constraints.

They are the columns' own limits (PostgreSQL's integer and bigint) and a time range that PostgreSQL,
psycopg and Python's datetime all represent whatever the offset: a value outside them is refused at
the boundary with a message naming the field, never left to fail in the database.
"""

from __future__ import annotations

from datetime import UTC, datetime

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MAX = 2**63 - 1
COST_MAX = 999_999.999_999  # Phase.cost: 12 digits, 6 after the point

EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9000, 1, 1, tzinfo=UTC)
TIME_RANGE = "between 1970-01-01 and 9000-01-01 (UTC)"


class OutOfRange(ValueError):
    pass


def as_utc(moment: datetime) -> datetime:
    """The moment in UTC (a naive one is taken as UTC, as agents' clocks are), or OutOfRange."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        moment = moment.astimezone(UTC)
    except OverflowError:
        raise OutOfRange(f"must be {TIME_RANGE}") from None
    if not EARLIEST <= moment < LATEST:
        raise OutOfRange(f"must be {TIME_RANGE}")
    return moment


def check_int(value: int | None, *, low: int = INT32_MIN, high: int = INT32_MAX) -> None:
    if value is not None and not low <= value <= high:
        raise OutOfRange(f"must be between {low} and {high}")
