"""Deterministic workloads for the benchmarks.

`AgentSessionWorkload` models one long agent session (the workload the peer stores were measured on): each step
appends an assistant message of 200–2,000 characters of word-based prose (sometimes a user or tool
message too), appends one tool-call record, changes 1–3 of ~50 memory keys and updates small
progress fields. That is ~2.6 KB of new JSON per step and ~2.25 MB of state at step 1,000.
Every step also yields `change`: just the JSON that was new or changed in that step, which is what
an ideal store would have to keep (the runner compresses it with zstd level 3).

`dreamos_states` makes small Dream.OS-style checkpoint states (a few KB each) for batch ingest.

Text is drawn from a Zipf-weighted English vocabulary plus project identifiers, file paths and
numbers, so it compresses like real transcripts (zstd-3 of a 2.6 KB piece ≈ 0.45, gzip of the
whole state ≈ 0.3), not like random letters (incompressible) or a repeated sentence (free).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

_WORD_TEXT = """
the of and to a in is that for it as with be on not this are by or from at an but have which you
can we if will they all one more there when so what their it's its would about been has other into
also some than them only then these could time should first use used make like just may any each
new way such because how now most over after where while through both well before need does
file function code test change value data state error call result return message run step time
agent session checkpoint memory task tool output input request response server client database
query table index row column key list string number type class method module package import path
config setting option flag default version update create delete read write load save store cache
parse check handle fix bug issue problem case line loop branch commit merge diff patch review
build deploy release log trace debug warning failure success status progress plan goal next
previous current last start end begin finish done pending running waiting retry timeout limit
user assistant model prompt context window token budget cost summary note idea approach option
look see find search open close add remove keep move copy rename replace split join sort filter
map reduce count size length width height offset page batch chunk node tree leaf root hash digest
let me here there now first next then finally also again instead still already yet only even
think seems looks appears probably likely maybe perhaps clearly actually exactly simply directly
because since although unless until whether either neither however therefore otherwise meanwhile
good bad right wrong correct incorrect valid invalid empty full small large long short fast slow
same different similar simple complex easy hard important necessary possible available missing
i you he she we they me him her us them my your our his their mine yours ours
test tests passing failing passed failed fixture assertion expected actual mismatch snapshot
function's method's module's variable parameter argument signature decorator generator iterator
exception traceback stack frame line number column offset encoding decoding serialization
migration schema field constraint foreign primary unique nullable transaction lock rollback
endpoint route view template form widget handler middleware settings environment variable
dependency requirement install upgrade downgrade pin lockfile virtualenv interpreter runtime
thread process worker queue job scheduler cron interval backoff jitter deadline heartbeat
metric counter gauge histogram latency throughput percentile median average minimum maximum
improve reduce increase avoid prevent ensure verify confirm validate compare measure estimate
understand explain describe mention suggest recommend consider decide choose prefer assume
"""
_WORDS = _WORD_TEXT.split()

_IDENT_TEXT = """
load save parse build make get set check validate render fetch store read write apply walk merge
state checkpoint session chunk node tree root batch item entry record config token user agent
tool call result message memory index cache queue task step phase alert policy diff patch frame
"""
_IDENT_PARTS = _IDENT_TEXT.split()

_DIRS = ["checkpoints", "dashboard", "config", "tests", "bench", "templates", "static/js", "docs", "scripts"]
_TOOLS = ["read_file", "write_file", "run_tests", "search_code", "shell", "list_dir", "apply_patch", "web_search"]
_MEMORY_KEYS = [
    "goal", "current_task", "user_preferences", "repo_layout", "test_command", "coding_style", "open_questions",
    "known_issues", "decisions", "constraints", "last_error", "last_success", "todo", "done", "blocked_on",
    "api_notes", "db_notes", "perf_notes", "security_notes", "naming", "glossary", "contacts", "deadlines",
    "branch", "ci_status", "flaky_tests", "env_vars", "dependencies", "migration_plan", "rollback_plan",
    "review_comments", "style_guide", "tool_stats", "token_budget", "cost_so_far", "error_patterns",
    "retry_policy", "assumptions", "risks", "next_actions", "scratchpad", "summary_so_far", "files_touched",
    "files_to_read", "hypotheses", "experiments", "metrics", "reviewer_feedback", "phase", "handoff_notes",
]  # fmt: skip


PHRASES = 300
PHRASE_SHARE = 0.3


class TextGen:
    """Word-based prose with a Zipf-like word distribution, identifiers, paths and numbers."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.words = list(dict.fromkeys(_WORDS))
        cumulative: list[float] = []
        total = 0.0
        for rank in range(len(self.words)):
            total += 1.0 / (rank + 3) ** 1.1
            cumulative.append(total)
        self.cum = cumulative
        # a project vocabulary: identifiers and files that come back again and again
        self.idents = [f"{rng.choice(_IDENT_PARTS)}_{rng.choice(_IDENT_PARTS)}" for _ in range(120)]
        self.files = [f"{rng.choice(_DIRS)}/{rng.choice(self.idents)}.py" for _ in range(60)]
        # recurring phrases ("the test fails because", "let me check the"): prose repeats itself
        self.phrases = [" ".join(self._words(rng.randint(2, 5))) for _ in range(PHRASES)]
        self.phrase_cum: list[float] = []
        total = 0.0
        for rank in range(PHRASES):
            total += 1.0 / (rank + 2)
            self.phrase_cum.append(total)

    def _words(self, count: int) -> list[str]:
        return self.rng.choices(self.words, cum_weights=self.cum, k=count)

    def _token(self) -> str:
        roll = self.rng.random()
        if roll < 0.02:
            return f"`{self.rng.choice(self.idents)}()`"
        if roll < 0.028:
            return f"{self.rng.choice(self.files)}:{self.rng.randint(1, 900)}"
        if roll < 0.036:
            return str(
                self.rng.choice(
                    [self.rng.randint(0, 100), self.rng.randint(100, 99999), round(self.rng.random() * 100, 2)]
                )
            )
        return ""

    def sentence(self) -> str:
        count = self.rng.randint(4, 16)
        words = self._words(count)
        for i in range(count):
            token = self._token()
            if token:
                words[i] = token
            elif self.rng.random() < PHRASE_SHARE:
                words[i] = self.rng.choices(self.phrases, cum_weights=self.phrase_cum, k=1)[0]
        text = " ".join(words)
        end = self.rng.choices([".", ".", ".", ":", "?", "!"], k=1)[0]
        return text[:1].upper() + text[1:] + end

    def text(self, low: int, high: int) -> str:
        """Prose of `low`–`high` characters (uniform), cut at a word boundary."""
        target = self.rng.randint(low, high)
        parts: list[str] = []
        size = 0
        while size < target:
            sentence = self.sentence()
            if self.rng.random() < 0.12:
                sentence += "\n\n"
            parts.append(sentence)
            size += len(sentence) + 1
        text = " ".join(parts)
        if len(text) > target:
            cut = text.rfind(" ", 0, target)
            text = text[: cut if cut > low // 2 else target]
        return text.strip()


@dataclass
class Step:
    """One step: `state` is the whole state after it (mutated in place by the next step), `change` what was new."""

    number: int
    state: dict[str, Any]
    change: dict[str, Any]


class AgentSessionWorkload:
    """A growing agent session, reproducible from its seed."""

    def __init__(self, seed: int = 0, memory_keys: int = 50) -> None:
        self.rng = random.Random(seed)
        self.text = TextGen(self.rng)
        self.started = datetime(2025, 3, 1, 9, 0, tzinfo=UTC) + timedelta(days=seed % 100)
        self.keys = _MEMORY_KEYS[:memory_keys]
        self.state: dict[str, Any] = {
            "session": {
                "id": f"sess-{seed:04d}-{self.rng.getrandbits(32):08x}",
                "agent": "coder-7",
                "model": "model-large-2025-01",
                "started_at": self.started.isoformat(),
                "system_prompt": self.text.text(600, 900),
            },
            "messages": [{"id": "m0", "role": "user", "step": 0, "ts": self.started.isoformat(), "content": self.text.text(300, 600)}],
            "tool_calls": [],
            "memory": {key: self._memory_value(key, 0) for key in self.keys},
            "progress": {
                "step": 0,
                "status": "running",
                "tasks_total": 40,
                "tasks_done": 0,
                "tokens_in": 0,
                "tokens_out": 0,
                "cost_usd": 0.0,
                "last_tool": None,
                "updated_at": self.started.isoformat(),
            },
        }  # fmt: skip
        self.step_number = 0

    def _memory_value(self, key: str, step: int) -> Any:
        roll = self.rng.random()
        if roll < 0.5:
            return self.text.text(40, 220)
        if roll < 0.8:
            return {"value": self.text.text(30, 160), "updated_step": step, "confidence": round(self.rng.random(), 2)}
        return [self.text.text(15, 60) for _ in range(self.rng.randint(1, 4))]

    def _message(self, role: str, low: int, high: int, ts: str) -> dict[str, Any]:
        number = len(self.state["messages"])
        return {
            "id": f"m{number}",
            "role": role,
            "step": self.step_number,
            "ts": ts,
            "content": self.text.text(low, high),
        }

    def _tool_call(self, ts: str) -> dict[str, Any]:
        rng = self.rng
        name = rng.choice(_TOOLS)
        if name in ("read_file", "write_file", "apply_patch", "list_dir"):
            arguments: dict[str, Any] = {"path": rng.choice(self.text.files)}
            if name != "read_file" and name != "list_dir":
                arguments["content"] = self.text.text(40, 200)
        elif name == "run_tests":
            arguments = {"command": "pytest -q", "selector": f"tests/test_{rng.choice(self.text.idents)}.py"}
        elif name == "shell":
            arguments = {"command": f"grep -rn {rng.choice(self.text.idents)} {rng.choice(_DIRS)}"}
        else:
            arguments = {"query": self.text.text(20, 80)}
        success = rng.random() > 0.08
        result = self.text.text(150, 1150) if success else f"Error: {self.text.text(40, 200)}"
        return {
            "id": f"t{len(self.state['tool_calls'])}",
            "step": self.step_number,
            "ts": ts,
            "name": name,
            "arguments": arguments,
            "result": result,
            "success": success,
            "duration_ms": rng.randint(5, 4000),
        }

    def advance(self) -> Step:
        """Apply the next step to `self.state`; return it with the step's change."""
        rng = self.rng
        self.step_number += 1
        n = self.step_number
        ts = (self.started + timedelta(seconds=7 * n + rng.randint(0, 5))).isoformat()
        new_messages: list[dict[str, Any]] = []
        if rng.random() < 0.5:
            role = rng.choice(["user", "tool"])
            new_messages.append(self._message(role, 80, 600, ts))
            self.state["messages"].append(new_messages[-1])
        new_messages.append(self._message("assistant", 200, 2000, ts))
        self.state["messages"].append(new_messages[-1])
        call = self._tool_call(ts)
        self.state["tool_calls"].append(call)
        changed: dict[str, Any] = {}
        for key in rng.sample(self.keys, rng.randint(1, 3)):
            changed[key] = self.state["memory"][key] = self._memory_value(key, n)
        progress = self.state["progress"]
        tokens_out = sum(len(m["content"]) for m in new_messages) // 4
        progress.update(
            step=n,
            tasks_done=min(progress["tasks_total"], n // 25),
            tokens_in=progress["tokens_in"] + rng.randint(2000, 9000),
            tokens_out=progress["tokens_out"] + tokens_out,
            cost_usd=round(progress["cost_usd"] + rng.random() * 0.05, 4),
            last_tool=call["name"],
            updated_at=ts,
        )
        change = {"messages": new_messages, "tool_calls": [call], "memory": changed, "progress": dict(progress)}
        return Step(n, self.state, change)

    def steps(self, count: int) -> Iterator[Step]:
        for _ in range(count):
            yield self.advance()


def dreamos_states(seed: int, agent_id: str, count: int) -> Iterator[dict[str, Any]]:
    """`count` successive Dream.OS-style checkpoint documents (~3–5 KB) for one agent."""
    rng = random.Random(seed)
    text = TextGen(rng)
    start = datetime(2025, 3, 1, 9, 0, tzinfo=UTC) + timedelta(minutes=seed % 1000)
    memory = {key: text.text(30, 160) for key in _MEMORY_KEYS[:16]}
    mailbox = [
        {"from": f"agent-{rng.randint(1, 8)}", "subject": text.text(15, 50), "body": text.text(60, 300)}
        for _ in range(4)
    ]
    task = {
        "id": f"task-{rng.randint(1000, 9999)}",
        "description": text.text(80, 240),
        "status": "in_progress",
        "progress": 0,
    }
    for n in range(1, count + 1):
        if rng.random() < 0.5:
            mailbox.append(
                {"from": f"agent-{rng.randint(1, 8)}", "subject": text.text(15, 50), "body": text.text(60, 300)}
            )
            mailbox = mailbox[-8:]
        for key in rng.sample(list(memory), rng.randint(1, 2)):
            memory[key] = text.text(30, 160)
        task = {**task, "progress": min(100, task["progress"] + rng.randint(0, 5))}
        ts = start + timedelta(seconds=30 * n)
        yield {
            "agent_id": agent_id,
            "timestamp": ts.isoformat(),
            "checkpoint_type": "routine",
            "version": "1.0",
            "state": {
                "current_task": task,
                "mailbox": list(mailbox),
                "operational_context": {
                    "cycle": n,
                    "mode": "autonomous",
                    "uptime_s": 30 * n,
                    "errors": rng.randint(0, 2),
                },
                "memory": dict(memory),
            },
        }


def canonical(value: Any) -> bytes:
    """Canonical JSON, as the store writes it (sorted keys, no spaces)."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
