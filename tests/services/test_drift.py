from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.http import QueryDict
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from checkpoints.metrics import record_ingest
from checkpoints.models import AgentSession, AlertKind, AlertState, AuditEvent, DriftAlert, JobRun
from checkpoints.registry.detectors import DETECTORS, DetectorSpec, Threshold, thresholds
from checkpoints.services import (
    Actor,
    CheckpointInput,
    drift,
    findings,
    ingest_checkpoints,
    loops,
    restore_checkpoint,
    undo_restore,
)
from dashboard.forms import AlertFilterForm, RuleForm
from tests.lg_states import langgraph_session, put

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
TOOLS = ["search_kb", "read_file", "run_tests", "write_file", "get_order", "send_reply", "fetch_url"]


class Agent:
    """Builds a session the way an agent would: one step checkpoint per tool call, the state growing."""

    def __init__(self, session: AgentSession, at: datetime = T0) -> None:
        self.session, self.at = session, at
        self.state: dict[str, Any] = {
            "step": 0,
            "task": {"id": "T-1", "progress": 0},
            "tool_calls": [],
            "messages": [],
            "metrics": {"tool_errors": 0},
        }
        self.inputs: list[CheckpointInput] = []
        self.checkpoints: list[Any] = []

    def step(
        self,
        tool: str | None = None,
        arguments: dict[str, Any] | None = None,
        *,
        ok: bool = True,
        progress: float | None = None,
        status: str = "completed",
        reason: str = "",
        repeat_state: bool = False,
        result: str | None = None,
        error: str | None = None,
        **extra: Any,
    ) -> Agent:
        s = self.state
        if not repeat_state:
            step = s["step"] + 1
            tool = tool or TOOLS[(step * 3) % len(TOOLS)]
            arguments = arguments if arguments is not None else {"query": f"question {step}"}
            outcome = result if result is not None else "ok" if ok else None
            record = {"step": step, "tool_name": tool, "arguments": arguments, "result": outcome, "error": error}
            self.state = {
                **s,
                **extra,
                "step": step,
                "task": {**s["task"], "progress": progress if progress is not None else min(99, step // 5)},
                "tool_calls": [*s["tool_calls"], {**record, "success": ok}],
                "messages": [*s["messages"], {"role": "assistant", "content": f"step {step} with {tool}"}],
                "metrics": {"tool_errors": s["metrics"]["tool_errors"] + (not ok)},
            }
        return self.checkpoint("step", name=tool or "step", status=status, status_reason=reason)

    def say(self, text: str, role: str = "assistant") -> Agent:
        """A message with no tool call: the agent talking (or, with role "user", someone answering it)."""
        self.state = {**self.state, "messages": [*self.state["messages"], {"role": role, "content": text}]}
        return self.checkpoint("step", name="message")

    def steps(self, count: int, **fields: Any) -> Agent:
        for _ in range(count):
            self.step(**fields)
        return self

    def checkpoint(self, kind: str, **fields: Any) -> Agent:
        self.at += timedelta(seconds=10)
        fields.setdefault("name", kind)
        self.inputs.append(
            CheckpointInput(state=self.state, kind=kind, step=self.state["step"], created_at=self.at, **fields)
        )
        return self

    def flush(self) -> Agent:
        self.checkpoints += [checkpoint for checkpoint, _ in ingest_checkpoints([(self.session, self.inputs)])]
        self.inputs = []
        # the heartbeat follows the agent's clock, as after a real run
        AgentSession.objects.filter(pk=self.session.pk).update(last_seen_at=self.at)
        self.session.refresh_from_db()
        return self

    @property
    def now(self) -> datetime:
        return self.at + timedelta(minutes=1)


def alert_kinds(session: AgentSession) -> set[str]:
    return set(DriftAlert.objects.unresolved().filter(session=session).values_list("kind", flat=True))


def detect(agent: Agent, **kwargs: Any) -> set[str]:
    drift.detect_session(agent.session, now=kwargs.pop("now", agent.now), **kwargs)
    return alert_kinds(agent.session)


# ---- one session that must fire and one that must not, for every detector --------------------------


def failed_fires(a: Agent) -> datetime:
    a.steps(5).step(status="failed", reason="tool crashed").flush()
    return a.now


def failed_quiet(a: Agent) -> datetime:  # failed once, then carried on
    a.steps(5).step(status="failed").steps(2).flush()
    return a.now


def halted_fires(a: Agent) -> datetime:
    a.steps(5).step(status="halted", reason="loop detector").flush()
    return a.now


def halted_quiet(a: Agent) -> datetime:
    a.steps(5).step(status="halted").steps(1).flush()
    return a.now


def error_rate_fires(a: Agent) -> datetime:
    a.steps(10)
    for i in range(20):
        a.step(ok=i % 3 == 0)  # 13 of 20 fail
    a.flush()
    return a.now


def error_rate_quiet(a: Agent) -> datetime:
    a.steps(10)
    for i in range(20):
        a.step(ok=i % 5 != 0)  # 4 of 20 fail
    a.flush()
    return a.now


def repetition_fires(a: Agent) -> datetime:
    a.steps(10)
    for _ in range(4):
        a.step("get_order", {"order_id": "A-10482"}, progress=2)
    a.flush()
    return a.now


def repetition_quiet(a: Agent) -> datetime:  # three times is still allowed
    a.steps(10)
    for _ in range(3):
        a.step("get_order", {"order_id": "A-10482"}, progress=2)
    a.step("send_reply", {"to": "customer"}).flush()
    return a.now


def stalled_fires(a: Agent) -> datetime:  # progress flat over the window, with varied actions
    a.steps(10)
    a.steps(20, progress=2)
    a.flush()
    return a.now


def stalled_quiet(a: Agent) -> datetime:  # slow but rising
    a.steps(40)
    a.flush()
    return a.now


def stalled_hash_fires(a: Agent) -> datetime:
    a.steps(10).step(repeat_state=True).step(repeat_state=True).flush()  # the same state three times
    return a.now


def stalled_hash_quiet(a: Agent) -> datetime:  # routine and pre-operation copies of a state are no stall
    a.steps(10).checkpoint("routine").checkpoint("pre_operation").step(repeat_state=True).flush()
    return a.now


def state_growth_fires(a: Agent) -> datetime:
    a.steps(3).step(scratchpad="x" * 6000).flush()
    return a.now


def state_growth_quiet(a: Agent) -> datetime:
    a.steps(3).step(scratchpad="x" * 500).flush()
    return a.now


def cycle_count_fires(a: Agent) -> datetime:
    a.steps(310).flush()
    return a.now


def cycle_count_quiet(a: Agent) -> datetime:
    a.steps(100).checkpoint("recovery").steps(210).flush()
    return a.now


def long_running_fires(a: Agent) -> datetime:
    a.steps(10).flush()
    return T0 + timedelta(hours=2, minutes=10)  # heartbeats kept coming: only the running time is long


def long_running_quiet(a: Agent) -> datetime:
    a.steps(10)
    a.at = T0 + timedelta(hours=1, minutes=30)
    a.checkpoint("recovery").steps(5).flush()
    return T0 + timedelta(hours=2, minutes=10)


def missed_routine_fires(a: Agent) -> datetime:
    a.steps(5).flush()
    return a.at + timedelta(minutes=40)


def missed_routine_quiet(a: Agent) -> datetime:
    a.steps(5).flush()
    return a.at + timedelta(minutes=30)


# ---- OpenHands' stuck detector and Gemini CLI's loop detection -------------------------------------

CONTEXT_ERROR = "Error code: 400 - This model's maximum context length is 128000 tokens (context_length_exceeded)"


def repeated_action_fires(a: Agent) -> datetime:
    a.steps(10)
    for _ in range(4):
        a.step("get_order", {"order_id": "A-10482"}, result="status refund_pending", progress=2)
    a.flush()
    return a.now


def repeated_action_quiet(a: Agent) -> datetime:  # the same poll, but its answer moves: it is waiting, not stuck
    a.steps(10)
    for status in ("queued", "picked", "packed", "shipped"):
        a.step("get_order", {"order_id": "A-10482"}, result=f"status {status}")
    a.flush()
    return a.now


def repeated_error_fires(a: Agent) -> datetime:
    a.steps(10)
    for _ in range(3):
        a.step("run_tests", {"path": "tests/"}, ok=False, error="1 failed: test_ingest")
    a.flush()
    return a.now


def repeated_error_quiet(a: Agent) -> datetime:  # three failures, each of another call: it is trying things
    a.steps(10)
    for path in ("tests/a.py", "tests/b.py", "tests/c.py"):
        a.step("run_tests", {"path": path}, ok=False, error="1 failed")
    a.flush()
    return a.now


def monologue_fires(a: Agent) -> datetime:
    a.steps(10).say("I should check the order again.").say("I should check the order again.")
    a.say("I should  check the order again.").flush()  # spacing aside, the same words
    return a.now


def monologue_quiet(a: Agent) -> datetime:  # the user answered in between
    a.steps(10).say("Which order do you mean?").say("Which order do you mean?")
    a.say("A-10482", role="user").say("Which order do you mean?").flush()
    return a.now


def ping_pong_fires(a: Agent) -> datetime:
    a.steps(10)
    for _ in range(3):
        a.step("read_file", {"path": "app.py"}, result="80 lines").step("run_tests", {"path": "tests/"}, result="red")
    a.flush()
    return a.now


def ping_pong_quiet(a: Agent) -> datetime:  # five alternations: one short of six
    a.steps(10)
    for _ in range(2):
        a.step("read_file", {"path": "app.py"}, result="80 lines").step("run_tests", {"path": "tests/"}, result="red")
    a.step("read_file", {"path": "app.py"}, result="80 lines").flush()
    return a.now


def context_overflow_fires(a: Agent) -> datetime:
    a.steps(10)
    a.step("summarize", {"scope": "all"}, status="failed", reason=CONTEXT_ERROR)
    a.step("summarize", {"scope": "last 50"}, ok=False, error=CONTEXT_ERROR)  # a failed call says it
    a.step("summarize", {"scope": "last 10"}, status="failed", reason=CONTEXT_ERROR).flush()
    return a.now


def context_overflow_quiet(a: Agent) -> datetime:  # trimming worked each time: a call succeeded in between
    a.steps(10)
    for _ in range(3):
        a.step("summarize", {"scope": "all"}, status="failed", reason=CONTEXT_ERROR).step()
    a.flush()
    return a.now


def tool_call_loop_fires(a: Agent) -> datetime:
    a.steps(10)
    for i in range(5):
        a.step("read_file", {"path": "src/app.py", "lines": "1-80"}, result=f"read at {i}")
    a.flush()
    return a.now


def tool_call_loop_quiet(a: Agent) -> datetime:  # a batch over different files is work, not a loop
    a.steps(10)
    for i in range(12):
        a.step("add_license_header", {"path": f"src/module_{i}.py"}, result="done")
    a.flush()
    return a.now


CHANT = "I will look up the order status again to be sure. "


def content_loop_fires(a: Agent) -> datetime:
    a.steps(10).say("Let me think about this. " + CHANT * 12).flush()
    return a.now


def content_loop_quiet(a: Agent) -> datetime:  # repeated lines in a code block and a list are no loop
    code = "```python\n" + "print(lookup('A-10482'))\n" * 20 + "```"
    items = "\n".join(f"- {CHANT}order {i}" for i in range(15))
    a.steps(10).say(f"Here is the retry script:\n{code}\nand what it checks:\n{items}").flush()
    return a.now


CASES: list[tuple[str, Callable[[Agent], datetime], Callable[[Agent], datetime]]] = [
    (AlertKind.FAILED, failed_fires, failed_quiet),
    (AlertKind.HALTED, halted_fires, halted_quiet),
    (AlertKind.ERROR_RATE, error_rate_fires, error_rate_quiet),
    (AlertKind.REPETITION, repetition_fires, repetition_quiet),
    (AlertKind.STALLED, stalled_fires, stalled_quiet),
    (AlertKind.STALLED, stalled_hash_fires, stalled_hash_quiet),
    (AlertKind.STATE_GROWTH, state_growth_fires, state_growth_quiet),
    (AlertKind.CYCLE_COUNT, cycle_count_fires, cycle_count_quiet),
    (AlertKind.LONG_RUNNING, long_running_fires, long_running_quiet),
    (AlertKind.MISSED_ROUTINE, missed_routine_fires, missed_routine_quiet),
    (AlertKind.REPEATED_ACTION, repeated_action_fires, repeated_action_quiet),
    (AlertKind.REPEATED_ERROR, repeated_error_fires, repeated_error_quiet),
    (AlertKind.MONOLOGUE, monologue_fires, monologue_quiet),
    (AlertKind.PING_PONG, ping_pong_fires, ping_pong_quiet),
    (AlertKind.CONTEXT_OVERFLOW, context_overflow_fires, context_overflow_quiet),
    (AlertKind.TOOL_CALL_LOOP, tool_call_loop_fires, tool_call_loop_quiet),
    (AlertKind.CONTENT_LOOP, content_loop_fires, content_loop_quiet),
]
IDS = [fires.__name__.removesuffix("_fires") for _, fires, _ in CASES]


@pytest.fixture
def small_state_limit(settings):
    settings.DRIFT_STATE_MAX_BYTES = 5000


@pytest.mark.usefixtures("small_state_limit")
@pytest.mark.parametrize(("kind", "fires", "quiet"), CASES, ids=IDS)
def test_detector_fires_on_a_drifting_session(make_session, kind, fires, quiet):
    agent = Agent(make_session())
    now = fires(agent)
    assert kind in detect(agent, now=now)
    alert = DriftAlert.objects.get(session=agent.session, kind=kind)
    assert alert.state == AlertState.OPEN
    assert alert.message and alert.evidence
    assert alert.checkpoint_id == agent.session.head_id


@pytest.mark.usefixtures("small_state_limit")
@pytest.mark.parametrize(("kind", "fires", "quiet"), CASES, ids=IDS)
def test_detector_stays_quiet_on_a_near_miss(make_session, kind, fires, quiet):
    agent = Agent(make_session())
    now = quiet(agent)
    assert kind not in detect(agent, now=now)


def test_repetition_with_rising_progress_is_work_not_a_loop(make_session):
    agent = Agent(make_session()).steps(10)
    for i in range(5):
        agent.step("run_tests", {"path": "tests/"}, progress=10 + i * 5)
    assert AlertKind.REPETITION not in detect(agent.flush())


def test_error_rate_counts_failed_checkpoints(make_session):
    agent = Agent(make_session())
    for i in range(20):
        agent.step(status="failed" if i % 2 else "completed")
    assert AlertKind.ERROR_RATE in detect(agent.step().flush())


def test_no_false_alarm_on_a_healthy_500_step_session(make_session):
    agent = Agent(make_session("healthy"))
    for step in range(1, 501):
        agent.step(progress=min(99, step // 5))
        if step % 30 == 0:
            agent.checkpoint("routine")
        if step % 100 == 0:
            agent.checkpoint("recovery")
    agent.flush()
    assert agent.session.last_seq > 500
    assert detect(agent) == set()
    result = drift.detect_all(now=agent.now)
    assert result == {"sessions_done": 1, "opened": 0, "resolved": 0, "errors": [], "error_count": 0}


# ---- alerts: dedupe, resolve, last_good ------------------------------------------------------------


def test_running_twice_keeps_one_alert_and_updates_it(make_session):
    agent = Agent(make_session())
    halted_fires(agent)
    first = agent.checkpoints[-1]
    assert drift.detect_session(agent.session, now=agent.now) == (1, 0)
    agent.step(status="halted", reason="halted again").flush()
    assert drift.detect_session(agent.session, now=agent.now) == (0, 0)
    alert = DriftAlert.objects.get(session=agent.session, kind=AlertKind.HALTED)
    assert alert.evidence["seq"] == agent.checkpoints[-1].seq != first.seq
    assert alert.checkpoint_id == agent.checkpoints[-1].pk
    assert alert.last_good_id == agent.checkpoints[-3].pk  # kept from when the drift began


def test_alert_resolves_itself_when_the_condition_clears(make_session):
    agent = Agent(make_session())
    halted_fires(agent)
    drift.detect_session(agent.session, now=agent.now)
    alert = DriftAlert.objects.get(session=agent.session, kind=AlertKind.HALTED)
    restore_checkpoint(alert.last_good, actor=Actor.system("test"), now=agent.now)
    later = agent.now + timedelta(minutes=1)
    assert drift.detect_session(agent.session, now=later) == (0, 1)
    alert.refresh_from_db()
    assert alert.state == AlertState.RESOLVED
    assert alert.resolved_at == later


def test_the_detector_audits_the_alerts_it_opens_and_resolves(make_session):
    agent = Agent(make_session())
    halted_fires(agent)
    drift.detect_session(agent.session, now=agent.now)
    alert = DriftAlert.objects.get(session=agent.session, kind=AlertKind.HALTED)
    opened = AuditEvent.objects.get(action="alert_opened")
    assert (opened.actor, opened.actor_user, opened.actor_token) == ("system:drift", None, None)
    assert (opened.session, opened.project_id, opened.created_at) == (
        agent.session,
        agent.session.project_id,
        agent.now,
    )
    assert opened.target == f"halted alert #{alert.pk}" and opened.reason == alert.message
    assert opened.details == {"alert_id": alert.pk, "kind": "halted", "severity": "critical", "message": alert.message}

    drift.detect_session(agent.session, now=agent.now)  # still halted: updated, nothing new to audit
    assert AuditEvent.objects.filter(actor="system:drift").count() == 1

    restore_checkpoint(alert.last_good, actor=Actor.system("test"), now=agent.now)
    later = agent.now + timedelta(minutes=1)
    drift.detect_session(agent.session, now=later)
    resolved = AuditEvent.objects.get(action="alert_resolved")
    assert (resolved.actor, resolved.session, resolved.created_at) == ("system:drift", agent.session, later)
    assert resolved.reason == "the condition cleared: the head #7 is completed" and resolved.details["kind"] == "halted"


def test_a_rise_in_severity_is_audited_as_an_escalation(make_session):
    agent = Agent(make_session())
    halted_fires(agent)
    DriftAlert.objects.create(session=agent.session, kind=AlertKind.HALTED, severity="info", message="was minor")
    drift.detect_session(agent.session, now=agent.now)
    escalated = AuditEvent.objects.get(action="alert_escalated")
    assert escalated.details["previous_severity"] == "info" and escalated.details["severity"] == "critical"
    assert escalated.reason.startswith("info → critical: ")
    assert DriftAlert.objects.get().severity == "critical"
    assert not AuditEvent.objects.filter(action="alert_opened").exists()


def test_an_alert_opened_right_after_ingest_is_audited(make_session, django_capture_on_commit_callbacks):
    session = make_session()
    with django_capture_on_commit_callbacks(execute=True):
        ingest_checkpoints([(session, [CheckpointInput(state={"x": 1}, status="failed", status_reason="boom")])])
    alert = DriftAlert.objects.get(session=session, kind=AlertKind.FAILED)
    event = AuditEvent.objects.get(action="alert_opened", session=session)
    assert event.details["alert_id"] == alert.pk and "boom" in event.reason


def test_a_state_above_the_setting_opens_its_alert_right_after_ingest(
    make_session, settings, django_capture_on_commit_callbacks
):
    """Ingest reads DRIFT_STATE_MAX_BYTES (declared in the registry) to decide whether the detectors run at once."""
    settings.DRIFT_STATE_MAX_BYTES = 100
    session = make_session()
    with django_capture_on_commit_callbacks(execute=True):
        ingest_checkpoints([(session, [CheckpointInput(state={"x": 1})])])
    assert not DriftAlert.objects.exists()
    with django_capture_on_commit_callbacks(execute=True):
        ingest_checkpoints([(session, [CheckpointInput(state={"x": "y" * 200})])])
    assert DriftAlert.objects.get(session=session).kind == AlertKind.STATE_GROWTH


def test_acknowledged_alert_is_updated_not_reopened(make_session):
    agent = Agent(make_session())
    halted_fires(agent)
    drift.detect_session(agent.session, now=agent.now)
    DriftAlert.objects.update(state=AlertState.ACKNOWLEDGED)
    assert drift.detect_session(agent.session, now=agent.now) == (0, 0)
    assert DriftAlert.objects.get().state == AlertState.ACKNOWLEDGED


def test_last_good_is_the_newest_checkpoint_before_the_loop(make_session):
    agent = Agent(make_session())
    repetition_fires(agent)
    detect(agent)
    alert = DriftAlert.objects.get(kind=AlertKind.REPETITION)
    assert alert.last_good_id == agent.checkpoints[9].pk  # the last step before the four repeats
    assert alert.evidence["count"] == 4
    assert alert.evidence["arguments"] == {"order_id": "A-10482"}


def test_last_good_of_a_failure_skips_earlier_failures(make_session):
    agent = Agent(make_session()).steps(3).step(status="failed").step(status="failed").flush()
    detect(agent)
    assert DriftAlert.objects.get(kind=AlertKind.FAILED).last_good_id == agent.checkpoints[2].pk


def test_cheap_run_leaves_time_based_alerts_alone(make_session):
    agent = Agent(make_session())
    now = missed_routine_fires(agent)
    detect(agent, now=now)
    assert drift.detect_session(agent.session, cheap_only=True, now=now) == (0, 0)
    assert alert_kinds(agent.session) == {AlertKind.MISSED_ROUTINE}


def test_detectors_are_pure_over_rows_and_states():
    row = drift.SeenCheckpoint(1, 1, "step", "halted", "loop", "get_order", 1, T0, b"h", 10, b"r")
    recent = drift.Recent(rows=[row], load=lambda r: {})
    [finding] = drift.detect_halted(recent, T0, drift.Limits())
    assert (finding.kind, finding.checkpoint, finding.last_good) == (AlertKind.HALTED, row, None)


# ---- on ingest, in the job, in the API -------------------------------------------------------------


def test_ingest_opens_a_halted_alert_right_after_the_checkpoint_arrives(
    make_session, make_checkpoint, django_capture_on_commit_callbacks
):
    session = make_session()
    good = make_checkpoint(session, {"step": 1})
    with django_capture_on_commit_callbacks(execute=True):
        halted = make_checkpoint(session, {"step": 2}, status="halted", status_reason="loop detector")
    alert = DriftAlert.objects.get(session=session)
    assert (alert.kind, alert.state, alert.checkpoint_id, alert.last_good_id) == (
        AlertKind.HALTED,
        AlertState.OPEN,
        halted.pk,
        good.pk,
    )


def test_a_failing_detector_does_not_fail_the_ingest(
    make_session, monkeypatch, caplog, django_capture_on_commit_callbacks
):
    def broken(*args, **kwargs):
        raise RuntimeError("detector bug")

    monkeypatch.setattr(drift, "detect_failed", broken)
    session = make_session()
    failed = CheckpointInput(state={"step": 1}, name="tests_failed", status="failed", step=1)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        [(checkpoint, created)] = ingest_checkpoints([(session, [failed])])
    assert callbacks, "a failed checkpoint runs the detectors once committed"
    assert created and session.checkpoints.get().pk == checkpoint.pk
    assert "drift detection failed" in caplog.text
    assert not DriftAlert.objects.exists()


def test_detect_drift_command_runs_the_job_and_prints_a_summary(make_session, capsys):
    agent = Agent(make_session())
    halted_fires(agent)
    AgentSession.objects.filter(pk=agent.session.pk).update(status="active")
    call_command("detect_drift")
    out = capsys.readouterr().out
    assert "Checked 1 active sessions" in out
    run = JobRun.objects.get(job="drift_detection")
    assert (run.triggered_by, run.status, run.result["sessions_done"]) == ("command", "succeeded", 1)
    assert run.result["opened"] >= 1


def test_api_lists_alerts_with_filters(api, make_session):
    halted = Agent(make_session("run-halted"))
    halted_fires(halted)
    detect(halted)
    looping = Agent(make_session("run-loop"))
    repetition_fires(looping)
    detect(looping)
    restore_checkpoint(halted.checkpoints[2], actor=Actor.system("test"))
    detect(halted, now=halted.now + timedelta(minutes=5))

    everything = api.get("/alerts").json()
    assert {(a["session"], a["kind"]) for a in everything} >= {
        ("run-halted", "halted"),
        ("run-loop", "repetition"),
    }
    [loop] = api.get("/alerts", {"session": "run-loop", "kind": "repetition"}).json()
    assert loop["state"] == "open" and loop["last_good"] == looping.checkpoints[9].pk
    resolved = api.get("/alerts", {"state": "resolved"}).json()
    assert [(a["session"], a["kind"]) for a in resolved] == [("run-halted", "halted")]
    assert all(a["session"] == "run-loop" for a in api.get("/alerts", {"state": "open"}).json())


def test_an_ordinary_checkpoint_schedules_no_detection(
    make_session, make_checkpoint, django_capture_on_commit_callbacks
):
    """Detection after ingest costs nothing on the normal path: only alarming arrivals trigger it."""
    session = make_session()
    with django_capture_on_commit_callbacks() as callbacks:
        make_checkpoint(session, {"step": 1})
    assert [getattr(callback, "func", None) for callback in callbacks] == [record_ingest]  # /metrics counts it


def test_time_based_alerts_say_how_long_in_plain_words(make_session):
    agent = Agent(make_session())
    detect(agent, now=long_running_fires(agent))
    running = DriftAlert.objects.get(kind=AlertKind.LONG_RUNNING)
    assert re.fullmatch(r"Active for 2 h \d+ min without a recovery checkpoint\.", running.message)
    quiet = Agent(make_session())
    detect(quiet, now=missed_routine_fires(quiet))
    missed = DriftAlert.objects.get(kind=AlertKind.MISSED_ROUTINE).message
    assert re.fullmatch(r"No checkpoint or heartbeat for 40 min\.", missed)


# ---- a failure that cleared: the alert resolves, the next failure is a new incident -------------------


def ingest_now(session: AgentSession, *items: CheckpointInput) -> list[Any]:
    return [checkpoint for checkpoint, _ in ingest_checkpoints([(session, list(items))])]


def step(n: int, **fields: Any) -> CheckpointInput:
    return CheckpointInput(state={"step": n, "tool_calls": [{"step": n, "tool_name": "run"}] * n}, step=n, **fields)


def unresolved(session: AgentSession, kind: str = AlertKind.FAILED) -> DriftAlert | None:
    return DriftAlert.objects.unresolved().filter(session=session, kind=kind).first()


def test_a_failed_alert_resolves_when_a_later_checkpoint_completes(make_session, django_capture_on_commit_callbacks):
    """The issue's case: failed at #4, healthy up to #9, failed again at #10 — restoring the old last good
    would have discarded every healthy checkpoint in between."""
    session = make_session()
    with django_capture_on_commit_callbacks(execute=True):
        before = ingest_now(session, *(step(n) for n in range(1, 4)), step(4, status="failed", status_reason="boom"))
    first = unresolved(session)
    assert first is not None and first.last_good_id == before[2].pk
    DriftAlert.objects.filter(pk=first.pk).update(state=AlertState.ACKNOWLEDGED)  # acknowledged or not

    with django_capture_on_commit_callbacks(execute=True):
        healthy = ingest_now(session, step(5))
    ingest_now(session, *(step(n) for n in range(6, 10)))
    first.refresh_from_db()
    assert first.state == AlertState.RESOLVED
    resolved = AuditEvent.objects.get(action="alert_resolved")
    assert resolved.details["alert_id"] == first.pk and f"#{healthy[0].seq}" in resolved.reason
    session.refresh_from_db()
    assert session.status == "active"  # the run went on: it is no longer failed

    with django_capture_on_commit_callbacks(execute=True):
        later = ingest_now(session, step(10, status="failed", status_reason="boom again"))
    second = unresolved(session)
    assert second is not None and second.pk != first.pk
    assert second.last_good.seq == later[0].seq - 1  # the checkpoint just before the new failure
    assert second.checkpoint_id == later[0].pk


def test_a_failure_after_recovery_in_one_batch_is_a_new_alert(make_session, django_capture_on_commit_callbacks):
    """No detection runs between the checkpoints of one batch: the open alert is still recognised as an
    earlier incident, because a healthy checkpoint stands between its failure and the new one."""
    session = make_session()
    with django_capture_on_commit_callbacks(execute=True):
        ingest_now(session, step(1), step(2, status="halted", status_reason="loop"))
    first = unresolved(session, AlertKind.HALTED)
    with django_capture_on_commit_callbacks(execute=True):
        later = ingest_now(session, *(step(n) for n in range(3, 30)), step(30, status="halted", status_reason="loop"))
    first.refresh_from_db()
    assert first.state == AlertState.RESOLVED
    second = unresolved(session, AlertKind.HALTED)
    assert second.last_good_id == later[-2].pk


def test_consecutive_failures_stay_one_alert_with_the_first_last_good(make_session, django_capture_on_commit_callbacks):
    session = make_session()
    with django_capture_on_commit_callbacks(execute=True):
        good = ingest_now(session, step(1), step(2))
        ingest_now(session, step(3, status="failed"))
        ingest_now(session, step(4, status="failed"))
    [alert] = DriftAlert.objects.filter(session=session)
    assert alert.state == AlertState.OPEN and alert.last_good_id == good[-1].pk


def test_a_restore_clears_a_failed_alert_at_once(make_session, django_capture_on_commit_callbacks):
    session = make_session()
    with django_capture_on_commit_callbacks(execute=True):
        good = ingest_now(session, step(1), step(2, status="failed"))
    alert = unresolved(session)
    with django_capture_on_commit_callbacks(execute=True):
        restore_checkpoint(good[0], actor=Actor.system("test"))
    alert.refresh_from_db()
    assert alert.state == AlertState.RESOLVED


def test_undoing_a_restore_reopens_the_failed_alert_it_resolved_and_the_failed_status(
    make_session, django_capture_on_commit_callbacks
):
    session = make_session()
    with django_capture_on_commit_callbacks(execute=True):
        good = ingest_now(session, step(1), step(2, status="failed", status_reason="tool crashed"))
    alert = unresolved(session)
    session.refresh_from_db()
    assert session.status == "failed"
    with django_capture_on_commit_callbacks(execute=True):
        restore_checkpoint(good[0], actor=Actor.system("test"))
    session.refresh_from_db()
    assert session.status == "active" and unresolved(session) is None

    with django_capture_on_commit_callbacks(execute=True):
        undone = undo_restore(session, actor=Actor.system("alice"))

    session.refresh_from_db()
    assert session.status == "failed"
    assert (undone.status, undone.status_reason) == ("failed", "tool crashed")  # the head is #2 again
    reopened = unresolved(session)
    assert reopened is not None and reopened.pk == alert.pk  # the same incident, not a second one
    assert reopened.severity == "critical" and reopened.checkpoint_id == undone.pk
    assert DriftAlert.objects.filter(session=session).count() == 1
    [event] = AuditEvent.objects.filter(action="alert_reopened")
    assert event.actor == "alice" and "undo" in event.reason


def test_undoing_a_restore_of_a_healthy_session_leaves_its_alerts_and_status_alone(
    make_session, django_capture_on_commit_callbacks
):
    session = make_session()
    with django_capture_on_commit_callbacks(execute=True):
        made = ingest_now(session, step(1), step(2), step(3))
        restore_checkpoint(made[0], actor=Actor.system("test"))
        session.refresh_from_db()
        undone = undo_restore(session, actor=Actor.system("alice"))
    session.refresh_from_db()
    assert (session.status, undone.status) == ("active", "completed")
    assert not DriftAlert.objects.filter(session=session).exists()


def test_the_failed_alert_follows_the_heads_branch(make_session, django_capture_on_commit_callbacks):
    """Checkpoints form a tree: the last good checkpoint of a failure is on the failing checkpoint's own
    branch, never the newest healthy checkpoint of another one."""
    session = make_session()
    with django_capture_on_commit_callbacks(execute=True):
        base = ingest_now(session, step(1), step(2), step(3))
        ingest_now(session, step(4), step(5, status="failed"))
        # the agent goes back to #3 and retries: a later checkpoint on the head's branch completes
        ingest_now(session, step(4, parent=base[2].pk))
    assert unresolved(session) is None
    with django_capture_on_commit_callbacks(execute=True):
        ingest_now(session, step(5), step(6))  # healthy, on the new branch
        # then it goes back to #2 and fails straight away
        failed = ingest_now(session, step(3, parent=base[1].pk, status="failed"))
    alert = unresolved(session)
    assert alert.checkpoint_id == failed[0].pk
    assert alert.last_good_id == base[1].pk  # its parent, not #8 of the other branch


def test_the_drift_job_resolves_failed_alerts_of_sessions_that_are_not_active(make_session):
    """Missed on ingest (a worker that died before its on-commit hook): the job clears it, whatever the
    session's status."""
    session = make_session()
    ingest_now(session, step(1), step(2, status="failed"))
    drift.detect_session(session)
    ingest_now(session, step(3))  # on-commit detection never ran
    AgentSession.objects.filter(pk=session.pk).update(status="completed")
    assert drift.detect_all()["resolved"] == 1
    assert unresolved(session) is None


# ---- at scale: rules about a running agent, and a job that reads only what changed -------------------


def test_an_idle_session_gets_neither_a_long_running_nor_a_missed_routine_alert(make_session):
    """An active session last heard from two days ago was left idle: nobody expects it to run."""
    agent = Agent(make_session()).steps(10).flush()
    drift.detect_all(now=agent.at + timedelta(days=2))
    assert alert_kinds(agent.session) == set()


def test_a_recently_active_long_session_gets_long_running_and_missed_routine(make_session):
    agent = Agent(make_session()).steps(10)
    agent.at = T0 + timedelta(hours=5)
    agent.steps(2).flush()
    drift.detect_all(now=agent.at + timedelta(minutes=5))
    assert alert_kinds(agent.session) == {AlertKind.LONG_RUNNING}
    drift.detect_all(now=agent.at + timedelta(minutes=50))
    assert alert_kinds(agent.session) == {AlertKind.LONG_RUNNING, AlertKind.MISSED_ROUTINE}


def test_running_alerts_resolve_once_the_session_goes_idle_or_ends(make_session):
    idle, ended = Agent(make_session("idle")), Agent(make_session("ended"))
    for agent in (idle, ended):
        agent.steps(5).flush()
    now = T0 + timedelta(hours=2, minutes=30)
    drift.detect_all(now=now)
    assert alert_kinds(idle.session) == alert_kinds(ended.session) == {"long_running", "missed_routine"}
    AgentSession.objects.filter(pk=ended.session.pk).update(status="completed")
    drift.detect_all(now=now + timedelta(minutes=5))
    assert alert_kinds(ended.session) == set()
    assert alert_kinds(idle.session) == {"long_running", "missed_routine"}
    assert drift.detect_all(now=now + timedelta(days=1))["resolved"] == 2
    assert alert_kinds(idle.session) == set()


def test_the_job_reads_only_sessions_with_new_checkpoints_or_a_running_clock(make_session):
    idle, working = Agent(make_session("idle")).steps(10).flush(), Agent(make_session("working"))
    working.at = T0 + timedelta(days=3)
    working.steps(3).flush()
    now = working.now
    assert drift.detect_all(now=now)["sessions_done"] == 2
    assert drift.detect_all(now=now)["sessions_done"] == 1  # the idle one has nothing new
    idle.at = now
    for _ in range(4):
        idle.step("get_order", {"order_id": "A-10482"}, progress=2)
    result = drift.detect_all(now=idle.flush().now)
    assert result["sessions_done"] == 2
    assert AlertKind.REPETITION in alert_kinds(idle.session)


def test_a_rerun_does_not_rewrite_an_unchanged_alert(make_session, django_assert_num_queries):
    agent = Agent(make_session())
    repetition_fires(agent)
    drift.detect_all(now=agent.now)
    AgentSession.objects.filter(pk=agent.session.pk).update(drift_checked_seq=None)  # read it all again
    # which sessions; the batch's savepoint, alerts, sessions, checkpoints, what it read, release: no alert written
    with django_assert_num_queries(7):
        drift.detect_all(now=agent.now)
    assert alert_kinds(agent.session) == {AlertKind.REPETITION, AlertKind.REPEATED_ACTION}


def test_the_job_clears_a_storm_of_alerts_in_a_few_statements_each_audited(make_session, django_assert_max_num_queries):
    agents = [Agent(make_session(f"run-{i}")).steps(3).flush() for i in range(12)]
    drift.detect_all(now=T0 + timedelta(hours=3))
    assert DriftAlert.objects.unresolved().filter(kind=AlertKind.LONG_RUNNING).count() == 12
    with django_assert_max_num_queries(14):  # as many for 12 alerts as for one
        result = drift.detect_all(now=T0 + timedelta(days=2))
    assert result["resolved"] == 24  # long running and missed routine, on every session
    assert DriftAlert.objects.unresolved().count() == 0
    resolved = AuditEvent.objects.filter(action="alert_resolved", actor="system:drift")
    assert sorted(resolved.values_list("session_id", flat=True)) == sorted([a.session.pk for a in agents] * 2)
    assert set(resolved.values_list("reason", flat=True)) == {"the condition cleared"}


def test_a_langgraph_agent_repeating_one_call_and_failing_it_raises_repetition_and_error_rate(make_session):
    session = langgraph_session(make_session)
    messages: list[Any] = [HumanMessage("Book the flight")]
    parent = None
    for turn in range(12):
        call = {"name": "book", "args": {"flight": "SK 4411"}, "id": f"call_{turn}"}
        messages += [
            AIMessage("", tool_calls=[call]),
            ToolMessage("seat map timeout", tool_call_id=call["id"], status="error"),
        ]
        parent = put(
            session,
            {"messages": messages},
            {"source": "loop", "step": turn},
            checkpoint_id=f"cp-{turn:02}",
            parent=parent,
        )
    session.refresh_from_db()

    drift.detect_session(session, now=datetime.now(UTC))

    assert {AlertKind.REPETITION, AlertKind.ERROR_RATE} <= alert_kinds(session)
    alert = DriftAlert.objects.get(session=session, kind=AlertKind.REPETITION)
    assert alert.evidence["tool"] == "book" and alert.evidence["count"] == 12


# ---- the published loop rules explain themselves -----------------------------------------------------


def test_a_loop_alert_names_the_rule_the_repeated_call_and_the_checkpoints_that_made_it(make_session):
    agent = Agent(make_session())
    tool_call_loop_fires(agent)
    detect(agent)
    alert = DriftAlert.objects.get(kind=AlertKind.TOOL_CALL_LOOP)
    assert alert.message.startswith("The same tool call came 5 times in a row (5 or more is a loop): ")
    assert alert.evidence["action"] == "read_file(lines=1-80, path=src/app.py)"  # stored states sort their keys
    repeats = agent.checkpoints[-5:]
    assert alert.evidence["checkpoints"] == [{"id": c.pk, "seq": c.seq} for c in repeats]
    assert alert.last_good_id == agent.checkpoints[-6].pk


def test_a_monologue_names_the_checkpoints_where_the_agent_said_it(make_session):
    agent = Agent(make_session())
    monologue_fires(agent)
    detect(agent)
    alert = DriftAlert.objects.get(kind=AlertKind.MONOLOGUE)
    assert alert.evidence["text"] == "I should check the order again." and alert.evidence["count"] == 3
    assert [row["seq"] for row in alert.evidence["checkpoints"]] == [c.seq for c in agent.checkpoints[-3:]]


def test_a_context_overflow_alert_resolves_once_a_call_succeeds(make_session):
    agent = Agent(make_session())
    context_overflow_fires(agent)
    assert AlertKind.CONTEXT_OVERFLOW in detect(agent)
    alert = DriftAlert.objects.get(kind=AlertKind.CONTEXT_OVERFLOW)
    assert "maximum context length" in alert.evidence["text"]
    agent.step("summarize", {"scope": "last 5"}).flush()
    assert AlertKind.CONTEXT_OVERFLOW not in detect(agent)


def test_openai_style_calls_compare_without_their_ids_or_key_order(make_session):
    session = make_session()
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Find the invoice"}]
    inputs = []
    for i in range(5):
        arguments = '{"query": "invoice 42", "limit": 5}' if i % 2 else '{"limit": 5, "query": "invoice 42"}'
        call = {"id": f"call_{i}", "type": "function", "function": {"name": "search", "arguments": arguments}}
        messages = [
            *messages,
            {"role": "assistant", "content": None, "tool_calls": [call], "id": f"msg_{i}"},
            {"role": "tool", "tool_call_id": f"call_{i}", "content": "0 results"},
        ]
        inputs.append(CheckpointInput(state={"messages": messages}, step=i + 1))
    checkpoints = ingest_now(session, *inputs)
    drift.detect_session(session, now=datetime.now(UTC))
    assert {AlertKind.TOOL_CALL_LOOP, AlertKind.REPEATED_ACTION} <= alert_kinds(session)
    alert = DriftAlert.objects.get(session=session, kind=AlertKind.TOOL_CALL_LOOP)
    assert alert.evidence["action"] == "search(limit=5, query=invoice 42)"
    assert [row["id"] for row in alert.evidence["checkpoints"]] == [c.pk for c in checkpoints]


def test_a_langgraph_agent_talking_to_itself_raises_a_monologue(make_session):
    session = langgraph_session(make_session)
    messages: list[Any] = [HumanMessage("Summarise the ticket")]
    parent = None
    for turn in range(3):
        messages.append(AIMessage("I need the ticket id to continue.", id=f"run-{turn}"))
        parent = put(session, {"messages": messages}, {"step": turn}, checkpoint_id=f"cp-{turn}", parent=parent)
    session.refresh_from_db()
    drift.detect_session(session, now=datetime.now(UTC))
    assert AlertKind.MONOLOGUE in alert_kinds(session)


def test_the_loop_rules_are_pure_over_rows_and_the_heads_state():
    state = {"tool_calls": [{"name": "grep", "arguments": {"pattern": "TODO"}, "result": "3 matches"}] * 5}
    row = drift.SeenCheckpoint(7, 7, "step", "completed", "", "grep", None, T0, b"h", 10, b"r", calls_made=5)
    recent = drift.Recent(rows=[row], load=lambda r: state)
    [finding] = loops.detect_tool_call_loop(recent, T0, drift.Limits())
    assert (finding.kind, finding.checkpoint, finding.evidence["count"]) == (AlertKind.TOOL_CALL_LOOP, row, 5)
    assert loops.detect_tool_call_loop(recent, T0, drift.Limits(tool_call_loop=6)) == []


def test_gemini_content_rule_needs_close_repeats_of_few_periods():
    chant = "Checking the build log one more time before I go on. "
    assert loops.repeated_chunk(chant * 12, 50, 10) is not None
    assert loops.repeated_chunk(chant * 8, 50, 10) is None
    spread = "".join(chant + f"then step {i} went on with unrelated prose about item {i} " * 6 for i in range(12))
    assert loops.repeated_chunk(spread, 50, 10) is None  # far apart: a recurring phrase, not a loop


# ---- the registry ------------------------------------------------------------------------------------


def detect_toy_rule(recent, now, limits):
    """A detector that exists only in tests: fires when the head's step reaches `limits.toy_limit`."""
    head = recent.head
    if head is None or (head.step or 0) < limits.toy_limit:
        return []
    return [drift.Finding("toy_rule", "warning", f"step {head.step}", {"step": head.step}, head, None)]


TOY_RULE = DetectorSpec(
    "toy_rule",
    "Toy Rule",
    "job",
    (Threshold("DRIFT_TOY_LIMIT", "toy_limit", 7, "steps a toy agent may take"),),
    module=__name__,
)


@pytest.fixture
def toy_rule(settings):
    settings.DRIFT_TOY_LIMIT = 3  # config/settings.py defines the declared ones; this one is declared late
    with DETECTORS.registered(TOY_RULE) as spec:
        yield spec


@pytest.mark.parametrize("spec", list(DETECTORS), ids=DETECTORS.names())
def test_every_detector_has_its_function_kind_limits_and_settings(spec, settings):
    if spec.runs == "raised":  # not a drift rule: the module it names raises it
        assert f"AlertKind.{spec.name.upper()}" in Path(importlib.import_module(spec.module).__file__).read_text()
    else:
        assert callable(drift.detector(spec.name))
        assert spec.name in drift.every_kind()
    assert AlertKind(spec.name).label == spec.label
    for threshold in spec.thresholds:
        assert getattr(drift.Limits(), threshold.field) == threshold.default
        assert isinstance(getattr(settings, threshold.setting), int)


def test_the_code_names_only_registered_kinds_with_their_labels():
    assert [(member.value, member.label) for member in AlertKind] == DETECTORS.choices()
    assert set(drift.on_ingest_kinds()) <= set(drift.cheap_kinds())
    assert set(drift.cheap_kinds()).isdisjoint(drift.timed_kinds())


def test_limits_read_every_declared_setting(settings):
    settings.DRIFT_MONOLOGUE_LIMIT = 9
    settings.ROUTINE_INTERVAL_MINUTES = 10
    limits = drift.Limits.from_settings()
    assert limits.monologue == 9
    assert limits.routine_interval == timedelta(minutes=10)
    assert limits == drift.Limits(**{**vars_of(drift.Limits.from_settings())})
    with pytest.raises(TypeError, match="no drift threshold is called nonsense"):
        drift.Limits(nonsense=1)
    with pytest.raises(AttributeError):
        limits.nonsense  # noqa: B018 - the attribute read is the test


def vars_of(limits):
    return {threshold.field: getattr(limits, threshold.field) for _, threshold in thresholds()}


def test_a_declared_detector_runs_and_is_a_choice_everywhere_without_other_edits(toy_rule, make_session):
    assert ("toy_rule", "Toy Rule") in DriftAlert._meta.get_field("kind").choices
    filters = AlertFilterForm(QueryDict("kind=toy_rule"), projects=[])
    assert ("toy_rule", "Toy Rule") in filters.fields["kind"].choices and filters.is_valid()
    assert ("toy_rule", "Toy Rule") in RuleForm().fields["alert_kinds"].choices
    assert drift.Limits().toy_limit == 7 and drift.Limits.from_settings().toy_limit == 3
    assert "toy_rule" in drift.every_kind() and "toy_rule" not in drift.on_ingest_kinds()
    agent = Agent(make_session()).steps(2).flush()
    assert drift.detect_session(agent.session, kinds=["toy_rule"], now=agent.now) == (0, 0)
    agent.steps(2).flush()
    assert drift.detect_session(agent.session, kinds=["toy_rule"], now=agent.now) == (1, 0)
    alert = DriftAlert.objects.get(kind="toy_rule")
    assert alert.get_kind_display() == "Toy Rule" and alert.message == "step 4"
    assert "toy_rule" in detect(agent)  # and with every other detector, as the drift job runs them


def test_a_detector_whose_function_is_missing_is_named(toy_rule, monkeypatch):
    monkeypatch.delitem(globals(), "detect_toy_rule")
    with pytest.raises(LookupError, match="has no detect_toy_rule"):
        drift.detector("toy_rule")


def test_one_threshold_reads_its_setting(settings):
    settings.DRIFT_STATE_MAX_BYTES = 1234
    assert findings.threshold("state_max_bytes") == 1234 == drift.Limits.from_settings().state_max_bytes
