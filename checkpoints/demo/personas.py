"""What demo agents say and do: personas, their tools and the text they write."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ..services import Actor

ACTOR = Actor.system("seed_demo")
ROUTINE_EVERY = timedelta(minutes=30)
RECOVERY_EVERY = timedelta(hours=2)
State = dict[str, Any]
Rng = random.Random


# ---- what agents say and do ---------------------------------------------------------------------


@dataclass(frozen=True)
class Tool:
    """A tool an agent calls: arguments and a result text, plus the checkpoint names it leads to."""

    call: Callable[[Rng], tuple[dict[str, Any], str]]
    error: Callable[[Rng], str]
    ok_name: str = "tool_called"
    fail_name: str = "tool_failed"
    fail_rate: float = 0.06
    risky: bool = False  # preceded by a pre_operation checkpoint
    weight: float = 1.0  # how often the agent picks it


@dataclass(frozen=True)
class Persona:
    title: str
    model: str
    system: str
    task: str
    subtasks: tuple[str, ...]
    thoughts: tuple[str, ...]
    follow_ups: tuple[str, ...]
    tools: dict[str, Tool]
    memory: dict[str, Callable[[Rng], Any]]
    fact_prefix: str
    facts: tuple[str, ...]


PAPERS = (
    ("2310.08560", "MemGPT: Towards LLMs as Operating Systems"),
    ("2304.03442", "Generative Agents: Interactive Simulacra of Human Behavior"),
    ("2303.11366", "Reflexion: Language Agents with Verbal Reinforcement Learning"),
    ("2304.08467", "Learning to Compress Prompts with Gist Tokens"),
    ("2307.03172", "Lost in the Middle: How Language Models Use Long Contexts"),
    ("2309.17453", "Efficient Streaming Language Models with Attention Sinks"),
    ("2305.14788", "Adapting Language Models to Compress Contexts"),
    ("2402.09727", "A Human-Inspired Reading Agent with Gist Memory of Very Long Contexts"),
)
TOPICS = (
    "recursive summarisation",
    "retrieval-augmented memory",
    "KV-cache eviction",
    "gist tokens",
    "virtual context paging",
    "reflection memory",
    "attention sinks",
    "hierarchical summaries",
)
BENCHMARKS = ("LongBench", "SCROLLS", "QuALITY", "NarrativeQA", "LoCoMo")

RESEARCH = Persona(
    title="Survey of context-compression techniques",
    model="claude-sonnet-4-5",
    system=(
        "You are Scout, a research agent. Find, read and summarise primary sources, cite arXiv ids, "
        "keep notes in memory and never invent results."
    ),
    task=(
        "Survey context-compression techniques for agents that run for days: summarisation, retrieval and "
        "learned compression. Compare them on published long-context benchmarks and recommend one."
    ),
    subtasks=(
        "collect candidate papers",
        "read and annotate",
        "extract benchmark numbers",
        "compare methods",
        "draft survey sections",
        "write the recommendation",
    ),
    thoughts=(
        "Searching for recent work on {topic}.",
        "The abstract of {paper} mentions {topic}; reading the evaluation section next.",
        "Two candidates report {bench} numbers; adding them to the comparison table.",
        "My notes on {topic} are getting long, so I will summarise them before moving on.",
        "{paper} uses a different {bench} split than the others; flagging it as not comparable.",
        "Cross-checking the claim about {topic} against the original paper.",
    ),
    follow_ups=(
        "Please include cost per 1k tokens where the papers report it.",
        "Skip anything that needs fine-tuning the base model; we can only prompt.",
        "Can you add a short section on failure modes after ~2 hours of operation?",
    ),
    tools={
        "web_search": Tool(
            call=lambda r: (
                {"query": f"{r.choice(TOPICS)} long-running LLM agents", "max_results": 10},
                "10 results; top: " + "; ".join(f"arXiv:{pid} {title}" for pid, title in r.sample(PAPERS, 3)),
            ),
            error=lambda r: "search backend timeout after 30s",
            fail_rate=0.03,
        ),
        "fetch_url": Tool(
            call=lambda r: (
                {"url": f"https://arxiv.org/abs/{r.choice(PAPERS)[0]}"},
                f"200 OK, {r.randint(3200, 9800):,} chars of abstract and metadata",
            ),
            error=lambda r: "HTTP 429 Too Many Requests (retry after 30s)",
            fail_rate=0.08,
        ),
        "read_pdf": Tool(
            call=lambda r: (
                {"arxiv_id": r.choice(PAPERS)[0], "pages": f"{(p := r.randint(4, 9))}-{p + r.randint(1, 4)}"},
                f"Section {r.randint(4, 6)} (Evaluation): {r.randint(38, 91)}.{r.randint(0, 9)} on "
                f"{r.choice(BENCHMARKS)} with a {r.choice(('4k', '8k', '16k', '32k'))} context budget",
            ),
            error=lambda r: "PDF parse error: xref table truncated",
        ),
        "write_note": Tool(
            call=lambda r: (
                {"path": f"notes/{r.choice(TOPICS).replace(' ', '-')}.md", "append": True},
                f"appended {r.randint(240, 1400)} chars",
            ),
            error=lambda r: "disk quota exceeded in /workspace/notes",
            ok_name="note_written",
            fail_rate=0.01,
        ),
        "summarize": Tool(
            call=lambda r: (
                {"sources": [pid for pid, _ in r.sample(PAPERS, 3)], "max_words": 200},
                f"Summary ({r.randint(150, 200)} words): {r.choice(TOPICS)} keeps recall within "
                f"{r.randint(2, 9)} points of full context at {r.randint(4, 12)}x compression.",
            ),
            error=lambda r: "model returned an empty completion",
            ok_name="summary_written",
            fail_rate=0.02,
        ),
    },
    memory={
        "user_goal": lambda r: "recommend one context-compression method for the console",
        "audience": lambda r: "platform team",
        "output_format": lambda r: "markdown report with a comparison table",
        "citation_style": lambda r: "arXiv ids inline",
        "papers_read": lambda r: r.randint(3, 40),
        "papers_queued": lambda r: r.randint(0, 12),
        "current_topic": lambda r: r.choice(TOPICS),
        "best_candidate": lambda r: r.choice(PAPERS)[1],
        "open_questions": lambda r: r.sample(
            ["cost per token?", "works without fine-tuning?", "tested beyond 100k tokens?", "code released?"], 2
        ),
        "benchmarks_seen": lambda r: r.sample(BENCHMARKS, 3),
        "notes_path": lambda r: "notes/",
        "rate_limit_backoff_s": lambda r: r.choice((0, 30, 60)),
        "draft_words": lambda r: r.randint(200, 4200),
        "confidence": lambda r: round(r.uniform(0.4, 0.9), 2),
        "last_search": lambda r: f"{r.choice(TOPICS)} benchmark",
        "excluded": lambda r: ["needs fine-tuning", "closed weights only"],
        "deadline": lambda r: "end of week",
        "language": lambda r: "en",
    },
    fact_prefix="finding",
    facts=(
        "{topic} loses recall on multi-hop questions",
        "{paper} reports the best {bench} score at 8k budget",
        "{topic} needs a summariser call every ~20 turns",
        "{bench} results are not comparable across papers",
    ),
)

CODE_FILES = (
    "checkpoints/services/",
    "checkpoints/store/__init__.py",
    "checkpoints/api.py",
    "tests/checkpoints/test_services.py",
    "tests/checkpoints/test_store.py",
    "bench/ingest.py",
)
CODING = Persona(
    title="Batch the inserts in ingest_checkpoints",
    model="claude-sonnet-4-5",
    system=(
        "You are Patchwright, a coding agent working in a git checkout. Make small, tested changes and "
        "run the test suite before every commit. Never push without a pre-operation checkpoint."
    ),
    task=(
        "Ingest is slow for batches over 1k checkpoints. Profile `ingest_checkpoints`, batch the inserts, "
        "keep the tests green and report the speed-up."
    ),
    subtasks=(
        "reproduce the slow ingest",
        "profile the insert path",
        "switch to bulk inserts",
        "update the tests",
        "benchmark",
        "open the pull request",
    ),
    thoughts=(
        "Reading {file} to see how rows are inserted.",
        "The profile shows most time in per-row INSERTs; batching them should help.",
        "Editing {file}: build all rows first, then one bulk insert.",
        "Running the checkpoint tests before going further.",
        "A test depends on insertion order; checking {file}.",
        "Benchmarking again to confirm the speed-up holds for 5k checkpoints.",
    ),
    follow_ups=(
        "Keep the public signature of ingest_checkpoints unchanged, the API depends on it.",
        "Please also check PostgreSQL, not only SQLite.",
    ),
    tools={
        "read_file": Tool(
            call=lambda r: (
                {"path": r.choice(CODE_FILES), "start_line": (s := r.randint(1, 300)), "end_line": s + 80},
                "80 lines read",
            ),
            error=lambda r: "file not found",
            fail_rate=0.01,
        ),
        "grep": Tool(
            call=lambda r: (
                {"pattern": r.choice(("bulk_create", "select_for_update", "last_seq", "def ingest")), "path": "."},
                f"{r.randint(1, 14)} matches in {r.randint(1, 5)} files",
            ),
            error=lambda r: "grep: invalid regular expression",
            fail_rate=0.01,
        ),
        "edit_file": Tool(
            call=lambda r: (
                {"path": r.choice(CODE_FILES[:3]), "start_line": (s := r.randint(100, 400)), "end_line": s + 12},
                f"applied edit: +{r.randint(2, 30)} -{r.randint(1, 20)} lines",
            ),
            error=lambda r: "edit rejected: the old text no longer matches",
            ok_name="file_edited",
            fail_rate=0.04,
        ),
        "run_tests": Tool(
            call=lambda r: (
                {"target": "tests/checkpoints", "args": "-q -x"},
                f"{r.randint(140, 190)} passed in {r.uniform(4, 9):.2f}s",
            ),
            error=lambda r: (
                "1 failed: test_ingest_assigns_gapless_seqs - AssertionError: assert [1, 2, 4] == [1, 2, 3]"
            ),
            ok_name="tests_passed",
            fail_name="tests_failed",
            fail_rate=0.15,
        ),
        "bash": Tool(
            call=lambda r: (
                {"cmd": f"python bench/ingest.py --n {r.choice((1000, 2000, 5000))}"},
                f"ingest: {r.uniform(0.8, 4.5):.2f} ms/checkpoint",
            ),
            error=lambda r: "exit 1: ModuleNotFoundError: No module named 'bench.peers'",
            fail_rate=0.05,
        ),
        "git_push": Tool(
            call=lambda r: (
                {"remote": "origin", "branch": "feat/batch-ingest"},
                f"pushed {r.randint(1, 4)} commits to origin/feat/batch-ingest",
            ),
            error=lambda r: "rejected: non-fast-forward",
            ok_name="pushed",
            fail_rate=0.02,
            risky=True,
            weight=0.12,
        ),
    },
    memory={
        "repo": lambda r: "checkpoint-console",
        "branch": lambda r: "feat/batch-ingest",
        "base_branch": lambda r: "main",
        "python": lambda r: "3.11",
        "test_command": lambda r: "pytest tests/checkpoints -q -x",
        "baseline_ms_per_checkpoint": lambda r: 11.8,
        "best_ms_per_checkpoint": lambda r: round(r.uniform(0.9, 4.0), 2),
        "files_touched": lambda r: sorted(r.sample(CODE_FILES, 3)),
        "last_failing_test": lambda r: r.choice(("", "test_ingest_assigns_gapless_seqs", "test_idempotent_repeat")),
        "hypothesis": lambda r: r.choice(("per-row INSERT dominates", "parent updates are N queries")),
        "commits": lambda r: r.randint(0, 6),
        "style": lambda r: "ruff format, 120 columns",
        "reviewer": lambda r: "@platform-team",
        "db_backends": lambda r: ["sqlite", "postgresql"],
        "open_todos": lambda r: r.sample(["update docstring", "add benchmark note", "check PostgreSQL"], 2),
        "lines_changed": lambda r: r.randint(10, 240),
        "coverage": lambda r: f"{r.randint(86, 94)}%",
        "ci_status": lambda r: r.choice(("green", "running", "red")),
    },
    fact_prefix="learned",
    facts=(
        "bulk_create does not return pks on old SQLite",
        "{file} holds the session row lock",
        "tests rely on seq order, not insertion order",
    ),
)

TICKETS = (
    "I was charged twice for my March invoice.",
    "The export button does nothing in Firefox.",
    "How do I add a second admin to our workspace?",
    "My refund for order {order} never arrived.",
    "Please cancel my subscription at the end of the term.",
    "SSO login loops back to the sign-in page.",
)
SUPPORT = Persona(
    title="Overnight support queue",
    model="claude-haiku-4-5",
    system=(
        "You are the Acme helpdesk triage agent. Classify each ticket, look up the customer and their "
        "orders, answer from the knowledge base and escalate refunds above $200 to a human."
    ),
    task="Work through the overnight queue (42 tickets): triage, answer what the knowledge base covers, escalate the rest.",
    subtasks=("billing tickets", "login problems", "feature questions", "refunds", "cancellations", "queue summary"),
    thoughts=(
        "Ticket {ticket} looks like a billing question; looking up the customer first.",
        "The knowledge base has an article on this; drafting a reply from it.",
        "Order {order} is above the $200 limit, so this goes to billing-l2.",
        "Customer is on the pro tier; answering within the 4-hour SLA.",
        "Checking the order history before replying to {ticket}.",
    ),
    follow_ups=(
        "New ticket {ticket}: " + TICKETS[0],
        "New ticket {ticket}: " + TICKETS[1],
        "New ticket {ticket}: " + TICKETS[3],
        "New ticket {ticket}: " + TICKETS[5],
    ),
    tools={
        "fetch_ticket": Tool(
            call=lambda r: (
                {"ticket_id": f"T-{r.randint(58000, 58999)}"},
                "From: customer, subject: " + r.choice(TICKETS).format(order=f"A-{r.randint(10000, 10999)}"),
            ),
            error=lambda r: "helpdesk API 503",
            fail_rate=0.03,
        ),
        "lookup_customer": Tool(
            call=lambda r: (
                {"email": f"{r.choice(('j.ortiz', 'm.chen', 'a.okafor', 's.novak', 'l.berg'))}@example.com"},
                f"customer C-{r.randint(20000, 29999)}, tier {r.choice(('free', 'pro', 'team'))}, since 2023",
            ),
            error=lambda r: "customer not found",
        ),
        "get_order": Tool(
            call=lambda r: (
                {"order_id": f"A-{r.randint(10000, 10999)}"},
                f"{r.randint(1, 4)} items, ${r.randint(19, 480)}.00, status {r.choice(('delivered', 'shipped'))}",
            ),
            error=lambda r: "orders service timeout",
        ),
        "search_kb": Tool(
            call=lambda r: (
                {"query": r.choice(("double charge", "export firefox", "add admin", "sso loop", "cancel plan"))},
                f"{r.randint(1, 4)} articles, best KB-{r.randint(100, 180)}",
            ),
            error=lambda r: "search index rebuilding",
            fail_rate=0.04,
        ),
        "send_reply": Tool(
            call=lambda r: (
                {"ticket_id": f"T-{r.randint(58000, 58999)}", "template": r.choice(("kb_answer", "billing_ack"))},
                f"reply queued as m-{r.getrandbits(32):08x}",
            ),
            error=lambda r: "template variable missing: first_name",
            ok_name="reply_sent",
            fail_rate=0.03,
        ),
        "issue_refund": Tool(
            call=lambda r: (
                {"order_id": f"A-{r.randint(10000, 10999)}", "amount": f"{r.randint(9, 199)}.00"},
                f"refund R-{r.randint(3000, 3999)} issued",
            ),
            error=lambda r: "payment provider declined: already refunded",
            ok_name="refund_issued",
            fail_rate=0.05,
            risky=True,
            weight=0.12,
        ),
    },
    memory={
        "queue": lambda r: "overnight",
        "tickets_total": lambda r: 42,
        "tickets_done": lambda r: r.randint(0, 42),
        "escalated": lambda r: r.randint(0, 6),
        "refund_limit_usd": lambda r: 200,
        "sla_hours": lambda r: 4,
        "current_ticket": lambda r: f"T-{r.randint(58000, 58999)}",
        "current_customer": lambda r: f"C-{r.randint(20000, 29999)}",
        "tone": lambda r: "friendly, concise",
        "signature": lambda r: "The Acme support team",
        "known_incidents": lambda r: ["INC-311 export in Firefox"],
        "macros": lambda r: ["kb_answer", "billing_ack", "escalate_l2"],
        "language": lambda r: r.choice(("en", "de", "es")),
        "csat_last_hour": lambda r: round(r.uniform(4.1, 4.9), 1),
        "kb_hits": lambda r: r.randint(0, 30),
        "kb_misses": lambda r: r.randint(0, 8),
        "pending_refunds": lambda r: r.randint(0, 3),
        "shift": lambda r: "night",
    },
    fact_prefix="customer_note",
    facts=("prefers email over chat", "asked for an invoice copy", "was double-charged once before"),
)

TABLES = (
    "orders.orders",
    "orders.order_items",
    "events.page_views",
    "events.clicks",
    "billing.invoices",
    "billing.payments",
    "crm.accounts",
)
PIPELINE = Persona(
    title="Nightly warehouse load",
    model="claude-haiku-4-5",
    system=(
        "You are the nightly ETL agent for the analytics warehouse. Load yesterday's partitions, validate row "
        "counts and schemas, and never swap a partition without a pre-operation checkpoint."
    ),
    task="Nightly load: 7 source tables from the orders, events, billing and crm schemas; validate, swap and publish.",
    subtasks=("list partitions", "load orders", "load events", "load billing", "validate", "publish marts"),
    thoughts=(
        "Loading {table} for yesterday's partition.",
        "Row count for {table} is within 2% of last week; moving on.",
        "Validating the schema of {table} against its contract.",
        "Staging for {table} is complete; the partition can be swapped in.",
    ),
    follow_ups=("Reminder: billing.invoices must be published before 06:00 UTC for the finance dashboard.",),
    tools={
        "list_partitions": Tool(
            call=lambda r: (
                {"table": r.choice(TABLES), "date": "yesterday"},
                f"{r.randint(8, 24)} partitions, {r.randint(0, 2)} missing",
            ),
            error=lambda r: "metastore connection refused",
            fail_rate=0.02,
        ),
        "run_sql": Tool(
            call=lambda r: (
                {"sql": f"SELECT count(*) FROM staging.{r.choice(TABLES).split('.')[1]} WHERE dt = current_date - 1"},  # noqa: S608 - the text of a demo tool call, never run
                f"count: {r.randint(90_000, 3_000_000):,}",
            ),
            error=lambda r: "canceling statement due to statement timeout",
            fail_rate=0.03,
        ),
        "validate_schema": Tool(
            call=lambda r: ({"table": r.choice(TABLES)}, f"matches contract v{r.randint(9, 15)}"),
            error=lambda r: "column discount_code: expected varchar(32), got text",
            ok_name="validation_passed",
            fail_name="validation_failed",
            fail_rate=0.05,
        ),
        "load_batch": Tool(
            call=lambda r: (
                {"table": r.choice(TABLES), "rows": r.choice((100_000, 250_000, 500_000))},
                f"loaded in {r.uniform(8, 60):.1f}s",
            ),
            error=lambda r: "deadlock detected; batch rolled back",
            ok_name="batch_loaded",
            fail_name="batch_failed",
            fail_rate=0.04,
        ),
        "swap_partition": Tool(
            call=lambda r: ({"table": r.choice(TABLES), "partition": "dt=yesterday"}, "partition swapped"),
            error=lambda r: "lock timeout on target table",
            ok_name="partition_swapped",
            fail_rate=0.02,
            risky=True,
            weight=0.12,
        ),
        "dbt_run": Tool(
            call=lambda r: (
                {"select": r.choice(("marts.finance", "marts.growth", "marts.support"))},
                f"Completed successfully: {r.randint(8, 30)} models, 0 errors",
            ),
            error=lambda r: "Database Error in model fct_revenue: division by zero",
            ok_name="models_built",
            fail_rate=0.04,
        ),
    },
    memory={
        "warehouse": lambda r: "analytics-prod",
        "run_date": lambda r: "yesterday",
        "tables_total": lambda r: len(TABLES),
        "tables_loaded": lambda r: r.randint(0, len(TABLES)),
        "rows_loaded": lambda r: r.randint(0, 9_000_000),
        "current_table": lambda r: r.choice(TABLES),
        "retries": lambda r: r.randint(0, 3),
        "slot": lambda r: "etl-large",
        "deadline_utc": lambda r: "06:00",
        "contracts_version": lambda r: "v14",
        "alerts_channel": lambda r: "#data-oncall",
        "swap_strategy": lambda r: "exchange partition",
        "max_batch_rows": lambda r: 500_000,
        "last_validation": lambda r: r.choice(("ok", "ok", "warning: 3% fewer rows")),
        "disk_free_gb": lambda r: r.randint(40, 400),
        "late_sources": lambda r: r.sample(["events.clicks", "crm.accounts", "billing.payments"], 1),
        "owner": lambda r: "data-platform",
        "dbt_target": lambda r: "prod",
    },
    fact_prefix="observed",
    facts=("{table} arrives late on Mondays", "{table} row count dips on weekends", "{table} has a new column"),
)


def fill(rng: Rng, text: str) -> str:
    paper = rng.choice(PAPERS)
    return text.format(
        topic=rng.choice(TOPICS),
        paper=f"{paper[1]} (arXiv:{paper[0]})",
        bench=rng.choice(BENCHMARKS),
        file=rng.choice(CODE_FILES),
        table=rng.choice(TABLES),
        ticket=f"T-{rng.randint(58000, 58999)}",
        order=f"A-{rng.randint(10000, 10999)}",
    )


# ---- one agent run, step by step ----------------------------------------------------------------
