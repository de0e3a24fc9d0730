"""A project's Secrets page: findings by detector with where each value came in, first and last seen and its
sessions; never the value, never another project's findings; its operators edit the project's own patterns."""

from __future__ import annotations

import pytest
from django.urls import reverse

from checkpoints.models import AuditEvent, Project, SecretFinding
from tests.helpers import select, text

pytestmark = pytest.mark.django_db
PAGE = "/projects/acme/secrets/"
GITHUB = "ghp_" + "Zq9Xw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe9Dc8"
GOOGLE = "AIzaSyD4-fake9Kq2Lm7Np3Rs8Tu1Vw6Xy0Zab1"


@pytest.fixture
def found(make_session, make_checkpoint):
    """A GitHub token added at step 2 of run-1 and again in run-2, a Google key in run-2."""
    one, two = make_session("run-1"), make_session("run-2")
    make_checkpoint(one, {"out": "ls"})
    introducing = make_checkpoint(one, {"out": "ls", "env": f"GH_TOKEN={GITHUB}"})
    make_checkpoint(two, {"out": f"{GITHUB} and {GOOGLE}"})
    return introducing


def test_the_page_lists_findings_by_detector_with_where_they_came_in(client, bob, found):
    assert reverse("dashboard:secrets", args=["acme"]) == PAGE
    client.force_login(bob)  # a viewer
    response = client.get(PAGE)
    assert response.status_code == 200
    groups = [text(h) for h in select(response, "#findings section h3")]
    assert groups == ["GitHub Token 1 value", "Google API Key 1 value"]
    [github_row] = select(response, "#findings section:first-of-type tbody tr")
    introduced = text(github_row.cssselect("td[data-label=Introduced]")[0])
    assert introduced == "run-1 · checkpoint #2 state.env"
    links = [a.get("href") for a in github_row.cssselect("a")]
    assert reverse("dashboard:checkpoint_detail", args=[found.pk]) in links
    assert text(github_row.cssselect("td[data-label=Sessions]")[0]) == "2: run-1, run-2"
    assert SecretFinding.objects.count() == 3


def test_the_page_never_shows_a_value(client, alice, found):
    client.force_login(alice)
    page = client.get(PAGE).content.decode()
    for value in (GITHUB, GOOGLE, GITHUB[4:20], GOOGLE[4:20]):
        assert value not in page


def test_another_projects_findings_are_invisible(client, alice, found, other_project, make_session, make_checkpoint):
    theirs = make_session("their-run", in_project=other_project)
    make_checkpoint(theirs, {"out": "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"})
    client.force_login(alice)  # operator in acme only
    page = client.get(PAGE).content.decode()
    assert "their-run" not in page and "Stripe" not in page
    assert client.get(f"/projects/{other_project.slug}/secrets/").status_code == 404


def test_a_viewer_sees_no_pattern_form_and_cannot_post_one(client, bob, project):
    client.force_login(bob)
    assert not select(client.get(PAGE), "#secret-patterns-form")
    response = client.post(PAGE, {"patterns": "mine: MINE-[0-9]+"})
    assert response.status_code == 403
    project.refresh_from_db()
    assert project.secret_patterns == []


def test_an_operator_saves_patterns_and_the_next_checkpoint_is_scanned_with_them(
    client, alice, project, make_session, make_checkpoint
):
    client.force_login(alice)
    response = client.post(PAGE, {"patterns": "ticket: TCK-[0-9]{5}"})
    assert response.status_code == 302
    assert Project.objects.get(pk=project.pk).secret_patterns == [["ticket", "TCK-[0-9]{5}"]]
    assert AuditEvent.objects.filter(action="set_secret_patterns", actor=alice).exists()
    make_checkpoint(make_session(), {"note": "see TCK-12345"})
    page = client.get(PAGE)
    assert [text(h) for h in select(page, "#findings section h3")] == ["Project pattern ticket 1 value"]
    assert "TCK-12345" not in page.content.decode()


def test_a_pattern_re2_cannot_run_is_refused_on_the_form_and_nothing_changes(client, alice, project):
    client.force_login(alice)
    response = client.post(PAGE, {"patterns": "ok: fine\nslow: (a+)+\\1"})
    assert response.status_code == 200
    assert "line 2: RE2 cannot compile it" in text(select(response, "#secret-patterns-form .errorlist")[0])
    project.refresh_from_db()
    assert project.secret_patterns == []
    assert not AuditEvent.objects.filter(action="set_secret_patterns").exists()


def test_no_findings_says_so(client, bob, project):
    client.force_login(bob)
    assert "No secrets found." in text(select(client.get(PAGE), "#findings")[0])
