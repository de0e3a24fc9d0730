"""Request bodies over their route's limit are refused with 413 before anything reads them."""

from __future__ import annotations

import socket
import time
from urllib.parse import urlsplit

import orjson
import pytest
from axes.models import AccessAttempt
from django.conf import settings as django_settings
from django.contrib.auth import SESSION_KEY
from django.test import Client
from django.urls import reverse

from checkpoints.models import Checkpoint, ImportJob
from tests.dashboard.test_imports import ARES, upload, zip_folder
from tests.helpers import select, text

LOGIN = reverse("login")
UPLOAD = reverse("dashboard:import_upload")
MiB = 1024 * 1024


def declared(client: Client, path: str, size: int, body: bytes = b"username=x&password=y", **extra):
    """A request announcing `size` bytes but carrying only `body`: the test client's payload raises if a
    reader asks for more than it holds, so a response proves nobody tried to read the announced body."""
    return client.post(path, body, content_type="application/x-www-form-urlencoded", CONTENT_LENGTH=str(size), **extra)


def test_the_form_limit_defaults_to_two_and_a_half_megabytes():
    assert django_settings.DATA_UPLOAD_MAX_MEMORY_SIZE == 2_621_440
    assert django_settings.FILE_UPLOAD_MAX_MEMORY_SIZE == 2_621_440
    assert django_settings.DATA_UPLOAD_MAX_NUMBER_FIELDS == 1000


@pytest.mark.django_db
def test_a_huge_body_to_the_login_page_is_refused_unread_with_413(client):
    response = declared(client, LOGIN, 200 * MiB)
    assert response.status_code == 413
    assert "The request body (209,715,200 bytes) is larger than this address accepts (2,621,440 bytes)." in (
        response.content.decode()
    )
    assert not AccessAttempt.objects.exists()


@pytest.mark.django_db
def test_a_body_one_byte_over_the_form_limit_is_refused(client, settings):
    body = b"username=x&password=y&pad=" + b"a" * settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    body = body[: settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1]
    response = client.post(LOGIN, body, content_type="application/x-www-form-urlencoded")
    assert response.status_code == 413
    assert not AccessAttempt.objects.exists()


@pytest.mark.django_db
def test_a_multipart_file_to_a_form_that_takes_none_is_refused_before_it_is_spooled(client):
    body = b'--b\r\nContent-Disposition: form-data; name="f"; filename="big.bin"\r\n\r\nxx\r\n--b--\r\n'
    response = client.post(LOGIN, body, content_type="multipart/form-data; boundary=b", CONTENT_LENGTH=str(200 * MiB))
    assert response.status_code == 413


def test_a_form_under_the_limit_still_signs_in(client, bob, settings):
    padding = "a" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE - 1000)
    response = client.post(LOGIN, {"username": "bob", "password": "bob-password-1", "note": padding})
    assert response.status_code == 302
    assert SESSION_KEY in client.session


@pytest.mark.django_db
def test_an_anonymous_upload_to_the_import_page_gets_the_form_limit(client):
    response = declared(client, UPLOAD, 3 * MiB)
    assert response.status_code == 413
    assert not ImportJob.objects.exists()


def test_a_signed_in_operator_uploads_an_archive_larger_than_the_form_limit(client, alice, settings, tmp_path):
    settings.VAR_DIR = tmp_path / "var"
    settings.VAR_DIR.mkdir()
    archive = zip_folder(ARES, tmp_path / "runs.zip")
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = archive.stat().st_size // 2  # the archive alone is over it
    assert upload(Client(), archive).status_code == 413  # anonymous: the form limit
    client.force_login(alice)
    response = upload(client, archive)
    assert response.status_code == 302
    assert ImportJob.objects.count() == 1


def test_an_upload_over_the_import_limit_is_refused_unread(client, alice, settings):
    client.force_login(alice)
    response = declared(client, UPLOAD, settings.IMPORT_UPLOAD_MAX_BYTES + settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1)
    assert response.status_code == 413
    assert not ImportJob.objects.exists()


def test_the_api_refuses_bodies_over_its_own_limit_with_json(client, token_secret, settings):
    response = declared(
        client,
        "/api/v1/sessions",
        settings.CHECKPOINT_MAX_BODY_BYTES + 1,
        body=b"{}",
        HTTP_AUTHORIZATION=f"Bearer {token_secret}",
    )
    assert response.status_code == 413
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"detail": "request body is larger than 16777216 bytes"}


def test_the_api_takes_a_body_between_the_form_limit_and_its_own(api, make_session, settings):
    make_session("big")
    state = {"blob": "x" * (3 * MiB)}
    body = orjson.dumps({"name": "big", "kind": "step", "state": state})
    assert settings.DATA_UPLOAD_MAX_MEMORY_SIZE < len(body) < settings.CHECKPOINT_MAX_BODY_BYTES
    response = api.post("/sessions/big/checkpoints", raw=body)
    assert response.status_code == 201, response.content[:300]
    assert Checkpoint.objects.filter(name="big").exists()


@pytest.mark.django_db(transaction=True)
def test_a_live_server_answers_413_without_waiting_for_the_announced_body(live_server):
    """Over a real socket: 200 MiB announced, 1 KiB sent, and the answer comes at once."""
    url = urlsplit(live_server.url)
    head = (
        f"POST {LOGIN} HTTP/1.1\r\nHost: {url.netloc}\r\nContent-Type: multipart/form-data; boundary=b\r\n"
        f"Content-Length: {200 * MiB}\r\nConnection: close\r\n\r\n"
    )
    started = time.monotonic()
    with socket.create_connection((url.hostname, url.port), timeout=10) as conn:
        conn.sendall(head.encode() + b"--b\r\n" + b"x" * 1024)
        status_line = conn.makefile("rb").readline()
    assert status_line.split()[1] == b"413"
    assert time.monotonic() - started < 5


def test_the_413_page_is_the_consoles(client):
    html = declared(client, LOGIN, 3 * MiB).content.decode()
    assert [text(heading) for heading in select(html, "h1")] == ["Too large"]
    assert select(html, 'link[href="/static/console/console.css"]')
