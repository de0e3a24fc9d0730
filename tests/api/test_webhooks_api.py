from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from checkpoints import tasks
from checkpoints.models import AuditEvent, Delivery, WebhookEndpoint
from checkpoints.services import create_api_token
from tests.kits.webhook_kit import verify


def subscribe(api, url, events=("checkpoint.created",), **fields):
    return api.post("/webhooks", {"url": url, "events": list(events), **fields})


def test_a_checkpoint_created_through_the_api_reaches_the_receiver_signed_with_the_returned_secret(
    api, receiver, django_capture_on_commit_callbacks
):
    response = subscribe(api, receiver.url, description="CI bot")
    assert response.status_code == 201, response.content
    created = response.json()
    assert created["secret"].startswith("whsec_")
    assert created["events"] == ["checkpoint.created"]
    api.post("/sessions", {"external_id": "run-1", "agent": "agent-7", "title": "Refactor"})

    with django_capture_on_commit_callbacks(execute=True):
        checkpoint = api.post("/sessions/run-1/checkpoints", {"name": "task_started", "state": {"n": 1}}).json()

    [got] = receiver.received
    assert got.headers["X-Checkpoint-Event"] == "checkpoint.created"
    assert verify(created["secret"], got.headers["X-Checkpoint-Signature"], got.body)
    data = got.json["data"]
    assert data["session"] == {
        "id": "run-1",
        "project": "acme",
        "agent": "agent-7",
        "title": "Refactor",
        "status": "active",
        "url": data["session"]["url"],
    }
    assert data["checkpoint"]["id"] == checkpoint["id"]
    assert (data["checkpoint"]["seq"], data["checkpoint"]["name"]) == (1, "task_started")
    assert data["checkpoint"]["url"] == f"http://127.0.0.1:8000/checkpoints/{checkpoint['id']}/"


def test_listing_webhooks_shows_no_secret(api, receiver):
    subscribe(api, receiver.url)
    [listed] = api.get("/webhooks").json()
    assert listed["url"] == receiver.url
    assert "secret" not in listed


def test_a_rotated_secret_signs_from_then_on_and_is_shown_once(api, receiver, django_capture_on_commit_callbacks):
    created = subscribe(api, receiver.url, events=["checkpoint.created"]).json()
    rotated = api.post(f"/webhooks/{created['id']}/rotate-secret")
    assert rotated.status_code == 200
    secret = rotated.json()["secret"]
    assert secret != created["secret"]
    api.post("/sessions", {"external_id": "run-1", "agent": "agent-7"})
    with django_capture_on_commit_callbacks(execute=True):
        api.post("/sessions/run-1/checkpoints", {"state": {}})
    [got] = receiver.received
    assert verify(secret, got.headers["X-Checkpoint-Signature"], got.body)
    assert not verify(created["secret"], got.headers["X-Checkpoint-Signature"], got.body)
    assert "secret" not in api.get("/webhooks").json()[0]


def test_a_deleted_webhook_gets_nothing_more_and_keeps_its_delivery_log(
    api, receiver, django_capture_on_commit_callbacks
):
    created = subscribe(api, receiver.url).json()
    api.post("/sessions", {"external_id": "run-1", "agent": "agent-7"})
    with django_capture_on_commit_callbacks(execute=True):
        api.post("/sessions/run-1/checkpoints", {"state": {}})

    assert api.delete(f"/webhooks/{created['id']}").status_code == 204
    with django_capture_on_commit_callbacks(execute=True):
        api.post("/sessions/run-1/checkpoints", {"state": {"n": 2}})

    assert len(receiver.received) == 1
    assert api.get("/webhooks").json() == []
    [logged] = api.get(f"/webhooks/{created['id']}/deliveries").json()
    assert (logged["status"], logged["attempts"], logged["response_code"]) == ("succeeded", 1, 200)
    assert api.delete(f"/webhooks/{created['id']}").status_code == 404


def test_the_delivery_log_shows_each_failed_attempt_and_the_retry(api, receiver, django_capture_on_commit_callbacks):
    receiver.status = 503
    created = subscribe(api, receiver.url).json()
    api.post("/sessions", {"external_id": "run-1", "agent": "agent-7"})
    with django_capture_on_commit_callbacks(execute=True):
        api.post("/sessions/run-1/checkpoints", {"state": {}})
    [logged] = api.get(f"/webhooks/{created['id']}/deliveries").json()
    assert (logged["status"], logged["attempts"], logged["response_code"]) == ("pending", 1, 503)
    assert logged["last_error"] == "The receiver answered HTTP 503."

    receiver.status = 200
    later = timezone.now() + timedelta(minutes=2)
    with time_machine.travel(later, tick=False), django_capture_on_commit_callbacks(execute=True):
        tasks.send_due_deliveries()
    [logged] = api.get(f"/webhooks/{created['id']}/deliveries").json()
    assert (logged["status"], logged["attempts"], logged["response_code"]) == ("succeeded", 2, 200)
    assert len({got.headers["X-Checkpoint-Delivery"] for got in receiver.received}) == 1


def test_creating_deleting_and_rotating_are_audited(api, receiver):
    created = subscribe(api, receiver.url).json()
    api.post(f"/webhooks/{created['id']}/rotate-secret")
    api.delete(f"/webhooks/{created['id']}")
    audited = list(AuditEvent.objects.order_by("pk").values_list("action", "actor", "target"))
    assert audited[-3:] == [
        ("create_webhook", "token:agent", receiver.url),
        ("rotate_webhook_secret", "token:agent", receiver.url),
        ("delete_webhook", "token:agent", receiver.url),
    ]


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"url": "ftp://example.com/x", "events": ["checkpoint.created"]}, "url", "http:// or https://"),
        ({"url": "http://127.0.0.1:9/x", "events": ["checkpoint.created"]}, "url", "WEBHOOK_ALLOW_PRIVATE"),
        ({"url": "http://10.0.0.8/x", "events": ["checkpoint.created"]}, "url", "private"),
        ({"url": "http://[::127.0.0.1]:9/x", "events": ["checkpoint.created"]}, "url", "that is 127.0.0.1"),
        ({"url": "http://[64:ff9b::a9fe:a9fe]/x", "events": ["checkpoint.created"]}, "url", "that is 169.254.169.254"),
        ({"url": "http://[2002:7f00:1::1]/x", "events": ["checkpoint.created"]}, "url", "that is 127.0.0.1"),
        ({"url": "https://example.com/x", "events": ["checkpoint.exploded"]}, "events", "checkpoint.created"),
        ({"url": "https://example.com/x", "events": []}, "events", "at least 1"),
    ],
)
def test_bad_subscriptions_get_422_naming_the_field_and_write_nothing(api, settings, body, field, message):
    settings.WEBHOOK_ALLOW_PRIVATE = False
    response = api.post("/webhooks", body)
    assert response.status_code == 422, response.content
    [error] = response.json()["detail"]
    assert error["loc"][-1] == field or field in error["loc"]
    assert message in error["msg"]
    assert not WebhookEndpoint.objects.exists()
    assert not AuditEvent.objects.filter(action="create_webhook").exists()


def test_a_read_only_token_lists_but_cannot_subscribe_or_delete(api, read_only_api, receiver):
    created = subscribe(api, receiver.url).json()
    assert read_only_api.get("/webhooks").status_code == 200
    assert subscribe(read_only_api, receiver.url).status_code == 403
    assert read_only_api.delete(f"/webhooks/{created['id']}").status_code == 403
    assert read_only_api.post(f"/webhooks/{created['id']}/rotate-secret").status_code == 403


def test_another_projects_token_sees_none_of_its_webhooks(api, api_as, other_project, receiver):
    created = subscribe(api, receiver.url).json()
    stranger = api_as(create_api_token(other_project, name="other")[1])
    assert stranger.get("/webhooks").json() == []
    assert stranger.get(f"/webhooks/{created['id']}/deliveries").status_code == 404
    assert stranger.delete(f"/webhooks/{created['id']}").status_code == 404
    assert not Delivery.objects.exists()
