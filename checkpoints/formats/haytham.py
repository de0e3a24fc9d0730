"""Haytham-style phased sessions: markdown files in `projects/<project>/sessions/<session>/`.

    session_manifest.md            "- Key: value" lists (Metadata, Current Phase, Metrics) and a phase table
    phase_<N>_<name>/checkpoint.md the phase's Metadata, Agents in Phase, Inputs, Outputs, Metrics (…, Errors)
    phase_<N>_<name>/<agent>.md    an agent's output: Metadata, Execution Details, Output (, Error Details)
    phase_<N>_<name>/user_feedback.md  Review Status, User Comments, Requested Changes, Action Taken

Mapping:

* session: project = the `projects/<project>` folder (else the manifest's Project ID), external id = the
  session folder, agent "haytham", execution mode; status in_progress → active, completed →
  completed, failed → failed, paused/interrupted/cancelled → halted (the original in metadata with
  user id, workflow type, created/updated, current phase and metrics; `metadata["manifest"]` keeps
  the manifest's lists verbatim so that export rewrites them);
* one PhaseRecord per phase, from its checkpoint.md, else its row of the manifest's phase table
  (phases listed there without a folder are pending phases); agent outputs with the whole markdown
  as content; user feedback (older `user_feedback.<timestamp>.md` files, kept by write-back, too);
* one CheckpointRecord (kind "phase", name = the phase folder) per version of a phase's
  checkpoint.md: state = its sections as JSON (values verbatim) plus the phase folder and the agent
  output names. Its key is "<session>/<phase folder>@<digest of the state>": importing the same
  files again adds nothing, a changed checkpoint.md adds the new version to the timeline.

Write-back (`write_back`) replaces checkpoint.md, user_feedback.md and session_manifest.md the way
Haytham does, but atomically (temporary file + os.replace) and keeping each previous file as
`<name>.<timestamp>.md` next to it, so nothing is lost.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from .. import jsoncodec
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
PHASE_DIR = re.compile(r"^phase_(\d+)_(.+)$")
KEPT = re.compile(r"^(checkpoint|user_feedback|session_manifest)\.(.+)\.md$")  # a previous version

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


def _render_value(value: Any, order: list[str] | None = None) -> str:
    if isinstance(value, dict):
        keys = [key for key in order or [] if key in value] + [key for key in value if key not in (order or [])]
        return "\n".join(f"- {key}: {value[key]}" if value[key] != "" else f"- {key}:" for key in keys)
    if isinstance(value, list):
        return "\n".join(f"- {item}" for item in value)
    return str(value)


def _render(
    title: str, sections: dict[str, Any], order: list[str], keys: dict[str, list[str]], preamble: str = ""
) -> str:
    parts = [f"# {title}"] if title else []
    if preamble:
        parts.append(preamble)
    for name in [name for name in order if name in sections] + [name for name in sections if name not in order]:
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
    if seconds is None:
        return "-"
    return f"{int(seconds)}s" if seconds == int(seconds) else f"{seconds}s"


def _stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


def _kept_order(path: Path) -> tuple[str, int]:
    """Previous versions (`<name>.<stamp>[-n].md`) oldest first."""
    match = KEPT.match(path.name)
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
    return state


def _render_checkpoint(state: dict[str, Any]) -> str:
    keys = dict(CHECKPOINT_KEYS)
    keys["Agents in Phase"] = list(state.get("agent_outputs") or [])
    return _render(state.get("title", ""), state["sections"], CHECKPOINT_SECTIONS, keys, state.get("preamble", ""))


def _state_key(session: str, state: dict[str, Any]) -> str:
    digest = hashlib.sha256(jsoncodec.canonical(state)).hexdigest()[:16]
    return f"{session}/{state['phase_dir']}@{digest}"


def _output(path: Path, text: str) -> OutputRecord:
    document = _markdown(text)
    details = _fields(document, "Metadata", "Execution Details")
    errors = _fields(document, "Error Details", last=True)
    model = details.get("Model", "")
    return OutputRecord(
        agent_name=path.name.removesuffix(".md"),
        content=text,
        status="" if _blank(details.get("Status")) else details["Status"],
        model="" if _blank(model) else model,
        tokens_in=_int(details.get("Input Tokens")) or 0,
        tokens_out=_int(details.get("Output Tokens")) or 0,
        tools_used=_names(details.get("Tools Used")),
        duration=_seconds(details.get("Duration")),
        error="" if _blank(errors.get("Error Message")) else errors["Error Message"],
    )


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
    for number in sorted(set(rows) | set(phases)):
        yield from _read_phase(external_id, number, phases.get(number), rows.get(number, {}))


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


def _read_phase(session: str, number: int, folder: Path | None, row: dict[str, str]) -> Iterator[Record]:
    versions: list[Path] = []
    feedback_files: list[Path] = []
    candidates: list[Path] = []
    for child in sorted(_children(folder)) if folder else []:
        name = child.name
        kept = KEPT.match(name)
        if child.is_dir():
            yield Problem(str(child), "stray folder in a Haytham phase folder; skipped")
        elif name == CHECKPOINT or (kept and kept.group(1) == "checkpoint"):
            versions.append(child)
        elif name == FEEDBACK or (kept and kept.group(1) == "user_feedback"):
            feedback_files.append(child)
        elif name.endswith(".md") and not kept:
            candidates.append(child)
        else:
            yield Problem(str(child), "stray file in a Haytham phase folder; skipped")
    current: dict[str, Any] | None = None
    keys: set[str] = set()
    for path in sorted(versions, key=lambda p: (p.name == CHECKPOINT, _kept_order(p))):
        try:
            state = _checkpoint_state(_read_text(path), folder.name)  # type: ignore[union-attr]
        except _Malformed as exc:
            yield Problem(str(path), str(exc))
            continue
        current = state
        key = _state_key(session, state)
        if key not in keys:
            keys.add(key)
            yield _checkpoint_record(session, number, state, path, key)

    listed = [f"{name}.md" for name in (current or {}).get("agent_outputs", [])]
    outputs: list[OutputRecord] = []
    for name in listed:
        if folder and not (folder / name).is_file():
            yield Problem(str(folder / name), f"listed in {CHECKPOINT} (Agent Outputs) but missing; skipped")
    for path in sorted(
        candidates, key=lambda p: (p.name not in listed, listed.index(p.name) if p.name in listed else 0)
    ):
        try:
            text = _read_text(path)
        except _Malformed as exc:
            yield Problem(str(path), str(exc))
            continue
        if path.name in listed or text.lstrip().startswith("# Agent Output"):
            outputs.append(_output(path, text))
        else:
            yield Problem(str(path), "not an agent output (no '# Agent Output' heading, not listed); skipped")

    feedback: list[FeedbackRecord] = []
    for path in sorted(feedback_files, key=lambda p: (p.name == FEEDBACK, _kept_order(p))):
        try:
            feedback.append(_feedback(_read_text(path)))
        except _Malformed as exc:
            yield Problem(str(path), str(exc))

    yield _phase_record(session, number, folder, row, current, outputs, feedback)


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
    folder: Path | None,
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
        extra["dir"] = folder.name
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
        name=_phase_name(number, folder.name if folder else None, metadata.get("Phase Name"), row.get("Name")),
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


def _table(phases: list[Any]) -> str:
    lines = [
        "",
        "| " + " | ".join(TABLE_COLUMNS) + " |",
        "|" + "|".join("-" * (len(c) + 2) for c in TABLE_COLUMNS) + "|",
    ]
    for phase in phases:
        status = (phase.metadata or {}).get("status") or phase.status
        cells = [str(phase.number), phase.name, status, _iso(phase.started_at), _iso(phase.completed_at)]
        lines.append("| " + " | ".join(cells + [_duration(phase.duration)]) + " |")
    return "\n".join(lines)


def _manifest_text(session: Any, phases: list[Any]) -> str:
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
    return _render(title, sections, MANIFEST_SECTIONS, MANIFEST_KEYS)


def _output_text(output: Any, phase: Any) -> str:
    if output.content.lstrip().startswith("# Agent Output"):
        return output.content
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
    if output.error:
        text += f"\n## Error Details\n- Error Message: {output.error}\n"
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


def export(session: Any, out_dir: Path) -> list[Path]:
    """`projects/<project>/sessions/<session>/…` under out_dir; existing files are not replaced.

    Each phase's latest checkpoint state becomes its checkpoint.md and earlier distinct states
    `checkpoint.<stamp>.md`; the latest feedback user_feedback.md and earlier ones `user_feedback.<stamp>.md`.
    """
    from .. import store
    from ..models import Checkpoint

    base = Path(out_dir) / "projects" / _safe(session.project.slug) / "sessions" / _safe(session.external_id)
    phases = list(session.phases.order_by("number").prefetch_related("outputs", "feedback"))
    written = [write_atomically(base / MANIFEST, _manifest_text(session, phases).encode("utf-8"))]

    versions: dict[int, list[tuple[bytes, bytes, datetime]]] = {}  # phase → (state hash, root, created_at)
    rows = Checkpoint.objects.filter(session=session, phase__isnull=False).order_by("seq")
    for number, state_hash, root, created_at in rows.values_list("phase", "state_hash", "root", "created_at"):
        digest = bytes(state_hash)
        kept = [item for item in versions.get(number, []) if item[0] != digest]  # a restore repeats a state:
        versions[number] = kept + [(digest, bytes(root), created_at)]  # it counts where it was last seen

    by_number = {phase.number: phase for phase in phases}
    for number in sorted(set(by_number) | set(versions)):
        phase = by_number.get(number)
        states: list[tuple[dict[str, Any], datetime]] = []
        for _, root, created_at in versions.get(number, []):
            state = store.load_state(root)
            if _is_phase_state(state):
                states.append((state, created_at))
        if phase is None and not states:
            continue
        folder = base / _phase_dir(phase, states[-1][0] if states else None)
        if states or (phase and ((phase.metadata or {}).get("dir") or phase.outputs.all() or phase.feedback.all())):
            folder.mkdir(parents=True, exist_ok=True)
        names = _kept_names("checkpoint", [moment for _, moment in states[:-1]]) + [CHECKPOINT]
        for name, (state, _) in zip(names, states, strict=False):
            written.append(write_atomically(folder / name, _render_checkpoint(state).encode("utf-8")))
        if phase is None:
            continue
        for output in phase.outputs.all():
            text = _output_text(output, phase)
            written.append(write_atomically(folder / f"{_safe(output.agent_name)}.md", text.encode("utf-8")))
        feedback = sorted(phase.feedback.all(), key=lambda item: (item.created_at, item.pk))
        names = _kept_names("user_feedback", [item.created_at for item in feedback[:-1]]) + [FEEDBACK]
        for name, item in zip(names, feedback, strict=False):
            written.append(write_atomically(folder / name, _render_feedback(item, phase.name).encode("utf-8")))
    return written


# ---- write-back --------------------------------------------------------------------------------


def _kept_path(path: Path, now: datetime, attempt: int) -> Path:
    stem = path.name.removesuffix(".md")
    suffix = f"-{attempt}" if attempt else ""
    return path.with_name(f"{stem}.{_stamp(now)}{suffix}.md")


def _replace(path: Path, data: bytes, now: datetime) -> list[Path]:
    """Write `path` atomically; an existing different file is kept as `<name>.<stamp>.md` first."""
    if not path.exists():
        return [write_atomically(path, data)]
    if path.read_bytes() == data:
        return []
    attempt = 0
    while True:
        kept = _kept_path(path, now, attempt)
        try:
            os.link(path, kept)  # never replaces an existing file
            break
        except FileExistsError:
            attempt += 1
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        temporary.write_bytes(data)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    return [path, kept]


def _session_folder(session: Any, folder: Path) -> Path:
    folder = Path(folder)
    if (folder / MANIFEST).is_file() and folder.name == session.external_id:
        return folder
    projects = [session.project.slug, (session.metadata or {}).get("project_id")]
    candidates = [folder / "projects" / str(p) / "sessions" / session.external_id for p in projects if p]
    candidates += [folder / str(p) / "sessions" / session.external_id for p in projects if p]
    candidates += [folder / "sessions" / session.external_id, folder / session.external_id, folder]
    for candidate in candidates:
        if candidate.is_dir() and (candidate.name == session.external_id or (candidate / MANIFEST).is_file()):
            return candidate
    raise FileNotFoundError(f"no Haytham session folder for {session.external_id} under {folder}")


def _updated_manifest(text: str, state: dict[str, Any], number: int, now: datetime) -> str:
    """Haytham's own manifest update: the phase's table row, Current Phase, Last Updated."""
    metadata = _sections(state, "Metadata")
    name = _phase_name(number, state.get("phase_dir"), metadata.get("Phase Name"))
    status = metadata.get("Status", "in_progress")
    row = (
        "| "
        + " | ".join(
            [str(number), name, status, metadata.get("Started", "-"), metadata.get("Completed", "-")]
            + [_duration(_seconds(metadata.get("Duration")))]
        )
        + " |"
    )
    lines = text.split("\n")
    section = ""
    replaced = False
    last_row = None
    for index, line in enumerate(lines):
        heading = _HEADING.match(line)
        if heading:
            section = heading.group(1)
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")] if line.strip().startswith("|") else []
        if section == "Phase Status" and cells:
            last_row = index
            if _int(cells[0]) == number:
                lines[index], replaced = row, True
        elif section == "Current Phase":
            for key, value in (("Phase", str(number)), ("Name", name), ("Status", status), ("Can Resume", "true")):
                if line.startswith(f"- {key}:"):
                    lines[index] = f"- {key}: {value}"
        elif section == "Metadata" and line.startswith("- Last Updated:"):
            lines[index] = f"- Last Updated: {_iso(now)}"
    if not replaced and last_row is not None:
        lines.insert(last_row + 1, row)
    return "\n".join(lines)


def write_back(session: Any, checkpoint: Any, folder: Path) -> list[Path]:
    """Put a restored phase checkpoint back where Haytham resumes from it.

    * `phase_<N>_<name>/checkpoint.md` — the restored state;
    * `phase_<N>_<name>/user_feedback.md` — the phase's latest review in the console, if there is one;
    * `session_manifest.md` — the phase's table row, Current Phase = N (Can Resume: true), Last Updated.

    Each file is replaced atomically and only when it differs; the previous one stays as
    `<name>.<stamp>.md`. Returns the files written and kept.
    """
    from .. import store

    state = store.load_state(bytes(checkpoint.root))
    if checkpoint.phase is None or not _is_phase_state(state):
        raise ValueError(f"checkpoint #{checkpoint.seq} is not a Haytham phase checkpoint")
    now = datetime.now(UTC)
    session_dir = _session_folder(session, folder)
    phase = session.phases.filter(number=checkpoint.phase).first()
    phase_dir = session_dir / _phase_dir(phase, state)
    written = _replace(phase_dir / CHECKPOINT, _render_checkpoint(state).encode("utf-8"), now)

    latest = phase.feedback.order_by("-created_at", "-pk").first() if phase else None
    if latest is not None:
        path = phase_dir / FEEDBACK
        current = None
        if path.is_file():
            try:
                current = _feedback(_read_text(path))
            except _Malformed:
                current = None
        fields = ("action", "reviewed", "approved", "comments", "requested_changes", "retry_count", "reviewer_name")
        fields += ("created_at",)
        if current is None or any(getattr(current, name) != getattr(latest, name) for name in fields):
            name = phase.name if phase else _phase_name(checkpoint.phase, phase_dir.name)
            written += _replace(path, _render_feedback(latest, name).encode("utf-8"), now)

    manifest = session_dir / MANIFEST
    if manifest.is_file():
        text = _read_text(manifest)
        written += _replace(manifest, _updated_manifest(text, state, checkpoint.phase, now).encode("utf-8"), now)
    return written
