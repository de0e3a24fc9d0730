"""`POST /api/v1/purges` and `GET /api/v1/purges/{id}` (docs/purges.md): the `purge` scope alone reaches them and
reaches nothing else; a token sees its own project's purges and counts, never another project's — even when the
purge rewrote that project's shared content; bad input is a 4xx that records nothing."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from checkpoints import store
from checkpoints.models import Checkpoint, Purge, SecretFinding
from checkpoints.services import CheckpointInput, create_api_token, ingest_checkpoints

pytestmark = pytest.mark.django_db

KEY = "ghp_" + "Zq9Xw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe9Dc8"


@pytest.fixture
def purge_api(project, api_as):
    return api_as(create_api_token(project, name="janitor", scopes=["purge"])[1])


@pytest.fixture
def post(django_capture_on_commit_callbacks):
    """POST /purges; the job queued once the request commits runs then, as a worker would."""

    def send(client, body):
        with django_capture_on_commit_callbacks(execute=True):
            return client.post("/purges", body)

    return send


def leak(session, steps: int = 4) -> None:
    for step in range(1, steps + 1):
        messages = [f"step {n}" if n != 2 else f"token {KEY}" for n in range(1, step + 1)]
        ingest_checkpoints([(session, [CheckpointInput(state={"messages": messages})])])


def test_a_purge_token_purges_and_follows_its_purge(project, make_session, purge_api, post):
    session = make_session()
    leak(session)
    answer = post(purge_api, {"value": KEY, "reason": "leaked"})
    assert answer.status_code == 202, answer.content
    got = purge_api.get(f"/purges/{answer.json()['id']}").json()
    assert got["state"] == "finished" and got["checkpoints"] == 3 and got["sessions"] == 1
    assert got["placeholder"].startswith("[purged github_token ")
    assert KEY not in answer.content.decode() + str(got)
    assert all(KEY not in str(store.load_state(bytes(r.root))) for r in Checkpoint.objects.filter(session=session))


def test_a_finding_is_purged_by_its_id_and_a_dry_run_changes_nothing(make_session, purge_api, post):
    session = make_session()
    leak(session)
    finding = SecretFinding.objects.get()
    dry = post(purge_api, {"finding": finding.pk, "dry_run": True}).json()
    got = purge_api.get(f"/purges/{dry['id']}").json()
    assert got["dry_run"] and got["preview"] == [{"session": "run-1", "seqs": [2, 3, 4], "count": 3}]
    assert SecretFinding.objects.open().count() == 1
    assert post(purge_api, {"finding": finding.pk, "reason": "rotated"}).status_code == 202
    assert not SecretFinding.objects.open().exists()


def test_counts_in_another_project_sharing_the_content_are_never_answered(
    project, other_project, make_session, purge_api, post
):
    leak(make_session())
    leak(make_session("theirs", in_project=other_project))  # the same states: shared chunks
    purge_id = post(purge_api, {"value": KEY, "reason": "leaked"}).json()["id"]
    got = purge_api.get(f"/purges/{purge_id}").json()
    assert got["checkpoints"] == 3 and got["sessions"] == 1
    assert "theirs" not in str(got) and "globex" not in str(got)
    assert "other_checkpoints" not in got and Purge.objects.get().other_checkpoints == 3


@pytest.mark.parametrize("scopes", [["read"], ["write"], ["read", "write", "recover"]])
def test_tokens_without_the_purge_scope_get_403(project, api_as, scopes, post):
    other = api_as(create_api_token(project, name="agent", scopes=scopes)[1])
    assert post(other, {"value": KEY, "reason": "x"}).status_code == 403
    assert other.get("/purges/1").status_code == 403
    assert not Purge.objects.exists()


def test_the_purge_scope_reaches_nothing_else(make_session, purge_api):
    make_session()
    assert purge_api.get("/sessions/run-1").status_code == 403
    assert purge_api.post("/sessions", {"external_id": "x", "agent": "a"}).status_code == 403


def test_another_projects_purge_and_finding_are_404(other_project, make_session, purge_api, api_as, post):
    leak(make_session("theirs", in_project=other_project))
    theirs = api_as(create_api_token(other_project, name="janitor", scopes=["purge"])[1])
    purge_id = post(theirs, {"value": KEY, "reason": "x", "dry_run": True}).json()["id"]
    assert purge_api.get(f"/purges/{purge_id}").status_code == 404
    finding = SecretFinding.objects.get()
    assert post(purge_api, {"finding": finding.pk, "reason": "x"}).status_code == 404


@pytest.mark.parametrize(
    "body",
    [
        {"value": "short", "reason": "x"},
        {"reason": "x"},
        {"value": KEY, "finding": 1, "reason": "x"},
        {"value": KEY},
        {"value": KEY, "reason": "x", "sessions": ["nobody"]},
        {"value": KEY, "reason": "x", "extra": 1},
        {"value": KEY, "reason": "x" * 501},
    ],
)
def test_bad_input_is_a_4xx_that_records_nothing(make_session, purge_api, body, post):
    leak(make_session())
    answer = post(purge_api, body)
    assert 400 <= answer.status_code < 500 and answer.status_code != 403
    assert not Purge.objects.exists()


def test_create_api_token_makes_a_purge_token(project, capsys):
    call_command("create_api_token", "--project", project.slug, "--name", "janitor", "--scope", "purge")
    assert project.tokens.get(name="janitor").scopes == ["purge"]
