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


def dismiss_url(finding) -> str:
    return reverse("dashboard:secret_dismiss", args=["acme", finding.pk])


def test_an_operator_dismisses_a_value_with_a_reason_and_it_leaves_the_page_audited(client, alice, found):
    github = SecretFinding.objects.get(checkpoint=found)
    client.force_login(alice)
    page = client.get(PAGE)
    [link] = [a for a in select(page, "#findings a") if a.get("href") == dismiss_url(github)]
    assert text(link) == "Dismiss…"
    form = client.get(dismiss_url(github))
    assert form.status_code == 200 and select(form, "#dismiss-form input[name=csrfmiddlewaretoken]")
    assert GITHUB not in form.content.decode()

    response = client.post(dismiss_url(github), {"reason": "a test key from the fixtures"})

    assert response.status_code == 302 and response["Location"] == PAGE
    # the value's findings in both sessions are closed, the Google key's stays open
    closed = SecretFinding.objects.filter(fingerprint=github.fingerprint)
    assert {(f.closed_as, f.close_reason, f.closed_by) for f in closed} == {
        ("dismissed", "a test key from the fixtures", "alice")
    }
    assert SecretFinding.objects.open().get().detector == "google_api_key"
    [event] = AuditEvent.objects.filter(action="dismiss_finding")
    assert (event.actor, event.reason, event.details["findings"]) == ("alice", "a test key from the fixtures", 2)
    assert [text(h) for h in select(client.get(PAGE), "#findings section h3")] == ["Google API Key 1 value"]
    assert client.get(dismiss_url(github)).status_code == 404  # closed: nothing left to dismiss
    # dismissed, not purged: the value is still in the state, and still masked
    checkpoint_page = client.get(reverse("dashboard:checkpoint_detail", args=[found.pk])).content.decode()
    assert GITHUB not in checkpoint_page and GITHUB[-4:] in checkpoint_page


def test_a_viewer_sees_no_dismiss_link_and_is_refused(client, bob, found):
    github = SecretFinding.objects.get(checkpoint=found)
    client.force_login(bob)
    assert not [a for a in select(client.get(PAGE), "#findings a") if "dismiss" in a.get("href")]
    assert client.get(dismiss_url(github)).status_code == 403
    assert client.post(dismiss_url(github), {"reason": "hiding it"}).status_code == 403
    assert not SecretFinding.objects.exclude(closed_at=None).exists()
    assert not AuditEvent.objects.filter(action="dismiss_finding").exists()


@pytest.mark.parametrize(
    "reason, error",
    [
        ("", "This field is required."),
        ("   \t ", "This field is required."),
        ("x" * 501, "Ensure this value has at most 500 characters"),
        ("nul \x00 byte", "Null characters are not allowed."),
    ],
)
def test_a_dismissal_without_a_usable_reason_changes_nothing(client, alice, found, reason, error):
    github = SecretFinding.objects.get(checkpoint=found)
    client.force_login(alice)
    response = client.post(dismiss_url(github), {"reason": reason})
    assert response.status_code == 200 and error in response.content.decode()
    assert not SecretFinding.objects.exclude(closed_at=None).exists()
    assert not AuditEvent.objects.filter(action="dismiss_finding").exists()


def test_a_hostile_reason_is_kept_as_text_and_shown_escaped(client, alice, found):
    github = SecretFinding.objects.get(checkpoint=found)
    client.force_login(alice)
    reason = '<script>alert(1)</script>"><img src=x onerror=alert(2)>'
    assert client.post(dismiss_url(github), {"reason": reason}).status_code == 302
    assert SecretFinding.objects.get(pk=github.pk).close_reason == reason
    log = client.get(reverse("dashboard:audit_log")).content.decode()
    assert "<script>alert(1)" not in log and "&lt;script&gt;alert(1)&lt;/script&gt;" in log


def test_another_projects_finding_and_a_post_without_csrf_are_refused(
    client, alice, found, other_project, make_session, make_checkpoint
):
    from django.test import Client

    theirs = make_session("their-run", in_project=other_project)
    make_checkpoint(theirs, {"out": "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"})
    their_finding = SecretFinding.objects.get(project=other_project)
    client.force_login(alice)  # operator in acme only
    assert client.post(dismiss_url(their_finding), {"reason": "x"}).status_code == 404  # under acme's slug
    url = reverse("dashboard:secret_dismiss", args=[other_project.slug, their_finding.pk])
    assert client.post(url, {"reason": "x"}).status_code == 404
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(alice)
    github = SecretFinding.objects.get(checkpoint=found)
    assert strict.post(dismiss_url(github), {"reason": "no token"}).status_code == 403
    assert not SecretFinding.objects.exclude(closed_at=None).exists()
    assert not AuditEvent.objects.filter(action="dismiss_finding").exists()
