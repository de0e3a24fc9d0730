from __future__ import annotations


def test_the_console_requires_sign_in(client, db):
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_signed_in_users_see_sessions(client, django_user_model, make_session, make_checkpoint):
    make_checkpoint(make_session("nightly-refactor"), {"n": 1})
    client.force_login(django_user_model.objects.create_user("viewer", password="pw-123456"))
    response = client.get("/")
    assert response.status_code == 200
    assert b"nightly-refactor" in response.content


def test_an_empty_console_says_what_to_do(client, django_user_model, db):
    client.force_login(django_user_model.objects.create_user("viewer", password="pw-123456"))
    assert b"seed_demo" in client.get("/").content
