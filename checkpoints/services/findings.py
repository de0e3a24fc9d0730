"""What the drift detectors read and return: light checkpoint rows, the session's recent window, the limits
(the settings `registry.detectors` declares) and findings, plus the helpers several detectors share (`drift` runs them, `loops` adds
the published loop rules)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings

from .. import store
from ..models import CheckpointKind, CheckpointStatus
from ..registry import detectors
from ..store import jsoncodec
from ..store.previews import Said, call_name, calls_of, talk_of

# Checkpoints that copy a state rather than record a step of the agent: they neither stall nor progress.
COPIES = {CheckpointKind.ROUTINE, CheckpointKind.PRE_OPERATION, CheckpointKind.RESTORE, CheckpointKind.FORK}
# A fresh start: the cycle and running-time counters begin again after one of these.
RESETS = [CheckpointKind.RECOVERY, CheckpointKind.RESTORE, CheckpointKind.FORK]
BAD = {CheckpointStatus.FAILED, CheckpointStatus.HALTED}


@dataclass(frozen=True)
class SeenCheckpoint:
    """One checkpoint as the detectors see it (no state, no metadata)."""

    pk: int
    seq: int
    kind: str
    status: str
    status_reason: str
    name: str
    step: int | None
    created_at: datetime
    state_hash: bytes
    raw_bytes: int
    root: bytes
    parent_id: int | None = None
    calls_made: int | None = None  # tool calls made on its path so far (None: stored before they were counted)
    preview: str = ""  # the newest tool call or message it added, in one line


ROW_FIELDS = [
    "pk", "seq", "kind", "status", "status_reason", "name", "step", "created_at", "state_hash", "raw_bytes", "root",
    "parent_id", "calls_made", "preview",
]  # fmt: skip
ANCESTORS_FETCHED = 20  # rows read one by one above the window when looking for a failure's last good


@dataclass(frozen=True)
class Finding:
    kind: str
    severity: str
    message: str
    evidence: dict[str, Any]
    checkpoint: SeenCheckpoint | None  # the checkpoint that showed the drift
    last_good: SeenCheckpoint | None  # the newest checkpoint before the drift began


class Limits:
    """The detectors' thresholds: `limits.<field>` of each threshold `registry.detectors` declares (an int, by
    default its declared default; `from_settings`: the settings, which default to the same), and the durations
    the time-based rules compare as timedeltas. A detector registered with a new threshold reads it here with
    no change to this class."""

    __slots__ = ("_values",)
    _values: dict[str, int]

    def __init__(self, **values: int) -> None:
        declared = {threshold.field: threshold.default for _, threshold in detectors.thresholds()}
        unknown = sorted(set(values) - set(declared))
        if unknown:
            raise TypeError(f"no drift threshold is called {', '.join(unknown)}")
        object.__setattr__(self, "_values", declared | values)

    @classmethod
    def from_settings(cls) -> Limits:
        return cls(**{threshold.field: getattr(settings, threshold.setting) for _, threshold in detectors.thresholds()})

    def __getattr__(self, name: str) -> int:
        values = object.__getattribute__(self, "_values")  # a missing slot raises here, never recurses
        try:
            return int(values[name])
        except KeyError:
            raise AttributeError(f"no drift threshold is called {name!r}") from None

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Limits are read-only: make another with Limits(**changes)")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Limits) and self._values == other._values

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._values.items())))

    def __repr__(self) -> str:
        return f"Limits({', '.join(f'{name}={value!r}' for name, value in self._values.items())})"

    @property
    def long_running(self) -> timedelta:
        return timedelta(minutes=self.long_running_minutes)

    @property
    def routine_interval(self) -> timedelta:
        return timedelta(minutes=self.routine_interval_minutes)

    @property
    def routine_grace(self) -> timedelta:
        return timedelta(minutes=self.routine_grace_minutes)

    @property
    def idle_after(self) -> timedelta:
        return timedelta(hours=self.idle_hours)


def threshold(field: str) -> int:
    """One threshold as the settings have it, without reading the others (every ingest reads `state_max_bytes`)."""
    setting = next(declared.setting for _, declared in detectors.thresholds() if declared.field == field)
    return int(getattr(settings, setting))


@dataclass
class Recent:
    """What the detectors know of one session: its newest checkpoints (oldest first) and a few facts."""

    rows: list[SeenCheckpoint]
    active: bool = True  # the session's status is active
    started_at: datetime | None = None
    heartbeat_at: datetime | None = None
    last_reset: SeenCheckpoint | None = None  # newest recovery/restore/fork checkpoint, possibly older than `rows`
    head_pk: int | None = None  # the session's head; the newest row when unknown
    load: Callable[[SeenCheckpoint], Any] = lambda row: store.load_shared(row.root)
    fetch: Callable[[int], SeenCheckpoint | None] = lambda pk: None  # a checkpoint older than the window, by id
    _states: dict[int, Any] = field(default_factory=dict)
    _read: dict[str, Any] = field(default_factory=dict)  # what several detectors read from the head's state

    @property
    def head(self) -> SeenCheckpoint | None:
        """The checkpoint the agent resumes from: the newest one, unless an importer pointed elsewhere."""
        if self.head_pk is not None:
            for row in reversed(self.rows):
                if row.pk == self.head_pk:
                    return row
        return self.rows[-1] if self.rows else None

    def running(self, now: datetime, limits: Limits) -> bool:
        """Whether the agent is expected to be running: active and heard from within `limits.idle_after`.

        Most sessions a console keeps are finished or left idle without a final status; the rules about a
        running agent (long running, missed routine) would fire on every one of them, drowning the rest."""
        heartbeat = self.heartbeat_at
        return self.active and heartbeat is not None and now - heartbeat <= limits.idle_after

    def ancestors(self, row: SeenCheckpoint) -> Iterator[SeenCheckpoint]:
        """`row`'s parent, its parent, …: its branch back in time, from the window and then a few more."""
        by_pk = {candidate.pk: candidate for candidate in self.rows}
        fetched = 0
        parent = row.parent_id
        while parent is not None:
            found = by_pk.get(parent)
            if found is None:
                if fetched == ANCESTORS_FETCHED:
                    return
                fetched += 1
                found = self.fetch(parent)
                if found is None:
                    return
            yield found
            parent = found.parent_id

    def branch(self) -> list[SeenCheckpoint]:
        """The head and its ancestors within the window, oldest first: the path the agent took to where it is."""
        head = self.head
        if head is None:
            return []
        by_pk = {row.pk: row for row in self.rows}
        path = [head]
        while path[-1].parent_id is not None and (parent := by_pk.get(path[-1].parent_id)) is not None:
            path.append(parent)
        return path[::-1]

    def head_calls(self) -> list[dict[str, Any]]:
        """The tool calls the head's state records (`previews.calls_of`), read once for every detector."""
        if "calls" not in self._read:
            self._read["calls"] = calls_of(self.state(self.head)) if self.head else []
        calls: list[dict[str, Any]] = self._read["calls"]
        return calls

    def head_talk(self, last: int) -> list[Said]:
        """The head state's `last` messages as the loop rules read them (`previews.talk_of`), read once."""
        key = f"talk:{last}"
        if key not in self._read:
            self._read[key] = talk_of(self.state(self.head), last) if self.head else []
        talk: list[Said] = self._read[key]
        return talk

    def state(self, row: SeenCheckpoint) -> Any:
        """States are read only when a detector needs one (content-addressed: reading is safe at any time)."""
        if row.seq not in self._states:
            self._states[row.seq] = self.load(row)
        return self._states[row.seq]


Detector = Callable[[Recent, datetime, Limits], list[Finding]]


def progress_of(state: Any) -> tuple[Any, float] | None:
    """(task identity, progress percentage) of the common state shapes, or None."""
    if not isinstance(state, dict):
        return None
    for key, metric in (("task", "progress"), ("current_task", "progress_percentage")):
        task = state.get(key)
        if isinstance(task, dict) and isinstance(task.get(metric), int | float):
            return task.get("id"), float(task[metric])
    if isinstance(state.get("progress"), int | float):
        return None, float(state["progress"])
    return None


def action_of(call: dict[str, Any]) -> tuple[str, bytes]:
    return call_name(call), jsoncodec.canonical(call.get("arguments"))  # arguments may hold integers beyond 64 bits


def good_ancestor(recent: Recent, row: SeenCheckpoint) -> SeenCheckpoint | None:
    """The newest healthy checkpoint on `row`'s own branch before it: what restoring undoes least."""
    return next((ancestor for ancestor in recent.ancestors(row) if ancestor.status not in BAD), None)


def healthy_before(rows: list[SeenCheckpoint], index: int) -> SeenCheckpoint | None:
    """The newest healthy checkpoint before rows[index]."""
    for row in reversed(rows[:index]):
        if row.status not in BAD:
            return row
    return None


def index_of_step(rows: list[SeenCheckpoint], step: Any) -> int:
    """Index of the first row at or after `step` (the newest row when steps are unknown)."""
    if isinstance(step, int):
        for index, row in enumerate(rows):
            if row.step is not None and row.step >= step:
                return index
    return len(rows) - 1
