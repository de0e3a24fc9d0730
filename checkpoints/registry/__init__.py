"""The extension points' registries (docs/extending.md): what a source format or a drift detector declares — the
name stored in the database, the label the console shows, the settings it reads and their defaults — in one place
that everything else is derived from: the models' choices, the settings, the drift `Limits`, the console's
filters and labels, and the checks on the docs' tables.

The declarations sit on the lowest floor, below the models, so that the models can take their choices from them
without importing the code above (`sources.formats`, `services.drift`) that does the work; each declaration
names the module that does it, which that code imports by name."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Generic, Protocol, TypeVar


class Spec(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def label(self) -> str: ...


S = TypeVar("S", bound=Spec)


class Registry(Generic[S]):
    """Declarations in the order they were registered (the order of the choices: keep new ones at the end, or
    makemigrations writes a migration that only reorders them)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._specs: dict[str, S] = {}

    def register(self, spec: S) -> S:
        if spec.name in self._specs:
            raise ValueError(f"{self.what} {spec.name!r} is registered already")
        self._specs[spec.name] = spec
        return spec

    def unregister(self, name: str) -> None:
        del self._specs[name]

    @contextmanager
    def registered(self, spec: S) -> Iterator[S]:
        """`spec` registered for the length of a `with` block (tests: a toy format or detector)."""
        self.register(spec)
        try:
            yield spec
        finally:
            self.unregister(spec.name)

    def get(self, name: str) -> S:
        try:
            return self._specs[name]
        except KeyError:
            raise ValueError(f"unknown {self.what} {name!r}; one of: {', '.join(self._specs)}") from None

    def __iter__(self) -> Iterator[S]:
        return iter(list(self._specs.values()))

    def __len__(self) -> int:
        return len(self._specs)

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def names(self) -> tuple[str, ...]:
        return tuple(self._specs)

    def choices(self) -> list[tuple[str, str]]:
        """(stored value, label) of each: a model field's or a form's choices (Django accepts the bound method,
        and calls it whenever it needs them, so a declaration registered later shows up too)."""
        return [(spec.name, spec.label) for spec in self._specs.values()]

    def label(self, name: str) -> str:
        """The label of `name`, or `name` itself when nothing by that name is registered (an alert of a detector
        since removed still shows)."""
        spec = self._specs.get(name)
        return spec.label if spec is not None else name
