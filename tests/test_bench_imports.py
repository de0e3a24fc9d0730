"""The benchmarks import the console's code inside their functions (Django is set up first), so nothing runs those
imports until someone runs `make bench`: a module moved by a refactor broke bench/run.py without a test noticing.
Each name a benchmark imports from the console must exist where it imports it from."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
OURS = ("checkpoints", "dashboard", "config")


def imports_of_ours(path: Path) -> list[tuple[str, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in OURS:
            found += [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(alias.name, "") for alias in node.names if alias.name.split(".")[0] in OURS]
    return found


@pytest.mark.parametrize("path", sorted(BENCH.glob("*.py")), ids=lambda path: path.name)
def test_every_console_name_a_benchmark_imports_exists(path):
    missing = []
    for module_name, name in imports_of_ours(path):
        module = importlib.import_module(module_name)
        if name and not hasattr(module, name):
            try:
                importlib.import_module(f"{module_name}.{name}")
            except ImportError:
                missing.append(f"{module_name}.{name}")
    assert missing == [], f"{path.name} imports what is not there: {missing}"
