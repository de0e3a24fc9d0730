"""The drift detectors (docs/drift.md, docs/extending.md "Adding a detector"): one declaration each.

A declaration names the alert kind (the value `DriftAlert.kind` stores, the console's filters and labels, the
notification rules' kinds), when it runs, the module holding its `detect_<kind>` function, and its thresholds:
each a setting and environment variable with its default, read into the drift `Limits` under `field`.
`config/settings.py` defines every threshold's setting from here, `Limits` reads them all, and the tests check
that docs/configuration.md and docs/drift.md list them. The order is the order of the choices: a new detector
goes at the end."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from . import Registry

MIB = 1024 * 1024

# When a detector runs. "ingest": right after each ingest (it reads no state) and in the drift job; "job": in
# the drift job, when the session has checkpoints the job has not read; "timed": in the drift job also when no
# checkpoint arrived (the clock moves it); "raised": not a drift rule — the module it names raises it (the watched
# folders' scan, LangGraph's writes).
Runs = Literal["ingest", "job", "timed", "raised"]


@dataclass(frozen=True)
class Threshold:
    setting: str  # the setting, and the environment variable that sets it
    field: str  # the name detectors read it by: `limits.<field>`
    default: int
    meaning: str  # docs/configuration.md's "meaning" column
    shown: str = ""  # the default as the docs write it, when not the plain number

    @property
    def shown_default(self) -> str:
        return self.shown or str(self.default)


@dataclass(frozen=True)
class DetectorSpec:
    name: str  # the alert kind, stored in the database: never rename one
    label: str  # what a choice shows (the alert list's "Kind" filter, the admin)
    runs: Runs
    thresholds: tuple[Threshold, ...] = ()
    origin: str = ""  # whose published rule it is, when not this project's ("OpenHands", "Gemini CLI")
    module: str = "checkpoints.services.drift"  # where `detect_<name>` is

    @property
    def function(self) -> str:
        return f"detect_{self.name}"


# What every detector reads, besides its own thresholds.
SHARED: tuple[Threshold, ...] = (
    Threshold("DRIFT_WINDOW", "window", 50, "recent checkpoints each detection run reads per session"),
    Threshold(
        "DRIFT_IDLE_HOURS",
        "idle_hours",
        24,
        "an active session silent longer is idle, not running: no `long_running` or `missed_routine`",
    ),
)

DETECTORS: Registry[DetectorSpec] = Registry("drift detector")
LOOPS = "checkpoints.services.loops"


def _rule(setting: str, field: str, default: int, meaning: str, shown: str = "") -> tuple[Threshold, ...]:
    return (Threshold(setting, field, default, meaning, shown),)


DETECTORS.register(
    DetectorSpec(
        "cycle_count",
        "Cycle Count",
        "timed",
        _rule("DRIFT_CYCLE_LIMIT", "cycle_limit", 300, "steps since the last recovery checkpoint"),
    )
)
DETECTORS.register(
    DetectorSpec(
        "long_running",
        "Long Running",
        "timed",
        _rule(
            "DRIFT_LONG_RUNNING_MINUTES",
            "long_running_minutes",
            120,
            "minutes active without a recovery checkpoint",
        ),
    )
)
DETECTORS.register(
    DetectorSpec(
        "error_rate",
        "Error Rate",
        "job",
        (
            Threshold("DRIFT_ERROR_WINDOW", "error_window", 20, "the last N tool calls, or checkpoints, it looks at"),
            Threshold(
                "DRIFT_ERROR_MIN_SAMPLES",
                "error_min_samples",
                10,
                "fewer calls (or checkpoints) than this in the window are not judged",
            ),
            Threshold("DRIFT_ERROR_PERCENT", "error_percent", 40, "fires above this share of failures"),
        ),
    )
)
DETECTORS.register(
    DetectorSpec(
        "repetition",
        "Repetition",
        "job",
        _rule("DRIFT_REPETITION_LIMIT", "repetition_limit", 3, "the same tool call more often than this in a row"),
    )
)
DETECTORS.register(
    DetectorSpec(
        "stalled",
        "Stalled",
        "job",
        (
            Threshold("DRIFT_STALLED_WINDOW", "stalled_window", 12, "step checkpoints without task progress"),
            Threshold(
                "DRIFT_STALLED_SAME_HASH", "stalled_same_hash", 3, "consecutive step checkpoints with the same state"
            ),
        ),
    )
)
DETECTORS.register(
    DetectorSpec(
        "missed_routine",
        "Missed Routine",
        "timed",
        (
            Threshold(
                "ROUTINE_INTERVAL_MINUTES",
                "routine_interval_minutes",
                30,
                "the heartbeat interval expected of an active session",
            ),
            Threshold(
                "DRIFT_ROUTINE_GRACE_MINUTES",
                "routine_grace_minutes",
                5,
                "how much later than the interval the heartbeat may come",
            ),
        ),
    )
)
DETECTORS.register(DetectorSpec("failed", "Failed", "ingest"))
DETECTORS.register(DetectorSpec("halted", "Halted", "ingest"))
DETECTORS.register(
    DetectorSpec(
        "state_growth",
        "State Growth",
        "ingest",
        _rule("DRIFT_STATE_MAX_BYTES", "state_max_bytes", 8 * MIB, "a larger state (context bloat)", "8 MiB"),
    )
)
DETECTORS.register(DetectorSpec("source_missing", "Source Missing", "raised", module="checkpoints.services.watched"))
# OpenHands' stuck detector
DETECTORS.register(
    DetectorSpec(
        "repeated_action",
        "Repeated Action",
        "job",
        _rule("DRIFT_REPEATED_ACTION_LIMIT", "repeated_action", 4, "same call, same result, in a row"),
        "OpenHands",
        LOOPS,
    )
)
DETECTORS.register(
    DetectorSpec(
        "repeated_error",
        "Repeated Error",
        "job",
        _rule("DRIFT_REPEATED_ERROR_LIMIT", "repeated_error", 3, "same call ending in an error, in a row"),
        "OpenHands",
        LOOPS,
    )
)
DETECTORS.register(
    DetectorSpec(
        "monologue",
        "Monologue",
        "job",
        _rule("DRIFT_MONOLOGUE_LIMIT", "monologue", 3, "same agent message with no input in between"),
        "OpenHands",
        LOOPS,
    )
)
DETECTORS.register(
    DetectorSpec(
        "ping_pong",
        "Ping Pong",
        "job",
        _rule("DRIFT_PING_PONG_LIMIT", "ping_pong", 6, "calls alternating between two (call, result) pairs"),
        "OpenHands",
        LOOPS,
    )
)
DETECTORS.register(
    DetectorSpec(
        "context_overflow",
        "Context Overflow",
        "ingest",
        _rule("DRIFT_CONTEXT_ERROR_LIMIT", "context_errors", 3, "context-window errors with no success between"),
        "OpenHands",
        LOOPS,
    )
)
# Gemini CLI's loop detection
DETECTORS.register(
    DetectorSpec(
        "tool_call_loop",
        "Tool Call Loop",
        "job",
        _rule("DRIFT_TOOL_CALL_LOOP_LIMIT", "tool_call_loop", 5, "identical calls (name and arguments) in a row"),
        "Gemini CLI",
        LOOPS,
    )
)
DETECTORS.register(
    DetectorSpec(
        "content_loop",
        "Content Loop",
        "job",
        (
            Threshold("DRIFT_CONTENT_CHUNK", "content_chunk", 50, "characters of the agent's text compared at a time"),
            Threshold("DRIFT_CONTENT_LOOP_LIMIT", "content_loop", 10, "repeats of one chunk that make a loop"),
        ),
        "Gemini CLI",
        LOOPS,
    )
)
# a LangGraph node raised: its __error__ write on the thread's latest root checkpoint
DETECTORS.register(DetectorSpec("node_error", "Node Error", "raised", module="checkpoints.services.lginterrupts"))
# a checkpoint added a secret: raised at ingest by the scan of what it added (docs/secrets.md)
DETECTORS.register(DetectorSpec("secret_found", "Secret Found", "raised", module="checkpoints.services.secrets"))


def thresholds() -> Iterator[tuple[DetectorSpec | None, Threshold]]:
    """Every threshold with the detector that declares it (None: one every detector reads), shared ones first."""
    for threshold in SHARED:
        yield None, threshold
    for spec in DETECTORS:
        for threshold in spec.thresholds:
            yield spec, threshold


def defaults() -> dict[str, int]:
    """Each threshold's setting and its default: what config/settings.py defines (from the environment)."""
    return {threshold.setting: threshold.default for _, threshold in thresholds()}
