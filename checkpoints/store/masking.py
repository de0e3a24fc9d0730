"""What people see of states, and of texts made from states: the secrets found in the project masked
(docs/secrets.md#masking).

A `Masker` holds one project's finding fingerprints and patterns; it masks a state (`state`), a text (`text`: a
preview, an alert's message, an audit reason), any JSON (`json`: an event's body, a LangGraph tuple) and a diff
(`diff`). It matches what it is shown against the fingerprints, so a value is masked wherever it appears — in the
checkpoint that added it, in a later one, a fork's, a text quoting it — and a value nobody found is not.

Nobody sees a found value by default, whatever their permissions: a person holding `reveal_secrets` reveals one
finding at a time, with a reason, audited (`services.reveals`). Agents' write tokens, restores, forks,
write-back and the `export_checkpoints` command read the real state: they never go through a masker.

`masked_reads` makes `store.load_state` mask what it returns for the duration of a block: the console's export of
a session in a source format reads its states through the format's own exporter, which knows nothing of people.
"""

from __future__ import annotations

import contextvars
import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from ..models import Project, SecretFinding
from . import secrets as scanner
from .diff import Diff


def _entries(stored: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(stored, list):
        return ()
    return tuple((str(item[0]), str(item[1])) for item in stored if isinstance(item, list) and len(item) == 2)


class Masker:
    """One project's found secrets, and what masks them."""

    __slots__ = ("_extra", "_fingerprints")

    def __init__(self, fingerprints: Mapping[str, str], patterns: Any = ()) -> None:
        self._fingerprints = dict(fingerprints)
        entries = _entries(patterns)
        self._extra = scanner.project_patterns(entries) if entries and self._fingerprints else ()

    @property
    def active(self) -> bool:
        """Whether anything was ever found: an inactive masker returns what it is given, unscanned."""
        return bool(self._fingerprints)

    def joined(self, other: Masker) -> Masker:
        """One masker for what two projects found (a comparison across projects shows both's values)."""
        if other is self or not other._fingerprints:
            return self
        if not self._fingerprints:
            return other
        both = Masker({**self._fingerprints, **other._fingerprints})
        both._extra = (*self._extra, *other._extra)
        return both

    def json(self, value: Any) -> Any:
        """`value` (any JSON) with every found value in its strings masked; unchanged parts are shared."""
        if not self._fingerprints:
            return value
        return scanner.mask_state(value, self._fingerprints, extra=self._extra)

    state = json
    __call__ = json

    def text(self, value: str) -> str:
        """One text (a preview, a message, a reason) masked; anything else is returned as it is."""
        if not isinstance(value, str):
            return value
        masked: str = self.json(value)
        return masked

    def keyed(self, key: str | int | None, value: Any) -> Any:
        """`value` as it sits under `key` in a state: a value found because of its key's name (`token: …`) is
        found again only when the key is known."""
        if not self._fingerprints or key is None:
            return self.json(value)
        return self.json({key: value})[key]

    def diff(self, diff: Diff) -> Diff:
        """`diff` with each change's old and new value masked (and so its line diff): the diff walked the real
        states, skipping what is equal, so this costs the size of the change."""
        if not self._fingerprints:
            return diff
        entries = [
            dataclasses.replace(
                entry,
                old=self.keyed(entry.path[-1] if entry.path else None, entry.old),
                new=self.keyed(entry.path[-1] if entry.path else None, entry.new),
            )
            for entry in diff.entries
        ]
        return Diff(entries=entries, stats=diff.stats)


AS_IT_IS = Masker({})


def for_project(project: Project) -> Masker:
    """The project's masker: one query for its fingerprints, none for a project where nothing was ever found."""
    if project.secrets_found_at is None:
        return AS_IT_IS
    fingerprints = SecretFinding.objects.filter(project=project).order_by().distinct()
    return Masker(dict(fingerprints.values_list("fingerprint", "detector")), project.secret_patterns)


def for_projects(project_ids: Iterable[int]) -> dict[int, Masker]:
    """Maskers of several projects (an outbox batch, a page listing many), read from the database whatever a
    loaded project says: two queries when something was found, one when nothing was."""
    wanted = {pk for pk in project_ids if pk is not None}
    found: dict[int, dict[str, str]] = {}
    rows = SecretFinding.objects.filter(project_id__in=wanted).order_by().distinct()
    for project_id, fingerprint, detector in rows.values_list("project_id", "fingerprint", "detector"):
        found.setdefault(project_id, {})[fingerprint] = detector
    if not found:
        return dict.fromkeys(wanted, AS_IT_IS)
    patterns = dict(Project.objects.filter(pk__in=found).values_list("pk", "secret_patterns"))
    return {pk: Masker(found[pk], patterns.get(pk)) if pk in found else AS_IT_IS for pk in wanted}


class Maskers:
    """Maskers made as a page needs them, one per project (a list may show rows of several)."""

    def __init__(self) -> None:
        self._made: dict[int, Masker] = {}

    def of(self, project: Project) -> Masker:
        if project.pk not in self._made:
            self._made[project.pk] = for_project(project)
        return self._made[project.pk]


_reads: contextvars.ContextVar[Masker] = contextvars.ContextVar("masked_reads", default=AS_IT_IS)


@contextmanager
def masked_reads(masker: Masker) -> Iterator[None]:
    """`store.load_state` returns states masked by `masker` inside the block."""
    token = _reads.set(masker)
    try:
        yield
    finally:
        _reads.reset(token)


def reading(state: Any) -> Any:
    """`state` as the block `masked_reads` opened lets it be read (outside one: as it is)."""
    return _reads.get().json(state)


def find_value(where: Any, fingerprint: str, patterns: Any = ()) -> str | None:
    """The string in `where` (a state, metadata) that a detector finds and whose fingerprint is `fingerprint`, or
    None: what a reveal shows, read back from the state that holds it (a finding keeps only the fingerprint)."""
    detectors = scanner.detectors()
    entries = _entries(patterns)
    extra = scanner.project_patterns(entries) if entries else ()
    stack: list[tuple[str | int | None, Any]] = [(None, where)]
    while stack:
        key, value = stack.pop()
        if isinstance(value, dict):
            stack.extend(value.items())
        elif isinstance(value, list):
            stack.extend(enumerate(value))
        elif isinstance(value, str) and len(value) >= scanner.SHORTEST:
            for pattern in [*detectors.matching(value), *(p for p in extra if p.regex.search(value))]:
                for match in pattern.regex.finditer(value):
                    text = match.group(pattern.group) or ""
                    if text and scanner.fingerprint(text) == fingerprint:
                        return str(text)
            keyed = scanner.keyword_value((key,) if key is not None else (), value)
            if keyed is not None and scanner.fingerprint(keyed) == fingerprint:
                return keyed
    return None
