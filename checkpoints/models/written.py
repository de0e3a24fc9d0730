"""Model rows read by statements written out, for the few reads every API request makes (its token, its session).

Django's ORM compiles a query anew each time it runs it, and `Model.objects.raw()` works out its columns, their
converters and the model's init order anew for each row set: for a statement that costs the database ~0.1 ms, the
ORM spent 1–2 ms of the web process's CPU (docs/benchmarks.md, "Where `state_patch` over HTTP goes"). `Columns`
spells a model's concrete columns once and turns a row's values into an instance as the ORM does: each field's
and the backend's converters applied (escaped text, JSON, dates), then `Model.from_db`, so the instance is the
one a queryset would have returned (deferred fields none, `_state` from the database).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper

M = TypeVar("M", bound=models.Model)
Converter = Callable[[Any, Any, BaseDatabaseWrapper], Any]


class Columns(Generic[M]):
    """Every concrete column of `model` under the table alias `alias`, in a SELECT list, and its rows as instances."""

    def __init__(self, model: type[M], alias: str) -> None:
        self.model, self.alias = model, alias
        self.fields = list(model._meta.concrete_fields)
        self.attnames = [field.attname for field in self.fields]
        self.width = len(self.fields)
        self._converters: dict[str, list[tuple[int, list[Converter], Any]]] = {}  # by database alias
        self._sql: dict[str, str] = {}

    def sql(self, connection: BaseDatabaseWrapper) -> str:
        """`alias.column, …` for a SELECT list."""
        found = self._sql.get(connection.alias)
        if found is None:
            quote = connection.ops.quote_name
            found = ", ".join(f"{quote(self.alias)}.{quote(field.column or field.attname)}" for field in self.fields)
            self._sql[connection.alias] = found
        return found

    def build(self, connection: BaseDatabaseWrapper, values: Sequence[Any]) -> M:
        """The instance of a row's values (this model's `width` of them, in `sql`'s order), as the ORM builds it."""
        row = list(values)
        for index, converters, expression in self._converters_for(connection):
            value = row[index]
            for converter in converters:
                value = converter(value, expression, connection)
            row[index] = value
        return self.model.from_db(connection.alias, self.attnames, row)

    def _converters_for(self, connection: BaseDatabaseWrapper) -> list[tuple[int, list[Converter], Any]]:
        """What the ORM's compiler applies to each column (`SQLCompiler.get_converters`), worked out once."""
        found = self._converters.get(connection.alias)
        if found is None:
            found = []
            for index, field in enumerate(self.fields):
                expression = field.get_col(self.alias)
                converters = connection.ops.get_db_converters(expression) + expression.get_db_converters(connection)
                if converters:
                    found.append((index, converters, expression))
            self._converters[connection.alias] = found
        return found
