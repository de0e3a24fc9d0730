"""Helpers shared by the JSON-file formats (dreamos, breakpilot, ares): reading files tolerantly, listing
folders, writing files, and carrying the console's own fields through a format that has no place for them.

The "console" convention: when a session made elsewhere is exported to a format that cannot hold one of
a checkpoint's fields (a name, a status, a step, metadata, or a state of another shape), the exporter puts
it under a top-level `"console"` key of that checkpoint's entry, only when it differs from what the
importer would derive anyway; the importers read it back. Checkpoints that came from the format itself
export without it, so their files stay exactly in the source system's shape.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeGuard

from ... import store
from ...models import Checkpoint, CheckpointKind, CheckpointStatus
from ...store import jsoncodec

CONSOLE = "console"
ENGINE_KEYS = ("source_format", "source_id")  # metadata the import engine adds to every checkpoint
BOM = b"\xef\xbb\xbf"


class BadFile(ValueError):
    """A file that cannot be read as its format; the message says why."""


def read_json(path: Path) -> Any:
    """Strict JSON from a UTF-8 file (a leading byte-order mark is allowed)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BadFile(f"cannot read: {exc.strerror or exc}") from exc
    return parse_json(data)


def parse_json(data: bytes) -> Any:
    data = data.removeprefix(BOM)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadFile(utf8_problem(data, exc)) from exc
    if not text.strip():
        raise BadFile("empty file")
    try:
        return jsoncodec.loads(text)
    except jsoncodec.InvalidJSON as exc:
        raise BadFile(f"not valid JSON (truncated or corrupt): {exc}") from exc


def utf8_problem(data: bytes, exc: UnicodeDecodeError) -> str:
    if exc.reason == "unexpected end of data" and exc.end == len(data):
        return "truncated: the file ends inside a character (cut short while being written?)"
    return f"not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start}"


def peek(path: Path, size: int = 4096) -> bytes:
    """The first bytes of a file, without a byte-order mark or leading white space; b"" when unreadable."""
    try:
        with path.open("rb") as handle:
            return handle.read(size).removeprefix(BOM).lstrip()
    except OSError:
        return b""


def hidden(path: Path) -> bool:
    """Dot files (editor droppings, our own temporary files) are neither read nor reported."""
    return path.name.startswith(".")


def listing(folder: Path) -> tuple[list[Path], list[Path]]:
    """A folder's visible files and sub-folders (not followed through symlinks), each sorted by name."""
    files: list[Path] = []
    folders: list[Path] = []
    for entry in sorted(folder.iterdir()):
        if hidden(entry):
            continue
        if entry.is_dir():
            if not entry.is_symlink():
                folders.append(entry)
        else:
            files.append(entry)
    return files, folders


def any_file(folder: Path, wanted: Any, *, limit: int = 10_000) -> bool:
    """Whether one of the first `limit` visible files directly in `folder` satisfies `wanted(path)`."""
    try:
        for count, entry in enumerate(os.scandir(folder)):
            if count >= limit:
                return False
            if not entry.name.startswith(".") and entry.is_file() and wanted(Path(entry.path)):
                return True
    except OSError:
        return False
    return False


def dumps(value: Any) -> bytes:
    """Readable JSON as the source systems write it (indented, UTF-8 kept as is)."""
    return (json.dumps(value, indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")


def safe_name(text: str) -> str:
    """`text` made usable inside a file name (ids keep their real spelling inside the file)."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", text).lstrip(".")
    return cleaned or "session"


def plain_name(name: Any) -> TypeGuard[str]:
    """A bare file name (no folders, not hidden): safe to write into an export folder."""
    return isinstance(name, str) and bool(name) and Path(name).name == name and not name.startswith(".")


def replace_atomically(path: Path, data: bytes) -> Path:
    """Write via a temporary file in the same folder and os.replace: for the one file a format updates."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def write_new(path: Path, chunks: Iterable[bytes]) -> Path:
    """base.write_atomically for content produced piece by piece (a large export is never held whole)."""
    if path.exists():
        raise FileExistsError(f"{path} exists; not overwriting it")
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        with temporary.open("wb") as out:
            for chunk in chunks:
                out.write(chunk)
        path.hardlink_to(temporary)  # fails if `path` appeared meanwhile
    finally:
        temporary.unlink(missing_ok=True)
    return path


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat()


# ---- exporting and writing back ----------------------------------------------------------------


def checkpoints_with_states(session: Any) -> Iterator[tuple[Checkpoint, Any]]:
    """A session's checkpoints in seq order, each with its state, loaded one at a time."""
    for checkpoint in Checkpoint.objects.filter(session=session).order_by("seq").iterator(chunk_size=200):
        yield checkpoint, store.load_state(bytes(checkpoint.root))


def restored_target(checkpoint: Checkpoint) -> Checkpoint:
    """For a `restore` checkpoint, the checkpoint it restored (same state; its metadata describes the source)."""
    if checkpoint.kind == CheckpointKind.RESTORE and checkpoint.parent_id:
        return Checkpoint.objects.filter(pk=checkpoint.parent_id).first() or checkpoint
    return checkpoint


def writable_folder(folder: Path) -> Path:
    """A write-back target must exist: a missing source folder is an error, not something to recreate."""
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not a folder")
    return folder


def home_folder(folder: Path, wanted: Any) -> Path:
    """Where a session's files are: `folder` when it directly holds one that `wanted(path)` accepts, else the
    first folder below it that does (an import of a parent folder records the parent), else `folder`."""
    if any_file(folder, wanted):
        return folder
    for root, folders, _ in os.walk(folder):  # top-down, symlinks not followed
        folders[:] = sorted(name for name in folders if not name.startswith("."))
        if any_file(Path(root), wanted):
            return Path(root)
    return folder


def from_format(checkpoint: Checkpoint, fmt: str) -> bool:
    return (checkpoint.metadata or {}).get("source_format") == fmt


def other_metadata(checkpoint: Checkpoint, own: tuple[str, ...] = ()) -> dict[str, Any]:
    """The checkpoint's metadata less what the engine adds and the keys the format writes natively."""
    skip = set(ENGINE_KEYS) | set(own)
    return {key: value for key, value in (checkpoint.metadata or {}).items() if key not in skip}


def console_fields(checkpoint: Checkpoint, derived: dict[str, Any]) -> dict[str, Any]:
    """The fields (of name, kind, status, status_reason, step, phase) that differ from what the importer
    would derive from the exported entry (`derived`): those go under the entry's "console" key."""
    extra: dict[str, Any] = {}
    defaults: dict[str, Any] = {"name": "", "kind": CheckpointKind.IMPORTED, "status": "completed", "status_reason": ""}
    defaults |= {"step": None, "phase": None}
    for name, default in defaults.items():
        value = getattr(checkpoint, name)
        if value != derived.get(name, default):
            extra[name] = value
    return extra


# ---- importing ---------------------------------------------------------------------------------


def apply_console(values: dict[str, Any], console: Any) -> None:
    """Fold an entry's "console" fields into a CheckpointRecord's keyword arguments (invalid ones ignored)."""
    if not isinstance(console, dict):
        return
    checks: dict[str, Callable[[Any], bool]] = {
        "name": lambda v: isinstance(v, str),
        "kind": lambda v: v in CheckpointKind.values,
        "status": lambda v: v in CheckpointStatus.values,
        "status_reason": lambda v: isinstance(v, str),
        "step": lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)),
        "phase": lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)),
    }
    for name, valid in checks.items():
        if name in console and valid(console[name]):
            values[name] = console[name]
    if isinstance(console.get("metadata"), dict):
        values["metadata"] = {**values.get("metadata", {}), **console["metadata"]}
    if "state" in console:
        values["state"] = console["state"]


def as_int(value: Any) -> int | None:
    """An integer (not a bool), or an integer written as a string; None otherwise."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
        return int(value)
    return None
