"""/health/live (the process answers) and /health/ (readiness: database, broker, worker, beat, disk)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from django_celery_beat.models import IntervalSchedule, PeriodicTask

CHECKS = {"database", "broker", "worker", "beat", "disk"}


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


def ready(client) -> tuple[int, dict]:
    response = client.get("/health/")
    body = response.json()
    assert set(body["checks"]) == CHECKS
    return response.status_code, body


def test_a_broker_that_is_down_turns_readiness_red(client, beat_ticked, app_broker):
    beat_ticked.last_run_at = timezone.now()
    beat_ticked.save()
    app_broker("redis://:hunter2@127.0.0.1:1/0")  # a closed port
    response = client.get("/health/")
    assert response.status_code == 503
    assert b"hunter2" not in response.content
    status, body = ready(client)
    checks = body["checks"]
    assert body["status"] == "fail"
    assert not checks["broker"]["ok"] and "127.0.0.1:1" in checks["broker"]["detail"]
    assert checks["worker"] == {**checks["worker"], "ok": False, "detail": "not checked: the broker check failed"}
    assert checks["database"]["ok"] and checks["beat"]["ok"] and checks["disk"]["ok"]


def test_no_worker_answering_turns_readiness_red(client, beat_ticked, settings):
    settings.HEALTH_WORKER_TIMEOUT_SECONDS = 0.2
    status, body = ready(client)
    assert status == 503
    assert body["checks"]["broker"]["ok"]  # the embedded filesystem broker of `make run`
    assert body["checks"]["worker"] == {
        **body["checks"]["worker"],
        "ok": False,
        "detail": "no worker answered a ping within 0.2 s",
    }


def test_beat_silent_for_too_long_or_never_turns_readiness_red(client, beat_ticked, settings):
    settings.HEALTH_BEAT_MAX_AGE_MINUTES = 15
    settings.HEALTH_WORKER_TIMEOUT_SECONDS = 0.1
    assert ready(client)[1]["checks"]["beat"]["detail"] == "beat has not run a periodic task yet"
    beat_ticked.last_run_at = timezone.now() - timedelta(minutes=16)
    beat_ticked.save()
    status, body = ready(client)
    assert status == 503 and not body["checks"]["beat"]["ok"]
    assert "more than 900 s" in body["checks"]["beat"]["detail"]


def test_too_little_disk_under_var_turns_readiness_red(client, beat_ticked, settings):
    settings.HEALTH_DISK_MIN_FREE_MB = 10**12
    settings.HEALTH_WORKER_TIMEOUT_SECONDS = 0.1
    status, body = ready(client)
    assert status == 503 and not body["checks"]["disk"]["ok"]
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


@pytest.mark.django_db(transaction=True)
def test_the_container_probe_exits_0_only_for_a_2xx_answer(live_server, settings, capsys):
    from config import probe

    settings.HEALTH_WORKER_TIMEOUT_SECONDS = 0.1
    assert probe.main(["probe", f"{live_server.url}/health/live"]) == 0
    assert probe.main(["probe", f"{live_server.url}/health/"]) == 1  # no worker answers here: 503
    assert "503" in capsys.readouterr().err
    assert probe.main(["probe", "http://127.0.0.1:1/health/live"]) == 1  # nothing listens


def test_probes_and_scrapers_may_speak_plain_http_behind_the_https_redirect(settings, db):
    """compose.yaml's probes and Prometheus ask web:8000 over HTTP inside the network; pages still redirect."""
    from django.test import Client

    settings.SECURE_SSL_REDIRECT = True
    client = Client()
    assert client.get("/health/live").status_code == 200
    assert client.get("/metrics").status_code == 200
    assert client.get("/accounts/login/").status_code == 301
