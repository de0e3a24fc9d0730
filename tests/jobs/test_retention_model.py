"""Retention against a model of its rules: random sessions (kinds, names, ages, branches, pins, pending operations,
restores, forks, alerts) under random policies, and what a run keeps compared with what docs/jobs.md ("Retention")
says it keeps. The model below is written from that page, not from checkpoints/jobs/retention.py."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import transaction
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from checkpoints.jobs.retention import apply_retention
from checkpoints.models import AgentSession, Checkpoint, DriftAlert, RetentionPolicy
from checkpoints.services import (
    Actor,
    CheckpointInput,
    create_checkpoint,
    fork_session,
    get_or_create_project,
    pin_checkpoint,
    restore_checkpoint,
    upsert_session,
)

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
AGE = timedelta(hours=1)  # ages and max_age in whole hours: the boundary (a checkpoint exactly max_age old) comes up
KINDS = ["step", "routine", "manual", "pre_operation", "restore"]
SYSTEM = Actor.system("test")
STEP = ("step", "", 0, False, False, None)  # an unnamed step made now
ROUTINE = ("routine", "", 0, False, False, None)

# (kind, name, age in hours, operation done, pinned, branch: parent this many checkpoints back, or None)
CHECKPOINT = st.tuples(
    st.sampled_from(KINDS[:4]),
    st.sampled_from(["", "plan", "code"]),
    st.integers(0, 2),
    st.booleans(),
    st.booleans(),
    st.none() | st.integers(2, 3),
)
# (project 0 or 1, agent, checkpoints)
SESSION = st.tuples(st.integers(0, 1), st.sampled_from(["x", "y"]), st.lists(CHECKPOINT, min_size=1, max_size=6))
PICK = st.integers(0, 50)
EVENT = st.one_of(
    st.tuples(st.just("restore"), PICK),
    st.tuples(st.just("fork"), PICK),
    # an alert of a session: its last good and its checkpoint (picks or none), resolved or not
    st.tuples(st.just("alert"), PICK, st.none() | PICK, st.none() | PICK, st.booleans()),
)
# (kind, project: None for the global policy or 0, keep_last, scope, max_age hours, until done, first, per name,
# enabled)
POLICY = st.tuples(
    st.sampled_from(KINDS),
    st.sampled_from([None, 0]),
    st.none() | st.integers(0, 3),
    st.sampled_from(["session", "agent"]),
    st.none() | st.integers(0, 2),
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.booleans(),
)
WORLD = st.tuples(
    st.lists(SESSION, min_size=1, max_size=3),
    st.lists(EVENT, max_size=4),
    st.lists(POLICY, max_size=6),
    st.integers(1, 6),  # the batch size: several batches per run
)


@contextmanager
def rolled_back() -> Iterator[None]:
    """Each example starts from an empty store: what it wrote goes when it ends (a savepoint)."""
    with transaction.atomic():
        yield
        transaction.set_rollback(True)


def build(world: Any) -> int:
    """Write the world through the services, with its policies in place of the defaults; returns the batch size."""
    sessions_spec, events, policies, batch_size = world
    projects = [get_or_create_project("acme"), get_or_create_project("globex")]
    RetentionPolicy.objects.all().delete()
    for kind, project, keep_last, scope, max_age, until_done, first, per_name, enabled in policies:
        RetentionPolicy.objects.update_or_create(
            kind=kind,
            project=None if project is None else projects[project],
            defaults={
                "keep_last": keep_last,
                "keep_last_scope": scope,
                "max_age": None if max_age is None else max_age * AGE,
                "until_operation_done": until_done,
                "keep_first": first,
                "keep_latest_per_name": per_name,
                "enabled": enabled,
            },
        )
    made: list[Checkpoint] = []
    for index, (project, agent, checkpoints) in enumerate(sessions_spec):
        session, _ = upsert_session(projects[project], external_id=f"run-{index}", agent=agent)
        mine: list[Checkpoint] = []
        for position, (kind, name, age, done, pinned, back) in enumerate(checkpoints):
            parent = mine[position - back].pk if back is not None and position >= back else None
            item = CheckpointInput(
                state={"session": index, "position": position},
                kind=kind,
                name=name,
                created_at=NOW - age * AGE,
                operation_id="op" if kind == "pre_operation" else "",
                parent=parent,
            )
            checkpoint, _ = create_checkpoint(session, item)
            if done:  # nothing in the console marks an operation done yet: agents' tooling does it in the database
                Checkpoint.objects.filter(pk=checkpoint.pk).update(operation_done=True)
            if pinned:
                pin_checkpoint(checkpoint, actor=SYSTEM)
            mine.append(checkpoint)
        made.extend(mine)
    for event, pick, *rest in events:
        target = made[pick % len(made)]
        if event == "restore":
            made.append(restore_checkpoint(target, actor=SYSTEM, now=NOW, detect=False))
        elif event == "fork":
            fork = fork_session(target, actor=SYSTEM, now=NOW)
            made.extend(Checkpoint.objects.filter(session=fork))
        else:
            last_good, checkpoint, resolved = rest
            of_session = [c for c in made if c.session_id == target.session_id]
            kind = "stall" if not DriftAlert.objects.filter(session_id=target.session_id, kind="stall").exists() else ""
            if kind:
                DriftAlert.objects.create(
                    session_id=target.session_id,
                    kind=kind,
                    message="stuck",
                    state="resolved" if resolved else "open",
                    last_good=None if last_good is None else of_session[last_good % len(of_session)],
                    checkpoint=None if checkpoint is None else of_session[checkpoint % len(of_session)],
                )
    return batch_size


# ---- the model: docs/jobs.md, "Retention" ----------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    pk: int
    session: int
    seq: int
    kind: str
    name: str
    created_at: datetime
    operation_done: bool
    pinned: bool
    parent: int | None
    restored_from: int | None


@dataclass
class Store:
    """The store as it is before the run, read whole (a few dozen rows)."""

    rows: list[Row]
    sessions: dict[int, AgentSession]
    policies: dict[tuple[int | None, str], RetentionPolicy]
    protected: set[int | None]

    @classmethod
    def read(cls) -> Store:
        rows = [
            Row(c.pk, c.session_id, c.seq, c.kind, c.name, c.created_at, c.operation_done, c.pinned, c.parent_id,
                c.metadata.get("restored_from") if c.kind == "restore" else None)
            for c in Checkpoint.objects.order_by("pk")
        ]  # fmt: skip
        sessions = {s.pk: s for s in AgentSession.objects.all()}
        unresolved = DriftAlert.objects.exclude(state="resolved")
        protected = {s.head_id for s in sessions.values()} | {s.forked_from_id for s in sessions.values()}
        protected |= {row.restored_from for row in rows}  # the target of every restore (and of every undo)
        protected |= set(unresolved.values_list("last_good_id", flat=True))
        protected |= set(unresolved.values_list("checkpoint_id", flat=True))
        policies = {(p.project_id, p.kind): p for p in RetentionPolicy.objects.all()}
        return cls(rows, sessions, policies, protected)

    def policy_of(self, row: Row) -> RetentionPolicy | None:
        project = self.sessions[row.session].project_id
        policy = self.policies.get((project, row.kind)) or self.policies.get((None, row.kind))
        if policy is None or not policy.enabled:
            return None
        rules = (policy.keep_last, policy.max_age)
        flags = (policy.until_operation_done, policy.keep_first, policy.keep_latest_per_name)
        return policy if any(rule is not None for rule in rules) or any(flags) else None

    def newest(self, row: Row, scope: str) -> list[Row]:
        """The checkpoints of the row's kind a `keep_last` counts, newest first."""
        if scope == "session":
            same_kind = [other for other in self.rows if other.session == row.session and other.kind == row.kind]
            return sorted(same_kind, key=lambda other: other.seq, reverse=True)
        session = self.sessions[row.session]  # the agent's, across its sessions in the project, by creation time
        agents = [
            other
            for other in self.rows
            if other.kind == row.kind
            and self.sessions[other.session].project_id == session.project_id
            and self.sessions[other.session].agent == session.agent
        ]
        return sorted(agents, key=lambda other: (other.created_at, other.pk), reverse=True)

    def kept_by_rules(self, row: Row, policy: RetentionPolicy) -> bool:
        of_session = [other for other in self.rows if other.session == row.session]
        named = [other for other in of_session if other.kind == row.kind and other.name == row.name]
        return any([
            policy.keep_last is not None and row in self.newest(row, policy.keep_last_scope)[: policy.keep_last],
            policy.max_age is not None and NOW - row.created_at < policy.max_age,  # "younger than it"
            policy.until_operation_done and not row.operation_done,
            policy.keep_first and row.seq == min(other.seq for other in of_session),
            policy.keep_latest_per_name and bool(row.name) and row.seq == max(other.seq for other in named),
        ])  # fmt: skip

    def kept(self) -> set[int]:
        kept = set()
        for row in self.rows:
            policy = self.policy_of(row)
            if policy is None or row.pinned or row.pk in self.protected or self.kept_by_rules(row, policy):
                kept.add(row.pk)
        return kept


def assert_a_tree() -> None:
    """Every kept checkpoint's parent is kept and in its session."""
    parents = {
        pk: (session, parent) for pk, session, parent in Checkpoint.objects.values_list("pk", "session_id", "parent_id")
    }
    for session, parent in parents.values():
        assert parent is None or parents[parent][0] == session


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(world=WORLD)
# A checkpoint exactly max_age old is not younger than max_age: it goes (retention kept it, >= instead of >)
@example(world=([(0, "x", [STEP, STEP])], [], [("step", None, None, "session", 0, False, False, False, True)], 1))
# keep_first keeps the session's first checkpoint, of whatever kind: a step policy's keeps no step after a routine
@example(
    world=([(0, "x", [ROUTINE, STEP, STEP])], [], [("step", None, None, "session", None, False, True, False, True)], 2)
)
# keep_latest_per_name: the newest of each name among the kind's; unnamed checkpoints have no name to keep
@example(
    world=(
        [(0, "x", [STEP, ("step", "plan", 2, False, False, None), ("manual", "plan", 2, False, False, None), STEP])],
        [],
        [("step", None, None, "session", None, False, False, True, True)],
        1,
    )
)
def test_retention_keeps_exactly_what_the_rules_keep(db, world):
    with rolled_back():
        batch_size = build(world)
        expected = Store.read().kept()
        total = Checkpoint.objects.count()

        result = apply_retention(now=NOW, batch_size=batch_size, pause=0)

        kept = set(Checkpoint.objects.values_list("pk", flat=True))
        assert kept == expected, f"kept beyond the rules: {kept - expected}, lost: {expected - kept}"
        assert (result["deleted"], result["kept"]) == (total - len(kept), len(kept))
        assert_a_tree()
