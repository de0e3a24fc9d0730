"""Writes need the database alone: with the shared cache or the broker on a closed port, agents' writes and
webhook management still answer 2xx, no event is lost, and deliveries wait in the database for the sweep."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkpoints import tasks
from checkpoints.models import Checkpoint, Delivery, DeliveryStatus, Event, EventType, NotificationRule
from checkpoints.outbox.events import wanted_types
from tests.helpers import in_thread
from tests.kits.langgraph_kit import lg_id, put_body

CREATED = EventType.CHECKPOINT_CREATED


def subscribe(api, url, events=(CREATED,)):
    response = api.post("/webhooks", {"url": url, "events": list(events)})
    assert response.status_code == 201, response.content
    return response.json()


def start_session(api, external_id="run-1"):
    response = api.post("/sessions", {"external_id": external_id, "agent": "agent-7"})
    assert response.status_code in (200, 201), response.content


def created_events() -> int:
    return Event.objects.filter(type=CREATED).count()


# ---- the cache on a closed port ---------------------------------------------------------------------------


def test_with_the_cache_down_every_write_is_stored_and_each_checkpoint_still_announced(
    api, receiver, cache_down, settings, django_capture_on_commit_callbacks
):
    """The wanted event types come from the database instead (not "nobody wants it"), and the per-token rate
    limit, whose counter is in the cache, is not what fails the request."""
    settings.API_RATE_LIMIT = "600/min"
    subscribe(api, receiver.url)
    start_session(api)
    with django_capture_on_commit_callbacks(execute=True):
        one = api.post("/sessions/run-1/checkpoints", {"name": "step", "state": {"n": 1}})
        batch = api.post(
            "/checkpoints/batch", {"checkpoints": [{"session": "run-1", "state": {"n": n}} for n in (2, 3)]}
        )
        put = api.post("/langgraph/checkpoints", put_body("thread-1", 0))
        writes = api.post(
            "/langgraph/writes",
            {"thread_id": "thread-1", "checkpoint_ns": "", "checkpoint_id": lg_id(0), "task_id": "t1", "writes": []},
        )
    assert (one.status_code, batch.status_code, put.status_code, writes.status_code) == (201, 201, 201, 200)
    assert Checkpoint.objects.count() == 4
    assert created_events() == 4
    assert len(receiver.received) == 4  # the broker is up here (tasks inline): each event reached the receiver


def test_with_the_cache_down_webhook_management_answers_2xx_and_takes_effect_at_once(
    api, receiver, cache_down, django_capture_on_commit_callbacks
):
    start_session(api)
    webhook = subscribe(api, receiver.url)
    assert api.post(f"/webhooks/{webhook['id']}/rotate-secret").status_code == 200
    with django_capture_on_commit_callbacks(execute=True):
        api.post("/sessions/run-1/checkpoints", {"state": {"n": 1}})
    assert created_events() == 1
    assert api.delete(f"/webhooks/{webhook['id']}").status_code == 204
    with django_capture_on_commit_callbacks(execute=True):
        assert api.post("/sessions/run-1/checkpoints", {"state": {"n": 2}}).status_code == 201
    assert created_events() == 1  # deleted: the next checkpoint is announced to nobody, with no stale answer


def test_with_the_cache_down_a_project_nobody_listens_to_records_no_event(api, cache_down):
    start_session(api)
    assert api.post("/sessions/run-1/checkpoints", {"state": {"n": 1}}).status_code == 201
    assert Event.objects.count() == 0


EVENT_LISTS = st.lists(st.lists(st.sampled_from(EventType.values), min_size=1, max_size=4, unique=True), max_size=3)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(endpoints=EVENT_LISTS, rules=EVENT_LISTS, disabled=EVENT_LISTS)
def test_the_wanted_event_types_read_without_the_cache_are_those_read_through_it(
    project, endpoints, rules, disabled, cache_down
):
    from django.core.cache import caches
    from django.test import override_settings

    from checkpoints.models import WebhookEndpoint

    WebhookEndpoint.objects.all().delete()
    NotificationRule.objects.all().delete()
    for n, events in enumerate(endpoints):
        WebhookEndpoint.objects.create(project=project, url=f"https://example.com/{n}", events=events, secret="s")
    for n, (events, enabled) in enumerate([*((e, True) for e in rules), *((e, False) for e in disabled)]):
        NotificationRule.objects.create(
            project=project, name=f"rule {n}", events=events, enabled=enabled, channel="email", target="a@example.com"
        )
    without_cache = wanted_types(project.pk)
    local = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    with override_settings(CACHES=local):
        caches["default"].clear()
        through_cache = wanted_types(project.pk)
        assert wanted_types(project.pk) == through_cache  # the second read is the cached one
    assert without_cache == through_cache == {event for events in [*endpoints, *rules] for event in events}


# ---- the broker on a closed port ---------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_with_the_broker_down_a_checkpoint_is_answered_201_and_its_delivery_waits_for_the_sweep(
    api, receiver, broker_down
):
    """Real commits (no captured hooks): the first attempt's send fails after the commit, which must not turn
    the stored checkpoint into a 500 (a client retrying without a key would store it twice)."""
    subscribe(api, receiver.url)
    start_session(api)
    started = time.perf_counter()
    response = api.post("/sessions/run-1/checkpoints", {"state": {"n": 1}})
    seconds = time.perf_counter() - started
    assert response.status_code == 201, response.content
    assert seconds < 5, f"the failed send held the answer {seconds:.1f} s"
    [delivery] = Delivery.objects.all()
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.PENDING, 0)
    assert receiver.received == []

    from config.celery import app

    app.conf.task_always_eager = True  # the broker is back (tasks run inline again)
    assert tasks.send_due_deliveries()["deliveries"] == 1
    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.SUCCEEDED
    [got] = receiver.received
    assert got.json["data"]["checkpoint"]["id"] == response.json()["id"]


@pytest.mark.django_db(transaction=True)
def test_a_broker_that_accepts_and_never_answers_holds_a_write_seconds_not_forever(api, receiver, app_broker, settings):
    """A hung Redis (the kernel completes the connection, nothing ever answers) held the request without end."""
    from config.celery import app

    subscribe(api, receiver.url)
    start_session(api)
    with silent_redis() as url:
        app_broker(url, settings.REDIS_BROKER_TRANSPORT_OPTIONS)
        app.conf.task_always_eager = False
        response, seconds = timed_post(api)
    assert response.status_code == 201 and seconds < 10
    assert Delivery.objects.get().status == DeliveryStatus.PENDING


@pytest.mark.django_db(transaction=True)
def test_a_cache_that_accepts_and_never_answers_holds_a_write_about_a_second(api, receiver, settings):
    subscribe(api, receiver.url)
    start_session(api)
    with silent_redis() as url:
        backend = "django.core.cache.backends.redis.RedisCache"
        settings.CACHES = {"default": {"BACKEND": backend, "LOCATION": url, "OPTIONS": settings.REDIS_CACHE_OPTIONS}}
        response, seconds = timed_post(api)
    assert response.status_code == 201 and seconds < 3  # 1.5 s measured; 5.2 s without the socket timeouts
    assert Event.objects.filter(type=CREATED).count() == 1


@contextmanager
def silent_redis() -> Iterator[str]:
    """A Redis URL on 127.0.0.1 where the kernel completes each connection and nothing ever answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield f"redis://127.0.0.1:{listener.getsockname()[1]}/0"


def timed_post(api) -> tuple[Any, float]:
    """A checkpoint POSTed from another thread, waited for at most 30 s: (its answer, seconds taken)."""
    answers: list = []
    errors: list[BaseException] = []
    started = time.perf_counter()
    thread = in_thread(lambda: answers.append(api.post("/sessions/run-1/checkpoints", {"state": {}})), errors)
    thread.join(timeout=30)
    seconds = time.perf_counter() - started
    assert not errors and answers, f"no answer after {seconds:.0f} s"
    return answers[0], seconds


@pytest.mark.django_db(transaction=True)
def test_with_the_broker_down_batches_langgraph_puts_and_webhook_changes_answer_2xx(api, receiver, broker_down):
    webhook = subscribe(api, receiver.url)
    start_session(api)
    batch = api.post("/checkpoints/batch", {"checkpoints": [{"session": "run-1", "state": {"n": n}} for n in (1, 2)]})
    assert batch.status_code == 201, batch.content
    assert api.post("/langgraph/checkpoints", put_body("thread-1", 0)).status_code == 201
    assert api.post(f"/webhooks/{webhook['id']}/rotate-secret").status_code == 200
    assert api.delete(f"/webhooks/{webhook['id']}").status_code == 204
    assert Checkpoint.objects.count() == 3
    assert Delivery.objects.filter(status=DeliveryStatus.PENDING, attempts=0).count() == 3


# ---- the database ------------------------------------------------------------------------------------------

DROP_ON_INSERT = """
CREATE FUNCTION test_drop_connection() RETURNS trigger AS $$
BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NEW; END $$ LANGUAGE plpgsql;
CREATE TRIGGER test_drop_connection BEFORE INSERT ON {table} FOR EACH ROW EXECUTE FUNCTION test_drop_connection();
"""


@pytest.fixture
def connection_dropped_on_insert(transactional_db):
    """PostgreSQL kills the connection of whoever inserts a checkpoint (a trigger terminating its own backend)
    until `heal()`; healed after the test in any case."""
    from django.db import connection

    table = Checkpoint._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(DROP_ON_INSERT.format(table=table))

    def heal() -> None:
        connection.close()  # it may be the killed one
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TRIGGER IF EXISTS test_drop_connection ON {table}")
            cursor.execute("DROP FUNCTION IF EXISTS test_drop_connection()")

    yield heal
    heal()


def assert_retry_later(response) -> None:
    assert response.status_code == 503, response.content
    assert response["Content-Type"].startswith("application/json")
    assert int(response["Retry-After"]) > 0
    assert "database is unavailable" in response.json()["detail"]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_connection_dropped_mid_write_answers_503_json_and_the_retry_stores_it_once(
    api, connection_dropped_on_insert
):
    start_session(api)
    body = {"state": {"n": 1}, "idempotency_key": "step-1"}
    assert_retry_later(api.post("/sessions/run-1/checkpoints", body))
    assert_retry_later(api.post("/langgraph/checkpoints", put_body("thread-1", 0)))
    connection_dropped_on_insert()
    assert Checkpoint.objects.count() == 0  # the dropped transaction stored nothing
    assert api.post("/sessions/run-1/checkpoints", body).status_code == 201
    assert api.post("/sessions/run-1/checkpoints", body).status_code == 200  # a second retry: the original
    assert Checkpoint.objects.count() == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_an_unreachable_database_answers_api_reads_and_writes_503_json(api, database_unreachable):
    start_session(api)
    with database_unreachable():
        write = api.post("/sessions/run-1/checkpoints", {"state": {"n": 1}})
        read = api.get("/sessions/run-1")
    assert_retry_later(write)
    assert_retry_later(read)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.urls("tests.fault_urls")
def test_a_database_error_escaping_the_api_handlers_is_still_503_json():
    from django.db import connection
    from django.test import Client

    response = Client(raise_request_exception=False).get("/api/v1/test-only/dropped-connection")
    connection.close()  # the test client leaves the killed connection open (a server closes it after the request)
    assert_retry_later(response)
