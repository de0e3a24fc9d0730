"""/health/live (the process answers) and /health/ (readiness: database, cache, broker, worker, beat, disk)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone
from django_celery_beat.models import IntervalSchedule, PeriodicTask

CHECKS = {"database", "cache", "broker", "worker", "beat", "disk"}
TOKEN = "health-s3cret"


def test_live_answers_without_touching_the_database(client):
    """No database fixture: pytest-django refuses any query, so a 200 here used none."""
    response = client.get("/health/live")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_live_refuses_posts(client):
    assert client.post("/health/live").status_code == 405


@pytest.fixture
def beat_ticked(db):
    """Beat has just recorded a run of a periodic task."""
    every, _ = IntervalSchedule.objects.get_or_create(every=5, period="minutes")
    PeriodicTask.objects.filter(enabled=True).update(last_run_at=None)
    return PeriodicTask.objects.update_or_create(
        name="health test", defaults={"task": "checkpoints.tasks.detect_drift", "interval": every, "enabled": True}
    )[0]


@pytest.fixture(autouse=True)
def metrics_token(settings) -> str:
    settings.METRICS_TOKEN = TOKEN
    return TOKEN


def ready(client, *, details: bool = True) -> tuple[int, dict]:
    headers = {"Authorization": f"Bearer {TOKEN}"} if details else {}
    response = client.get("/health/", headers=headers)
    body = response.json()
    assert set(body["checks"]) == CHECKS
    return response.status_code, body


def test_a_broker_that_is_down_degrades_readiness_but_answers_200(client, beat_ticked, app_broker):
    """Checkpoints are still stored without the broker (the deliveries wait in the database): a load balancer
    must keep sending traffic."""
    beat_ticked.last_run_at = timezone.now()
    beat_ticked.save()
    app_broker("redis://:hunter2@127.0.0.1:1/0")  # a closed port
    response = client.get("/health/", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    assert b"hunter2" not in response.content
    status, body = ready(client)
    checks = body["checks"]
    assert body["status"] == "degraded"
    assert not checks["broker"]["ok"] and "127.0.0.1:1" in checks["broker"]["detail"]
    assert checks["worker"] == {**checks["worker"], "ok": False, "detail": "not checked: the broker check failed"}
    assert checks["database"]["ok"] and checks["beat"]["ok"] and checks["disk"]["ok"] and checks["cache"]["ok"]


def test_a_cache_that_is_down_degrades_readiness_and_is_named(client, beat_ticked, cache_down, settings):
    settings.HEALTH_WORKER_TIMEOUT_SECONDS = 0.1
    beat_ticked.last_run_at = timezone.now()
    beat_ticked.save()
    status, body = ready(client)
    assert status == 200 and body["status"] == "degraded"
    assert not body["checks"]["cache"]["ok"] and "refused" in body["checks"]["cache"]["detail"].lower()
    assert body["checks"]["database"]["ok"] and body["checks"]["disk"]["ok"]


def test_anyone_sees_which_checks_pass_but_no_hosts_or_versions(client, beat_ticked, app_broker, settings):
    settings.HEALTH_WORKER_TIMEOUT_SECONDS = 0.1
    app_broker("redis://:hunter2@127.0.0.1:1/0")
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
        response = client.get("/health/", headers=headers)
        body = response.json()
        assert response.status_code == 200 and body["status"] == "degraded"
        assert body["checks"] == {name: {"ok": body["checks"][name]["ok"]} for name in CHECKS}
        assert body["checks"]["broker"] == {"ok": False} and body["checks"]["database"] == {"ok": True}
        for secret in (b"127.0.0.1", b"postgresql", b"sqlite", b"MB free", b'"ms"', b"detail"):
            assert secret not in response.content


def test_staff_see_the_details_without_the_token(client, admin_user, beat_ticked, settings):
    settings.HEALTH_WORKER_TIMEOUT_SECONDS = 0.1
    client.force_login(admin_user)
    body = client.get("/health/").json()
    assert body["checks"]["database"]["detail"] in ("postgresql", "sqlite")
    assert "MB free of" in body["checks"]["disk"]["detail"]


def test_a_signed_in_non_staff_user_sees_no_details(client, django_user_model, beat_ticked, settings):
    settings.HEALTH_WORKER_TIMEOUT_SECONDS = 0.1
    client.force_login(django_user_model.objects.create_user("viewer", password="x" * 20))
    body = client.get("/health/").json()
    assert body["checks"]["database"] == {"ok": True}


@pytest.mark.postgres
def test_a_database_that_cannot_be_reached_fails_readiness_with_503(client, database_unreachable, settings):
    settings.HEALTH_WORKER_TIMEOUT_SECONDS = 0.1
    with database_unreachable():
        status, body = ready(client)
        anonymous = client.get("/health/")
    assert status == 503 and body["status"] == "fail"
    assert not body["checks"]["database"]["ok"]
    assert body["checks"]["beat"]["detail"] == "not checked: the database check failed"
    assert anonymous.status_code == 503 and anonymous.json()["checks"]["database"] == {"ok": False}


def test_no_worker_answering_degrades_readiness(client, beat_ticked, settings, app_broker, tmp_path):
    settings.HEALTH_WORKER_TIMEOUT_SECONDS = 0.2
    # the embedded broker in folders of the test's own: a console left running (`make run`) shares VAR_DIR's
    folders = {name: tmp_path / name for name in ("queue", "processed", "control")}
    for folder in folders.values():
        folder.mkdir()
    app_broker(
        "filesystem://",
        {
            "data_folder_in": str(folders["queue"]),
            "data_folder_out": str(folders["queue"]),
            "processed_folder": str(folders["processed"]),
            "control_folder": str(folders["control"]),
            "store_processed": False,
        },
    )
    status, body = ready(client)
    assert status == 200 and body["status"] == "degraded"
    assert body["checks"]["broker"]["ok"]  # the embedded filesystem broker of `make run`
    assert body["checks"]["worker"] == {
        **body["checks"]["worker"],
        "ok": False,
        "detail": "no worker answered a ping within 0.2 s",
    }


def test_beat_silent_for_too_long_or_never_degrades_readiness(client, beat_ticked, settings):
    settings.HEALTH_BEAT_MAX_AGE_MINUTES = 15
    settings.HEALTH_WORKER_TIMEOUT_SECONDS = 0.1
    assert ready(client)[1]["checks"]["beat"]["detail"] == "beat has not run a periodic task yet"
    beat_ticked.last_run_at = timezone.now() - timedelta(minutes=16)
    beat_ticked.save()
    status, body = ready(client)
    assert status == 200 and body["status"] == "degraded" and not body["checks"]["beat"]["ok"]
    assert "more than 900 s" in body["checks"]["beat"]["detail"]


def test_too_little_disk_under_var_turns_readiness_red(client, beat_ticked, settings):
    settings.HEALTH_DISK_MIN_FREE_MB = 10**12
    settings.HEALTH_WORKER_TIMEOUT_SECONDS = 0.1
    status, body = ready(client)
    assert status == 503 and body["status"] == "fail" and not body["checks"]["disk"]["ok"]
    assert "MB free of" in body["checks"]["disk"]["detail"]


@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_with_every_part_up_readiness_is_green(client, redis_broker):
    """A real worker (in a thread) answers the ping through Redis; beat ticked a minute ago."""
    from celery.contrib.testing.worker import start_worker

    from config.celery import app

    every, _ = IntervalSchedule.objects.get_or_create(every=5, period="minutes")
    PeriodicTask.objects.create(
        name="health test", task="checkpoints.tasks.detect_drift", interval=every, last_run_at=timezone.now()
    )
    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=10):
        status, body = ready(client)
    assert status == 200, body
    assert body["status"] == "ok"
    assert all(check["ok"] for check in body["checks"].values())
    assert body["checks"]["worker"]["detail"].endswith("answered")


@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_a_routed_queue_that_no_worker_consumes_degrades_readiness_and_is_named(client, redis_broker, beat_ticked):
    """A worker started with `-Q celery` alone: the webhook and notification deliveries would wait forever."""
    from celery.contrib.testing.worker import start_worker

    from config.celery import app

    # a queue of this test's own: another test's worker on the same broker (a full run shares it) may consume
    # "deliveries", and then the console is healthy; no worker anywhere consumes this one
    queue = f"deliveries-{uuid.uuid4().hex[:8]}"
    routes = app.conf.task_routes
    app.conf.task_routes = {**(routes or {}), "checkpoints.tasks.send_delivery": {"queue": queue}}
    try:
        with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=10, queues=["celery"]):
            status, body = ready(client)
            anonymous = client.get("/health/").json()
    finally:
        app.conf.task_routes = routes
    assert status == 200 and body["status"] == "degraded"
    assert body["checks"]["worker"]["ok"] is False
    detail = body["checks"]["worker"]["detail"]
    assert "answered; no worker consumes the queue " in detail and detail.endswith(queue)
    assert anonymous["checks"]["worker"] == {"ok": False}  # the queue's and host's names are details


def test_a_worker_started_without_q_consumes_every_routed_queue(settings):
    """`celery -A config worker`, as Celery's docs say: the queues come from CELERY_TASK_QUEUES."""
    from config.celery import app
    from config.health import routed_queues

    assert routed_queues() == {"celery", "deliveries"}
    assert {queue.name for queue in app.amqp.queues.values()} >= routed_queues()


@pytest.mark.django_db(transaction=True)
def test_the_container_probe_exits_0_only_for_a_2xx_answer(live_server, settings, capsys):
    from config import probe

    settings.HEALTH_WORKER_TIMEOUT_SECONDS = 0.1
    assert probe.main(["probe", f"{live_server.url}/health/live"]) == 0
    assert probe.main(["probe", f"{live_server.url}/health/"]) == 0  # no worker answers here: degraded, 200
    settings.HEALTH_DISK_MIN_FREE_MB = 10**12
    assert probe.main(["probe", f"{live_server.url}/health/"]) == 1  # too little disk: 503
    assert "503" in capsys.readouterr().err
    assert probe.main(["probe", "http://127.0.0.1:1/health/live"]) == 1  # nothing listens


def test_probes_and_scrapers_may_speak_plain_http_behind_the_https_redirect(settings, db):
    """compose.yaml's probes and Prometheus ask web:8000 over HTTP inside the network; pages still redirect."""
    from django.test import Client

    settings.SECURE_SSL_REDIRECT = True
    client = Client()
    assert client.get("/health/live").status_code == 200
    assert client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert client.get("/accounts/login/").status_code == 301
