"""The source formats (docs/formats.md). Each is declared in `checkpoints.registry.formats` (its name, label and
module) and its module follows `formats.base.Format`; LangGraph's databases are read into threads instead of
records (`langgraph.threads`), which the LangGraph service stores."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import cast

from ...registry.formats import FORMATS
from .base import Format


def names() -> tuple[str, ...]:
    """Every registered format, in the order auto-detection tries them."""
    return FORMATS.names()


def get(name: str) -> Format:
    """The module that reads and writes `name` (imported by the name its declaration gives: the declaration sits
    below the models, which take their choices from it)."""
    return cast(Format, importlib.import_module(FORMATS.get(name).module_path))


def detect(path: Path) -> str | None:
    """The format of a file or folder, or None."""
    for name in names():
        if get(name).detect(path):
            return name
    return None
