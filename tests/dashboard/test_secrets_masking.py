"""Found secrets are masked on a checkpoint's page — its state tree, its transcript, a subtree fragment and the JSON
download — for everyone, those holding `reveal_secrets` too (they reveal one value at a time, with a reason),
wherever the value appears in the project; the agent's API keeps the real state."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from checkpoints.models import SecretFinding
from checkpoints.services import Actor, fork_session
from checkpoints.store import secrets as scanner

pytestmark = pytest.mark.django_db
GITHUB = "ghp_" + "Zq9Xw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe9Dc8"


@pytest.fixture
def leaked(make_session, make_checkpoint):
    session = make_session()
    make_checkpoint(session, {"messages": [{"role": "user", "content": "show me the env"}]})
    return make_checkpoint(
        session,
        {
            "messages": [
                {"role": "user", "content": "show me the env"},
                {"role": "tool", "content": f"HOME=/root\nGH_TOKEN={GITHUB}\nSHELL=/bin/bash"},
            ]
        },
    )


def pages(client, checkpoint) -> dict[str, str]:
    detail = reverse("dashboard:checkpoint_detail", args=[checkpoint.pk])
    subtree = reverse("dashboard:checkpoint_subtree", args=[checkpoint.pk])
    download = reverse("dashboard:checkpoint_download", args=[checkpoint.pk])
    return {
        "page": client.get(detail).content.decode(),
        "subtree": client.get(subtree, {"path": '["messages",1,"content"]'}).content.decode(),
        "download": client.get(download).content.decode(),
    }


@pytest.mark.parametrize("member", ["alice", "bob"])  # an operator and a viewer
def test_members_see_the_value_masked_everywhere_on_the_checkpoint(client, request, leaked, member):
    assert SecretFinding.objects.count() == 1
    client.force_login(request.getfixturevalue(member))
    for name, body in pages(client, leaked).items():
        assert GITHUB not in body and GITHUB[4:24] not in body, name
        assert "[masked github_token …9Dc8]" in body, name
    assert "SHELL=/bin/bash" in pages(client, leaked)["download"]  # the rest of the text stays


def test_a_fork_holding_the_value_is_masked_too(client, alice, leaked):
    fork = fork_session(leaked, actor=Actor.for_user(alice), title="copy")
    client.force_login(alice)
    fork.refresh_from_db()
    body = client.get(reverse("dashboard:checkpoint_detail", args=[fork.head_id])).content.decode()
    assert "[masked github_token …9Dc8]" in body
    assert GITHUB not in body


def test_staff_given_reveal_secrets_in_the_admin_see_it_masked_until_they_reveal_it(client, alice, leaked):
    alice.is_staff = True  # a permission given to a person applies to every project only for staff
    alice.save(update_fields=["is_staff"])
    alice.user_permissions.add(Permission.objects.get(codename="reveal_secrets"))
    client.force_login(alice)
    for body in pages(client, leaked).values():
        assert GITHUB not in body and "[masked github_token …9Dc8]" in body


def test_a_value_nobody_found_is_shown_as_it_is(client, alice, make_session, make_checkpoint, settings):
    settings.SECRETS_SCAN = False  # stored unscanned: no finding, nothing to match
    checkpoint = make_checkpoint(make_session("unscanned"), {"out": GITHUB})
    client.force_login(alice)
    assert GITHUB in pages(client, checkpoint)["download"]


def test_the_agents_api_keeps_the_real_state(api, leaked):
    response = api.get(f"/checkpoints/{leaked.pk}")
    assert response.status_code == 200 and GITHUB in response.content.decode()


def test_masking_shares_what_it_does_not_change():
    fingerprints = {scanner.fingerprint(GITHUB): "github_token"}
    clean = {"a": ["one", "two"], "b": {"c": "three"}}
    state = {**clean, "leak": f"key {GITHUB}"}
    masked = scanner.mask_state(state, fingerprints)
    assert masked["leak"] == "key [masked github_token …9Dc8]"
    assert masked["a"] is state["a"] and masked["b"] is state["b"]
    assert state["leak"] == f"key {GITHUB}"  # the store's shared copy is not changed
    assert scanner.mask_state(clean, fingerprints) is clean
