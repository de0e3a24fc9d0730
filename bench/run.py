"""Benchmark runner: the content-addressed store against one gzip JSON document per checkpoint.

    python bench/run.py [--steps 1000] [--database-url URL] [--profile] [--secrets]

In one run, on one database: (a) the growing-session workload through the service layer, (b) reads
and listings, (c) the same workload through the HTTP API (a real gunicorn server), (d) batch ingest
of small Dream.OS-style states through the service layer and the API, (e) the naive baseline (gzip of
the whole JSON state per checkpoint, in table `bench_naive`), and with --secrets (f) the growing-session
workload with and without the secret scan, interleaved. Prints a table and writes
var/bench-results.json. bench/README.md explains every figure.
"""

from __future__ import annotations

import argparse
import cProfile
import gzip
import io
import json
import math
import os
import pstats
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import zstandard
from workload import AgentSessionWorkload, canonical, dreamos_states

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PG = "postgres://postgres@127.0.0.1:5432/bench_cc"
RESULTS = ROOT / "var" / "bench-results.json"
WINDOW = 100  # the last WINDOW steps (901–1000) are where sizes and latencies are judged
READS = 20
BATCH_SESSIONS = 100
BATCH_PER_SESSION = 50
BATCH_SIZE = 500
RUN = time.strftime("%Y%m%d%H%M%S")  # in every session id: a --database-url may hold earlier runs


# ---- small helpers -------------------------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0–100)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def latency_figures(verb: str, window: list[float], latencies: list[float]) -> dict[str, float]:
    """p50/p95 over the measured window and over the whole run, and the rate."""
    return {
        f"{verb}_p50_ms_window": ms(statistics.median(window)),
        f"{verb}_p95_ms_window": ms(pct(window, 95)),
        f"{verb}_p50_ms_all": ms(statistics.median(latencies)),
        f"{verb}_p95_ms_all": ms(pct(latencies, 95)),
        "checkpoints_per_s": round(len(latencies) / sum(latencies), 1),
    }


def timed(fn: Callable[[], Any], repeat: int = READS, before: Callable[[], None] | None = None) -> list[float]:
    """Run `fn` `repeat` times (calling `before` untimed first each time); return the durations."""
    out = []
    for _ in range(repeat):
        if before is not None:
            before()
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass
class Row:
    metric: str
    ours: str
    naive: str = ""
    target: str = ""
    verdict: str = ""


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def add(self, metric: str, ours: Any, naive: Any = "", target: str = "", ok: bool | None = None) -> None:
        verdict = "" if ok is None else ("PASS" if ok else "FAIL")
        self.rows.append(Row(metric, str(ours), str(naive), target, verdict))

    def table(self) -> str:
        head = Row("metric", "ours", "naive", "target", "pass/fail")
        rows = [head, *self.rows]
        widths = [max(len(getattr(r, name)) for r in rows) for name in ("metric", "ours", "naive", "target", "verdict")]

        def line(r: Row) -> str:
            cells = (r.metric, r.ours, r.naive, r.target, r.verdict)
            return " | ".join(
                c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
            )

        rule = "-+-".join("-" * w for w in widths)
        return "\n".join([line(head), rule, *(line(r) for r in self.rows)])


def kb(n: float) -> str:
    """Decimal units (1 kB = 1,000 B), as the figures in docs/benchmarks.md."""
    return f"{n / 1e3:,.2f} kB" if n < 1e6 else f"{n / 1e6:,.2f} MB"


# ---- database ------------------------------------------------------------------------------------


def choose_database(given: str | None) -> tuple[str, str]:
    """DATABASE_URL for the run and a line saying what it is."""
    if given:
        return given, f"given: {given}"
    try:
        import psycopg

        with psycopg.connect(
            "host=127.0.0.1 port=5432 user=postgres dbname=postgres", connect_timeout=3, autocommit=True
        ) as conn:
            conn.execute("DROP DATABASE IF EXISTS bench_cc WITH (FORCE)")
            conn.execute("CREATE DATABASE bench_cc")
        return DEFAULT_PG, "PostgreSQL 127.0.0.1:5432, database bench_cc (dropped and created anew)"
    except Exception as exc:  # noqa: BLE001 - any failure means: no usable PostgreSQL here
        path = Path(tempfile.mkdtemp(prefix="bench_cc_")) / "bench.sqlite3"
        say(f"PostgreSQL is not reachable on 127.0.0.1:5432 ({exc}); falling back to SQLite at {path}")
        return f"sqlite:///{path}", f"SQLite fallback at {path} (PostgreSQL not reachable; figures are not comparable)"


def setup_django(url: str) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
    os.environ["DATABASE_URL"] = url
    os.environ["DEBUG"] = "0"  # DEBUG records every query: slower and growing memory
    sys.path.insert(0, str(ROOT))
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0, interactive=False)


def vendor() -> str:
    from django.db import connection

    return connection.vendor


def relation_bytes(table: str) -> int:
    """On-disk bytes of a table with its indexes (and TOAST on PostgreSQL)."""
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT pg_total_relation_size(%s::regclass)", [table])
        else:
            cursor.execute(
                "SELECT COALESCE(SUM(pgsize), 0) FROM dbstat WHERE name IN "
                "(SELECT name FROM sqlite_master WHERE tbl_name = %s)",
                [table],
            )
        return int(cursor.fetchone()[0])


def tables() -> dict[str, str]:
    from checkpoints.models import AgentSession, Checkpoint, Chunk, SessionCount, SessionRollup

    return {
        "chunk": Chunk._meta.db_table,
        "checkpoint": Checkpoint._meta.db_table,
        "session": AgentSession._meta.db_table,
        "rollup": SessionRollup._meta.db_table,
        "counts": SessionCount._meta.db_table,
    }


def index_bytes(table: str) -> dict[str, int]:
    """On-disk bytes of each index of `table` (PostgreSQL; empty elsewhere)."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return {}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexrelid::regclass::text, pg_relation_size(indexrelid) FROM pg_index WHERE indrelid = %s::regclass",
            [table],
        )
        return dict(cursor.fetchall())


def sizes() -> dict[str, int]:
    return {name: relation_bytes(table) for name, table in tables().items()}


def parts() -> dict[str, int]:
    """Bytes of each part of the store's two tables (PostgreSQL; empty elsewhere): heap, TOAST with its index, each
    index."""
    from django.db import connection

    out: dict[str, int] = {}
    if connection.vendor != "postgresql":
        return out
    for name in ("chunk", "checkpoint"):
        table = tables()[name]
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_relation_size(%s::regclass), pg_table_size(%s::regclass)", [table, table])
            heap, with_toast = cursor.fetchone()
        out[f"{name} heap"] = int(heap)
        out[f"{name} TOAST"] = int(with_toast) - int(heap)
        out.update({f"{name} {index}": size for index, size in index_bytes(table).items()})
    return out


# ---- (a) the service layer -----------------------------------------------------------------------


def vacuum_chunks() -> None:
    """VACUUM the chunk table (PostgreSQL): a keyframe compresses the patches before it again (store._rebase), and
    their old row versions are free space once vacuumed. Autovacuum does it beside a live writer (the table asks
    for it at 1 % dead rows, migration 0043); the bench does it after each keyframe, so that the window's growth
    is what a store keeps, not versions waiting for autovacuum's next minute."""
    from django.db import connection

    from checkpoints.models import Chunk

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"VACUUM {connection.ops.quote_name(Chunk._meta.db_table)}")


def run_service(report: Report, steps: int, seed: int, vacuum: bool = True) -> tuple[Any, AgentSessionWorkload]:
    from checkpoints import services, store
    from checkpoints.models import Checkpoint, Chunk

    project = services.get_or_create_project("bench")
    session, _ = services.upsert_session(
        project, external_id=f"svc-{seed}-{RUN}", agent="coder-7", title="bench service"
    )
    window_start = max(1, steps - WINDOW + 1)
    workload = AgentSessionWorkload(seed)
    zc = zstandard.ZstdCompressor(level=3)
    latencies: list[float] = []
    cpu_times: list[float] = []  # this process's CPU time per create: what a loaded machine's queueing leaves out
    change_raw: list[int] = []
    change_zstd: list[int] = []
    before: dict[str, int] = {}
    # the checkpoint table's per-row cost over 90 % of the run: page rounding matters less than over 100 rows
    early_start = min(window_start, steps // 10 + 1)
    early: dict[str, int] = {}
    early_all: dict[str, int] = {}
    window_all: dict[str, int] = {}
    say(f"(a) service layer: {steps} steps")
    for step in workload.steps(steps):
        if step.number == early_start:
            early = sizes()
            early_all = parts()
        if step.number == window_start:
            before = sizes()
            window_all = parts()
        item = services.CheckpointInput(
            state=step.state, name="step", step=step.number, metadata={"tool": step.change["tool_calls"][0]["name"]}
        )
        start, cpu = time.perf_counter(), time.process_time()
        row, _ = services.create_checkpoint(session, item)
        latencies.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - cpu)
        if vacuum and Chunk.objects.filter(hash=row.root, base__isnull=True).exists():
            vacuum_chunks()  # untimed: what autovacuum does beside the writer
        if step.number >= window_start:
            encoded = canonical(step.change)
            change_raw.append(len(encoded))
            change_zstd.append(len(zc.compress(encoded)))
        if step.number % 200 == 0:
            say(f"    step {step.number}: p50 so far {ms(statistics.median(latencies))} ms")
    after = sizes()
    after_all = parts()
    n = len(change_raw)
    growth = {name: (after[name] - before[name]) / n for name in after}
    window = list(
        Checkpoint.objects.filter(session=session, seq__gte=window_start).values("root", "raw_bytes", "stored_bytes")
    )
    roots = [bytes(row["root"]) for row in window]
    keyframe_roots = {
        bytes(h) for h in Chunk.objects.filter(hash__in=roots, base__isnull=True).values_list("hash", flat=True)
    }
    keyframes = len(keyframe_roots)
    patch_payload = [r["stored_bytes"] for r in window if bytes(r["root"]) not in keyframe_roots]
    # what a patch's chunk holds now: a keyframe compressed the patches before it again (store._rebase)
    patch_now = [
        len(data)
        for data in Chunk.objects.filter(hash__in=roots, base__isnull=False).values_list("data", flat=True)
        if store.rebased_on(bytes(data)) is not None
    ]
    keyframe_steps = [
        ms(latencies[window_start - 1 + index]) for index, r in enumerate(window) if bytes(r["root"]) in keyframe_roots
    ]
    keyframe_payload = [r["stored_bytes"] for r in window if bytes(r["root"]) in keyframe_roots]
    totals = Checkpoint.objects.filter(session=session).values_list("raw_bytes", "stored_bytes")
    total_raw = sum(r for r, _ in totals)
    total_payload = sum(s for _, s in totals)
    w_lat = latencies[window_start - 1 :]
    figures = {
        "steps": steps,
        "window": [window_start, steps],
        **latency_figures("create", w_lat, latencies),
        "checkpoints_per_s_window": round(len(w_lat) / sum(w_lat), 1),
        "create_cpu_p50_ms_window": ms(statistics.median(cpu_times[window_start - 1 :])),
        "disk_growth_per_checkpoint": {k: round(v, 1) for k, v in growth.items()},
        "payload_stored_bytes_per_checkpoint": sum(r["stored_bytes"] for r in window) / n,
        "state_bytes_window_mean": sum(r["raw_bytes"] for r in window) / n,
        "state_bytes_last": window[-1]["raw_bytes"] if window else 0,
        "change_bytes_mean": sum(change_raw) / n,
        "change_zstd3_bytes_mean": sum(change_zstd) / n,
        "keyframes_in_window": keyframes,
        "patch_payload_bytes_mean": round(statistics.mean(patch_payload)) if patch_payload else None,
        "keyframe_payload_bytes": keyframe_payload,
        "patch_chunk_bytes_now_mean": round(statistics.mean(patch_now)) if patch_now else None,
        "keyframe_create_ms": keyframe_steps,
        "total_raw_bytes": total_raw,
        "total_payload_bytes": total_payload,
        "tables_after": after,
        "checkpoint_table_marginal_bytes_per_row": round(
            (after["checkpoint"] - early["checkpoint"]) / (steps - early_start + 1), 1
        ),
        "checkpoint_table_marginal_steps": [early_start, steps],
        # every part of both tables, per checkpoint, in the window and over the same long run: 100 checkpoints fill
        # whole 8 kB pages of a relation or none, so the window's figure of a small part is 0 or a multiple of 82 B
        "parts_bytes_per_checkpoint_window": {
            part: round((size - window_all.get(part, 0)) / n, 1) for part, size in after_all.items()
        },
        "parts_bytes_per_checkpoint_marginal": {
            part: round((size - early_all.get(part, 0)) / (steps - early_start + 1), 1)
            for part, size in after_all.items()
        },
    }
    report.figures["service"] = figures
    return session, workload


def run_secrets(report: Report, steps: int, seed: int) -> None:
    """(f) The same workload with and without the secret scan, in one run: two sessions of the same statistics
    (seeds `seed` and `seed + 1`: no chunk shared between them), their creates interleaved step by step so that the
    machine's load falls on both alike. The scan takes turns: at each step one session's create is scanned and the
    other's is not, swapped every step (a scan reads only what its create adds, so a session scanned every other
    step costs what a scanned one does), and which goes first flips every two steps: each arm holds both sessions'
    steps alike, in both positions, and the difference of the two is the scan's. The window is the last WINDOW
    steps."""
    from django.conf import settings

    from checkpoints import services
    from checkpoints.store import secrets as scanner

    project = services.get_or_create_project("bench")
    sessions = [
        services.upsert_session(project, external_id=f"secrets-{which}-{seed}-{RUN}", agent="coder-7")[0]
        for which in (0, 1)
    ]
    latencies: dict[bool, list[float]] = {True: [], False: []}
    scan_seconds: list[float] = []  # each call's
    per_create: list[float] = []  # the scans of one scanned create (its state and its metadata) together
    real_scan = scanner.scan

    def timed_scan(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return real_scan(*args, **kwargs)
        finally:
            scan_seconds.append(time.perf_counter() - start)

    scanner.scan = timed_scan  # type: ignore[assignment]
    say(f"(f) secret scan: {steps} steps with and without, interleaved")
    steps_of = [AgentSessionWorkload(seed).steps(steps), AgentSessionWorkload(seed + 1).steps(steps)]
    try:
        for number in range(1, steps + 1):
            for which in (0, 1) if (number // 2) % 2 else (1, 0):
                scan = (which == 0) == (number % 2 == 1)
                step = next(steps_of[which])
                item = services.CheckpointInput(state=step.state, name="step", step=step.number)
                settings.SECRETS_SCAN = scan
                calls = len(scan_seconds)
                start = time.perf_counter()
                services.create_checkpoint(sessions[which], item)
                latencies[scan].append(time.perf_counter() - start)
                if scan:
                    per_create.append(sum(scan_seconds[calls:]))
    finally:
        settings.SECRETS_SCAN = True
        scanner.scan = real_scan  # type: ignore[assignment]
    window_start = max(1, steps - WINDOW + 1)
    with_scan = statistics.median(latencies[True][window_start - 1 :])
    without = statistics.median(latencies[False][window_start - 1 :])
    figures = {
        "window": [window_start, steps],
        "create_p50_ms_with_scan": ms(with_scan),
        "create_p50_ms_without_scan": ms(without),
        "rise_percent": round((with_scan / without - 1) * 100, 1),
        "scan_p50_ms_window": ms(statistics.median(per_create[window_start - 1 :])),
        "scan_p99_ms_window": ms(pct(per_create[window_start - 1 :], 99)),
    }
    report.figures["secrets"] = figures
    report.add(
        f"secret scan of one create, p50 / p99 (steps {window_start}–{steps})",
        f"{figures['scan_p50_ms_window']} / {figures['scan_p99_ms_window']} ms",
    )
    report.add(
        f"create p50, steps {window_start}–{steps}, with / without the secret scan",
        f"{figures['create_p50_ms_with_scan']} / {figures['create_p50_ms_without_scan']} ms "
        f"({figures['rise_percent']:+} %)",
        target="≤ +10 %",
        ok=figures["rise_percent"] <= 10,
    )


def profile_creates(session: Any, workload: AgentSessionWorkload, count: int) -> None:
    """cProfile `count` more creates (after the measured ones, so they are not disturbed)."""
    from checkpoints import services

    profiler = cProfile.Profile()
    for step in workload.steps(count):
        item = services.CheckpointInput(state=step.state, name="step", step=step.number)
        profiler.enable()
        services.create_checkpoint(session, item)
        profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out).sort_stats("cumulative")
    stats.print_stats(30)
    out.write("\n--- by own time ---\n")
    stats.sort_stats("tottime").print_stats(15)
    say(
        f"cProfile of {count} creates at steps {workload.step_number - count + 1}–{workload.step_number}:\n{out.getvalue()}"
    )


# ---- (b) reads -----------------------------------------------------------------------------------


def run_reads(report: Report, session: Any) -> None:
    from checkpoints import store
    from checkpoints.api.agent import _CHECKPOINT_FIELDS
    from checkpoints.models import AgentSession, Checkpoint, Chunk

    say("(b) reads")

    def latest_object() -> Any:
        head = AgentSession.objects.select_related("head").get(pk=session.pk).head
        return store.load_state(bytes(head.root))

    def latest_json() -> bytes:
        head = AgentSession.objects.select_related("head").get(pk=session.pk).head
        return store.load_state_json(bytes(head.root))

    def listing() -> list[dict[str, Any]]:
        return list(Checkpoint.objects.filter(session=session).order_by("seq").values(*_CHECKPOINT_FIELDS)[:1000])

    latest_object()
    cold = timed(latest_object, before=store.cache.clear)
    # warm: the state is in this process's cache, as after the agent's last create or an API read
    latest_json()
    warm = timed(latest_object)
    cold_json = timed(latest_json, before=store.cache.clear)
    # the deepest patch chain: the checkpoint just before the newest keyframe
    rows = list(Checkpoint.objects.filter(session=session).order_by("-seq").values("seq", "root")[:WINDOW])
    bases = dict(Chunk.objects.filter(hash__in=[bytes(r["root"]) for r in rows]).values_list("hash", "base"))
    keyframe_seqs = [r["seq"] for r in rows if bases.get(bytes(r["root"])) is None]
    deepest = None
    if keyframe_seqs and max(keyframe_seqs) > 1:
        deepest = Checkpoint.objects.filter(session=session, seq=max(keyframe_seqs) - 1).values("seq", "root").first()
    figures: dict[str, Any] = {
        "latest_read_cold_p50_ms": ms(statistics.median(cold)),
        "latest_read_cold_p95_ms": ms(pct(cold, 95)),
        "latest_read_warm_p50_ms": ms(statistics.median(warm)),
        "latest_read_json_cold_p50_ms": ms(statistics.median(cold_json)),
        "list_1000_queryset_p50_ms": ms(statistics.median(timed(listing))),
        "listed_rows": len(listing()),
    }
    head_depth = store._entry(bytes(AgentSession.objects.get(pk=session.pk).head.root)).depth
    figures["latest_patch_depth"] = head_depth
    if deepest is not None:
        root = bytes(deepest["root"])
        deep = timed(lambda: store.load_state(root), before=store.cache.clear)
        figures["deep_read_cold_p50_ms"] = ms(statistics.median(deep))
        figures["deep_read_seq"] = deepest["seq"]
        figures["deep_read_depth"] = store._entry(root).depth
    report.figures["reads"] = figures


# ---- (c) and (d) the HTTP API --------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def gunicorn(url: str, workers: int = 2) -> Iterator[str]:
    """A real gunicorn serving config.wsgi on a free port; yields its base URL."""
    exe = Path(sys.executable).parent / "gunicorn"
    command = [str(exe)] if exe.exists() else [sys.executable, "-m", "gunicorn"]
    help_text = subprocess.run([*command, "--help"], capture_output=True, text=True, check=False).stdout  # noqa: S603 - gunicorn's own --help
    port = free_port()
    command += ["config.wsgi", "-b", f"127.0.0.1:{port}", "-w", str(workers), "--timeout", "300"]
    if "--no-control-socket" in help_text:
        command.append("--no-control-socket")
    log = tempfile.NamedTemporaryFile(prefix="bench_gunicorn_", suffix=".log", delete=False)  # noqa: SIM115
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "config.settings", "DEBUG": "0"}
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)  # noqa: S603 - the gunicorn command spelled out above
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{base}/api/v1/openapi.json", timeout=60).read()  # noqa: S310 - base is the local gunicorn's http:// URL
                break
            except (urllib.error.URLError, ConnectionError):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"gunicorn did not start; see {log.name}") from None
                time.sleep(0.2)
        # one request per worker so every process has imported and connected before timing
        for _ in range(workers * 2):
            urllib.request.urlopen(f"{base}/api/v1/openapi.json", timeout=60).read()  # noqa: S310 - base is the local gunicorn's http:// URL
        yield base
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


class Api:
    def __init__(self, base: str, token: str) -> None:
        self.base = base
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def call(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        request = urllib.request.Request(self.base + path, data=body, method=method, headers=self.headers)  # noqa: S310 - base is the local gunicorn's http:// URL
        try:
            with urllib.request.urlopen(request, timeout=300) as response:  # noqa: S310 - base is the local gunicorn's http:// URL
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            raise RuntimeError(f"{method} {path}: {exc.code} {exc.read()[:500]!r}") from None


def run_http(report: Report, url: str, steps: int, seed: int, service_session: Any, workers: int) -> None:
    from checkpoints import services

    project = services.get_or_create_project("bench")
    _, token = services.create_api_token(project, name=f"bench-{time.time_ns()}")
    say(f"(c) HTTP API: starting gunicorn, {steps} steps")
    with gunicorn(url, workers) as base:
        api = Api(base, token)
        external_id = f"http-{seed}-{RUN}"
        api.call("POST", "/api/v1/sessions", orjson.dumps({"external_id": external_id, "agent": "coder-7"}))
        latencies: list[float] = []
        encode: list[float] = []
        workload = AgentSessionWorkload(seed)
        for step in workload.steps(steps):
            start = time.perf_counter()
            body = orjson.dumps({"name": "step", "kind": "step", "step": step.number, "state": step.state})
            encode.append(time.perf_counter() - start)
            start = time.perf_counter()
            status, _ = api.call("POST", f"/api/v1/sessions/{external_id}/checkpoints", body)
            latencies.append(time.perf_counter() - start)
            if status != 201:  # not an assert: a run under -O would time answers it never checked
                raise RuntimeError(f"checkpoint {step.number}: {status}, not 201")
            if step.number % 200 == 0:
                say(f"    step {step.number}: p50 so far {ms(statistics.median(latencies))} ms")
        window = latencies[-WINDOW:]
        patched = run_http_patches(api, external_id, workload)
        listed = f"/api/v1/sessions/{service_session.external_id}/checkpoints?limit=1000"
        count = len(orjson.loads(api.call("GET", listed)[1])["items"])
        list_times = timed(lambda: api.call("GET", listed))
        resume = f"/api/v1/sessions/{service_session.external_id}/resume"
        resume_times = timed(lambda: api.call("GET", resume))
        report.figures["http"] = {
            **latency_figures("create", window, latencies),
            "client_encode_p50_ms_window": ms(statistics.median(encode[-WINDOW:])),
            "list_1000_http_p50_ms": ms(statistics.median(list_times)),
            "listed_rows_http": count,
            "resume_http_p50_ms": ms(statistics.median(resume_times)),
            "resume_http_max_ms": ms(max(resume_times)),
            **patched,
        }
        run_batch(report, api, seed)


def _pointer(*parts: str) -> str:
    return "".join("/" + part.replace("~", "~0").replace("/", "~1") for part in parts)


def step_patch(change: dict[str, Any]) -> list[dict[str, Any]]:
    """The step's change as the RFC 6902 patch an agent sends instead of its whole state."""
    operations = [{"op": "add", "path": "/messages/-", "value": message} for message in change["messages"]]
    operations += [{"op": "add", "path": "/tool_calls/-", "value": call} for call in change["tool_calls"]]
    operations += [{"op": "add", "path": _pointer("memory", k), "value": v} for k, v in change["memory"].items()]
    return [*operations, {"op": "replace", "path": "/progress", "value": change["progress"]}]


def run_http_patches(api: Api, external_id: str, workload: AgentSessionWorkload) -> dict[str, float]:
    """WINDOW more steps of the session (a ~2.2 MB state) sent as `state_patch` against the head."""
    say(f"    {WINDOW} more steps as state_patch")
    latencies: list[float] = []
    for step in workload.steps(WINDOW):
        body = orjson.dumps(
            {"name": "step", "kind": "step", "step": step.number, "state_patch": step_patch(step.change)}
        )
        start = time.perf_counter()
        status, _ = api.call("POST", f"/api/v1/sessions/{external_id}/checkpoints", body)
        latencies.append(time.perf_counter() - start)
        if status != 201:
            raise RuntimeError(f"patched checkpoint {step.number}: {status}, not 201")
    return {"patch_create_p50_ms": ms(statistics.median(latencies)), "patch_create_p95_ms": ms(pct(latencies, 95))}


def batch_inputs(prefix: str, seed: int) -> list[tuple[str, list[dict[str, Any]]]]:
    return [
        (f"{prefix}-{i:03d}", list(dreamos_states(seed * 1000 + i, f"agent-{i:03d}", BATCH_PER_SESSION)))
        for i in range(BATCH_SESSIONS)
    ]


def run_batch(report: Report, api: Api, seed: int) -> None:
    """(d) many small checkpoints: services.ingest_checkpoints and POST /checkpoints/batch."""
    from checkpoints import services

    project = services.get_or_create_project("bench")
    per_call = BATCH_SIZE // BATCH_PER_SESSION
    total = BATCH_SESSIONS * BATCH_PER_SESSION
    say(f"(d) batch ingest: {BATCH_SESSIONS} sessions x {BATCH_PER_SESSION} checkpoints, {BATCH_SIZE} per call")

    # service layer
    data = batch_inputs(f"dream-svc-{RUN}", seed)
    sizes_raw = [len(canonical(state)) for _, states in data for state in states]
    sessions = {name: services.upsert_session(project, external_id=name, agent=name)[0] for name, _ in data}
    elapsed = 0.0
    for start in range(0, len(data), per_call):
        groups = [
            (sessions[name], [services.CheckpointInput(state=s, name="routine", kind="routine") for s in states])
            for name, states in data[start : start + per_call]
        ]
        begin = time.perf_counter()
        services.ingest_checkpoints(groups)
        elapsed += time.perf_counter() - begin
    service_rate = total / elapsed

    # HTTP
    data = batch_inputs(f"dream-http-{RUN}", seed + 1)
    for name, _ in data:
        services.upsert_session(project, external_id=name, agent=name)
    bodies = []
    for start in range(0, len(data), per_call):
        items = [
            {"session": name, "name": "routine", "kind": "routine", "state": s}
            for name, states in data[start : start + per_call]
            for s in states
        ]
        bodies.append(orjson.dumps({"checkpoints": items}))
    elapsed = 0.0
    for body in bodies:
        begin = time.perf_counter()
        status, payload = api.call("POST", "/api/v1/checkpoints/batch", body)
        elapsed += time.perf_counter() - begin
        if status != 201 or orjson.loads(payload)["created"] != BATCH_SIZE:
            raise RuntimeError(f"batch: {status} {payload[:200]!r}")
    report.figures["batch"] = {
        "checkpoints": total,
        "state_bytes_mean": round(statistics.mean(sizes_raw)),
        "service_checkpoints_per_s": round(service_rate, 1),
        "http_checkpoints_per_s": round(total / elapsed, 1),
        "http_body_bytes_mean": round(statistics.mean(len(b) for b in bodies)),
    }


# ---- (e) the naive baseline ----------------------------------------------------------------------


def run_naive(report: Report, steps: int, seed: int) -> None:
    """gzip(json.dumps(state)) per checkpoint, one row each, as the file-based source systems store it."""
    from django.db import connection

    say(f"(e) naive baseline: {steps} steps of gzip JSON")
    postgres = connection.vendor == "postgresql"
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS bench_naive")
        cursor.execute(
            "CREATE TABLE bench_naive (id serial PRIMARY KEY, session text NOT NULL, seq int NOT NULL, "
            "created_at timestamptz NOT NULL, data bytea NOT NULL)"
            if postgres
            else "CREATE TABLE bench_naive (id integer PRIMARY KEY AUTOINCREMENT, session text NOT NULL, "
            "seq int NOT NULL, created_at text NOT NULL, data blob NOT NULL)"
        )
        cursor.execute("CREATE UNIQUE INDEX bench_naive_session_seq ON bench_naive (session, seq)")
    from django.utils import timezone

    session = f"naive-{seed}-{RUN}"
    window_start = max(1, steps - WINDOW + 1)
    latencies: list[float] = []
    blob_sizes: list[int] = []
    raw_sizes: list[int] = []
    before = 0
    for step in AgentSessionWorkload(seed).steps(steps):
        if step.number == window_start:
            before = relation_bytes("bench_naive")
        start = time.perf_counter()
        raw = json.dumps(step.state).encode()
        blob = gzip.compress(raw, mtime=0)
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO bench_naive (session, seq, created_at, data) VALUES (%s, %s, %s, %s)",
                [session, step.number, timezone.now(), blob],
            )
        latencies.append(time.perf_counter() - start)
        if step.number >= window_start:
            blob_sizes.append(len(blob))
            raw_sizes.append(len(canonical(step.state)))
        if step.number % 200 == 0:
            say(f"    step {step.number}: p50 so far {ms(statistics.median(latencies))} ms")
    growth = (relation_bytes("bench_naive") - before) / len(blob_sizes)

    def latest() -> Any:
        with connection.cursor() as cursor:
            cursor.execute("SELECT data FROM bench_naive WHERE session = %s ORDER BY seq DESC LIMIT 1", [session])
            return json.loads(gzip.decompress(bytes(cursor.fetchone()[0])))

    def listing() -> list[Any]:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT id, session, seq, created_at FROM bench_naive WHERE session = %s ORDER BY seq LIMIT 1000",
                [session],
            )
            return cursor.fetchall()

    latest()
    w_lat = latencies[window_start - 1 :]
    report.figures["naive"] = {
        **latency_figures("put", w_lat, latencies),
        "disk_growth_per_checkpoint": round(growth, 1),
        "gzip_bytes_mean_window": sum(blob_sizes) / len(blob_sizes),
        "raw_bytes_mean_window": sum(raw_sizes) / len(raw_sizes),
        "latest_read_p50_ms": ms(statistics.median(timed(latest))),
        "list_1000_p50_ms": ms(statistics.median(timed(listing))),
        "table_bytes": relation_bytes("bench_naive"),
    }


# ---- the report ----------------------------------------------------------------------------------


def build_table(report: Report) -> None:
    s, r = report.figures["service"], report.figures["reads"]
    n = report.figures.get("naive") or defaultdict(lambda: math.nan)  # --no-naive: its cells say nan
    h, b = report.figures.get("http"), report.figures.get("batch")
    w0, w1 = s["window"]
    win = f"{w0}–{w1}"
    growth = s["disk_growth_per_checkpoint"]
    ours_disk = growth["chunk"] + growth["checkpoint"]
    target_bytes = 2 * s["change_zstd3_bytes_mean"] + 256
    add = report.add
    add(
        f"create p50, service layer (steps {win})",
        f"{s['create_p50_ms_window']} ms",
        f"{n['put_p50_ms_window']} ms",
        "≤ 10 ms",
        s["create_p50_ms_window"] <= 10,
    )
    add(f"create p95, service layer (steps {win})", f"{s['create_p95_ms_window']} ms", f"{n['put_p95_ms_window']} ms")
    add(f"create p50, this process's CPU time (steps {win})", f"{s['create_cpu_p50_ms_window']} ms")
    add(
        "create p50 / p95, service layer (all steps)",
        f"{s['create_p50_ms_all']} / {s['create_p95_ms_all']} ms",
        f"{n['put_p50_ms_all']} / {n['put_p95_ms_all']} ms",
    )
    add("checkpoints/s, service layer (all steps)", s["checkpoints_per_s"], n["checkpoints_per_s"])
    if h:
        add(f"create p50, HTTP API (steps {win})", f"{h['create_p50_ms_window']} ms")
        add(f"create p95, HTTP API (steps {win})", f"{h['create_p95_ms_window']} ms")
        add("checkpoints/s, HTTP API (all steps)", h["checkpoints_per_s"])
        patch_ok = h["patch_create_p50_ms"] <= 8
        add(
            f"create with state_patch p50 / p95, HTTP API (the {WINDOW} steps after)",
            f"{h['patch_create_p50_ms']} / {h['patch_create_p95_ms']} ms",
            target="p50 ≤ 8 ms",
            ok=patch_ok,
        )
    add(
        f"stored bytes/checkpoint: disk growth, chunk+checkpoint tables ({win})",
        f"{ours_disk:,.0f} B",
        f"{n['disk_growth_per_checkpoint']:,.0f} B",
        f"≤ {target_bytes:,.0f} B",
        ours_disk <= target_bytes,
    )
    add(
        "  of which chunk table (+TOAST, indexes)",
        f"{growth['chunk']:,.0f} B",
        "",
        f"≤ {target_bytes:,.0f} B",
        growth["chunk"] <= target_bytes,
    )
    add("  of which checkpoint table (+indexes)", f"{growth['checkpoint']:,.0f} B")
    # 100 rows of ~0.5 kB fill a handful of 8 kB pages across 6 relations: the window figure is coarse
    per_row = s["checkpoint_table_marginal_bytes_per_row"]
    m0, m1 = s["checkpoint_table_marginal_steps"]
    add(
        f"  same, with the checkpoint table's growth over {m0}–{m1} ({per_row:,.0f} B/row)",
        f"{growth['chunk'] + per_row:,.0f} B",
        "",
        f"≤ {target_bytes:,.0f} B",
        growth["chunk"] + per_row <= target_bytes,
    )
    add("  session table growth (row versions, not counted)", f"{growth['session']:,.0f} B")
    # all-in: what the database keeps per checkpoint for good (chunks, the row at its long-run cost with every
    # index, the tallies' rollups and counts); the session's dead row versions are VACUUM's, shown above
    all_in = growth["chunk"] + per_row + growth["rollup"] + growth["counts"]
    add(
        f"bytes/checkpoint all-in: chunks + row ({per_row:,.0f} B) + tallies ({win})",
        f"{all_in:,.0f} B",
        "",
        "≤ 2,000 B",
        all_in <= 2000,
    )
    window_parts, marginal = s["parts_bytes_per_checkpoint_window"], s["parts_bytes_per_checkpoint_marginal"]
    for part, size in sorted(marginal.items(), key=lambda kv: -kv[1]):
        add(f"    {part}, B/checkpoint over {win} · {m0}–{m1}", f"{window_parts[part]:,.1f} · {size:,.1f} B")
    add(
        f"stored bytes/checkpoint: payload `stored_bytes` ({win})",
        f"{s['payload_stored_bytes_per_checkpoint']:,.0f} B",
        f"{n['gzip_bytes_mean_window']:,.0f} B",
    )
    add(
        f"zstd-3 size of the step's change ({win})",
        f"{s['change_zstd3_bytes_mean']:,.0f} B",
        "",
        f"raw {s['change_bytes_mean']:,.0f} B",
    )
    factor = n["disk_growth_per_checkpoint"] / ours_disk if ours_disk > 0 else float("inf")
    add("naive / ours, disk growth per checkpoint", f"{factor:,.0f}×", "", "≥ 50×", factor >= 50)
    state = s["state_bytes_window_mean"]
    add(
        f"stored/raw, disk growth / state size ({win})",
        f"{ours_disk / state:.5f}",
        f"{n['disk_growth_per_checkpoint'] / state:.4f}",
        f"state {kb(state)}",
    )
    tables_total = s["tables_after"]["chunk"] + s["tables_after"]["checkpoint"]
    add(
        "stored/raw, whole run (table sizes / Σ state sizes)",
        f"{tables_total / s['total_raw_bytes']:.5f}",
        f"{n['table_bytes'] / s['total_raw_bytes']:.4f}",
        f"Σ {kb(s['total_raw_bytes'])}",
    )
    add(
        f"latest state read p50, cold cache (depth {r['latest_patch_depth']})",
        f"{r['latest_read_cold_p50_ms']} ms",
        f"{n['latest_read_p50_ms']} ms",
        "≤ 15 ms",
        r["latest_read_cold_p50_ms"] <= 15,
    )
    add(
        "latest state read p50, warm cache",
        f"{r['latest_read_warm_p50_ms']} ms",
        "",
        "≤ 15 ms",
        r["latest_read_warm_p50_ms"] <= 15,
    )
    add("latest state as JSON bytes p50, cold cache", f"{r['latest_read_json_cold_p50_ms']} ms")
    if "deep_read_cold_p50_ms" in r:
        add(
            f"read of seq {r['deep_read_seq']} (patch depth {r['deep_read_depth']}) p50, cold",
            f"{r['deep_read_cold_p50_ms']} ms",
        )
    if h:
        add("GET /resume (latest state) p50, HTTP", f"{h['resume_http_p50_ms']} ms")
    add(
        f"list {r['listed_rows']} checkpoints' metadata p50 (queryset)",
        f"{r['list_1000_queryset_p50_ms']} ms",
        f"{n['list_1000_p50_ms']} ms",
        "≤ 20 ms",
        r["list_1000_queryset_p50_ms"] <= 20,
    )
    if h:
        add(
            f"list {h['listed_rows_http']} checkpoints' metadata p50 (HTTP, limit=1000)",
            f"{h['list_1000_http_p50_ms']} ms",
            "",
            "≤ 20 ms",
            h["list_1000_http_p50_ms"] <= 20,
        )
    if b:
        size = kb(b["state_bytes_mean"])
        add(
            f"batch ingest checkpoints/s, service layer (state {size})",
            b["service_checkpoints_per_s"],
            "",
            "≥ 2,000/s",
            b["service_checkpoints_per_s"] >= 2000,
        )
        add(
            f"batch ingest checkpoints/s, HTTP API (state {size})",
            b["http_checkpoints_per_s"],
            "",
            "≥ 2,000/s",
            b["http_checkpoints_per_s"] >= 2000,
        )
    report.notes.append(
        f"state at step {w1}: {kb(s['state_bytes_last'])} canonical JSON; change per step {win}: "
        f"{s['change_bytes_mean']:,.0f} B raw, {s['change_zstd3_bytes_mean']:,.0f} B zstd-3; "
        f"{s['keyframes_in_window']} keyframe(s) among the {w1 - w0 + 1} measured checkpoints"
    )
    if s["patch_payload_bytes_mean"] is not None:
        frames = ", ".join(f"{v:,} B" for v in s["keyframe_payload_bytes"]) or "none"
        report.notes.append(
            f"payload at {win}: a patch checkpoint stores {s['patch_payload_bytes_mean']:,} B (mean); keyframes: {frames}"
        )
        if s.get("patch_chunk_bytes_now_mean") is not None:
            created = ", ".join(f"{v} ms" for v in s["keyframe_create_ms"]) or "none"
            report.notes.append(
                f"a patch's chunk once the next keyframe rebased it: {s['patch_chunk_bytes_now_mean']:,} B (mean of "
                f"those at {win}; the newest segment's wait for its keyframe); creates that wrote a keyframe: {created}"
            )
    if h:
        report.notes.append(
            f"HTTP create latency excludes the client's JSON encoding of the state (p50 {h['client_encode_p50_ms_window']} ms at {win})"
        )
    if b:
        report.notes.append(
            f"batch ingest: {b['checkpoints']} checkpoints of Dream.OS-style states (mean {b['state_bytes_mean']:,} B), "
            f"{BATCH_SESSIONS} sessions x {BATCH_PER_SESSION}, {BATCH_SIZE} per call; a {kb(s['state_bytes_last'])} state "
            f"is not a batch-ingest workload (see the service create rate above)"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1000, help="steps of the growing session (default 1000)")
    parser.add_argument("--database-url", help=f"default: {DEFAULT_PG}, recreated; SQLite if PostgreSQL is down")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-http", action="store_true", help="skip (c) and the HTTP half of (d)")
    parser.add_argument(
        "--no-vacuum", action="store_true", help="(a) without a VACUUM of the chunk table after each keyframe"
    )
    parser.add_argument("--no-naive", action="store_true", help="skip (e), the naive baseline (its cells say nan)")
    parser.add_argument("--http-workers", type=int, default=2, help="gunicorn workers (default 2)")
    parser.add_argument("--profile", action="store_true", help="cProfile 30 extra service creates and print it")
    parser.add_argument("--secrets", action="store_true", help="(f): ingest with and without the secret scan")
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"JSON results (default {RESULTS.relative_to(ROOT)})")
    args = parser.parse_args(argv)
    if args.steps < 2:
        parser.error("--steps must be at least 2")

    started = time.perf_counter()
    url, db_note = choose_database(args.database_url)
    say(f"database: {db_note}")
    setup_django(url)
    report = Report()
    session, workload = run_service(report, args.steps, args.seed, vacuum=not args.no_vacuum)
    run_reads(report, session)
    if args.profile:  # after the reads: the extra checkpoints must not change what (a) and (b) measured
        profile_creates(session, workload, 30)
    if args.secrets:
        run_secrets(report, args.steps, args.seed + 2)
    if not args.no_naive:
        run_naive(report, args.steps, args.seed)
    if not args.no_http:
        # a different seed: the same statistics, but no chunk the service run already stored
        run_http(report, url, args.steps, args.seed + 1, session, args.http_workers)
    build_table(report)
    elapsed = time.perf_counter() - started
    from django.conf import settings

    meta = {
        "database": db_note,
        "vendor": vendor(),
        "steps": args.steps,
        "seed": args.seed,
        "keyframe_interval": settings.CHECKPOINT_KEYFRAME_INTERVAL,
        "http_workers": args.http_workers,
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "seconds": round(elapsed, 1),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    print(f"Checkpoint Console bench — {args.steps} steps, {db_note}, {os.cpu_count()} CPUs, {elapsed:.0f} s\n")
    print(report.table())
    print()
    for note in report.notes:
        print(f"* {note}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "meta": meta,
        "table": [r.__dict__ for r in report.rows],
        "notes": report.notes,
        "figures": report.figures,
    }
    args.out.write_text(json.dumps(document, indent=2, default=str))
    print(f"\nresults written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
