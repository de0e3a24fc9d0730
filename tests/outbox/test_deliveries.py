from __future__ import annotations

import socket
from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from checkpoints import tasks
from checkpoints.audit import Actor
from checkpoints.models import Delivery, DeliveryStatus, Event, EventType
from checkpoints.outbox import deliveries, events
from checkpoints.outbox.channels.webhook import body_of, signature_header
from checkpoints.outbox.safe_http import UnsafeTarget, check_target
from checkpoints.outbox.webhooks import create_webhook, delete_webhook
from tests.kits.webhook_kit import verify

ALICE = Actor.system("alice")


@pytest.fixture
def endpoint(project, receiver):
    return create_webhook(project, url=receiver.url, events=[EventType.PING, "session.restored"], actor=ALICE)


def ping(project, django_capture_on_commit_callbacks, message="hello"):
    with django_capture_on_commit_callbacks(execute=True):
        return events.publish(EventType.PING, project=project, data={"message": message})


def ping_delivery(project, django_capture_on_commit_callbacks):
    event = ping(project, django_capture_on_commit_callbacks)
    return Delivery.objects.get(event=event)


def test_a_subscribed_endpoint_receives_the_event_signed_with_its_secret(
    project, endpoint, receiver, django_capture_on_commit_callbacks
):
    event = ping(project, django_capture_on_commit_callbacks)

    [got] = receiver.received
    delivery = Delivery.objects.get()
    assert got.json == {
        "id": str(event.id),
        "type": "ping",
        "created_at": got.json["created_at"],
        "data": {"message": "hello"},
    }
    assert got.headers["Content-Type"] == "application/json"
    assert got.headers["X-Checkpoint-Event"] == "ping"
    assert got.headers["X-Checkpoint-Delivery"] == str(delivery.pk)
    assert verify(endpoint.secret, got.headers["X-Checkpoint-Signature"], got.body)
    assert not verify("whsec_other", got.headers["X-Checkpoint-Signature"], got.body)
    assert (delivery.status, delivery.attempts, delivery.response_code) == (DeliveryStatus.SUCCEEDED, 1, 200)


def test_nothing_is_written_when_no_endpoint_wants_the_event(project, endpoint, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        assert events.publish(EventType.ALERT_OPENED, project=project, data={}) is None
    assert not Event.objects.exists()
    assert not Delivery.objects.exists()


def test_a_deleted_endpoint_receives_nothing_more(project, endpoint, receiver, django_capture_on_commit_callbacks):
    delete_webhook(endpoint, actor=ALICE)
    assert ping(project, django_capture_on_commit_callbacks) is None
    assert receiver.received == []


def test_the_body_is_the_same_bytes_on_every_attempt_and_the_signature_covers_time_and_body(project, endpoint):
    event = Event.objects.create(project=project, type=EventType.PING, data={"message": "é", "n": [1, 2]})
    assert body_of(event) == body_of(Event.objects.get(pk=event.pk))
    header = signature_header("s3cret", b"{}", 1700000000)
    assert header.startswith("t=1700000000,v1=")
    assert verify("s3cret", header, b"{}")
    assert not verify("s3cret", header.replace("t=1700000000", "t=1700000001"), b"{}")


def test_a_failing_receiver_is_retried_on_a_growing_schedule_until_attempts_are_spent(
    project, endpoint, receiver, settings, django_capture_on_commit_callbacks
):
    receiver.status = 500
    start = timezone.now()
    with time_machine.travel(start, tick=False):
        delivery = ping_delivery(project, django_capture_on_commit_callbacks)
    assert (delivery.status, delivery.attempts, delivery.response_code) == (DeliveryStatus.PENDING, 1, 500)
    assert delivery.last_error == "The receiver answered HTTP 500."

    clock, times = start, [start]
    for _ in range(settings.WEBHOOK_MAX_ATTEMPTS - 1):
        delivery.refresh_from_db()
        assert delivery.next_attempt_at > clock
        not_yet = clock + timedelta(seconds=30)  # the sweep leaves it
        with time_machine.travel(not_yet, tick=False), django_capture_on_commit_callbacks(execute=True):
            tasks.send_due_deliveries()
        clock = delivery.next_attempt_at
        with time_machine.travel(clock, tick=False), django_capture_on_commit_callbacks(execute=True):
            tasks.send_due_deliveries()
        times.append(clock)

    delivery.refresh_from_db()
    assert len(receiver.received) == settings.WEBHOOK_MAX_ATTEMPTS
    assert {got.headers["X-Checkpoint-Delivery"] for got in receiver.received} == {str(delivery.pk)}
    assert (delivery.status, delivery.attempts, delivery.next_attempt_at) == (DeliveryStatus.FAILED, 6, None)
    assert times[5] - times[0] >= timedelta(hours=1)
    assert all(later > earlier for earlier, later in zip(times, times[1:], strict=False))


def test_a_receiver_that_answers_too_late_is_a_failed_attempt_retried_later(
    project, endpoint, receiver, django_capture_on_commit_callbacks
):
    receiver.delay = 1.5  # the test's timeout is 1 s
    delivery = ping_delivery(project, django_capture_on_commit_callbacks)
    assert (delivery.status, delivery.attempts, delivery.response_code) == (DeliveryStatus.PENDING, 1, None)
    assert "timed out" in delivery.last_error

    receiver.delay = 0
    with time_machine.travel(delivery.next_attempt_at, tick=False), django_capture_on_commit_callbacks(execute=True):
        tasks.send_due_deliveries()
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.response_code) == (DeliveryStatus.SUCCEEDED, 2, 200)


def test_an_attempt_is_sent_once_even_when_two_workers_pick_it(
    project, endpoint, receiver, django_capture_on_commit_callbacks
):
    receiver.status = 500
    delivery = ping_delivery(project, django_capture_on_commit_callbacks)
    due = delivery.next_attempt_at
    with time_machine.travel(due, tick=False):
        deliveries.attempt(delivery.pk)
        again = deliveries.attempt(delivery.pk)  # the sweep queued it while the first worker held it
    assert again.attempts == 2
    assert len(receiver.received) == 2


def test_a_test_send_tries_once_and_records_the_failure(project, endpoint, receiver):
    receiver.status = 404
    event = Event.objects.create(project=project, type=EventType.PING, data={"message": "test"})
    delivery = Delivery.objects.create(event=event, endpoint=endpoint, channel="webhook", target=endpoint.url)

    sent = deliveries.send_now(delivery)

    assert (sent.status, sent.attempts, sent.response_code, sent.next_attempt_at) == (
        DeliveryStatus.FAILED,
        1,
        404,
        None,
    )


def test_the_admins_retry_gives_a_failed_delivery_one_more_attempt(
    project, endpoint, receiver, django_capture_on_commit_callbacks
):
    receiver.status = 500
    event = Event.objects.create(project=project, type=EventType.PING, data={"message": "test"})
    delivery = Delivery.objects.create(
        event=event, endpoint=endpoint, channel="webhook", target=endpoint.url, status="failed", attempts=6
    )
    receiver.status = 200
    with django_capture_on_commit_callbacks(execute=True):
        assert deliveries.retry_now([delivery], actor=ALICE) == 1
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.SUCCEEDED, 7)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/hook",
        "http://10.1.2.3/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]:8080/hook",
        "http://192.168.0.10/",
        "http://0.0.0.0/",
        "http://localhost:9000/hook",  # a name that resolves to loopback
    ],
)
def test_the_ssrf_guard_refuses_addresses_inside_the_network(url, settings):
    settings.WEBHOOK_ALLOW_PRIVATE = False
    with pytest.raises(UnsafeTarget, match="WEBHOOK_ALLOW_PRIVATE"):
        check_target(url)


@pytest.mark.parametrize("url", ["ftp://example.com/x", "file:///etc/passwd", "http:///nohost", "example.com"])
def test_the_ssrf_guard_refuses_urls_that_are_not_http(url):
    with pytest.raises(UnsafeTarget, match="http:// or https://"):
        check_target(url)


def test_a_name_resolving_to_a_private_address_is_refused_at_send_time_too(
    project, endpoint, receiver, settings, monkeypatch, django_capture_on_commit_callbacks
):
    settings.WEBHOOK_ALLOW_PRIVATE = False  # the endpoint was saved while allowed; the send checks again
    real = socket.getaddrinfo
    monkeypatch.setattr(socket, "getaddrinfo", lambda host, *a, **k: real("127.0.0.1", *a, **k))
    delivery = ping_delivery(project, django_capture_on_commit_callbacks)
    assert receiver.received == []
    assert delivery.status == DeliveryStatus.PENDING
    assert "resolves to 127.0.0.1" in delivery.last_error


def test_old_deliveries_and_events_are_deleted_after_the_keep_days(
    project, endpoint, settings, django_capture_on_commit_callbacks
):
    ping(project, django_capture_on_commit_callbacks)
    with time_machine.travel(timezone.now() + timedelta(days=settings.DELIVERY_KEEP_DAYS - 1), tick=False):
        assert deliveries.delete_old() == {"deliveries": 0, "events": 0}
    with time_machine.travel(timezone.now() + timedelta(days=settings.DELIVERY_KEEP_DAYS + 1), tick=False):
        assert deliveries.delete_old() == {"deliveries": 1, "events": 1}
    assert not Event.objects.exists()


def test_sends_and_the_sweep_run_on_their_own_deliveries_queue():
    from config.celery import app

    for task in ("checkpoints.tasks.send_delivery", "checkpoints.tasks.send_due_deliveries"):
        assert app.amqp.router.route({}, task)["queue"].name == "deliveries"
