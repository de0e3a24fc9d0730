"""The types a project's LangGraph values may name: what the API, the importer and exports let through.

The server never rebuilds a typed value, but LangGraph savers on agents' hosts do, importing and calling the
callable each msgpack record names. A value naming one outside the project's allow-list (Project.type_allowlist)
is refused where it would be stored, and left out of what an export writes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from checkpoint_console import typedjson

from ..audit import Actor, InvalidInput, record_audit
from ..models import AgentSession, Project, SourceFormat, refused_types
from ..store import lgtuples
from .checkpoints import check_json_field

WHERE_TO_ALLOW = "a project operator can add it under Project settings in the console (or in the admin)"


class TypeNotAllowed(InvalidInput):
    """A typed value names a callable the project's allow-list does not hold (422 at the API)."""

    def __init__(self, field: str, name: str, project: Project) -> None:
        super().__init__(
            field, f"names the type {name[:300]}, which project {project.slug} does not allow: {WHERE_TO_ALLOW}"
        )
        self.type_name = name


def check_typed(name: str, value: Any) -> None:
    """Typed JSON that LangGraph's serializer can read back: plain JSON whose `__lg__` tags are well formed."""
    check_json_field(name, value)
    try:
        typedjson.to_typed(value)
    except (ValueError, TypeError) as exc:
        raise InvalidInput(name, f"not typed JSON: {exc}") from None


def check_types(project: Project, fields: Iterable[tuple[str, Any]]) -> None:
    """Raise TypeNotAllowed for the first callable outside the project's allow-list in any of the named values."""
    for field, value in fields:
        for where, name in refused_types(project.type_allowlist, value, field):
            raise TypeNotAllowed(where, name, project)


# An entry: a dotted Python name (module.Name, a method as module.Name.method), a prefix ending in ".", or "pickle".
ENTRY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\.?")
ENTRY_MAX = 300
ENTRIES_MAX = 1000


def parse_allowlist(text: str) -> list[str]:
    """One entry a line (blank lines and surrounding spaces ignored, repeats dropped); InvalidInput naming the
    first bad line."""
    entries: dict[str, None] = {}  # ordered, and a repeat found in O(1): a pasted text may hold many lines
    for number, line in enumerate(text.splitlines(), start=1):
        entry = line.strip()
        if not entry or entry in entries:
            continue
        if len(entry) > ENTRY_MAX or not ENTRY.fullmatch(entry):
            raise InvalidInput(
                "type_allowlist",
                f"line {number} ({entry[:60]!r}) is not a dotted name such as myapp.state.Plan or a prefix "
                "ending in '.' such as myapp.state.",
            )
        entries[entry] = None
    if len(entries) > ENTRIES_MAX:
        raise InvalidInput("type_allowlist", f"at most {ENTRIES_MAX} entries")
    return list(entries)


@transaction.atomic
def set_type_allowlist(project: Project, *, actor: Actor, entries: list[str]) -> Project:
    """Replace the project's allow-list (entries as parse_allowlist gives them), audited with what changed.
    Values stored earlier are not looked at again: manage.py check_typed_values lists those it would refuse."""
    entries = parse_allowlist("\n".join(entries))
    before = list(project.type_allowlist)
    if entries == before:
        return project
    project.type_allowlist = entries
    project.save(update_fields=["type_allowlist"])
    details = {"added": [e for e in entries if e not in before], "removed": [e for e in before if e not in entries]}
    record_audit(actor, "set_type_allowlist", project=project, target=f"project {project.slug}", details=details)
    return project


@dataclass(frozen=True)
class StoredRefusal:
    session: AgentSession
    checkpoint_ns: str
    checkpoint_id: str
    path: str
    type_name: str


def stored_refusals(project: Project) -> Iterator[StoredRefusal]:
    """The values a LangGraph saver can read from the project's threads that its allow-list would refuse today
    (stored before the list said so): each thread's current checkpoints, their metadata and pending writes."""
    allowlist = list(project.type_allowlist)
    sessions = AgentSession.objects.filter(project=project, source_format=SourceFormat.LANGGRAPH).order_by("pk")
    for session in sessions.iterator(chunk_size=100):
        for item in lgtuples.session_tuples(session):
            for path, name in lgtuples.refused_in(item, allowlist):
                yield StoredRefusal(session, item["checkpoint_ns"], item["checkpoint_id"], path, name)
