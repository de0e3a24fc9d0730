"""Precision and recall of every drift detector on a labelled set of sessions.

    python bench/detectors.py [--database-url URL] [--seeds N] [--steps N]

The set (the detectors of docs/drift.md, issue #14):

* healthy runs of the demo personas (`checkpoints/demo`: research, coding, support, pipeline), `--steps`
  (default 520) steps each, `--seeds` runs per persona, as the demo writes them (a `tool_calls` log and
  messages) and, for two personas, as OpenAI-style messages only (`function: {name, arguments}`, no log);
* drifting runs of the same personas: a healthy stretch, then a loop, a stall, a failure, … (the labels
  say which detectors must fire, every other loop, stall or error detector must stay quiet);
* the fixtures of tests/services/test_drift.py: for each detector a session that must fire and one
  that must stay quiet (each judges its own detector only).

A persona run is ingested ten checkpoints at a time and the detectors run after each batch (as the drift
job does every few minutes while an agent works): an alert opened at any point counts, not only at the end.
The rules about a running agent's clock (cycle count, long running, missed routine) are reported apart:
on healthy runs they may suggest a recovery checkpoint at info severity, nothing more.

Prints a table per detector (TP, FP, FN, TN, precision, recall) and what fired on the healthy runs; writes
var/bench-detectors.json. The database is a temporary SQLite file unless `--database-url` names another
(the detectors read the same rows either way).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from run import say, setup_django

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "var" / "bench-detectors.json"
BATCH = 10  # checkpoints per ingest, with a detection run after each
CLOCK_KINDS = {"cycle_count", "long_running", "missed_routine"}  # about a running agent's clock
NOT_JUDGED = CLOCK_KINDS | {"source_missing"}  # source_missing is about watched folders, not sessions
CONTEXT_ERROR = "Error code: 400 - This model's maximum context length is 128000 tokens (context_length_exceeded)"


@dataclass
class Outcome:
    name: str
    source: str
    positive: set[str]  # the detectors that must fire
    judged: set[str]  # the detectors this case says anything about
    fired: set[str] = field(default_factory=set)
    info: set[str] = field(default_factory=set)  # clock rules that fired at info severity
    steps: int = 0


# ---- persona runs -----------------------------------------------------------------------------------


class PersonaRun:
    """One demo persona's run, ingested BATCH checkpoints at a time with the detectors run after each batch."""

    def __init__(
        self, project: Any, name: str, persona: Any, seed: int, *, planned: int = 100, openai: bool = False
    ) -> None:
        from checkpoints import services
        from checkpoints.demo.seed import Run

        self.session, _ = services.upsert_session(project, external_id=name, agent=name.split("-")[0])
        self.run = Run(
            persona, random.Random(seed), name, self.session.agent, planned_steps=planned
        )  # progress rises until then
        self.at = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
        self.openai, self.sent, self.timings = openai, 0, []
        self.run.begin(self.at)

    def tick(self) -> datetime:
        self.at += timedelta(seconds=self.run.rng.uniform(5, 180))
        return self.at

    def healthy(self, steps: int) -> PersonaRun:
        for _ in range(steps):
            self.run.step(self.tick())
            self.maybe_detect()
        return self

    def call(self, tool: str, arguments: dict[str, Any], result: str, *, ok: bool = True, **fields: Any) -> None:
        from checkpoints.demo.seed import Call

        self.run.step(self.tick(), call=Call(tool, arguments, result, ok), **fields)
        self.maybe_detect()

    def message(self, text: str) -> None:
        """The agent writes a message and calls no tool."""
        state = self.run.state
        self.run.state = {**state, "messages": [*state["messages"], {"role": "assistant", "content": text}]}
        self.run.emit(self.tick(), name="message")
        self.maybe_detect()

    def maybe_detect(self) -> None:
        if len(self.run.inputs) - self.sent >= BATCH:
            self.detect()

    def detect(self) -> None:
        from checkpoints import services
        from checkpoints.models import AgentSession
        from checkpoints.services import drift

        items = self.run.inputs[self.sent :]
        if self.openai:
            items = [_as_openai(item) for item in items]
        services.ingest_checkpoints([(self.session, items)], now=self.at)
        self.sent = len(self.run.inputs)
        AgentSession.objects.filter(pk=self.session.pk).update(last_seen_at=self.at)
        self.session.refresh_from_db()
        start = time.perf_counter()
        drift.detect_session(self.session, now=self.at + timedelta(minutes=1))
        self.timings.append(time.perf_counter() - start)

    def outcome(self, name: str, positive: set[str], judged: set[str]) -> Outcome:
        self.detect()
        return _outcome(self.session, name, "persona", positive, judged, self.run.state["step"])


def _as_openai(item: Any) -> Any:
    """The demo's state as an OpenAI-style agent keeps it: messages only, calls nested under `function` with
    their arguments as JSON text, no log of calls."""
    from dataclasses import replace

    messages = []
    for message in item.state["messages"]:
        calls = message.get("tool_calls")
        if calls:
            nested = [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])},
                }
                for call in calls
            ]
            message = {**message, "tool_calls": nested}
        messages.append(message)
    return replace(item, state={"messages": messages, "task": item.state["task"], "step": item.state["step"]})


def _outcome(session: Any, name: str, source: str, positive: set[str], judged: set[str], steps: int) -> Outcome:
    from checkpoints.models import DriftAlert

    alerts = list(DriftAlert.objects.filter(session=session).values_list("kind", "severity"))
    outcome = Outcome(name, source, positive, judged, steps=steps)
    outcome.fired = {kind for kind, _ in alerts}
    outcome.info = {f"{kind} ({severity})" for kind, severity in alerts if kind in CLOCK_KINDS}
    return outcome


# ---- the labelled set -------------------------------------------------------------------------------


@dataclass
class Collected:
    """The persona runs' outcomes, every detection run's time, and the loop rules' cost on each healthy head."""

    judged: set[str]
    outcomes: list[Outcome] = field(default_factory=list)
    timings: list[float] = field(default_factory=list)
    loop_ms: dict[str, float] = field(default_factory=dict)

    def finish(self, run: PersonaRun, name: str, positive: set[str]) -> None:
        self.outcomes.append(run.outcome(name, {str(kind) for kind in positive}, self.judged))
        self.timings.extend(run.timings)


PERSONAS = ("research", "coding", "support", "pipeline")


def persona(label: str) -> Any:
    from checkpoints.demo import personas

    return getattr(personas, label.upper())


def persona_cases(project: Any, seeds: int, steps: int) -> Collected:
    from checkpoints.services.drift import every_kind

    found = Collected(set(every_kind()) - NOT_JUDGED)
    for seed in range(seeds):
        for label in PERSONAS:
            name = f"{label}-healthy-{seed}"
            say(f"  {name}: {steps} steps")
            run = PersonaRun(project, name, persona(label), 100 + seed, planned=steps).healthy(steps)
            found.finish(run, name, set())
            found.loop_ms[name] = _loop_cost(run.session)
    for label in ("support", "coding"):
        name = f"{label}-healthy-openai"
        say(f"  {name}: {steps} steps, OpenAI-style messages")
        run = PersonaRun(project, name, persona(label), 7, planned=steps, openai=True).healthy(steps)
        found.finish(run, name, set())
        found.loop_ms[name] = _loop_cost(run.session)
    drifting_cases(project, found)
    return found


def drifting_cases(project: Any, found: Collected) -> None:
    """A healthy stretch of 60 steps, then the drift; `found.finish` with the detectors that must fire."""
    from checkpoints.demo.personas import CODING, PIPELINE, RESEARCH, SUPPORT
    from checkpoints.models import AlertKind

    finish = found.finish
    say("  drifting persona runs")
    run = PersonaRun(project, "support-refund-loop", SUPPORT, 21).healthy(60)
    for _ in range(6):
        run.call("get_order", {"order_id": "A-10482"}, "1 items, $129.00, status refund_pending", freeze=True)
    finish(run, "support-refund-loop", {AlertKind.REPETITION, AlertKind.REPEATED_ACTION, AlertKind.TOOL_CALL_LOOP})

    run = PersonaRun(project, "support-refund-loop-openai", SUPPORT, 32, openai=True).healthy(60)
    for _ in range(6):
        run.call("get_order", {"order_id": "A-10482"}, "1 items, $129.00, status refund_pending", freeze=True)
    finish(
        run, "support-refund-loop-openai", {AlertKind.REPETITION, AlertKind.REPEATED_ACTION, AlertKind.TOOL_CALL_LOOP}
    )

    # Waiting for CI is work, but to the published rules five identical polls with the same answer are a loop:
    # labelled healthy, so what they say here counts against them.
    run = PersonaRun(project, "coding-ci-wait", CODING, 33).healthy(60)
    for _ in range(5):
        run.call("bash", {"cmd": "gh run view 4711 --json status"}, '{"status": "in_progress"}', freeze=True)
    run.detect()  # the drift job happens to run while the agent waits
    run.call("bash", {"cmd": "gh run view 4711 --json status"}, '{"status": "completed"}')
    finish(run, "coding-ci-wait", set())

    run = PersonaRun(project, "support-polling", SUPPORT, 22).healthy(60)
    for status in ("queued", "queued", "picked", "picked", "packed", "packed"):
        run.call("get_order", {"order_id": "A-10999"}, f"1 items, $40.00, status {status}", freeze=True)
    finish(run, "support-polling", {AlertKind.REPETITION, AlertKind.TOOL_CALL_LOOP})

    run = PersonaRun(project, "pipeline-disk-full", PIPELINE, 23).healthy(60)
    error = 'psycopg.errors.DiskFull: could not extend file "base/16384/24577.3": No space left on device'
    for _ in range(4):
        run.call("load_batch", {"table": "events.page_views", "rows": 500_000}, error, ok=False, freeze=True)
    finish(run, "pipeline-disk-full", {AlertKind.REPETITION, AlertKind.REPEATED_ERROR, AlertKind.REPEATED_ACTION})

    run = PersonaRun(project, "coding-edit-test-ping-pong", CODING, 24).healthy(60)
    failure = "1 failed: test_ingest_assigns_gapless_seqs - AssertionError: assert [1, 2, 4] == [1, 2, 3]"
    for _ in range(4):
        run.call("edit_file", {"path": "checkpoints/api.py", "start_line": 212, "end_line": 260}, "applied edit")
        run.call("run_tests", {"target": "tests/checkpoints", "args": "-q -x"}, failure, ok=False, freeze=True)
    finish(run, "coding-edit-test-ping-pong", {AlertKind.PING_PONG})

    run = PersonaRun(project, "coding-license-batch", CODING, 25).healthy(60)
    for i in range(20):
        run.call("edit_file", {"path": f"checkpoints/module_{i}.py", "start_line": 1, "end_line": 1}, "+2 lines")
    finish(run, "coding-license-batch", set())

    run = PersonaRun(project, "research-monologue", RESEARCH, 26).healthy(60)
    for _ in range(3):
        run.message("I need to decide which benchmark to trust before I can continue.")
    finish(run, "research-monologue", {AlertKind.MONOLOGUE})

    run = PersonaRun(project, "research-chanting", RESEARCH, 27).healthy(60)
    run.message("Summary so far. " + "The gist-token method keeps recall within two points of full context. " * 14)
    finish(run, "research-chanting", {AlertKind.CONTENT_LOOP})

    run = PersonaRun(project, "research-context-overflow", RESEARCH, 28).healthy(60)
    for scope in ("all notes", "last 40 notes", "last 10 notes"):
        run.call("summarize", {"scope": scope}, CONTEXT_ERROR, ok=False, status="failed", status_reason=CONTEXT_ERROR)
    finish(run, "research-context-overflow", {AlertKind.CONTEXT_OVERFLOW, AlertKind.FAILED})

    run = PersonaRun(project, "support-stalled", SUPPORT, 29).healthy(60)
    for _ in range(14):
        query = run.run.rng.choice(("sso loop okta", "sso redirect loop", "login loop after sso", "saml loop"))
        run.call("search_kb", {"query": query}, "0 articles", freeze=True)
    finish(run, "support-stalled", {AlertKind.STALLED})

    run = PersonaRun(project, "pipeline-error-storm", PIPELINE, 30).healthy(60)
    for i in range(20):
        table = ["orders.orders", "events.clicks", "billing.invoices", "crm.accounts"][i % 4]
        run.call("run_sql", {"sql": f"SELECT count(*) FROM {table} -- {i}"}, "statement timeout", ok=i % 3 == 0)  # noqa: S608 - the text of a tool call in the workload, never run
    finish(run, "pipeline-error-storm", {AlertKind.ERROR_RATE})

    run = PersonaRun(project, "support-halted", SUPPORT, 31).healthy(60)
    run.call("send_reply", {"ticket_id": "T-58001"}, "queued", status="halted", status_reason="operator stop")
    finish(run, "support-halted", {AlertKind.HALTED})


def _loop_cost(session: Any) -> float:
    """Milliseconds the published loop rules take over the session's window, its head's state already read."""
    from checkpoints.registry.detectors import DETECTORS, LOOPS
    from checkpoints.services import drift

    limits = drift.Limits.from_settings()
    _, recent = drift.recents_for([session.pk], limits=limits, timed=False)[session.pk]
    drift.run_detectors(recent, datetime.now(UTC), limits, ["error_rate"])  # reads the head's state
    start = time.perf_counter()
    for _ in range(20):
        recent._read.clear()
        drift.run_detectors(recent, datetime.now(UTC), limits, [s.name for s in DETECTORS if s.module == LOOPS])
    return (time.perf_counter() - start) / 20 * 1000


def fixture_cases(project: Any) -> list[Outcome]:
    from django.test import override_settings

    from checkpoints import services
    from tests.services.test_drift import CASES, Agent, detect

    outcomes = []
    with override_settings(DRIFT_STATE_MAX_BYTES=5000):  # as the tests run them (small_state_limit)
        for number, (kind, fires, quiet) in enumerate(CASES):
            for build, positive in ((fires, {str(kind)}), (quiet, set())):
                name = f"fixture-{build.__name__}-{number}"
                session, _ = services.upsert_session(project, external_id=name, agent="fixture")
                agent = Agent(session)
                detect(agent, now=build(agent))
                outcomes.append(_outcome(session, name, "fixture", positive, {str(kind)}, agent.state["step"]))
    return outcomes


# ---- figures ---------------------------------------------------------------------------------------


def scores(outcomes: list[Outcome]) -> dict[str, dict[str, Any]]:
    from checkpoints.services.drift import every_kind

    table = {}
    for kind in sorted(every_kind()):
        tp = fp = fn = tn = 0
        for outcome in outcomes:
            if kind not in outcome.judged:
                continue
            fired, wanted = kind in outcome.fired, kind in outcome.positive
            tp, fp, fn, tn = (
                tp + (fired and wanted),
                fp + (fired and not wanted),
                fn + (wanted and not fired),
                tn + (not fired and not wanted),
            )
        precision = tp / (tp + fp) if tp + fp else None
        recall = tp / (tp + fn) if tp + fn else None
        table[kind] = {"tp": tp, "fp": fp, "fn": fn, "tn": tn, "precision": precision, "recall": recall}
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", help="default: a temporary SQLite file")
    parser.add_argument("--seeds", type=int, default=2, help="healthy runs per persona (default 2)")
    parser.add_argument("--steps", type=int, default=520, help="steps of a healthy run (default 520)")
    args = parser.parse_args()
    url = args.database_url or f"sqlite:///{Path(tempfile.mkdtemp(prefix='bench_detect_')) / 'db.sqlite3'}"
    setup_django(url)
    from checkpoints import services

    project = services.get_or_create_project(f"bench-detectors-{int(time.time())}")
    say("persona runs (detection after every 10 checkpoints)")
    found = persona_cases(project, args.seeds, args.steps)
    say("test fixtures")
    outcomes, timings, loop_ms = found.outcomes + fixture_cases(project), found.timings, found.loop_ms

    table = scores(outcomes)
    print(f"{'detector':<18} {'TP':>3} {'FP':>3} {'FN':>3} {'TN':>4}  precision  recall")
    for kind, row in table.items():
        precision = "—" if row["precision"] is None else f"{row['precision']:.2f}"
        recall = "—" if row["recall"] is None else f"{row['recall']:.2f}"
        print(f"{kind:<18} {row['tp']:>3} {row['fp']:>3} {row['fn']:>3} {row['tn']:>4}  {precision:>9}  {recall:>6}")
    healthy = [outcome for outcome in outcomes if "-healthy-" in outcome.name]
    print(f"\nhealthy runs: {len(healthy)} (of which ≥ 500 steps: {sum(o.steps >= 500 for o in healthy)})")
    for outcome in healthy:
        fired = ", ".join(sorted(outcome.fired - CLOCK_KINDS)) or "none"
        info = ", ".join(sorted(outcome.info)) or "none"
        print(
            f"  {outcome.name:<28} {outcome.steps:>4} steps  loop/stall/error alerts: {fired:<10} clock rules: {info}"
        )
    wrong = [outcome for outcome in outcomes if outcome.fired & outcome.judged - outcome.positive]
    for outcome in wrong:
        print(f"  false alarm on {outcome.name}: {sorted(outcome.fired & outcome.judged - outcome.positive)}")
    missed = [outcome for outcome in outcomes if outcome.positive - outcome.fired]
    for outcome in missed:
        print(f"  missed on {outcome.name}: {sorted(outcome.positive - outcome.fired)}")
    p50 = statistics.median(timings) * 1000
    print(f"\ndetection run per session (every detector, {len(timings)} runs): p50 {p50:.1f} ms")
    print(f"published loop rules over a {args.steps}-step head, state read: {statistics.mean(loop_ms.values()):.2f} ms")

    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "database": url.split("@")[-1],
                "detectors": table,
                "cases": [
                    {
                        "name": o.name,
                        "source": o.source,
                        "steps": o.steps,
                        "positive": sorted(o.positive),
                        "fired": sorted(o.fired),
                        "clock_rules": sorted(o.info),
                    }
                    for o in outcomes
                ],
                "detect_run_p50_ms": p50,
                "loop_rules_ms": loop_ms,
            },
            indent=2,
        )
    )
    say(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
