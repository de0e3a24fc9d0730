"""/metrics: what a Prometheus scrape reads, and who may read it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from checkpoints.jobs import run_job
from checkpoints.jobs.retention import apply_retention
from checkpoints.models import RetentionPolicy

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[1]
TOKEN = "s3cret-token"
BEARER = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(autouse=True)
def metrics_token(settings) -> str:
    """As in production: a scrape sends the token (without one, /metrics is open only with DEBUG on)."""
    settings.METRICS_TOKEN = TOKEN
    return TOKEN


def scrape(client, **headers) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape, by (name, sorted labels), as Prometheus' own parser reads the text."""
    response = client.get("/metrics", headers=headers or BEARER)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    text = response.content.decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture
def session(api):
    assert api.post("/sessions", {"external_id": "run-1", "agent": "agent-7"}).status_code in (200, 201)
    return "run-1"


def post_checkpoint(api, capture, **fields):
    with capture(execute=True):  # the counts move once the ingest is committed
        response = api.post("/sessions/run-1/checkpoints", {"state": {"n": 1}, **fields})
    assert response.status_code == 201, response.content
    return response


def test_a_checkpoint_arriving_through_the_api_moves_the_counts(
    client, api, session, django_capture_on_commit_callbacks
):
    before = scrape(client)
    post_checkpoint(api, django_capture_on_commit_callbacks, name="start", kind="step")
    post_checkpoint(api, django_capture_on_commit_callbacks, name="boom", kind="step", status="failed")
    after = scrape(client)

    ingested = "checkpoint_console_checkpoints_ingested_total"
    for status in ("completed", "failed"):
        moved = value(after, ingested, project="acme", kind="step", status=status)
        assert moved - value(before, ingested, project="acme", kind="step", status=status) == 1
    latency = "checkpoint_console_ingest_duration_seconds_count"
    assert value(after, latency) - value(before, latency) == 2
    assert value(after, "checkpoint_console_checkpoints", project="acme") == 2
    assert value(after, "checkpoint_console_sessions", project="acme", status="failed") == 1
    assert value(after, "checkpoint_console_state_raw_bytes", project="acme") > 0
    assert value(after, "checkpoint_console_state_stored_bytes", project="acme") > 0
    # the failed checkpoint opened a drift alert
    assert value(after, "checkpoint_console_open_alerts", project="acme", kind="failed", severity="critical") == 1


def test_requests_and_database_queries_are_counted(client, api, session):
    before = scrape(client)
    api.get("/sessions/run-1")
    after = scrape(client)
    requests = "django_http_requests_total_by_method_total"
    assert value(after, requests, method="GET") > value(before, requests, method="GET")
    assert sum(v for (name, _), v in after.items() if name == "django_db_execute_total") > 0


def test_job_runs_retention_deletions_and_last_success_are_read_from_the_database(
    client, make_session, make_checkpoint
):
    RetentionPolicy.objects.filter(project=None, kind="step").update(
        keep_last=2, keep_first=False, keep_latest_per_name=False, enabled=True
    )
    session = make_session()
    for i in range(5):
        make_checkpoint(session, {"i": i}, name=f"s{i}")
    run_job("retention", lambda: apply_retention(dry_run=True), dry_run=True)
    run = run_job("retention", apply_retention)
    assert run.result["deleted"] == 3
    with pytest.raises(RuntimeError):
        run_job("gc", lambda: (_ for _ in ()).throw(RuntimeError("disk full")))

    samples = scrape(client)
    assert value(samples, "checkpoint_console_retention_deleted_checkpoints_total", kind="step") == 3  # not the dry run
    assert value(samples, "checkpoint_console_job_runs_total", job="retention", result="succeeded") == 2
    assert value(samples, "checkpoint_console_job_runs_total", job="gc", result="failed") == 1
    finished = run.finished_at.timestamp()
    assert value(samples, "checkpoint_console_job_last_success_timestamp_seconds", job="retention") == finished
    assert ("checkpoint_console_job_last_success_timestamp_seconds", (("job", "gc"),)) not in samples
    assert value(samples, "checkpoint_console_checkpoints", project="acme") == 2


def test_a_run_that_finishes_after_later_runs_is_still_counted(client):
    """Scrapes sum the finished history once and then read only newer runs: one still running stays unsummed."""
    during = {}

    def long_gc():
        run_job("drift_detection", dict)  # a later run finishes while this one runs
        during.update(scrape(client))
        return {}

    run_job("gc", dict)
    run_job("gc", long_gc)
    runs = "checkpoint_console_job_runs_total"
    assert value(during, runs, job="gc", result="succeeded") == 1
    assert value(during, runs, job="drift_detection", result="succeeded") == 1
    for _ in range(2):  # the second scrape reads the summed history
        after = scrape(client)
        assert value(after, runs, job="gc", result="succeeded") == 2
        assert value(after, runs, job="drift_detection", result="succeeded") == 1


def test_a_scrape_reads_the_database_in_a_bounded_number_of_queries(
    client, make_session, make_checkpoint, django_assert_max_num_queries
):
    for n in range(20):
        make_checkpoint(make_session(f"run-{n}"), {"n": n})
    for job in ("gc", "retention", "drift_detection"):
        run_job(job, dict)
    with django_assert_max_num_queries(12):  # sessions, alerts, the job history (see JobHistory), each last success
        scrape(client)


def test_with_a_token_set_a_scrape_needs_it(client):
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.get("/metrics", headers={"Authorization": "s3cret-token"}).status_code == 401
    refused = client.get("/metrics")
    assert refused["WWW-Authenticate"].startswith("Bearer") and b"checkpoint_console" not in refused.content
    assert scrape(client, Authorization="Bearer s3cret-token")


def test_metrics_need_no_sign_in_and_refuse_posts(client):
    assert client.get("/metrics", headers=BEARER).status_code == 200
    assert client.post("/metrics", headers=BEARER).status_code == 405


def test_in_production_without_a_token_metrics_are_refused(client, settings, project):
    """DEBUG off and METRICS_TOKEN forgotten: nobody reads the projects' slugs, whatever they send."""
    settings.METRICS_TOKEN = ""
    settings.DEBUG = False
    for headers in ({}, {"Authorization": "Bearer "}, {"Authorization": "Bearer"}, BEARER):
        refused = client.get("/metrics", headers=headers)
        assert refused.status_code == 401
        assert refused["WWW-Authenticate"].startswith("Bearer") and b"acme" not in refused.content


def test_with_debug_on_and_no_token_metrics_are_open_for_make_run(client, settings, project):
    settings.METRICS_TOKEN = ""
    settings.DEBUG = True
    response = client.get("/metrics")
    assert response.status_code == 200 and b'project="acme"' in response.content


def test_a_celery_worker_without_a_token_in_production_refuses_scrapes(settings):
    from config.metrics import serve_worker_metrics

    settings.METRICS_TOKEN = ""
    settings.DEBUG = False
    server = serve_worker_metrics(0, host="127.0.0.1")
    try:
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=5)
    finally:
        server.shutdown()
        server.server_close()
    assert refused.value.code == 401


@pytest.mark.redis
def test_queue_depth_counts_the_tasks_waiting_in_redis(client, redis_broker):
    from checkpoints.tasks import collect_garbage
    from config.celery import app

    assert value(scrape(client), "checkpoint_console_celery_queue_length", queue="celery") == 0
    with app.connection_for_write() as connection:
        for _ in range(3):
            collect_garbage.apply_async(connection=connection)
    samples = scrape(client)
    assert value(samples, "checkpoint_console_celery_queue_length", queue="celery") == 3
    assert value(samples, "checkpoint_console_broker_up") == 1


def test_a_broker_that_is_down_does_not_hide_the_other_metrics(client, app_broker):
    app_broker("redis://127.0.0.1:1/0")  # nothing listens there
    samples = scrape(client)
    assert value(samples, "checkpoint_console_broker_up") == 0
    assert ("checkpoint_console_metrics_collect_seconds", ()) in samples


def test_the_sample_grafana_dashboard_queries_metrics_that_exist(client, api, session):
    dashboard = json.loads((ROOT / "deploy/grafana/checkpoint-console.json").read_text())
    queried = {
        re.sub(r"_(bucket|total|count|sum)$", "", name)
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"\b(?:checkpoint_console|django)_\w+", target["expr"])
    }
    api.get("/sessions/run-1")
    text = client.get("/metrics", headers=BEARER).content.decode()
    exported = {family.name for family in text_string_to_metric_families(text)}
    assert queried and queried <= exported, queried - exported


def test_with_a_multiprocess_folder_a_scrape_adds_up_every_process(client, tmp_path, monkeypatch):
    """gunicorn's workers each count their own ingests in PROMETHEUS_MULTIPROC_DIR; any of them answers the sum."""
    folder = tmp_path / "prometheus"
    ingest = (
        "import django; django.setup(); from checkpoints.metrics import record_ingest; "
        "record_ingest([('acme', 'step', 'completed')] * 3, 0.01)"
    )
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(folder), "DJANGO_SETTINGS_MODULE": "config.settings"}
    env["VAR_DIR"] = str(tmp_path / "var")
    for _ in range(2):  # two worker processes
        subprocess.run([sys.executable, "-c", ingest], cwd=ROOT, env=env, check=True, capture_output=True, timeout=120)
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(folder))
    samples = scrape(client)
    ingested = "checkpoint_console_checkpoints_ingested_total"
    assert value(samples, ingested, project="acme", kind="step", status="completed") == 6
    assert value(samples, "checkpoint_console_ingest_duration_seconds_count") == 2
    assert ("checkpoint_console_metrics_collect_seconds", ()) in samples  # and the database's figures, once


def test_a_celery_worker_serves_its_own_counts_behind_the_same_token(settings):
    """What a worker ingests (imports, routine checkpoints) is scraped from the worker, without the database's
    figures, which the web's /metrics already has."""
    from checkpoints.metrics import record_ingest
    from config.metrics import serve_worker_metrics

    server = serve_worker_metrics(0, host="127.0.0.1")
    url = f"http://127.0.0.1:{server.server_port}/metrics"
    try:
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url, timeout=5)
        record_ingest([("acme", "imported", "completed")] * 2, 0.5)
        request = urllib.request.Request(url, headers={"Authorization": "Bearer s3cret-token"})
        with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310 - the test's own local server
            text = response.read().decode()
    finally:
        server.shutdown()
        server.server_close()
    assert refused.value.code == 401
    families = {family.name: family for family in text_string_to_metric_families(text)}
    ingested = families["checkpoint_console_checkpoints_ingested"].samples
    assert any(s.labels == {"project": "acme", "kind": "imported", "status": "completed"} for s in ingested)
    assert "checkpoint_console_open_alerts" not in families


def test_every_sample_scrape_job_and_every_compose_service_carries_the_token():
    """DEBUG is off in compose.yaml, so a scrape without the token is refused: the sample config sends it."""
    import yaml

    scrapes = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())["scrape_configs"]
    assert {target for job in scrapes for c in job["static_configs"] for target in c["targets"]} == {
        "web:8000",
        "worker:9100",
    }
    for job in scrapes:
        assert job["authorization"]["type"] == "Bearer" and job["authorization"]["credentials_file"], job
    services = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]
    for name in ("web", "worker", "beat"):
        environment = services[name]["environment"]
        assert environment["DEBUG"] == "0" and "METRICS_TOKEN" in environment, name


def test_under_gunicorn_a_scrape_adds_up_every_worker_without_any_setting(tmp_path):
    """The image's gunicorn command, two workers, no PROMETHEUS_MULTIPROC_DIR: gunicorn.conf.py defaults it under
    VAR_DIR, so every scrape, whichever worker answers it, counts every worker's requests."""
    import socket
    import time

    env = {k: v for k, v in os.environ.items() if k not in {"PROMETHEUS_MULTIPROC_DIR", "DATABASE_URL"}}
    env.update(VAR_DIR=str(tmp_path), DEBUG="0", METRICS_TOKEN=TOKEN, SECRET_KEY="gunicorn-test-key-" + "x" * 40)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True, timeout=300)
    stale = tmp_path / "prometheus" / "counter_1.db"
    stale.parent.mkdir()
    stale.write_bytes(b"from an earlier run")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = ["gunicorn", "config.wsgi", "--bind", f"127.0.0.1:{port}", "--workers", "2"]
    with (tmp_path / "gunicorn.log").open("wb") as log:
        server = subprocess.Popen([sys.executable, "-m", *command], cwd=ROOT, env=env, stdout=log, stderr=log)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline, probes = time.monotonic() + 120, 0
        while True:
            assert server.poll() is None, (tmp_path / "gunicorn.log").read_text()
            probes += 1
            try:
                urllib.request.urlopen(f"{base}/health/live", timeout=2)  # noqa: S310 - the test's own server
                break
            except OSError:
                assert time.monotonic() < deadline, "gunicorn did not answer within 120 s"
                time.sleep(0.2)
        for _ in range(30):
            urllib.request.urlopen(f"{base}/health/live", timeout=10)  # noqa: S310 - as above
        counts = []
        for _ in range(6):
            request = urllib.request.Request(f"{base}/metrics", headers=BEARER)  # noqa: S310 - as above
            with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - as above
                families = text_string_to_metric_families(response.read().decode())
            counts.append(
                sum(
                    s.value
                    for family in families
                    for s in family.samples
                    if s.name == "django_http_requests_latency_seconds_by_view_method_count"
                    and s.labels.get("view") == "health_live"
                )
            )
    finally:
        server.terminate()
        server.wait(timeout=30)
    # every scrape the sum of both workers: at least the 30 and the probe answered, never less than the scrape
    # before (one worker's share would alternate); a probe the client gave up on may still be counted late
    assert counts == sorted(counts) and 31 <= counts[0] <= counts[-1] <= 30 + probes, (counts, probes)
    files = {p.name for p in (tmp_path / "prometheus").iterdir()}
    assert any(name.startswith("counter_") for name in files), files  # the workers wrote their counts there
    assert "counter_1.db" not in files  # the earlier run's counts went at start
