"""A format that exists only in tests: one `<session>.toy` file of JSON lines, one checkpoint each. The registry
tests declare it for the length of a test and check that everything derived from the registry picks it up."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from checkpoints.sources.formats.base import CheckpointRecord, Problem, Record, SessionRecord, write_atomically

NAME = "toy"


def detect(path: Path) -> bool:
    return path.is_file() and path.suffix == ".toy"


def read(path: Path) -> Iterator[Record]:
    yield SessionRecord(external_id=path.stem, agent="toy")
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        try:
            state = json.loads(line)
        except ValueError as exc:
            yield Problem(str(path), f"line {number + 1}: {exc}")
            continue
        yield CheckpointRecord(session=path.stem, key=f"toy:{number}", state=state, step=number)


def export(session: Any, out_dir: Path) -> list[Path]:
    lines = [json.dumps(checkpoint.state) for checkpoint in session.checkpoints.order_by("seq")]
    return [write_atomically(out_dir / f"{session.external_id}.toy", "\n".join(lines).encode())]


def write_back(session: Any, checkpoint: Any, folder: Path) -> list[Path]:
    return [write_atomically(folder / f"{session.external_id}.{checkpoint.seq}.toy", json.dumps({}).encode())]
