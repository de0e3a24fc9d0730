"""The source formats (docs/formats.md, docs/extending.md "Adding a format"): one declaration each.

A declaration names the format (the value `AgentSession.source_format` and `WatchedSource.format` store, the
`--format` of the import and export commands, the console's choices), its label, and the module under
`checkpoints/sources/formats/` that reads and writes it (`formats.base.Format`). The order is the order of the
choices and of auto-detection: a new format goes at the end."""

from __future__ import annotations

from dataclasses import dataclass

from . import Registry

PACKAGE = "checkpoints.sources.formats"


@dataclass(frozen=True)
class SourceFormatSpec:
    name: str  # stored in the database: never rename one
    label: str  # what a choice shows (Django's admin and forms)
    write_back: bool = True  # it can write a restored checkpoint into the agent's own folder
    module: str = ""  # where it is read and written; "" for PACKAGE.<name>

    @property
    def module_path(self) -> str:
        return self.module or f"{PACKAGE}.{self.name}"


FORMATS: Registry[SourceFormatSpec] = Registry("format")

FORMATS.register(SourceFormatSpec("dreamos", "Dreamos"))
FORMATS.register(SourceFormatSpec("breakpilot", "Breakpilot"))
FORMATS.register(SourceFormatSpec("ares", "Ares"))
FORMATS.register(SourceFormatSpec("kaizen", "Kaizen"))
FORMATS.register(SourceFormatSpec("haytham", "Haytham"))
FORMATS.register(SourceFormatSpec("langgraph", "Langgraph", write_back=False))  # read into threads, not records
