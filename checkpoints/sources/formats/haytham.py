"""Haytham-style phased sessions: markdown files in `projects/<project>/sessions/<session>/`.

    session_manifest.md            "- Key: value" lists (Metadata, Current Phase, Metrics) and a phase table
    phase_<N>_<name>/checkpoint.md the phase's Metadata, Agents in Phase, Inputs, Outputs, Metrics (…, Errors)
    phase_<N>_<name>/<agent>.md    an agent's output: Metadata, Execution Details, Output (, Error Details)
    phase_<N>_<name>/user_feedback.md  Review Status, User Comments, Requested Changes, Action Taken

This is what Haytham's CheckpointManager (arslan70/haytham, haytham/checkpoint/checkpoint_manager.py)
writes, and what its loaders read back: `load_session` parses the manifest, `get_phase_outputs` reads
every `*.md` of a phase folder except checkpoint.md and user_feedback.md as an agent's output,
`get_approved_phases` looks for "- Approved: true" in each phase's user_feedback.md. So earlier
versions never go into a phase folder: they live in the console, and on disk in the session's
`.checkpoint-console/<phase folder>/<name>.<stamp>.md` (HISTORY), which none of those loaders opens.

Mapping:

* session: project = the `projects/<project>` folder (else the manifest's Project ID), external id = the
  session folder, agent "haytham", execution mode; status in_progress → active, completed →
  completed, failed → failed, paused/interrupted/cancelled → halted (the original in metadata with
  user id, workflow type, created/updated, current phase and metrics; `metadata["manifest"]` keeps
  the manifest's lists verbatim so that export rewrites them);
* one PhaseRecord per phase, from its checkpoint.md, else its row of the manifest's phase table
  (phases listed there without a folder are pending phases; the row's cells are kept in the phase's
  metadata); agent outputs with the whole markdown as content, the agent's "Executed" time and its
  Error Details; user feedback. Earlier versions from HISTORY (and `<name>.<stamp>.md` files that
  older write-backs left in phase folders) come first: an output whose content changed is the
  agent's next attempt, kept beside the earlier one;
* one CheckpointRecord (kind "phase", name = the phase folder) per version of a phase's
  checkpoint.md: state = its sections as JSON (values verbatim) plus the phase folder and the agent
  output names (and `key_order` where a section's keys are in an order the renderer would not
  produce). Its key is "<session>/<phase folder>@<digest of the state>": importing the same
  files again adds nothing, a changed checkpoint.md adds the new version to the timeline.

Which outputs and which feedback go with a version of a phase: those from before the next version
of that phase started. Export writes each phase's current version so; write-back after a restore of
phase N writes N's restored version so, and returns the phases after N to "pending", as Haytham's
manifest had them before they ran. Every file replaced or removed is kept in HISTORY first.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from ... import store
from ...models import Checkpoint, CheckpointKind
from ...phases import latest_attempts
from ...store import jsoncodec
from .base import (
    CheckpointRecord,
    FeedbackRecord,
    OutputRecord,
    PhaseRecord,
    Problem,
    Record,
    SessionRecord,
    parse_time,
    write_atomically,
)

NAME = "haytham"

MANIFEST = "session_manifest.md"
CHECKPOINT = "checkpoint.md"
FEEDBACK = "user_feedback.md"
HISTORY = ".checkpoint-console"  # earlier versions, per session: a dot-folder Haytham's loaders never read
PHASE_DIR = re.compile(r"^phase_(\d+)_(.+)$")
# `<name>.<stamp>.md` left in phase folders by write-backs before HISTORY (Haytham read them as agents)
KEPT = re.compile(r"^(checkpoint|user_feedback|session_manifest)\.(.+)\.md$")
STAMPED = re.compile(r"^(.+?)\.(\d{8}T\d{6}Z(?:-\d+)?)\.md$")  # `<name>.<stamp>.md` in HISTORY

# Haytham's own phase names and folders
PHASE_NAMES = {
    1: "Concept Expansion",
    2: "Market Research",
    3: "Niche Selection",
    4: "Product Strategy",
    5: "Business Planning",
    6: "Validation",
    7: "Final Synthesis",
}
PHASE_DIRS = {
    1: "phase_1_concept",
    2: "phase_2_market_research",
    3: "phase_3_niche_selection",
    4: "phase_4_product_strategy",
    5: "phase_5_business_planning",
    6: "phase_6_validation",
    7: "phase_7_synthesis",
}
PHASE_STATUSES = {"pending", "in_progress", "completed", "failed", "skipped", "requires_retry"}
CHECKPOINT_STATUS = {
    "pending": "in_progress",
    "in_progress": "in_progress",
    "requires_retry": "in_progress",
    "completed": "completed",
    "skipped": "completed",
    "failed": "failed",
}
SESSION_STATUS = {
    "pending": "active",
    "in_progress": "active",
    "active": "active",
    "completed": "completed",
    "failed": "failed",
    "halted": "halted",
    "paused": "halted",
    "interrupted": "halted",
    "cancelled": "halted",
    "archived": "archived",
}
HAYTHAM_SESSION_STATUS = {"active": "in_progress", "completed": "completed", "failed": "failed", "halted": "paused"}

# Section and key order of the files Haytham writes (what the stored JSON cannot remember)
CHECKPOINT_SECTIONS = ["Metadata", "Agents in Phase", "Inputs", "Outputs", "Metrics", "Next Phase", "Errors"]
CHECKPOINT_KEYS = {
    "Metadata": ["Phase Number", "Phase Name", "Status", "Started", "Completed", "Duration", "Retry Count"]
    + ["Execution Mode"],
    "Inputs": ["Previous Phase", "Required Context", "User Parameters"],
    "Outputs": ["Agent Outputs", "User Feedback"],
    "Metrics": ["Total Tokens", "Input Tokens", "Output Tokens", "Cost", "Agent Execution Times"],
    "Next Phase": ["Phase Number", "Phase Name", "Ready to Execute", "Blocking Issues"],
}
MANIFEST_SECTIONS = ["Metadata", "Phase Status", "Current Phase", "Metrics"]
MANIFEST_KEYS = {
    "Metadata": ["Session ID", "Project ID", "User ID", "Workflow Type", "Execution Mode", "Created", "Last Updated"]
    + ["Status"],
    "Current Phase": ["Phase", "Name", "Status", "Can Resume"],
    "Metrics": ["Total Duration", "Total Tokens", "Total Cost"],
}
TABLE_COLUMNS = ["Phase", "Name", "Status", "Started", "Completed", "Duration"]

_PEEK = 50


# ---- detection ---------------------------------------------------------------------------------


def _children(folder: Path, limit: int | None = None) -> list[Path]:
    try:
        with os.scandir(folder) as entries:
            found = []
            for entry in entries:
                if not entry.name.startswith("."):
                    found.append(Path(entry.path))
                    if limit is not None and len(found) >= limit:
                        break
            return found
    except OSError:
        return []


def _holds_sessions(folder: Path) -> bool:
    return any((child / MANIFEST).is_file() for child in _children(folder, _PEEK))


def _holds_projects(folder: Path) -> bool:
    return any(_holds_sessions(child / "sessions") for child in _children(folder, _PEEK))


def detect(path: Path) -> bool:
    """A session_manifest.md, or a session, sessions, project, `projects` or root folder of them."""
    if path.is_file():
        return path.name == MANIFEST
    if not path.is_dir():
        return False
    return (
        (path / MANIFEST).is_file()
        or _holds_sessions(path)
        or _holds_sessions(path / "sessions")
        or _holds_projects(path)
        or _holds_projects(path / "projects")
    )


# ---- markdown ----------------------------------------------------------------------------------


class _Malformed(Exception):
    pass


_TITLE = re.compile(r"^#[ \t]+(.+?)[ \t]*$")
_HEADING = re.compile(r"^##[ \t]+(.+?)[ \t]*$")
_BULLET = re.compile(r"^[-*][ \t]+(.*)$")


@dataclass
class _Document:
    title: str = ""
    preamble: str = ""
    sections: list[tuple[str, list[str]]] = field(default_factory=list)

    def first(self, name: str) -> list[str] | None:
        return next((lines for heading, lines in self.sections if heading == name), None)

    def last(self, name: str) -> list[str] | None:
        return next((lines for heading, lines in reversed(self.sections) if heading == name), None)


def _markdown(text: str) -> _Document:
    """`# title`, then `## section` blocks of lines (headings inside ``` fences are content)."""
    document = _Document()
    preamble: list[str] = []
    current: list[str] | None = None
    fenced = False
    for raw in text.split("\n"):
        line = raw.rstrip("\r")
        if not fenced:
            heading = _HEADING.match(line)
            title = _TITLE.match(line)
            if heading:
                current = []
                document.sections.append((heading.group(1), current))
                continue
            if title and current is None and not document.title:
                document.title = title.group(1)
                continue
        if line.lstrip().startswith("```"):
            fenced = not fenced
        (preamble if current is None else current).append(line)
    document.preamble = "\n".join(preamble).strip()
    return document


def _trimmed(lines: list[str]) -> list[str]:
    start, end = 0, len(lines)
    while start < end and not lines[start].strip():
        start += 1
    while end > start and not lines[end - 1].strip():
        end -= 1
    return lines[start:end]


def _pair(item: str) -> tuple[str, str] | None:
    if ": " in item:
        key, value = item.split(": ", 1)
    elif item.endswith(":"):
        key, value = item[:-1], ""
    else:
        return None
    key = key.strip()
    return (key, value.strip()) if key else None


def _value(lines: list[str]) -> dict[str, str] | list[str] | str:
    """A section as JSON: "- Key: value" lines → dict, other "- item" lines → list, anything else → text."""
    content = _trimmed(lines)
    items = [_BULLET.match(line) for line in content]
    if not content or not all(items):
        return "\n".join(content)
    texts = [match.group(1).strip() for match in items if match]
    pairs = [_pair(text) for text in texts]
    if all(pairs) and len({pair[0] for pair in pairs if pair}) == len(pairs):
        return dict(pair for pair in pairs if pair)
    return texts


def _fields(document: _Document, *names: str, last: bool = False) -> dict[str, str]:
    """The "- Key: value" lines of the named sections (the first of each name, or the last)."""
    found: dict[str, str] = {}
    for name in names:
        lines = (document.last if last else document.first)(name) or []
        for line in lines:
            match = _BULLET.match(line.strip())
            pair = _pair(match.group(1).strip()) if match else None
            if pair and pair[0] not in found:
                found[pair[0]] = pair[1]
    return found


def _ordered(keys: Any, order: list[str] | None) -> list[str]:
    """The known keys in their order, then the others sorted (the store and jsonb keep no order of their own)."""
    known = [key for key in order or [] if key in keys]
    return known + sorted(key for key in keys if key not in known)


def _render_value(value: Any, order: list[str] | None = None) -> str:
    """As Haytham writes it: "- {key}: {value}" (an empty value keeps the space after the colon)."""
    if isinstance(value, dict):
        return "\n".join(f"- {key}: {value[key]}" for key in _ordered(value, order))
    if isinstance(value, list):
        return "\n".join(f"- {item}" for item in value)
    return str(value)


def _render(
    title: str, sections: dict[str, Any], order: list[str], keys: dict[str, list[str]], preamble: str = ""
) -> str:
    parts = [f"# {title}"] if title else []
    if preamble:
        parts.append(preamble)
    for name in _ordered(sections, order):
        body = _render_value(sections[name], keys.get(name))
        parts.append(f"## {name}\n{body}" if body else f"## {name}")
    return "\n\n".join(parts) + "\n"


# ---- values ------------------------------------------------------------------------------------


def _blank(value: str | None) -> bool:
    return value is None or value.strip() in ("", "-", "None", "none", "null")


def _int(value: str | None) -> int | None:
    if _blank(value):
        return None
    text = str(value).strip().replace(",", "")
    return int(text) if re.fullmatch(r"-?\d+", text) else None


def _seconds(value: str | None) -> float | None:
    if _blank(value):
        return None
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(?:s|sec|secs|seconds)?", str(value).strip())
    return float(match.group(1)) if match else None


def _cost(value: str | None) -> Decimal | None:
    if _blank(value):
        return None
    try:
        cost = Decimal(str(value).strip().lstrip("$").replace(",", "").strip())
    except InvalidOperation:
        return None
    return cost if cost.is_finite() else None


def _bool(value: str | None) -> bool:
    return str(value or "").strip().lower() in ("true", "yes", "1")


def _names(value: str | None) -> list[str]:
    """ "[a.md, b.md]" → ["a.md", "b.md"]."""
    text = str(value or "").strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    names = [name.strip() for name in text.split(",")]
    return [name for name in names if name and name.lower() != "none"]


def _iso(moment: datetime | None) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z") if moment else "-"


def _duration(seconds: float | None) -> str:
    """As Haytham writes a duration in checkpoint.md and agent outputs."""
    return f"{seconds:.1f}s" if seconds else "-"


def _stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


def _kept_order(path: Path) -> tuple[str, int]:
    """Previous versions (`<name>.<stamp>[-n].md`) oldest first."""
    match = STAMPED.match(path.name) or KEPT.match(path.name)
    suffix = match.group(2) if match else ""
    stamp, _, counter = suffix.partition("-")
    return (stamp, int(counter) if counter.isdigit() else 0)


def _read_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise _Malformed(f"cannot read: {exc}") from exc
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Malformed(f"not UTF-8 text: {exc}") from exc


# ---- reading -----------------------------------------------------------------------------------


@dataclass
class _Manifest:
    title: str
    sections: dict[str, Any]  # everything but the phase table, verbatim
    rows: dict[int, dict[str, str]]


def _parse_manifest(text: str, path: Path) -> tuple[_Manifest, list[Problem]]:
    document = _markdown(text)
    sections: dict[str, Any] = {}
    rows: dict[int, dict[str, str]] = {}
    problems: list[Problem] = []
    for name, lines in document.sections:
        if name == "Phase Status":
            columns: list[str] = []
            for line in lines:
                if not line.strip().startswith("|"):
                    continue
                cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
                if not columns:
                    columns = cells
                elif all(set(cell) <= set("-: ") for cell in cells):
                    continue
                elif (number := _int(cells[0])) is None:
                    problems.append(
                        Problem(str(path), f"phase table row {line.strip()!r} has no phase number; skipped")
                    )
                else:
                    rows[number] = dict(zip(columns, cells, strict=False))
        elif name not in sections:
            sections[name] = _value(lines)
    if not isinstance(sections.get("Metadata"), dict):
        raise _Malformed("malformed session_manifest.md: no '## Metadata' list of '- Key: value' lines")
    return _Manifest(document.title, sections, rows), problems


def _checkpoint_state(text: str, folder: str) -> dict[str, Any]:
    """The checkpoint.md sections as JSON (values verbatim), the phase folder and the agent output names."""
    document = _markdown(text)
    sections: dict[str, Any] = {}
    for name, lines in document.sections:
        if name not in sections:
            sections[name] = _value(lines)
    metadata = sections.get("Metadata")
    if not isinstance(metadata, dict) or not ({"Phase Number", "Status"} & set(metadata)):
        raise _Malformed("malformed checkpoint.md: no '## Metadata' list with Phase Number and Status")
    outputs = sections.get("Outputs")
    agents = sections.get("Agents in Phase")
    if isinstance(outputs, dict) and "Agent Outputs" in outputs:
        names = [name.removesuffix(".md") for name in _names(outputs["Agent Outputs"])]
    else:
        names = list(agents) if isinstance(agents, dict) else []
    state: dict[str, Any] = {"phase_dir": folder, "title": document.title, "sections": sections, "agent_outputs": names}
    if document.preamble:
        state["preamble"] = document.preamble
    orders = _checkpoint_keys(names)
    unusual = {
        name: list(value)
        for name, value in sections.items()
        if isinstance(value, dict) and list(value) != _ordered(value, orders.get(name))
    }
    if unusual:  # e.g. Errors "b: …" before "a: …": rendered back in the file's order
        state["key_order"] = unusual
    return state


def _checkpoint_keys(agent_outputs: list[str]) -> dict[str, list[str]]:
    return {**CHECKPOINT_KEYS, "Agents in Phase": list(agent_outputs)}


def _render_checkpoint(state: dict[str, Any]) -> str:
    keys = {**_checkpoint_keys(state.get("agent_outputs") or []), **(state.get("key_order") or {})}
    return _render(state.get("title", ""), state["sections"], CHECKPOINT_SECTIONS, keys, state.get("preamble", ""))


def _state_key(session: str, state: dict[str, Any]) -> str:
    digest = hashlib.sha256(jsoncodec.canonical(state)).hexdigest()[:16]
    return f"{session}/{state['phase_dir']}@{digest}"


def _output(agent: str, text: str) -> OutputRecord:
    document = _markdown(text)
    details = _fields(document, "Metadata", "Execution Details")
    errors = _error_details(document.last("Error Details") or [])
    model = details.get("Model", "")
    return OutputRecord(
        agent_name=agent,
        content=text,
        status="" if _blank(details.get("Status")) else details["Status"],
        model="" if _blank(model) else model,
        tokens_in=_int(details.get("Input Tokens")) or 0,
        tokens_out=_int(details.get("Output Tokens")) or 0,
        tools_used=_names(details.get("Tools Used")),
        duration=_seconds(details.get("Duration")),
        error="" if _blank(errors.get("error_message")) else errors["error_message"],
        error_details=errors,
        created_at=parse_time(details.get("Executed")),
    )


ERROR_FIELDS = {"Error Type": "error_type", "Error Message": "error_message"}


def _error_details(lines: list[str]) -> dict[str, str]:
    """Haytham's "## Error Details": Error Type, Error Message, and a Stack Trace in a ``` block below its line."""
    details: dict[str, str] = {}
    for index, line in enumerate(lines):
        match = _BULLET.match(line.strip())
        pair = _pair(match.group(1).strip()) if match else None
        if pair is None:
            continue
        key, value = pair
        if key in ERROR_FIELDS and ERROR_FIELDS[key] not in details:
            details[ERROR_FIELDS[key]] = value
        elif key == "Stack Trace" and "stack_trace" not in details:
            block = lines[index + 1 :]
            if not value and block and block[0].strip().startswith("```"):
                end = next((n for n in range(1, len(block)) if block[n].strip() == "```"), len(block))
                value = "\n".join(block[1:end])
            details["stack_trace"] = value
    return details


def _feedback(text: str) -> FeedbackRecord:
    document = _markdown(text)
    review = _fields(document, "Review Status")
    taken = _fields(document, "Action Taken")
    action = taken.get("Action", "")
    if _blank(action):
        raise _Malformed("malformed user_feedback.md: no '- Action:' under '## Action Taken'")
    comments = "\n".join(_trimmed(document.first("User Comments") or []))
    changes: list[str] = []
    for line in _trimmed(document.first("Requested Changes") or []):
        match = _BULLET.match(line.strip())
        if match:
            item = match.group(1).strip()
            numbered = re.match(r"^Change \d+:\s*(.*)$", item)
            if numbered:
                changes.append(numbered.group(1))
            elif item.lower().rstrip(".") != "no changes requested":
                changes.append(item)
        elif line.strip() and changes:
            changes[-1] += "\n" + line.strip()
        elif line.strip():
            changes.append(line.strip())
    return FeedbackRecord(
        action=action,
        reviewed=_bool(review.get("Reviewed", "true")),
        approved=_bool(review.get("Approved")),
        comments="" if comments.strip() == "No comments provided" else comments,
        requested_changes=changes,
        retry_count=_int(taken.get("Retry Count")) or 0,
        reviewer_name="" if _blank(review.get("Reviewer")) else review["Reviewer"],
        created_at=parse_time(review.get("Timestamp")),
    )


def _render_feedback(feedback: Any, phase_name: str) -> str:
    changes = feedback.requested_changes or []
    lines = [f"- Change {number}: {change}" for number, change in enumerate(changes, 1)] or ["- No changes requested"]
    reviewer = f"- Reviewer: {feedback.reviewer_name}\n" if feedback.reviewer_name else ""  # not in Haytham's own
    return (
        f"# User Feedback: {phase_name}\n\n"
        "## Review Status\n"
        f"- Reviewed: {str(bool(feedback.reviewed)).lower()}\n"
        f"- Approved: {str(bool(feedback.approved)).lower()}\n"
        f"- Timestamp: {_iso(feedback.created_at)}\n"
        f"{reviewer}\n"
        "## User Comments\n"
        f"{feedback.comments or 'No comments provided'}\n\n"
        "## Requested Changes\n" + "\n".join(lines) + "\n\n"
        "## Action Taken\n"
        f"- Action: {feedback.action}\n"
        f"- Retry Count: {feedback.retry_count}\n"
    )


def _project_of(session_dir: Path) -> str | None:
    return session_dir.parent.parent.name if session_dir.parent.name == "sessions" else None


def read(path: Path) -> Iterator[Record]:
    path = Path(path)
    if path.is_file():
        if path.name == MANIFEST:
            yield from _read_session(path.parent, _project_of(path.parent))
        else:
            yield Problem(str(path), f"not a Haytham {MANIFEST}; skipped")
        return
    if (path / MANIFEST).is_file() or any(PHASE_DIR.match(child.name) for child in _children(path, _PEEK)):
        yield from _read_session(path, _project_of(path))
    elif path.name == "sessions" or _holds_sessions(path):
        yield from _read_sessions(path, path.parent.name if path.name == "sessions" else None)
    elif (path / "sessions").is_dir():
        yield from _read_project(path)
    elif path.name == "projects" or not (path / "projects").is_dir():
        yield from _read_projects(path)
    else:
        for child in sorted(_children(path)):
            if child.name != "projects":
                yield Problem(str(child), "not part of the Haytham projects/ tree; skipped")
        yield from _read_projects(path / "projects")


def _read_projects(folder: Path) -> Iterator[Record]:
    for child in sorted(_children(folder)):
        if child.is_dir() and (child / "sessions").is_dir():
            yield from _read_project(child)
        else:
            yield Problem(str(child), "not a Haytham project folder (<project>/sessions/); skipped")


def _read_project(folder: Path) -> Iterator[Record]:
    for child in sorted(_children(folder)):
        if child.name != "sessions":
            yield Problem(str(child), "stray entry in a Haytham project folder; skipped")
    yield from _read_sessions(folder / "sessions", folder.name)


def _read_sessions(folder: Path, project: str | None) -> Iterator[Record]:
    for child in sorted(_children(folder)):
        if child.is_dir():
            yield from _read_session(child, project)
        else:
            yield Problem(str(child), "stray file among Haytham sessions; skipped")


def _phase_folders(folder: Path, phases: dict[int, Path]) -> Iterator[Problem]:
    """Put the session folder's phase folders into `phases` by number; anything else there but the manifest (and
    its kept versions) is a problem."""
    for child in sorted(_children(folder)):
        match = PHASE_DIR.match(child.name)
        if child.name == MANIFEST or (child.is_file() and child.name.startswith("session_manifest.")):
            continue
        if child.is_dir() and match:
            number = int(match.group(1))
            if number in phases:
                yield Problem(str(child), f"a second folder for phase {number} (after {phases[number].name}); skipped")
            else:
                phases[number] = child
        else:
            yield Problem(str(child), "stray entry in a Haytham session folder; skipped")


def _read_session(folder: Path, project: str | None) -> Iterator[Record]:
    manifest: _Manifest | None = None
    manifest_path = folder / MANIFEST
    if manifest_path.is_file():
        try:
            manifest, problems = _parse_manifest(_read_text(manifest_path), manifest_path)
            yield from problems
        except _Malformed as exc:
            yield Problem(str(manifest_path), str(exc))
    phases: dict[int, Path] = {}
    yield from _phase_folders(folder, phases)
    histories: dict[int, Path] = {}
    for child in sorted(_children(folder / HISTORY)):
        match = PHASE_DIR.match(child.name)
        if child.is_dir() and match and phases.get(int(match.group(1)), child).name == child.name:
            histories[int(match.group(1))] = child
        elif not (child.is_file() and STAMPED.match(child.name) and child.name.startswith("session_manifest.")):
            yield Problem(str(child), f"stray entry in the session's {HISTORY} folder; skipped")
    if not manifest_path.is_file():
        if not phases:
            yield Problem(str(folder), f"not a Haytham session folder: no {MANIFEST} and no phase folders")
            return
        yield Problem(str(manifest_path), f"missing {MANIFEST}; the session is imported from its phase folders")

    metadata_section = manifest.sections["Metadata"] if manifest else {}
    external_id = folder.name
    raw_status = metadata_section.get("Status", "")
    yield SessionRecord(
        external_id=external_id,
        agent="haytham",
        execution_mode=metadata_section.get("Execution Mode", ""),
        status=SESSION_STATUS.get(raw_status),
        metadata=_session_metadata(manifest) if manifest else {"source_format": NAME},
        project=project or metadata_section.get("Project ID") or None,
    )
    rows = manifest.rows if manifest else {}
    for number in sorted(set(rows) | set(phases) | set(histories)):
        folder_name = (phases.get(number) or histories.get(number) or Path()).name or None
        yield from _read_phase(
            external_id, number, folder_name, phases.get(number), histories.get(number), rows.get(number, {})
        )


def _session_metadata(manifest: _Manifest) -> dict[str, Any]:
    section = manifest.sections["Metadata"]
    metadata: dict[str, Any] = {"source_format": NAME}
    for key, name in (
        ("Project ID", "project_id"),
        ("Session ID", "session_id"),
        ("User ID", "user_id"),
        ("Workflow Type", "workflow_type"),
        ("Created", "created"),
        ("Last Updated", "last_updated"),
        ("Status", "status"),
    ):
        if key in section:
            metadata[name] = section[key]
    current = manifest.sections.get("Current Phase")
    if isinstance(current, dict):
        metadata["current_phase"] = {
            "phase": _int(current.get("Phase")),
            "name": current.get("Name", ""),
            "status": current.get("Status", ""),
            "can_resume": _bool(current.get("Can Resume")),
        }
    metrics = manifest.sections.get("Metrics")
    if isinstance(metrics, dict):
        cost = _cost(metrics.get("Total Cost"))
        metadata["metrics"] = {
            "total_duration": _seconds(metrics.get("Total Duration")),
            "total_tokens": _int(metrics.get("Total Tokens")),
            "total_cost": str(cost) if cost is not None else None,
        }
    metadata["manifest"] = {"title": manifest.title, "sections": manifest.sections}
    return metadata


def _read_phase(
    session: str, number: int, name: str | None, folder: Path | None, history: Path | None, row: dict[str, str]
) -> Iterator[Record]:
    """A phase's files: earlier versions (HISTORY, old write-backs' kept files) first, oldest first, then the current.

    Only the phase folder's own checkpoint.md says what the phase is now (a phase a restore returned
    to pending has its checkpoint in HISTORY only, and its manifest row says pending).
    """
    files = _PhaseFiles()
    yield from files.sort_folder(folder)
    yield from files.sort_history(history)
    current = yield from _phase_checkpoints(session, number, name, folder, files)
    outputs: list[OutputRecord] = []
    yield from _phase_outputs(folder, history, files, current, outputs)
    feedback: list[FeedbackRecord] = []
    for path in sorted(files.earlier["user_feedback"], key=_kept_order) + ([files.feedback] if files.feedback else []):
        try:
            feedback.append(_feedback(_read_text(path)))
        except _Malformed as exc:
            yield Problem(str(path), str(exc))
    yield _phase_record(session, number, name, row, current, outputs, feedback)


@dataclass
class _PhaseFiles:
    """A phase's files by what they hold: the folder's checkpoint.md and its kept versions (`current`), earlier
    versions by kind, the current feedback file, and the markdown files that may be agent outputs."""

    current: list[Path] = field(default_factory=list)
    earlier: dict[str, list[Path]] = field(
        default_factory=lambda: {"checkpoint": [], "user_feedback": [], "outputs": []}
    )
    feedback: Path | None = None
    candidates: list[Path] = field(default_factory=list)

    def sort_folder(self, folder: Path | None) -> Iterator[Problem]:
        for child in sorted(_children(folder)) if folder else []:
            kept = KEPT.match(child.name)
            if child.is_dir():
                yield Problem(str(child), "stray folder in a Haytham phase folder; skipped")
            elif child.name == CHECKPOINT or (kept and kept.group(1) == "checkpoint"):
                self.current.append(child)
            elif kept and kept.group(1) == "user_feedback":
                self.earlier["user_feedback"].append(child)
            elif child.name == FEEDBACK:
                self.feedback = child
            elif child.name.endswith(".md") and not kept:
                self.candidates.append(child)
            else:
                yield Problem(str(child), "stray file in a Haytham phase folder; skipped")

    def sort_history(self, history: Path | None) -> Iterator[Problem]:
        for child in sorted(_children(history)) if history else []:
            stamped = STAMPED.match(child.name) if child.is_file() else None
            if stamped is None or stamped.group(1) == "session_manifest":
                yield Problem(str(child), f"stray entry in the session's {HISTORY} folder; skipped")
            else:
                self.earlier[stamped.group(1) if stamped.group(1) in self.earlier else "outputs"].append(child)


def _phase_checkpoints(
    session: str, number: int, name: str | None, folder: Path | None, files: _PhaseFiles
) -> Generator[Record, None, dict[str, Any] | None]:
    """The phase's checkpoints, oldest first, each state once; returns the current state (the folder's own)."""
    current: dict[str, Any] | None = None
    keys: set[str] = set()
    versions = sorted(files.earlier["checkpoint"], key=_kept_order)
    versions += sorted(files.current, key=lambda p: (p.name == CHECKPOINT, _kept_order(p)))
    for path in versions:
        try:
            state = _checkpoint_state(_read_text(path), name or "")
        except _Malformed as exc:
            yield Problem(str(path), str(exc))
            continue
        if path.parent == folder:
            current = state
        key = _state_key(session, state)
        if key not in keys:
            keys.add(key)
            yield _checkpoint_record(session, number, state, path, key)
    return current


def _phase_outputs(
    folder: Path | None,
    history: Path | None,
    files: _PhaseFiles,
    current: dict[str, Any] | None,
    outputs: list[OutputRecord],
) -> Iterator[Problem]:
    """Add the phase's agent outputs to `outputs`: earlier ones first, then those the current state lists, in its
    order, then any other file headed as one."""
    listed = [f"{agent}.md" for agent in (current or {}).get("agent_outputs", [])]
    for agent_file in listed:
        if folder and not (folder / agent_file).is_file():
            yield Problem(str(folder / agent_file), f"listed in {CHECKPOINT} (Agent Outputs) but missing; skipped")
    for path in sorted(files.earlier["outputs"], key=_kept_order) + sorted(
        files.candidates, key=lambda p: (p.name not in listed, listed.index(p.name) if p.name in listed else 0)
    ):
        try:
            text = _read_text(path)
        except _Malformed as exc:
            yield Problem(str(path), str(exc))
            continue
        stamped = STAMPED.match(path.name) if path.parent == history else None  # a match: sort_history kept it
        if stamped is not None:
            outputs.append(_output(stamped.group(1), text))
        elif path.name in listed or text.lstrip().startswith("# Agent Output"):
            outputs.append(_output(path.name.removesuffix(".md"), text))
        else:
            yield Problem(str(path), "not an agent output (no '# Agent Output' heading, not listed); skipped")


def _sections(state: dict[str, Any] | None, name: str) -> dict[str, str]:
    value = (state or {}).get("sections", {}).get(name)
    return value if isinstance(value, dict) else {}


def _errors(state: dict[str, Any] | None) -> list[str]:
    value = (state or {}).get("sections", {}).get("Errors")
    if isinstance(value, dict):
        return [f"{key}: {item}" for key, item in value.items()]
    if isinstance(value, list):
        return [str(item) for item in value]
    return [value] if isinstance(value, str) and value else []


def _phase_name(number: int, folder: str | None, *names: str | None) -> str:
    for name in names:
        if not _blank(name):
            return str(name)
    if number in PHASE_NAMES:
        return PHASE_NAMES[number]
    match = PHASE_DIR.match(folder or "")
    return match.group(2).replace("_", " ").title() if match else f"Phase {number}"


def _checkpoint_record(session: str, number: int, state: dict[str, Any], path: Path, key: str) -> CheckpointRecord:
    metadata = _sections(state, "Metadata")
    raw_status = metadata.get("Status", "")
    errors = _errors(state)
    return CheckpointRecord(
        session=session,
        key=key,
        state=state,
        name=state["phase_dir"],
        kind="phase",
        status=CHECKPOINT_STATUS.get(raw_status, "in_progress"),
        status_reason="; ".join(errors) if raw_status == "failed" else "",
        phase=number,
        created_at=parse_time(metadata.get("Completed")) or parse_time(metadata.get("Started")),
        metadata={
            "source_path": str(path),
            "phase_status": raw_status,
            "phase_name": _phase_name(number, state["phase_dir"], metadata.get("Phase Name")),
        },
    )


def _phase_record(
    session: str,
    number: int,
    folder: str | None,
    row: dict[str, str],
    state: dict[str, Any] | None,
    outputs: list[OutputRecord],
    feedback: list[FeedbackRecord],
) -> PhaseRecord:
    metadata = _sections(state, "Metadata")
    metrics = _sections(state, "Metrics")

    def value(key: str) -> str | None:
        return metadata[key] if key in metadata else row.get(key)

    raw_status = value("Status") or "pending"
    extra: dict[str, Any] = {}
    if folder:
        extra["dir"] = folder
    if row:
        extra["row"] = row  # the manifest's cells as written, e.g. a duration Haytham truncated to whole seconds
    if raw_status not in PHASE_STATUSES:
        extra["status"] = raw_status
    if not _blank(metadata.get("Execution Mode")):
        extra["execution_mode"] = metadata["Execution Mode"]
    if _int(metrics.get("Total Tokens")) is not None:
        extra["total_tokens"] = _int(metrics.get("Total Tokens"))
    agents = _sections(state, "Agents in Phase")
    if agents:
        extra["agents"] = agents
    times = {}
    for part in (metrics.get("Agent Execution Times") or "").split(","):
        pair = _pair(part.strip())
        if pair and _seconds(pair[1]) is not None:
            times[pair[0]] = _seconds(pair[1])
    if times:
        extra["agent_execution_times"] = times
    return PhaseRecord(
        session=session,
        number=number,
        name=_phase_name(number, folder, metadata.get("Phase Name"), row.get("Name")),
        status=raw_status if raw_status in PHASE_STATUSES else "pending",
        started_at=parse_time(value("Started")),
        completed_at=parse_time(value("Completed")),
        duration=_seconds(value("Duration")),
        retry_count=_int(metadata.get("Retry Count")) or 0,
        tokens_in=_int(metrics.get("Input Tokens")) or 0,
        tokens_out=_int(metrics.get("Output Tokens")) or 0,
        cost=_cost(metrics.get("Cost")) or Decimal(0),
        errors=_errors(state),
        metadata=extra,
        outputs=outputs,
        feedback=feedback,
    )


# ---- writing -----------------------------------------------------------------------------------


def _safe(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", str(name)).lstrip(".")
    return cleaned or "_"


def _phase_dir(phase: Any, state: dict[str, Any] | None) -> str:
    for name in ((state or {}).get("phase_dir"), (phase.metadata or {}).get("dir") if phase else None):
        if isinstance(name, str) and PHASE_DIR.match(name) and _safe(name) == name:
            return name
    number = phase.number if phase else 0
    return PHASE_DIRS.get(number) or f"phase_{number}_{_safe((phase.name if phase else '') or 'phase').lower()}"


def _is_phase_state(state: Any) -> bool:
    return isinstance(state, dict) and isinstance(state.get("sections"), dict) and "phase_dir" in state


def _whole_seconds(seconds: float | None) -> str:
    """A duration in the manifest's phase table, as Haytham's `_update_session_manifest` writes it."""
    return f"{int(seconds)}s" if seconds else "-"


def _same_duration(cell: str, seconds: float | None) -> bool:
    """Whether a table cell could be Haytham's whole seconds of the duration checkpoint.md shows to 0.1 s."""
    whole = _seconds(cell)
    if whole is None or not seconds:
        return cell == _whole_seconds(seconds)
    return -0.05 <= seconds - whole < 1.05


def _row(phase: Any) -> list[str]:
    """The phase's table row: the cells as read while they agree with the phase, else rendered.

    A cell agrees when it says the same, or "-" (the manifest may lag behind checkpoint.md); a
    duration agrees when it is what Haytham's truncation to whole seconds could have made of it.
    """
    status = (phase.metadata or {}).get("status") or phase.status
    cells = [str(phase.number), phase.name, status, _iso(phase.started_at), _iso(phase.completed_at)]
    cells.append(_whole_seconds(phase.duration))
    read = (phase.metadata or {}).get("row")
    if not isinstance(read, dict):
        return cells
    source = [str(read.get(column, "")) for column in TABLE_COLUMNS]
    agree = [
        source[:3] == cells[:3],
        source[3] == "-" or parse_time(source[3]) == phase.started_at,
        source[4] == "-" or parse_time(source[4]) == phase.completed_at,
        source[5] == "-" or _same_duration(source[5], phase.duration),
    ]
    return source if all(agree) else cells


def _table(phases: list[Any]) -> str:
    lines = [
        "",
        "| " + " | ".join(TABLE_COLUMNS) + " |",
        "|" + "|".join("-" * (len(c) + 2) for c in TABLE_COLUMNS) + "|",
    ]
    lines += ["| " + " | ".join(_row(phase)) + " |" for phase in phases]
    return "\n".join(lines)


def _manifest_text(session: Any, phases: list[Any], timeline: _Timeline) -> str:
    metadata = session.metadata or {}
    stored = metadata.get("manifest") if metadata.get("source_format") == NAME else None
    if isinstance(stored, dict) and isinstance(stored.get("sections"), dict):
        title = stored.get("title") or "Session Manifest"
        sections = {
            name: dict(value) if isinstance(value, dict) else value for name, value in stored["sections"].items()
        }
    else:
        title = "Session Manifest"
        sections = {
            "Metadata": {
                "Session ID": session.external_id,
                "Project ID": session.project.slug,
                "User ID": "",
                "Workflow Type": "",
                "Execution Mode": session.execution_mode,
                "Created": _iso(session.created_at),
                "Last Updated": _iso(session.updated_at),
                "Status": "",
            }
        }
    head = sections.setdefault("Metadata", {})
    if isinstance(head, dict):
        if session.execution_mode and head.get("Execution Mode") != session.execution_mode:
            head["Execution Mode"] = session.execution_mode
        if SESSION_STATUS.get(head.get("Status", "")) != session.status:
            head["Status"] = HAYTHAM_SESSION_STATUS.get(session.status, session.status)
    sections["Phase Status"] = _table(phases)
    text = _render(title, sections, MANIFEST_SECTIONS, MANIFEST_KEYS)
    if timeline.restored is not None:  # nothing came in since: the manifest says where the restore put Haytham
        number, version, when = timeline.restored
        text = _updated_manifest(text, version.state, number, when)
    return text


def _output_text(output: Any, phase: Any) -> str:
    """An output as Haytham's `_format_agent_output` writes it (one read from Haytham's files is its file)."""
    content: str = output.content  # a PhaseOutput's text
    if content.lstrip().startswith("# Agent Output"):
        return content
    tools = ", ".join(str(tool) for tool in output.tools_used or []) or "none"
    text = (
        f"# Agent Output: {output.agent_name}\n\n"
        "## Metadata\n"
        f"- Agent: {output.agent_name}\n"
        f"- Phase: {phase.number} - {phase.name}\n"
        f"- Executed: {_iso(output.created_at)}\n"
        f"- Duration: {_duration(output.duration)}\n"
        f"- Status: {output.status or '-'}\n\n"
        "## Execution Details\n"
        f"- Model: {output.model or '-'}\n"
        f"- Input Tokens: {output.tokens_in or '-'}\n"
        f"- Output Tokens: {output.tokens_out or '-'}\n"
        f"- Tools Used: [{tools}]\n\n"
        "## Output\n\n"
        f"{output.content}\n"
    )
    details = output.error_details or {}
    if output.error or details:
        text += (
            "\n## Error Details\n"
            f"- Error Type: {details.get('error_type') or 'Unknown'}\n"
            f"- Error Message: {output.error or details.get('error_message') or 'No message'}\n"
        )
        if details.get("stack_trace"):
            text += f"- Stack Trace:\n```\n{details['stack_trace']}\n```\n"
    return text


def _kept_names(base: str, moments: list[datetime]) -> list[str]:
    """`<base>.<stamp>.md` for earlier versions, oldest first, stamps made strictly increasing."""
    names: list[str] = []
    previous: datetime | None = None
    for moment in moments:
        moment = moment.astimezone(UTC).replace(microsecond=0)
        if previous is not None and moment <= previous:
            moment = previous + timedelta(seconds=1)
        names.append(f"{base}.{_stamp(moment)}.md")
        previous = moment
    return names


# ---- which version of a phase is current, and what goes with it --------------------------------


@dataclass
class _Version:
    """A distinct state of a phase's checkpoint.md, and when its run started and ended (or was stored)."""

    state: dict[str, Any]
    moment: datetime
    start: datetime


def _version(state: dict[str, Any], stored_at: datetime) -> _Version:
    metadata = _sections(state, "Metadata")
    start = parse_time(metadata.get("Started"))
    moment = parse_time(metadata.get("Completed")) or start or stored_at
    return _Version(state, moment, start or moment)


@dataclass
class _Timeline:
    """A session's phase checkpoints replayed in order (`seq`).

    An imported version becomes its phase's current one; a restore of phase N makes its version N's
    current one and leaves the phases after N without one (`reset`), as they were before they ran.
    `restored` is (N, version, when) if a restore is the last thing that happened to the phases.
    """

    versions: dict[int, list[_Version]] = field(default_factory=dict)
    current: dict[int, _Version] = field(default_factory=dict)
    reset: set[int] = field(default_factory=set)
    restored: tuple[int, _Version, datetime] | None = None

    def bound(self, number: int, version: _Version) -> datetime | None:
        """When the next version of the phase started: outputs and feedback from then on belong to it."""
        later = [other for other in self.versions.get(number, []) if other.moment > version.moment]
        return min(later, key=lambda other: other.moment).start if later else None


def _timeline(session: Any) -> _Timeline:

    timeline = _Timeline()
    loaded: dict[bytes, _Version | None] = {}
    rows = Checkpoint.objects.filter(session=session, phase__isnull=False).order_by("seq")
    for number, kind, state_hash, root, created_at in rows.values_list(
        "phase", "kind", "state_hash", "root", "created_at"
    ):
        digest = bytes(state_hash)
        if digest not in loaded:
            state = store.load_state(bytes(root))
            loaded[digest] = found = _version(state, created_at) if _is_phase_state(state) else None
            if found is not None:
                timeline.versions.setdefault(number, []).append(found)
        version = loaded[digest]
        if version is None:
            continue
        timeline.current[number] = version
        timeline.reset.discard(number)
        timeline.restored = None
        if kind == CheckpointKind.RESTORE:
            for later in [other for other in timeline.current if other > number]:
                del timeline.current[later]
                timeline.reset.add(later)
            timeline.restored = (number, version, created_at)
    for versions in timeline.versions.values():
        versions.sort(key=lambda version: version.moment)
    return timeline


def _current_outputs(outputs: list[Any], bound: datetime | None) -> list[Any]:
    """Each agent's latest attempt from before `bound` (all of them when there is no later version)."""

    return latest_attempts([output for output in outputs if bound is None or output.created_at < bound])


def _current_feedback(feedback: list[Any], bound: datetime | None) -> Any | None:
    """The latest decision from before `bound`: a later one was about a later version."""
    earlier = [item for item in feedback if bound is None or item.created_at < bound]
    return max(earlier, key=lambda item: (item.created_at, item.pk), default=None)


# ---- export ------------------------------------------------------------------------------------


def export(session: Any, out_dir: Path) -> list[Path]:
    """`projects/<project>/sessions/<session>/…` under out_dir; existing files are not replaced.

    Each phase folder holds what Haytham would have there at the session's head: the phase's current
    checkpoint.md, the agent outputs and the user_feedback.md that go with it (none for a phase a
    restore returned to pending). Every other version, attempt and decision goes to HISTORY as
    `<name>.<stamp>.md`, so that importing the export gives the same timeline again.
    """
    base = Path(out_dir) / "projects" / _safe(session.project.slug) / "sessions" / _safe(session.external_id)
    phases = list(session.phases.order_by("number").prefetch_related("outputs", "feedback"))
    timeline = _timeline(session)
    written = [write_atomically(base / MANIFEST, _manifest_text(session, phases, timeline).encode("utf-8"))]
    by_number = {phase.number: phase for phase in phases}
    for number in sorted(set(by_number) | set(timeline.versions)):
        written += _export_phase(base, by_number.get(number), number, timeline)
    return written


def _export_phase(base: Path, phase: Any, number: int, timeline: _Timeline) -> list[Path]:
    versions = timeline.versions.get(number, [])
    version = timeline.current.get(number)
    if phase is None and not versions:
        return []
    name = _phase_dir(phase, (version or versions[-1]).state if versions else None)
    folder, history = base / name, base / HISTORY / name
    if versions or (phase and ((phase.metadata or {}).get("dir") or phase.outputs.all() or phase.feedback.all())):
        folder.mkdir(parents=True, exist_ok=True)
    bound = timeline.bound(number, version) if version else None
    reset = number in timeline.reset
    files: list[tuple[Path, str]] = []

    if version is not None:
        files.append((folder / CHECKPOINT, _render_checkpoint(version.state)))
    earlier = [other for other in versions if other is not version]
    for kept, other in zip(_kept_names("checkpoint", [v.moment for v in earlier]), earlier, strict=True):
        files.append((history / kept, _render_checkpoint(other.state)))

    if phase is not None:
        outputs = sorted(phase.outputs.all(), key=lambda item: (item.attempt, item.created_at, item.pk))
        current = [] if reset else _current_outputs(outputs, bound)
        files += [(folder / f"{_safe(output.agent_name)}.md", _output_text(output, phase)) for output in current]
        for agent in dict.fromkeys(output.agent_name for output in outputs):
            rest = [output for output in outputs if output.agent_name == agent and output not in current]
            names = _kept_names(_safe(agent), [output.created_at for output in rest])
            files += [(history / kept, _output_text(output, phase)) for kept, output in zip(names, rest, strict=True)]

        feedback = sorted(phase.feedback.all(), key=lambda item: (item.created_at, item.pk))
        decision = None if reset else _current_feedback(feedback, bound)
        if decision is not None:
            files.append((folder / FEEDBACK, _render_feedback(decision, phase.name)))
        rest = [item for item in feedback if item is not decision]
        names = _kept_names("user_feedback", [item.created_at for item in rest])
        files += [(history / kept, _render_feedback(item, phase.name)) for kept, item in zip(names, rest, strict=True)]
    return [write_atomically(path, text.encode("utf-8")) for path, text in files]


# ---- write-back --------------------------------------------------------------------------------


def _sync_folder(folder: Path) -> None:
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _durable(path: Path, data: bytes, *, replace: bool) -> None:
    """Write through a synced temporary file, then rename it over `path`, or link it (never over a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        with open(temporary, "xb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if replace:
            os.replace(temporary, path)
        else:
            os.link(temporary, path)  # FileExistsError if `path` exists
    finally:
        temporary.unlink(missing_ok=True)
    _sync_folder(path.parent)


def _keep(path: Path, data: bytes, session_dir: Path, now: datetime) -> Path:
    """A copy of `path` in HISTORY, `<name>.<stamp>[-n].md` (a file that is already stamped keeps its name)."""
    folder = session_dir / HISTORY / path.parent.relative_to(session_dir)
    stamped = KEPT.match(path.name)
    stem = path.name.removesuffix(".md") if stamped else f"{path.name.removesuffix('.md')}.{_stamp(now)}"
    attempt = 0
    while True:
        kept = folder / f"{stem}{f'-{attempt}' if attempt else ''}.md"
        try:
            _durable(kept, data, replace=False)
            return kept
        except FileExistsError:
            attempt += 1


def _replace(path: Path, data: bytes, now: datetime, session_dir: Path) -> list[Path]:
    """Write `path` atomically; a different file already there is kept in HISTORY first."""
    if not path.exists():
        _durable(path, data, replace=False)
        return [path]
    old = path.read_bytes()
    if old == data:
        return []
    kept = _keep(path, old, session_dir, now)
    _durable(path, data, replace=True)
    return [path, kept]


def _retire(path: Path, now: datetime, session_dir: Path) -> list[Path]:
    """Move a file Haytham would read into HISTORY (kept first, then removed)."""
    kept = _keep(path, path.read_bytes(), session_dir, now)
    path.unlink()
    _sync_folder(path.parent)
    return [kept]


def _session_folder(session: Any, folder: Path) -> Path:
    folder = Path(folder)
    if (folder / MANIFEST).is_file() and folder.name == session.external_id:
        return folder
    projects = [session.project.slug, (session.metadata or {}).get("project_id")]
    candidates: list[Path] = [folder / "projects" / str(p) / "sessions" / session.external_id for p in projects if p]
    candidates += [folder / str(p) / "sessions" / session.external_id for p in projects if p]
    candidates += [folder / "sessions" / session.external_id, folder / session.external_id, folder]
    for candidate in candidates:
        if candidate.is_dir() and (candidate.name == session.external_id or (candidate / MANIFEST).is_file()):
            return candidate
    raise FileNotFoundError(f"no Haytham session folder for {session.external_id} under {folder}")


def _updated_manifest(text: str, state: dict[str, Any], number: int, now: datetime) -> str:
    """The manifest as Haytham would have it right after phase `number` wrote this state.

    Haytham's `_update_session_manifest` rules: the phase's row (duration in whole seconds), Current
    Phase, "Can Resume: true" only for in_progress and failed, Last Updated. The phases after it go
    back to the row they had before they ran ("pending | - | - | -"), and the session is in_progress.
    """
    metadata = _sections(state, "Metadata")
    name = _phase_name(number, state.get("phase_dir"), metadata.get("Phase Name"))
    status = metadata.get("Status", "in_progress")
    started, completed = metadata.get("Started") or "-", metadata.get("Completed") or "-"
    duration = _seconds(metadata.get("Duration"))
    current = {"Phase": str(number), "Name": name, "Status": status}
    current["Can Resume"] = str(status in ("in_progress", "failed")).lower()
    lines = text.split("\n")
    section = ""
    for index, line in enumerate(lines):
        heading = _HEADING.match(line)
        if heading:
            section = heading.group(1)
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")] if line.strip().startswith("|") else []
        row = _int(cells[0]) if cells else None
        if section == "Phase Status" and row == number and len(cells) == len(TABLE_COLUMNS):
            same_run = cells[3:5] == [started, completed] and _same_duration(cells[5], duration)
            seconds = cells[5] if same_run else _whole_seconds(duration)  # Haytham truncated the exact one
            lines[index] = "| " + " | ".join([str(number), name, status, started, completed, seconds]) + " |"
        elif section == "Phase Status" and row is not None and row > number and len(cells) == len(TABLE_COLUMNS):
            lines[index] = f"| {row} | {cells[1]} | pending | - | - | - |"
        elif section == "Current Phase":
            for key, value in current.items():
                if line.startswith(f"- {key}:"):
                    lines[index] = f"- {key}: {value}"
        elif section == "Metadata" and line.startswith("- Last Updated:"):
            lines[index] = f"- Last Updated: {_iso(now)}"
        elif section == "Metadata" and line.startswith("- Status:"):
            lines[index] = f"- Status: {HAYTHAM_SESSION_STATUS['active']}"
    return "\n".join(lines)


def write_back(session: Any, checkpoint: Any, folder: Path) -> list[Path]:
    """Put a restored phase checkpoint back where Haytham resumes from it.

    For the restored phase N: checkpoint.md = the restored state; each agent's output and
    user_feedback.md as they were at that version (from before the phase's next version started);
    outputs and a review that only came later leave the folder. The phases after N are returned to
    before they ran: their files leave their folders and their manifest rows read pending. The
    manifest says Current Phase = N the way Haytham writes it. Every file that changes is kept in
    HISTORY first and replaced atomically; older write-backs' stamped files leave the phase folders
    too. Returns the files written and kept.
    """

    state = store.load_state(bytes(checkpoint.root))
    if checkpoint.phase is None or not _is_phase_state(state):
        raise ValueError(f"checkpoint #{checkpoint.seq} is not a Haytham phase checkpoint")
    now = datetime.now(UTC)
    number = checkpoint.phase
    session_dir = _session_folder(session, folder)
    phase = session.phases.filter(number=number).first()
    phase_dir = session_dir / _phase_dir(phase, state)
    timeline = _timeline(session)
    bound = timeline.bound(number, _version(state, checkpoint.created_at))

    written = _replace(phase_dir / CHECKPOINT, _render_checkpoint(state).encode("utf-8"), now, session_dir)
    if phase is not None:
        outputs = list(phase.outputs.all())
        current = _current_outputs(outputs, bound)
        for output in current:
            text = _output_text(output, phase).encode("utf-8")
            written += _replace(phase_dir / f"{_safe(output.agent_name)}.md", text, now, session_dir)
        for agent in {output.agent_name for output in outputs} - {output.agent_name for output in current}:
            if (phase_dir / f"{_safe(agent)}.md").is_file():  # this agent first ran after the restored version
                written += _retire(phase_dir / f"{_safe(agent)}.md", now, session_dir)
        written += _write_decision(
            phase, _current_feedback(list(phase.feedback.all()), bound), phase_dir, now, session_dir
        )

    for child in sorted(_children(session_dir)):
        match = PHASE_DIR.match(child.name)
        if not (child.is_dir() and match):
            continue
        later = int(match.group(1)) > number
        for path in sorted(_children(child)):
            if path.is_file() and path.name.endswith(".md") and (later or KEPT.match(path.name)):
                written += _retire(path, now, session_dir)

    manifest = session_dir / MANIFEST
    if manifest.is_file():
        updated = _updated_manifest(_read_text(manifest), state, number, now)
        written += _replace(manifest, updated.encode("utf-8"), now, session_dir)
    return written


def _write_decision(phase: Any, decision: Any | None, phase_dir: Path, now: datetime, session_dir: Path) -> list[Path]:
    """user_feedback.md = the decision, unless the file already says the same; no decision: the file leaves."""
    path = phase_dir / FEEDBACK
    if decision is None:
        return _retire(path, now, session_dir) if path.is_file() and phase.feedback.exists() else []
    if path.is_file():
        try:
            on_disk = _feedback(_read_text(path))
        except _Malformed:
            on_disk = None
        fields = ("action", "reviewed", "approved", "comments", "requested_changes", "retry_count", "reviewer_name")
        if on_disk is not None and all(
            getattr(on_disk, name) == getattr(decision, name) for name in (*fields, "created_at")
        ):
            return []
    return _replace(path, _render_feedback(decision, phase.name).encode("utf-8"), now, session_dir)


def write_feedback(session: Any, phase: Any, feedback: Any, folder: Path, *, now: datetime) -> list[Path]:
    """A reviewer's decision, written to the phase's user_feedback.md the way Haytham's `save_user_feedback` does."""
    session_dir = _session_folder(session, folder)
    phase_dir = session_dir / _phase_dir(phase, None)
    phase_dir.mkdir(parents=True, exist_ok=True)
    return _replace(phase_dir / FEEDBACK, _render_feedback(feedback, phase.name).encode("utf-8"), now, session_dir)
