"""The console's purge (docs/purges.md): only a user holding `purge_secrets` (in no role) reaches it; from a finding
on the Secrets page or a pasted value, a preview that changes nothing, then a confirmation with a reason that purges
and leads to the progress page; another project's purge is 404; the value is never rendered back but in its own
(password) field."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from checkpoints import store
from checkpoints.models import AuditEvent, Checkpoint, Purge, SecretFinding
from checkpoints.services import CheckpointInput, ingest_checkpoints

pytestmark = pytest.mark.django_db

KEY = "ghp_" + "Zq9Xw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe9Dc8"


@pytest.fixture
def purger(alice, project, grant):
    grant(alice, project, "operator")
    alice.is_staff = True  # a permission in no role is given to staff in the admin, as reveal_secrets is
    alice.save(update_fields=["is_staff"])
    alice.user_permissions.add(Permission.objects.get(codename="purge_secrets"))
    client = Client()
    client.force_login(alice)
    return client


@pytest.fixture
def leaked(make_session):
    session = make_session()
    for step in range(1, 5):
        messages = [f"step {n}" if n != 2 else f"token {KEY}" for n in range(1, step + 1)]
        ingest_checkpoints([(session, [CheckpointInput(state={"messages": messages})])])
    return session


def test_an_operator_without_the_permission_gets_403_and_sees_no_purge_link(alice, project, grant, leaked):
    grant(alice, project, "operator")
    client = Client()
    client.force_login(alice)
    assert client.get(reverse("dashboard:purge_new", args=[project.slug])).status_code == 403
    page = client.get(reverse("dashboard:secrets", args=[project.slug])).content.decode()
    assert "Purge…" not in page


def test_signed_out_visitors_are_sent_to_sign_in(client, project):
    assert client.get(reverse("dashboard:purge_new", args=[project.slug])).status_code == 302


def test_a_finding_is_previewed_then_purged_with_a_reason(purger, project, leaked, django_capture_on_commit_callbacks):
    finding = SecretFinding.objects.get()
    secrets_page = purger.get(reverse("dashboard:secrets", args=[project.slug])).content.decode()
    assert f"?finding={finding.pk}" in secrets_page
    url = reverse("dashboard:purge_new", args=[project.slug])
    form = purger.get(url, {"finding": finding.pk})
    assert form.status_code == 200 and KEY not in form.content.decode()

    preview = purger.post(url, {"finding": finding.pk, "preview": "1"})
    html = preview.content.decode()
    assert preview.status_code == 200 and "3 checkpoints in 1 session hold it" in html and KEY not in html
    assert Purge.objects.get().dry_run and all(
        KEY in str(store.load_state(bytes(r.root))) for r in leaked_rows(leaked)[1:]
    )

    refused = purger.post(url, {"finding": finding.pk, "confirm": "1"})
    assert refused.status_code == 200 and "say why" in refused.content.decode()
    with django_capture_on_commit_callbacks(execute=True):
        done = purger.post(url, {"finding": finding.pk, "confirm": "1", "reason": "rotated"})
    purge = Purge.objects.get(dry_run=False)
    assert done.status_code == 302 and done["Location"] == reverse(
        "dashboard:purge_detail", args=[project.slug, purge.pk]
    )
    assert all(KEY not in str(store.load_state(bytes(r.root))) for r in leaked_rows(leaked))
    progress = purger.get(done["Location"]).content.decode()
    assert "Finished" in progress and "3 checkpoints in 1 session of this project" in progress
    fragment = purger.get(done["Location"], headers={"HX-Request": "true"}).content.decode()
    assert fragment.lstrip().startswith('<section id="purge-progress"')
    assert AuditEvent.objects.filter(action="purge_done", reason="rotated").exists()


def test_a_pasted_value_too_short_is_a_form_error_that_records_nothing(purger, project, leaked):
    answer = purger.post(reverse("dashboard:purge_new", args=[project.slug]), {"value": "short", "preview": "1"})
    assert answer.status_code == 200 and "8 to 10000 characters" in answer.content.decode()
    assert not Purge.objects.exists()


def test_another_projects_purge_and_finding_are_404(purger, other_project, make_session):
    theirs = make_session("theirs", in_project=other_project)
    ingest_checkpoints([(theirs, [CheckpointInput(state={"out": KEY})])])
    purge = Purge.objects.create(project=other_project, detector="value", fingerprint="0" * 64, length=9, reason="x")
    assert purger.get(reverse("dashboard:purge_detail", args=[other_project.slug, purge.pk])).status_code == 404
    finding = SecretFinding.objects.get()
    ours = reverse("dashboard:purge_new", args=["acme"])
    assert purger.get(ours, {"finding": finding.pk}).status_code == 404
    assert purger.get(ours, {"finding": "²"}).status_code == 404


def test_the_wrong_method_is_405(purger, project):
    assert purger.delete(reverse("dashboard:purge_new", args=[project.slug])).status_code == 405
    assert purger.post(reverse("dashboard:purge_detail", args=[project.slug, 1])).status_code == 405


def leaked_rows(session):
    return list(Checkpoint.objects.filter(session=session).order_by("seq"))
