"""The source formats (docs/formats.md). Each module follows `formats.base.Format`; LangGraph's databases are
read into threads instead of records (`langgraph.threads`), which the LangGraph service stores."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import cast

from .base import Format

NAMES = ("dreamos", "breakpilot", "ares", "kaizen", "haytham", "langgraph")


def get(name: str) -> Format:
    if name not in NAMES:
        raise ValueError(f"unknown format {name!r}; one of: {', '.join(NAMES)}")
    return cast(Format, importlib.import_module(f"{__name__}.{name}"))


def detect(path: Path) -> str | None:
    """The format of a file or folder, or None."""
    for name in NAMES:
        if get(name).detect(path):
            return name
    return None
