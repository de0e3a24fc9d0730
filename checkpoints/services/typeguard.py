"""The types a project's LangGraph values may name: what the API, the importer and exports let through.

The server never rebuilds a typed value, but LangGraph savers on agents' hosts do, importing and calling the
callable each msgpack record names. A value naming one outside the project's allow-list (Project.type_allowlist)
is refused where it would be stored, and left out of what an export writes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..models import Project, refused_types
from .audit import InvalidInput

WHERE_TO_ALLOW = "a project operator can add it under Project settings in the console (or in the admin)"


class TypeNotAllowed(InvalidInput):
    """A typed value names a callable the project's allow-list does not hold (422 at the API)."""

    def __init__(self, field: str, name: str, project: Project) -> None:
        super().__init__(
            field, f"names the type {name[:300]}, which project {project.slug} does not allow: {WHERE_TO_ALLOW}"
        )
        self.type_name = name


def check_types(project: Project, fields: Iterable[tuple[str, Any]]) -> None:
    """Raise TypeNotAllowed for the first callable outside the project's allow-list in any of the named values."""
    for field, value in fields:
        for where, name in refused_types(project.type_allowlist, value, field):
            raise TypeNotAllowed(where, name, project)
