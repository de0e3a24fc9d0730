"""Model fields that store any Python text and any JSON faithfully, whatever the database refuses.

PostgreSQL's text and jsonb cannot hold U+0000, and jsonb keeps numbers as decimals: 1e300 comes back
as an integer and -0.0 as 0. Agents produce both (binary tool output, big ids, floats), so these fields
escape them reversibly on the way in and undo it on the way out. The escape character is a private-use
code point that is itself escaped, so every string round-trips:

    U+E000 → U+E000 "e"        U+0000 → U+E000 "0"        a float jsonb would alter → U+E000 "f" repr

Lookups escape their value the same way (Django prepares a lookup's value with the field), so
`filter(metadata__key="a\\x00b")` finds what was stored.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

from django.db import models

ESC = "\ue000"
_UNESCAPE = re.compile(ESC + "([e0])")
_CHARS = {"e": ESC, "0": "\x00"}
_FLOAT = ESC + "f"
_ESC_ASCII = "\\ue000"  # how JSON text written with ensure_ascii (SQLite's column) spells it


def escape_text(text: str) -> str:
    if "\x00" not in text and ESC not in text:
        return text
    return text.replace(ESC, ESC + "e").replace("\x00", ESC + "0")


def unescape_text(text: str) -> str:
    if ESC not in text:
        return text
    return _UNESCAPE.sub(lambda match: _CHARS[match.group(1)], text)


def _altered_by_jsonb(number: float) -> bool:
    """jsonb prints 1e+16 and beyond without an exponent or point (read back as int), and drops -0.0's sign."""
    return abs(number) >= 1e16 or (number == 0.0 and math.copysign(1.0, number) < 0)


def escape_json(value: Any) -> Any:
    kind = type(value)
    if kind is str:
        return escape_text(value)
    if kind is dict:
        return {escape_text(key) if type(key) is str else key: escape_json(item) for key, item in value.items()}
    if kind is list or kind is tuple:
        return [escape_json(item) for item in value]
    if kind is float and _altered_by_jsonb(value):
        return _FLOAT + repr(value)
    return value


def unescape_json(value: Any) -> Any:
    kind = type(value)
    if kind is str:
        if value.startswith(_FLOAT):
            try:
                return float(value[len(_FLOAT) :])
            except ValueError:  # text written before these fields existed
                pass
        return unescape_text(value)
    if kind is dict:
        return {unescape_text(key): unescape_json(item) for key, item in value.items()}
    if kind is list:
        return [unescape_json(item) for item in value]
    return value


def _needs_escape(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is str:
            if "\x00" in item or ESC in item:
                return True
        elif kind is dict:
            for key, child in item.items():
                if type(key) is str and ("\x00" in key or ESC in key):
                    return True
                stack.append(child)
        elif kind is list or kind is tuple:
            stack.extend(item)
        elif kind is float and _altered_by_jsonb(item):
            return True
    return False


if TYPE_CHECKING:  # Django's fields take type arguments in the stubs only (no django_stubs_ext at run time)
    from django.db.models.expressions import Combinable

    _CharField = models.CharField[str | int | Combinable, str]
    _TextField = models.TextField[str | Combinable, str]
else:
    _CharField, _TextField = models.CharField, models.TextField


class _EscapedText:
    def get_prep_value(self, value: Any) -> Any:
        # a mixin placed before a text field (see below): super() is the field, which mypy cannot see from here
        value = super().get_prep_value(value)  # type: ignore[misc]
        return escape_text(value) if type(value) is str else value

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        return unescape_text(value) if type(value) is str else value


class SafeCharField(_EscapedText, _CharField):
    """`max_length` counts the text as given; the column leaves room for its escapes."""

    def db_type_parameters(self, connection: Any) -> Any:
        parameters = super().db_type_parameters(connection)
        if parameters.get("max_length"):
            parameters["max_length"] = parameters["max_length"] * 2
        return parameters


class SafeTextField(_EscapedText, _TextField):
    pass


class SafeJSONField(models.JSONField):
    def get_prep_value(self, value: Any) -> Any:
        value = super().get_prep_value(value)
        return escape_json(value) if _needs_escape(value) else value

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        escaped = type(value) is not str or ESC in value or _ESC_ASCII in value
        value = super().from_db_value(value, expression, connection)
        return unescape_json(value) if escaped else value
