"""Demo data for an empty console: three projects of agents whose checkpoints look like real runs.

Every session is written through the services (ingest, restore, fork, pin), so the demo exercises the
same paths as real agents. Content comes from one seeded `random.Random`; times are laid out backwards
from now, so the console always shows activity from the last three days.

The demo holds what a console running its default retention holds, so beat's hourly run deletes none
of it (tests/checkpoints/test_seed_demo.py runs it an hour and a day later): at most 100 step
checkpoints per session, routine checkpoints only the three newest of the Dream.OS captain, and
pre-operation checkpoints only for operations that are not done (they failed, or a rollout is under way).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import F

from .. import services, store
from ..models import (
    AgentOutput,
    AgentSession,
    AlertKind,
    AlertSeverity,
    AlertState,
    AuditEvent,
    Checkpoint,
    CheckpointKind,
    CheckpointStatus,
    DriftAlert,
    FeedbackAction,
    Phase,
    PhaseFeedback,
    PhaseStatus,
    Project,
    SessionStatus,
)
from ..services import CheckpointInput
from .personas import (
    ACTOR,
    CODE_FILES,
    CODING,
    PIPELINE,
    RECOVERY_EVERY,
    RESEARCH,
    ROUTINE_EVERY,
    SUPPORT,
    TABLES,
    Persona,
    Rng,
    State,
    fill,
)


@dataclass
class Call:
    """A tool call forced by a scenario (a loop, a failure) instead of a random one."""

    tool: str
    arguments: dict[str, Any]
    result: str
    ok: bool = True


@dataclass
class Run:
    """Builds the checkpoints of one agent run. States are never changed in place: each step makes a new
    top-level dict that shares the unchanged parts, so every queued checkpoint keeps its own state."""

    persona: Persona
    rng: Rng
    session_id: str
    agent: str
    planned_steps: int
    inputs: list[CheckpointInput] = field(default_factory=list)
    state: State = field(default_factory=dict)
    started: datetime | None = None
    last_at: datetime | None = None
    last_recovery: datetime | None = None

    def begin(self, at: datetime) -> None:
        p, r = self.persona, self.rng
        self.state = {
            "session_id": self.session_id,
            "agent": {"name": self.agent, "model": p.model},
            "step": 0,
            "task": {
                "id": f"TASK-{r.randint(400, 999)}",
                "title": p.title,
                "status": "in_progress",
                "progress": 0,
                "subtasks": [{"title": title, "done": False} for title in p.subtasks],
            },
            "messages": [
                {"role": "system", "content": p.system},
                {"role": "user", "content": p.task},
            ],
            "tool_calls": [],
            "memory": {key: make(r) for key, make in p.memory.items()},
            "metrics": {"tokens_in": 0, "tokens_out": 0, "cost_usd": 0.0, "tool_errors": 0},
        }
        self.started = self.last_at = self.last_recovery = at
        self.emit(at, name="task_started")

    def resume(self, state: State, at: datetime, note: str) -> None:
        """Continue from a stored state (after a restore or a fork)."""
        self.state = {**state, "messages": [*state["messages"], {"role": "user", "content": note}]}
        self.started = self.started or at
        self.last_at = self.last_recovery = at

    def emit(self, at: datetime, *, name: str, kind: str = CheckpointKind.STEP, **extra: Any) -> int:
        self.inputs.append(
            CheckpointInput(state=self.state, name=name, kind=kind, step=self.state["step"], created_at=at, **extra)
        )
        return len(self.inputs) - 1

    def step(
        self,
        at: datetime,
        *,
        call: Call | None = None,
        freeze: bool = False,
        status: str = CheckpointStatus.COMPLETED,
        status_reason: str = "",
    ) -> int:
        """One agent step at `at` (recovery and end-of-day checkpoints are added before it when due); returns the
        index of its checkpoint in `inputs`."""
        self._housekeeping(at)
        p, r, s = self.persona, self.rng, self.state
        if call is None:
            tool_name = r.choices(list(p.tools), weights=[tool.weight for tool in p.tools.values()])[0]
            tool = p.tools[tool_name]
            arguments, result = tool.call(r)
            ok = r.random() >= tool.fail_rate
            result = result if ok else tool.error(r)
        else:
            tool_name, tool, arguments, result, ok = call.tool, p.tools[call.tool], call.arguments, call.result, call.ok
        step = s["step"] + 1
        if tool.risky and not ok:  # retention lets a pre-operation checkpoint go once its operation is done
            self.emit(
                at - timedelta(seconds=2),
                name=f"pre_{tool_name}",
                kind=CheckpointKind.PRE_OPERATION,
                operation_id=f"{tool_name}-{self.session_id}-{step}",
            )
        call_id = f"call_{r.getrandbits(40):010x}"
        messages = [
            {
                "role": "assistant",
                "content": fill(r, r.choice(p.thoughts)),
                "tool_calls": [{"id": call_id, "name": tool_name, "arguments": arguments}],
            },
            {"role": "tool", "tool_call_id": call_id, "name": tool_name, "content": result},
        ]
        if call is None and r.random() < 0.03:
            messages.append({"role": "user", "content": fill(r, r.choice(p.follow_ups))})
        record = {
            "id": call_id,
            "step": step,
            "tool_name": tool_name,
            "arguments": arguments,
            "result": result if ok else None,
            "error": None if ok else result,
            "success": ok,
            "duration_ms": r.randint(40, 9000),
        }
        task = s["task"]
        progress = (
            task["progress"] if freeze else min(99, max(task["progress"], round(100 * step / self.planned_steps)))
        )
        done_count = progress * len(task["subtasks"]) // 100
        newly_done = done_count > sum(item["done"] for item in task["subtasks"])
        if newly_done:
            task = {
                **task,
                "subtasks": [{**item, "done": i < done_count} for i, item in enumerate(task["subtasks"])],
            }
        metrics = s["metrics"]
        tokens_in = metrics["tokens_in"] + 900 + 40 * len(s["messages"]) + r.randint(0, 1500)
        tokens_out = metrics["tokens_out"] + r.randint(60, 700)
        self.state = {
            **s,
            "step": step,
            "task": {**task, "progress": progress},
            "messages": s["messages"] + messages,
            "tool_calls": [*s["tool_calls"], record],
            "memory": self._remember(tool_name, ok, step),
            "metrics": {
                "tokens_in": tokens_in,
                "tokens_out": tokens_out,
                "cost_usd": round(tokens_in * 3e-6 + tokens_out * 15e-6, 4),
                "tool_errors": metrics["tool_errors"] + (not ok),
            },
        }
        name = "subtask_completed" if newly_done and ok else tool.ok_name if ok else tool.fail_name
        self.last_at = at
        return self.emit(at, name=name, status=status, status_reason=status_reason)

    def finish(self, at: datetime) -> int:
        s = self.state
        self.state = {
            **s,
            "task": {
                **s["task"],
                "status": "completed",
                "progress": 100,
                "subtasks": [{**item, "done": True} for item in s["task"]["subtasks"]],
            },
            "messages": [*s["messages"], {"role": "assistant", "content": "Done. " + s["task"]["title"] + "."}],
        }
        self.last_at = at
        return self.emit(at, name="task_completed")

    def _remember(self, tool_name: str, ok: bool, step: int) -> dict[str, Any]:
        p, r = self.persona, self.rng
        memory = {**self.state["memory"], "last_tool": tool_name, "last_tool_ok": ok}
        for key in r.sample(list(p.memory), r.randint(0, 2)):
            memory[key] = p.memory[key](r)
        facts = sum(key.startswith(p.fact_prefix) for key in memory)
        if r.random() < 0.08 and facts < 25:
            memory[f"{p.fact_prefix}_{facts + 1:02d}"] = {"text": fill(r, r.choice(p.facts)), "step": step}
        return memory

    def _housekeeping(self, at: datetime) -> None:
        """Checkpoints the agent's own routines take between steps: recovery, end of day."""
        assert self.last_at and self.last_recovery and self.started  # noqa: S101 - set by begin() or resume(); for mypy
        gap = at - self.last_at
        if gap <= timedelta(seconds=6):
            return
        if self.last_at.date() != at.date():
            day = (self.last_at.date() - self.started.date()).days + 1
            self.emit(self.last_at + timedelta(seconds=1), name=f"day{day}_final", kind=CheckpointKind.MANUAL)
        if at - self.last_recovery >= RECOVERY_EVERY:
            self.last_recovery = at - timedelta(seconds=3)
            memory = {**self.state["memory"], "last_recovery_at": self.last_recovery.isoformat(timespec="seconds")}
            self.state = {**self.state, "memory": memory}
            self.emit(self.last_recovery, name="recovery", kind=CheckpointKind.RECOVERY)


def _schedule(
    rng: Rng,
    count: int,
    *,
    end: datetime,
    gap: tuple[float, float] = (5, 180),
    pause_rate: float = 0.01,
    pause: tuple[float, float] = (600, 3600),
) -> list[datetime]:
    """`count` step times ending at `end`: a few seconds to minutes apart, with the odd longer pause."""
    gaps = [rng.uniform(*pause) if rng.random() < pause_rate else rng.uniform(*gap) for _ in range(max(count - 1, 0))]
    at = end - timedelta(seconds=sum(gaps))
    times = [at]
    for seconds in gaps:
        at += timedelta(seconds=seconds)
        times.append(at)
    return [moment.replace(microsecond=0) for moment in times]


# ---- the command --------------------------------------------------------------------------------


@dataclass
class Seeder:
    rng: Rng
    now: datetime
    small: bool
    sessions: list[AgentSession] = field(default_factory=list)

    def size(self, full: int, small: int = 20) -> int:
        return small if self.small else full

    def session(self, project: str, external_id: str, agent: str, title: str, **fields: Any) -> AgentSession:
        owner = services.get_or_create_project(project)
        if owner.name == owner.slug:
            Project.objects.filter(pk=owner.pk).update(name=project.replace("-", " ").capitalize())
        unique, n = external_id, 1
        while AgentSession.objects.filter(project=owner, external_id=unique).exists():
            n += 1
            unique = f"{external_id}-{n}"
        session, _ = services.upsert_session(owner, external_id=unique, agent=agent, title=title, **fields)
        self.sessions.append(session)
        return session

    def ingest(self, session: AgentSession, run: Run, start: int = 0) -> list[Checkpoint]:
        results = services.ingest_checkpoints([(session, run.inputs[start:])], now=self.now)
        return [checkpoint for checkpoint, _ in results]

    def plain(
        self,
        project: str,
        external_id: str,
        agent: str,
        title: str,
        persona: Persona,
        *,
        steps: int,
        ends_ago: timedelta,
        outcome: str = SessionStatus.ACTIVE,
        **schedule: Any,
    ) -> tuple[AgentSession, Run, list[Checkpoint]]:
        session = self.session(project, external_id, agent, title)
        run = Run(persona, self.rng, external_id, agent, planned_steps=steps)
        times = _schedule(self.rng, steps, end=self.now - ends_ago, **schedule)
        run.begin(times[0])
        for at in times[1:-1]:
            run.step(at)
        if outcome == SessionStatus.COMPLETED:
            run.finish(times[-1])
        else:
            run.step(times[-1])
        checkpoints = self.ingest(session, run)
        if outcome == SessionStatus.COMPLETED:
            AgentSession.objects.filter(pk=session.pk).update(status=SessionStatus.COMPLETED)
        return session, run, checkpoints

    # ---- scenarios ----

    def research(self) -> None:
        """A long survey with day-end checkpoints, a pinned milestone, and a fork that tries another approach."""
        steps = self.size(96, 18)  # step checkpoints are kept 100 per session: the whole survey stays
        session, run, checkpoints = self.plain(
            "research-agents",
            "scout-ctx-compression",
            "scout",
            "Survey: context compression for long-running agents",
            RESEARCH,
            steps=steps,
            ends_ago=timedelta(minutes=3),
            gap=(20, 200),
            pause_rate=0.15,
            pause=(2 * 3600, 6 * 3600),
        )
        for checkpoint in checkpoints:
            if checkpoint.kind == CheckpointKind.MANUAL and checkpoint.name == "day1_final":
                services.pin_checkpoint(checkpoint, actor=ACTOR, reason="baseline before the draft rewrite")
        fork_steps = self.size(70, 8)
        fork_times = _schedule(self.rng, fork_steps, end=self.now - timedelta(minutes=9), gap=(20, 150))
        candidates = [
            c
            for c in checkpoints
            if c.kind == CheckpointKind.STEP and c.created_at < fork_times[0] - timedelta(minutes=5)
        ]
        source = candidates[len(candidates) * 2 // 3] if len(candidates) > 3 else checkpoints[1]
        fork = services.fork_session(
            source,
            actor=ACTOR,
            title="Scout: retrieval-only variant",
            external_id=f"{session.external_id}-retrieval",
            now=max(source.created_at + timedelta(minutes=2), fork_times[0] - timedelta(minutes=3)),
        )
        self.sessions.append(fork)
        branch = Run(RESEARCH, self.rng, fork.external_id, fork.agent, planned_steps=steps)
        branch.resume(
            store.load_state(bytes(source.root)),
            fork_times[0] - timedelta(minutes=1),
            "Fork: try a retrieval-only design (no summariser calls) and compare it on the same benchmarks.",
        )
        for at in fork_times:
            branch.step(at)
        self.ingest(fork, branch)

        self.plain(
            "research-agents",
            "scout-agent-memory",
            "scout",
            "Survey: memory architectures for agents",
            RESEARCH,
            steps=self.size(90, 12),
            ends_ago=timedelta(hours=30),
            outcome=SessionStatus.COMPLETED,
            gap=(15, 160),
        )

    def coding(self) -> None:
        """A refactor that broke the tests; an operator restored the last green checkpoint and the agent went on."""
        session = self.session("research-agents", "patchwright-batch-ingest", "patchwright", "Batch inserts in ingest")
        before, broken, after = self.size(50, 12), self.size(14, 4), self.size(32, 6)  # 96 step checkpoints
        run = Run(CODING, self.rng, session.external_id, session.agent, planned_steps=before + broken + after)
        end = self.now - timedelta(minutes=2)
        after_times = _schedule(self.rng, after, end=end, gap=(10, 150))
        restore_at = after_times[0] - timedelta(minutes=4)
        times = _schedule(self.rng, before + broken, end=restore_at - timedelta(minutes=6), gap=(8, 120))
        run.begin(times[0])
        for at in times[1 : before - 1]:
            run.step(at)
        green = Call("run_tests", {"target": "tests/checkpoints", "args": "-q -x"}, "163 passed in 5.87s")
        last_green = run.step(times[before - 1], call=green)
        failure = CODING.tools["run_tests"].error(self.rng)
        for i, at in enumerate(times[before:]):
            edit = Call(
                "edit_file", {"path": CODE_FILES[0], "start_line": 212, "end_line": 260}, "applied edit: +31 -18"
            )
            tests = Call("run_tests", {"target": "tests/checkpoints", "args": "-q -x"}, failure, ok=False)
            run.step(at, call=tests if i % 2 else edit, freeze=True)
        checkpoints = self.ingest(session, run)
        target = checkpoints[last_green]
        services.pin_checkpoint(target, actor=ACTOR, reason="last green test run before the refactor")
        services.restore_checkpoint(
            target,
            actor=ACTOR,
            reason=f"tests red since the batching refactor; back to the last green run (#{target.seq})",
            now=restore_at,
        )
        start = len(run.inputs)
        run.resume(
            store.load_state(bytes(target.root)),
            restore_at,
            "Restored to the last green checkpoint. Keep the per-session row lock while assigning seqs.",
        )
        for at in after_times:
            run.step(at)
        session.refresh_from_db()  # the restore moved the head: the next states are stored against it
        self.ingest(session, run, start)

    def support(self) -> None:
        """A finished queue, a queue whose progress stalled, and a refund bot halted by the loop detector."""
        self.plain(
            "support-bots",
            "triage-night-1",
            "helpdesk-triage",
            "Overnight queue, night 1",
            SUPPORT,
            steps=self.size(95, 12),
            ends_ago=timedelta(hours=44),
            outcome=SessionStatus.COMPLETED,
            gap=(10, 120),
        )
        session = self.session("support-bots", "triage-night-3", "helpdesk-triage", "Overnight queue, night 3")
        steps, flat = self.size(95, 16), self.size(14, 6)
        run = Run(SUPPORT, self.rng, session.external_id, session.agent, planned_steps=steps + 40)
        times = _schedule(self.rng, steps, end=self.now - timedelta(minutes=6), gap=(10, 140))
        run.begin(times[0])
        last_good = 0
        for at in times[1 : steps - flat]:
            last_good = run.step(at)
        progress = run.state["task"]["progress"]
        for at in times[steps - flat :]:
            query = self.rng.choice(("sso loop okta", "sso redirect loop", "login loop after sso", "saml loop"))
            run.step(at, call=Call("search_kb", {"query": query}, "0 articles"), freeze=True)
        checkpoints = self.ingest(session, run)
        self.alert(
            session,
            AlertKind.STALLED,
            checkpoints[-1],
            checkpoints[last_good],
            f"Task progress flat at {progress}% for the last {flat} checkpoints.",
            {"window": flat, "progress": [progress] * flat, "metric": "task.progress"},
        )

        session = self.session("support-bots", "refund-bot-0412", "refund-bot", "Refund requests, batch 0412")
        steps = self.size(80, 14)
        run = Run(SUPPORT, self.rng, session.external_id, session.agent, planned_steps=steps + 20)
        times = _schedule(self.rng, steps + 4, end=self.now - timedelta(hours=5), gap=(5, 90))
        run.begin(times[0])
        last_good = 0
        for at in times[1:steps]:
            last_good = run.step(at)
        loop = Call("get_order", {"order_id": "A-10482"}, "1 items, $129.00, status refund_pending")
        repeats = [run.step(at, call=loop, freeze=True) for at in times[steps:-1]]
        reason = 'loop detector: same tool call 4 times (get_order {"order_id": "A-10482"})'
        repeats.append(
            run.step(times[-1], call=loop, freeze=True, status=CheckpointStatus.HALTED, status_reason=reason)
        )
        checkpoints = self.ingest(session, run)
        self.alert(
            session,
            AlertKind.REPETITION,
            checkpoints[-1],
            checkpoints[last_good],
            "The same action (get_order, same arguments) ran 4 times without progress.",
            {
                "tool": "get_order",
                "arguments": loop.arguments,
                "count": 4,
                "seqs": [checkpoints[i].seq for i in repeats],
            },
        )

    def dreamos(self) -> None:
        """A coordinator in the Dream.OS style: its state moves every 30 minutes; a recovery checkpoint every two
        hours and, as Dream.OS keeps them, its three newest routine ones; a rollout under way behind a
        pre-operation checkpoint."""
        session = self.session("support-bots", "captain.1", "captain.1", "Swarm captain")
        count = self.size(150, 20)
        end = self.now - timedelta(minutes=self.rng.randint(1, 20))
        start = end - ROUTINE_EVERY * (count - 1)
        state: State = {
            "current_task": {"id": "TASK-501", "status": "in_progress", "progress_percentage": 0, "context": {}},
            "mailbox": {"last_processed_id": "MSG-200", "pending_count": 3},
            "operational_context": {
                "goals": ["keep every agent under its drift budget", "clear the mailbox each hour"],
                "constraints": ["no data loss", "pre-operation checkpoint before any rollout"],
                "decisions": [],
            },
            "memory": {"short_term": [], "session": []},
        }
        inputs: list[CheckpointInput] = []
        task, message = 501, 200
        for i in range(count):
            at = start + ROUTINE_EVERY * i
            message += self.rng.randint(0, 9)
            progress = state["current_task"]["progress_percentage"] + self.rng.randint(0, 12)
            if progress >= 100:
                task, progress = task + 1, 0
            note = fill(self.rng, self.rng.choice(RESEARCH.thoughts + SUPPORT.thoughts + PIPELINE.thoughts))
            decisions = state["operational_context"]["decisions"]
            if self.rng.random() < 0.1:
                decisions = [
                    *decisions,
                    f"{at:%H:%M} reassign {self.rng.choice(TABLES)} to agent-{self.rng.randint(2, 9)}",
                ]
            state = {
                "current_task": {
                    "id": f"TASK-{task}",
                    "status": "in_progress",
                    "progress_percentage": progress,
                    "context": {"note": note},
                },
                "mailbox": {"last_processed_id": f"MSG-{message}", "pending_count": self.rng.randint(0, 7)},
                "operational_context": {**state["operational_context"], "decisions": decisions},
                "memory": {
                    "short_term": [*state["memory"]["short_term"][-3:], note],
                    "session": [*state["memory"]["session"], f"{at:%Y-%m-%d %H:%M} {note}"],
                },
            }
            kind, name, operation = CheckpointKind.ROUTINE, "routine", ""  # the newest three, before the last
            if i == count - 5:
                kind, name, operation = CheckpointKind.PRE_OPERATION, "pre_rollout", f"rollout-{i}"  # not done yet
            elif i == count - 1 or (i < count - 5 and i % 4 == 0):
                kind, name = CheckpointKind.RECOVERY, "recovery"
            elif i < count - 5:
                continue  # a routine checkpoint that Dream.OS (and retention: three per agent) let go already
            inputs.append(CheckpointInput(state=state, name=name, kind=kind, created_at=at, operation_id=operation))
        services.ingest_checkpoints([(session, inputs)], now=self.now)

    def pipeline(self) -> None:
        """Nightly loads: one completed, one that failed on a full disk, tonight's still running."""
        day = timedelta(days=1)
        self.plain(
            "data-pipeline",
            f"nightly-etl-{(self.now - 2 * day):%Y-%m-%d}",
            "etl-runner",
            "Nightly load",
            PIPELINE,
            steps=self.size(95, 12),
            ends_ago=2 * day - timedelta(hours=2),
            outcome=SessionStatus.COMPLETED,
            gap=(5, 90),
        )
        session = self.session(
            "data-pipeline", f"nightly-etl-{(self.now - day):%Y-%m-%d}", "etl-runner", "Nightly load"
        )
        steps = self.size(95, 14)
        run = Run(PIPELINE, self.rng, session.external_id, session.agent, planned_steps=steps + 10)
        times = _schedule(self.rng, steps + 3, end=self.now - day + timedelta(hours=3), gap=(5, 90))
        run.begin(times[0])
        last_good = 0
        for at in times[1:steps]:
            last_good = run.step(at)
        error = 'psycopg.errors.DiskFull: could not extend file "base/16384/24577.3": No space left on device'
        load = {"table": "events.page_views", "rows": 500_000}
        for at in times[steps:-1]:
            run.step(at, call=Call("load_batch", load, error, ok=False), freeze=True)
        run.step(
            times[-1],
            call=Call("load_batch", load, error, ok=False),
            freeze=True,
            status=CheckpointStatus.FAILED,
            status_reason=f"load_batch failed 3 times: {error}",
        )
        checkpoints = self.ingest(session, run)
        self.alert(
            session,
            AlertKind.FAILED,
            checkpoints[-1],
            checkpoints[last_good],
            "The run stopped with status failed: load_batch hit a full disk 3 times.",
            {"status_reason": error, "failed_tool_calls": 3},
            severity=AlertSeverity.CRITICAL,
        )
        self.plain(
            "data-pipeline",
            f"nightly-etl-{self.now:%Y-%m-%d}",
            "etl-runner",
            "Nightly load",
            PIPELINE,
            steps=self.size(60, 10),
            ends_ago=timedelta(minutes=1),
            gap=(5, 90),
        )

    def phased(self) -> None:
        """An idea-validation workflow in mvp mode (phases 1, 2, 3, 6, 7) with outputs and reviews."""
        session = self.session(
            "research-agents",
            "idea-validation-456",
            "idea-validator",
            "Idea validation: fridge-aware meal planning",
            execution_mode="mvp",
        )
        idea = "A subscription app that plans weekly meals around what is already in your fridge."
        plan = [
            (1, "Concept Expansion", ["concept_expansion"], PhaseStatus.COMPLETED),
            (2, "Market Research", ["market_intelligence", "competitor_analysis"], PhaseStatus.COMPLETED),
            (3, "Niche Selection", ["niche_selection"], PhaseStatus.COMPLETED),
            (6, "Validation", ["risk_assessment", "validation"], PhaseStatus.IN_PROGRESS),
            (7, "Final Synthesis", ["final_synthesis"], PhaseStatus.PENDING),
        ]
        at = self.now - timedelta(hours=26)
        state: State = {
            "workflow": "idea_validation",
            "execution_mode": "mvp",
            "idea": idea,
            "current_phase": 1,
            "phases": {},
            "messages": [{"role": "user", "content": f"Validate this idea: {idea}"}],
        }
        inputs: list[CheckpointInput] = []

        def checkpoint(name: str, number: int, when: datetime) -> None:
            inputs.append(
                CheckpointInput(state=state, name=name, kind=CheckpointKind.PHASE, phase=number, created_at=when)
            )

        total_tokens, total_cost = 0, Decimal(0)
        for number, name, agents, status in plan:
            if status == PhaseStatus.PENDING:
                Phase.objects.create(session=session, number=number, name=name, status=status)
                continue
            started = at
            retries = 1 if number == 3 else 0
            phase = Phase.objects.create(
                session=session, number=number, name=name, status=PhaseStatus.IN_PROGRESS, started_at=started
            )
            state = {
                **state,
                "current_phase": number,
                "phases": {**state["phases"], str(number): {"name": name, "status": "in_progress"}},
            }
            checkpoint("phase_started", number, at)
            tokens_in = tokens_out = 0
            for attempt in range(retries + 1):
                for i, agent in enumerate(agents):
                    at += timedelta(seconds=self.rng.randint(40, 240))
                    running = status == PhaseStatus.IN_PROGRESS and i == len(agents) - 1
                    t_in, t_out = self.rng.randint(5000, 14000), self.rng.randint(1200, 4000)
                    tokens_in, tokens_out = tokens_in + t_in, tokens_out + t_out
                    AgentOutput.objects.create(
                        phase=phase,
                        agent_name=agent,
                        status="in_progress" if running else "completed",
                        content="" if running else _agent_output(agent, name, idea, attempt),
                        model="claude-sonnet-4-5",
                        tokens_in=0 if running else t_in,
                        tokens_out=0 if running else t_out,
                        tools_used=["web_search", "file_write"] if number in (2, 6) else ["file_write"],
                        duration=None if running else float(self.rng.randint(20, 180)),
                        created_at=at,
                    )
                    if running:
                        break
                    summary = f"{agent} finished ({t_out} tokens): {_agent_output(agent, name, idea, attempt).splitlines()[2]}"
                    state = {**state, "messages": [*state["messages"], {"role": "assistant", "content": summary}]}
                    checkpoint("agent_completed", number, at)
                if status == PhaseStatus.IN_PROGRESS:
                    break
                at += timedelta(hours=self.rng.randint(1, 4), minutes=self.rng.randint(0, 59))
                changes = ["focus on households of 2-4 people", "drop the B2B angle"] if attempt < retries else []
                PhaseFeedback.objects.create(
                    phase=phase,
                    approved=not changes,
                    action=FeedbackAction.RETRY_WITH_CHANGES if changes else FeedbackAction.APPROVED,
                    comments="Too broad, narrow the niche." if changes else "Looks good, go ahead.",
                    requested_changes=changes,
                    retry_count=attempt,
                    reviewer_name="dana (product)",
                    created_at=at,
                )
                verdict = "feedback_received" if changes else "phase_approved"
                state = {
                    **state,
                    "messages": [
                        *state["messages"],
                        {"role": "user", "content": "Review: " + ("; ".join(changes) or "approved")},
                    ],
                }
                checkpoint(verdict, number, at)
            cost = Decimal(tokens_in * 3 + tokens_out * 15) / Decimal(1_000_000)
            total_tokens += tokens_in + tokens_out
            total_cost += cost
            completed = status == PhaseStatus.COMPLETED
            Phase.objects.filter(pk=phase.pk).update(
                status=status,
                completed_at=at if completed else None,
                duration=(at - started).total_seconds() if completed else None,
                retry_count=retries,
                tokens_in=tokens_in,
                tokens_out=tokens_out,
                cost=cost.quantize(Decimal("0.000001")),
            )
            if completed:
                phases = {**state["phases"], str(number): {"name": name, "status": "completed"}}
                state = {**state, "phases": phases}
                checkpoint("phase_completed", number, at)
                at += timedelta(minutes=self.rng.randint(1, 20))
        services.ingest_checkpoints([(session, inputs)], now=self.now)
        AgentSession.objects.filter(pk=session.pk).update(
            metadata={
                "workflow": "idea_validation",
                "total_tokens": total_tokens,
                "total_cost": str(total_cost),
            }
        )

    # ---- helpers ----

    def alert(
        self,
        session: AgentSession,
        kind: str,
        checkpoint: Checkpoint,
        last_good: Checkpoint,
        message: str,
        evidence: dict[str, Any],
        severity: str = AlertSeverity.WARNING,
    ) -> None:
        fields = {
            "checkpoint": checkpoint,
            "last_good": last_good,
            "message": message,
            "evidence": evidence,
            "severity": severity,
            "opened_at": checkpoint.created_at,
        }
        # Drift detectors running on ingest may have opened the same alert already.
        if not DriftAlert.objects.unresolved().filter(session=session, kind=kind).update(**fields):
            DriftAlert.objects.create(session=session, kind=kind, state=AlertState.OPEN, **fields)

    def settle(self) -> None:
        """Session and audit times follow the agents' clocks rather than the moment the seed ran."""
        for session in self.sessions:
            checkpoints = Checkpoint.objects.filter(session=session)
            first = checkpoints.order_by("created_at").values_list("created_at", flat=True).first()
            last = checkpoints.order_by("-created_at").values_list("created_at", flat=True).first()
            checkpoints.update(received_at=F("created_at"))
            AgentSession.objects.filter(pk=session.pk).update(created_at=first, updated_at=last, last_seen_at=last)
            for event in AuditEvent.objects.filter(session=session, checkpoint__isnull=False).select_related(
                "checkpoint"
            ):
                moment = event.checkpoint.created_at
                if event.action == "fork":
                    moment = (
                        Checkpoint.objects.filter(session__forked_from=event.checkpoint)
                        .values_list("created_at", flat=True)
                        .first()
                        or moment
                    )
                AuditEvent.objects.filter(pk=event.pk).update(created_at=moment)


def _agent_output(agent: str, phase: str, idea: str, attempt: int) -> str:
    title = agent.replace("_", " ").title()
    narrowed = "\n\n> Revised after review: narrowed to households of 2-4 people.\n" if attempt else ""
    return (
        f"# {title}\n\n"
        f"Phase: {phase}. Idea: {idea}\n\n"
        "## Key findings\n\n"
        "- Food waste is the pain point users name first; saving money comes second.\n"
        "- Fridge inventory must be near-zero effort: receipt scanning beats manual entry.\n"
        "- Retention risk: novelty fades after 3-4 weeks without grocery integration.\n\n"
        "| metric | estimate |\n|---|---|\n| TAM (EU + US) | $4.2B |\n| willingness to pay | $6-9 / month |\n"
        f"| churn after 3 months | 35-45% |\n{narrowed}\n"
        "## Next steps\n\n1. Interview 10 households.\n2. Prototype receipt scanning.\n"
    )
