"""The formats' registry is complete (every declared format has what its declaration promises) and is the one
list: a format declared there is a choice of the columns, the commands, the console's lists and auto-detection,
with no other edit."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError
from hypothesis import given
from hypothesis import strategies as st

from checkpoints.management.commands.import_checkpoints import Command as ImportCommand
from checkpoints.models import AgentSession, SourceFormat, WatchedSource
from checkpoints.registry.formats import FORMATS, SourceFormatSpec
from checkpoints.sources import formats
from dashboard.templatetags.exports import export_formats

TESTS = Path(__file__).resolve().parents[2]
TOY = SourceFormatSpec("toy", "Toy", module="tests.sources.formats.toy_format")


@pytest.fixture
def toy():
    with FORMATS.registered(TOY) as spec:
        yield spec


@pytest.mark.parametrize("spec", list(FORMATS), ids=FORMATS.names())
def test_every_format_has_what_its_declaration_promises(spec):
    module = formats.get(spec.name)
    assert spec.name == module.NAME
    functions = {"detect", "export", *(["write_back"] if spec.write_back else [])}
    functions.add("read" if spec.name != "langgraph" else "threads")  # LangGraph reads threads, not records
    assert {name for name in functions if not inspect.isfunction(getattr(module, name, None))} == set()
    assert not spec.write_back or "write_back" in vars(module)
    assert (TESTS / "sources" / "formats" / f"test_{spec.name}.py").is_file()
    if spec.name != "langgraph":  # its tests build their SqliteSaver files and PostgresSaver databases
        assert any((TESTS / "fixtures" / spec.name).iterdir())


def test_the_code_names_only_registered_formats_with_their_labels():
    assert [(member.value, member.label) for member in SourceFormat] == FORMATS.choices()


def test_unknown_formats_are_refused_with_the_list():
    with pytest.raises(ValueError, match="unknown format 'nope'; one of: dreamos, breakpilot"):
        formats.get("nope")
    with pytest.raises(ValueError, match="registered already"):
        FORMATS.register(SourceFormatSpec("ares", "Ares"))


def test_a_declared_format_is_a_choice_everywhere_without_other_edits(toy, tmp_path):
    assert ("toy", "Toy") in AgentSession._meta.get_field("source_format").choices
    assert ("toy", "Toy") in WatchedSource._meta.get_field("format").choices
    AgentSession._meta.get_field("source_format").clean("toy", None)  # the column's validation accepts it
    assert formats.names()[-1] == "toy"
    assert "toy" in export_formats()  # the session page's "Download as…"
    options = ImportCommand().create_parser("manage.py", "import_checkpoints").parse_args(["x", "--format", "toy"])
    assert options.format == "toy"
    (tmp_path / "run-1.toy").write_text('{"step": 1}\n{"step": 2}\n', encoding="utf-8")
    assert formats.detect(tmp_path / "run-1.toy") == "toy"
    assert [type(record).__name__ for record in formats.get("toy").read(tmp_path / "run-1.toy")] == [
        "SessionRecord",
        "CheckpointRecord",
        "CheckpointRecord",
    ]


def test_a_format_no_longer_declared_is_refused(toy):
    FORMATS.unregister("toy")
    try:
        with pytest.raises(ValidationError):
            AgentSession._meta.get_field("source_format").clean("toy", None)
    finally:
        FORMATS.register(TOY)


@given(st.text(max_size=40).filter(lambda name: name not in FORMATS))
def test_a_name_not_declared_never_imports_a_module(name):
    """The session page's `?format=` and the commands' `--format` reach `get`: only a declared name is imported
    (`base`, `_jsonfiles`, `os` or a dotted path are names like any other)."""
    with pytest.raises(ValueError, match="unknown format"):
        formats.get(name)


@pytest.mark.parametrize("name", ["base", "_jsonfiles", "__init__", "os", "dreamos.os", "../dreamos", "DREAMOS"])
def test_module_names_that_are_no_format_are_refused(name):
    with pytest.raises(ValueError, match="unknown format"):
        formats.get(name)
