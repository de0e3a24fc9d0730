"""What every source format reads into and writes from.

A format module (dreamos, breakpilot, ares, kaizen, haytham) provides:

* `NAME` — its name on the command line;
* `detect(path) -> bool` — whether a file or folder is in this format (cheap: names and a peek);
* `read(path) -> Iterator[Record]` — the sessions, checkpoints and phases found under `path`, in
  order within each session, streaming (one file at a time); a file that cannot be read yields a
  `Problem` and reading goes on;
* `export(session, out_dir) -> list[Path]` — the session written back in the format's own layout,
  so that import → export → import gives the same sessions, checkpoints and states;
* `write_back(session, checkpoint, folder) -> list[Path]` — a restored checkpoint written into the
  agent's own folder the way that system expects, new files only, atomically.

A SessionRecord may come again after its checkpoints (e.g. with the status only the last file
tells); the later one updates the session.

Anything a source has that no field holds goes into `metadata`, so nothing is lost.

`langgraph` is the exception: its checkpointer databases are read into threads (`langgraph.threads`) that
the LangGraph service stores, as a live agent's puts would; it exports, and has no write-back.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, Protocol


@dataclass
class SessionRecord:
    external_id: str
    agent: str
    title: str = ""
    execution_mode: str = ""
    status: str | None = None  # a SessionStatus value
    metadata: dict[str, Any] = field(default_factory=dict)
    forked_from: tuple[str, str] | None = None  # (source session's external id, source checkpoint's key)
    project: str | None = None  # a project slug the source names (else the import's --project)
    folder: str = ""  # the folder holding this session's files, when not the one being read (write-back)


@dataclass
class CheckpointRecord:
    session: str  # the session's external id
    key: str  # what identifies this checkpoint in its source: imports are idempotent on it
    state: Any
    name: str = ""
    kind: str = "imported"
    status: str = "completed"
    status_reason: str = ""
    step: int | None = None
    phase: int | None = None
    created_at: datetime | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    head: bool = False  # the source's "latest" pointer names this checkpoint
    parent_key: str | None = None  # the source's key of its parent, yielded before it (None: the checkpoint before)
    new_root: bool = False  # no parent at all: a new run in the same session
    source_path: str = ""  # the file it came from, for error reports (not stored)
    # The key an earlier version of the importer stored this checkpoint under, if different: a checkpoint
    # stored under it that is this very one (same time, state, fields) counts as already imported.
    legacy_key: str = ""


@dataclass
class OutputRecord:
    agent_name: str
    content: str = ""
    status: str = ""
    model: str = ""
    tokens_in: int = 0
    tokens_out: int = 0
    tools_used: list[Any] = field(default_factory=list)
    duration: float | None = None
    error: str = ""
    error_details: dict[str, Any] = field(default_factory=dict)
    created_at: datetime | None = None  # when the agent produced it (else: when it is imported)


@dataclass
class FeedbackRecord:
    action: str
    reviewed: bool = True
    approved: bool = False
    comments: str = ""
    requested_changes: list[str] = field(default_factory=list)
    retry_count: int = 0
    reviewer_name: str = ""
    created_at: datetime | None = None


@dataclass
class PhaseRecord:
    session: str
    number: int
    name: str
    status: str = "pending"
    started_at: datetime | None = None
    completed_at: datetime | None = None
    duration: float | None = None
    retry_count: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost: Decimal = Decimal(0)
    errors: list[Any] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    outputs: list[OutputRecord] = field(default_factory=list)
    feedback: list[FeedbackRecord] = field(default_factory=list)


@dataclass
class Problem:
    """A file that could not be imported, and why (reported, skipped; the rest goes on)."""

    path: str
    error: str


Record = SessionRecord | CheckpointRecord | PhaseRecord | Problem


class Format(Protocol):
    NAME: str

    def detect(self, path: Path) -> bool: ...

    def read(self, path: Path) -> Iterator[Record]: ...

    def export(self, session: Any, out_dir: Path) -> list[Path]: ...

    def write_back(self, session: Any, checkpoint: Any, folder: Path) -> list[Path]: ...


def parse_time(value: Any) -> datetime | None:
    """ISO 8601 (a trailing Z too) or epoch seconds; None when absent or unreadable."""
    if value in (None, "", "-"):
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, tz=UTC)
    try:
        parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def write_atomically(path: Path, data: bytes) -> Path:
    """Write via a temporary file and rename, never replacing an existing file."""
    if path.exists():
        raise FileExistsError(f"{path} exists; not overwriting it")
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_bytes(data)
    try:
        path.hardlink_to(temporary)  # unlike a rename, fails if `path` appeared meanwhile
    finally:
        temporary.unlink()
    return path
