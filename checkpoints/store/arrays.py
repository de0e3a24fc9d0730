"""Array parameters on PostgreSQL: bulk inserts with each column's values as one array (`INSERT … SELECT * FROM
unnest(…)`), and a batch's ids as one value (`ids`).

Django's bulk_create compiles a placeholder per value and psycopg parses a statement that long anew every time; one
array a column took a third of the time for 500 checkpoint rows (166–190 ms against 524–587 ms, load 8). The
statement's text depends only on the model and its columns, so it is built once a process.

A single row (a create's checkpoint, its chunk) goes as a VALUES list of its values instead (`_statement`).

The arrays travel in PostgreSQL's binary format, bound on the server (`cursor`): Django's cursors bind on the client,
and quoting an array means psycopg writing each element out as text in Python, then the server parsing it back (a
bytea element as hex). For a batch's ~500 chunks that was 12.6 ms of quoting against 2.2 ms dumping them binary;
for 50 checkpoint rows 2.7 against 1.4 ms.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

import psycopg
from django.db import connection, connections, models
from django.db.backends.utils import CursorWrapper
from django.db.models import Field, Model
from django.db.models.expressions import RawSQL
from django_prometheus.db.common import DatabaseWrapperMixin, ExportingCursorWrapper

_ARRAY_TYPE = re.compile(r"\(\d+\)")  # varchar(400)[] → varchar[]: the column checks the length on insert


def insert(model: type[Model], rows: list[Any], *, with_ids: bool = True, ignore_conflicts: bool = False) -> None:
    """Insert `rows` of `model` in one statement; the values are prepared by each field as bulk_create prepares them
    (the Safe* fields' escapes included). Without `with_ids` the ids come from the table's sequence and are set on
    the rows in their order; with `ignore_conflicts` a row whose key is stored already is skipped."""
    sql, arrays = statement(model, rows, with_ids=with_ids, ignore_conflicts=ignore_conflicts)
    with cursor() as binding:
        binding.execute(sql, arrays)
        ids = None if with_ids or ignore_conflicts else [pk for (pk,) in binding.fetchall()]
    for index, row in enumerate(rows):
        if ids is not None:
            row.pk = ids[index]
        row._state.adding, row._state.db = False, connection.alias


def ids(values: Collection[int]) -> list[int] | RawSQL:
    """`values` (ids) for an `__in` lookup: on PostgreSQL one parameter, the array written out as text once (the
    batch's statements quote, parse and plan one value instead of hundreds each, and psycopg would dump a list of
    ints element by element in Python for every statement naming it: 8 ms of a 500-row retention batch's 13
    statements), elsewhere the plain list."""
    if connection.vendor == "postgresql":
        return RawSQL("SELECT unnest(%s::bigint[])", ("{" + ",".join(map(str, map(int, values))) + "}",))
    return list(values)


@contextmanager
def cursor() -> Iterator[CursorWrapper]:
    """A cursor of the default connection that binds parameters on the server, which `statement`'s binary (`%b`)
    placeholders need; `%s` works in it too. Wrapped as Django wraps its own (errors translated, queries logged
    where Django logs them, counted for /metrics)."""
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    connection.validate_thread_sharing()
    raw = _binding_class(connection.alias)(connection.connection)
    wrapped = connection.make_debug_cursor(raw) if connection.queries_logged else connection.make_cursor(raw)
    with wrapped as opened:
        yield opened


@cache
def _binding_class(alias: str) -> type:
    """psycopg's own server-binding cursor (what Django's `ServerBindingCursor` adds to it is `callproc`, and
    importing Django's PostgreSQL backend would cost every SQLite process ~7 ms at start for nothing)."""
    database = connections[alias]
    if isinstance(database, DatabaseWrapperMixin):  # the settings' engines are django-prometheus' wrappers
        return ExportingCursorWrapper(psycopg.Cursor, alias, database.vendor)  # type: ignore[no-any-return]
    return psycopg.Cursor


def statement(
    model: type[Model], rows: list[Any], *, with_ids: bool = True, ignore_conflicts: bool = False
) -> tuple[str, list[Any]]:
    """`insert`'s statement and its parameters (an array a column, or one row's values), for a caller that sends it
    as part of another (a WITH) through `cursor()`."""
    single = len(rows) == 1
    sql, fields = _statement(model, with_ids, ignore_conflicts, single)
    # the connection itself, not Django's proxy to it: the proxy looks it up in a thread-local at every attribute a
    # field's preparation reads (~6 % of a batch's CPU, 160,000 values for 5,000 checkpoints)
    db = connections[connection.alias]
    columns = [_column(field, _plain_type(field), rows, db) for field in fields]
    return sql, [column[0] for column in columns] if single else columns


def _column(field: Field[Any, Any], plain: type | None, rows: list[Any], db: Any) -> list[Any]:
    """The field's values of `rows` as bulk_create prepares them. A value of a plain field (`_plain_type`) that is
    None or exactly of the field's Python type skips what its preparation would do to it: a bool or a text is taken
    as it is, an integer only goes through the backend's adaptation (`prepared=True`: `int(v)` is v)."""
    if plain is None:
        return [field.get_db_prep_save(field.pre_save(row, True), db) for row in rows]
    attname, values = field.attname, []
    for row in rows:
        value = getattr(row, attname)
        if value is None or (type(value) is plain and plain is not int):
            values.append(value)
        elif type(value) is plain:
            values.append(field.get_db_prep_value(value, db, prepared=True))
        else:
            values.append(field.get_db_prep_save(field.pre_save(row, True), db))
    return values


# Fields (of exactly these classes, not subclasses such as the Safe* fields, which escape) whose preparation of a
# value of exactly that Python type is `int(v)`, `bool(v)` or `str(v)` (v itself) before the backend's adaptation,
# and None's is None.
_PLAIN: dict[type, type] = {
    models.AutoField: int,
    models.BigAutoField: int,
    models.IntegerField: int,
    models.BigIntegerField: int,
    models.SmallIntegerField: int,
    models.PositiveIntegerField: int,
    models.PositiveBigIntegerField: int,
    models.PositiveSmallIntegerField: int,
    models.BooleanField: bool,
    models.CharField: str,
    models.TextField: str,
}


def _plain_type(field: Field[Any, Any]) -> type | None:
    target = field.target_field if type(field) is models.ForeignKey else field
    plain = _PLAIN.get(type(target))
    # a field whose pre_save is its own (auto_now, say) is never plain: pre_save is Field's, the attribute's value
    return plain if plain is not None and type(field).pre_save is Field.pre_save else None


@cache
def _statement(
    model: type[Model], with_ids: bool, ignore_conflicts: bool, single: bool = False
) -> tuple[str, list[Field[Any, Any]]]:
    """The INSERT of rows given as one array a column, or (`single`) of one row given as its values: a create's one
    row as one-element arrays went through psycopg's array dumper (Python) once a column, and the server unnested
    them (a checkpoint row's insert 0.96-1.51 ms against 0.59-0.95 ms as values, interleaved in one process)."""
    fields = [f for f in model._meta.concrete_fields if with_ids or not f.primary_key]
    quote = connection.ops.quote_name
    columns = ", ".join(quote(field.column or field.attname) for field in fields)
    # no length on the casts: an explicit cast to varchar(n) would cut a longer text, the column refuses it
    types = [_ARRAY_TYPE.sub("", field.db_type(connection) or "") for field in fields]
    table = quote(model._meta.db_table)
    if single:
        values = ", ".join(f"%b::{type_}" for type_ in types)
        sql = f"INSERT INTO {table} ({columns}) VALUES ({values})"  # noqa: S608 - quoted names and the columns' own types; values are parameters
    else:
        unnest = ", ".join(f"%b::{type_}[]" for type_ in types)
        sql = f"INSERT INTO {table} ({columns}) SELECT * FROM unnest({unnest})"  # noqa: S608 - quoted names and the columns' own types; values are parameters
    if ignore_conflicts:
        sql += " ON CONFLICT DO NOTHING"
    elif not with_ids:
        sql += f" RETURNING {quote(model._meta.pk.column or model._meta.pk.attname)}"
    return sql, fields
