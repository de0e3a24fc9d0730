from __future__ import annotations

from django.urls import reverse

from checkpoints.services import Actor, fork_session, pin_checkpoint, record_audit, restore_checkpoint
from checkpoints.services.drift import detect_session
from dashboard.views import audit
from tests.dashboard.test_session_list import add_sessions
from tests.helpers import select, text

URL = reverse("dashboard:audit_log")
HTMX = {"HX-Request": "true"}


def reasons(response) -> list[str]:
    return [event.reason for event in response.context["page"].rows]


# ---- access ---------------------------------------------------------------------------------------


def test_members_see_their_projects_events_and_staff_also_see_system_wide_ones(
    client, bob, staff_operator, make_session, other_project, project
):
    ours, theirs = make_session("ours"), make_session("theirs", in_project=other_project)
    record_audit(Actor.system("a"), "pin", session=ours, reason="ours, by session")
    record_audit(Actor.system("a"), "upload", project=project, reason="ours, by project")
    record_audit(Actor.system("a"), "pin", session=theirs, reason="theirs, by session")
    record_audit(Actor.system("a"), "upload", project=other_project, reason="theirs, by project")
    record_audit(Actor.system("retention"), "retention", target="all projects", reason="system-wide")
    client.force_login(bob)
    assert sorted(reasons(client.get(URL))) == ["ours, by project", "ours, by session"]
    response = client.get(URL, {"session": theirs.pk})  # naming their session shows an error, not their events
    assert "Select a valid choice" in response.content.decode() and "theirs" not in str(reasons(response))
    client.force_login(staff_operator)
    assert len(reasons(client.get(URL))) == 5


def test_a_session_filter_of_unicode_digits_is_an_error_not_a_crash(client, bob, make_session):
    make_session("ours")
    client.force_login(bob)
    for value in ("²", "١٢", "9" * 30, "1\x00"):
        response = client.get(URL, {"session": value})
        assert response.status_code == 200
        assert "Session: Select a valid choice" in response.content.decode()


# ---- the page -------------------------------------------------------------------------------------


def test_log_shows_who_did_what_when_and_why_with_target_links(client, bob, alice, make_session, make_checkpoint):
    session = make_session()
    first = make_checkpoint(session, {"a": 1})
    make_checkpoint(session, {"a": 2})
    restored = restore_checkpoint(first, actor=Actor.for_user(alice), reason="tests went red")
    fork = fork_session(first, actor=Actor.for_user(alice), title="try another way")
    client.force_login(bob)
    response = client.get(URL)
    html = response.content.decode()
    assert response.status_code == 200 and [text(heading) for heading in select(html, "h1")] == ["Audit log"]
    assert [event.action for event in response.context["page"].rows] == ["fork", "restore"]
    assert "alice" in html and "tests went red" in html and "no reason given" in html
    links = {link.get("href") for link in select(html, "#audit-results a")}
    assert reverse("dashboard:checkpoint_detail", args=[restored.pk]) in links
    assert reverse("dashboard:session_detail", args=[session.pk]) in links
    assert reverse("dashboard:session_detail", args=[fork.pk]) in links  # "open the fork"
    assert select(html, "#audit-results tr[data-keynav-item] time[datetime]")


def test_filters_by_actor_action_and_session(client, bob, alice, make_session, make_checkpoint):
    one, two = make_session("one"), make_session("two")
    checkpoint = make_checkpoint(one, {"a": 1})
    pin_checkpoint(checkpoint, actor=Actor.for_user(alice), reason="alice pins")
    record_audit(Actor.system("retention"), "retention", session=one, reason="system trims one")
    record_audit(Actor.for_user(alice), "acknowledge", session=two, reason="alice acks two")
    client.force_login(bob)
    assert reasons(client.get(URL, {"actor": "alice"})) == ["alice acks two", "alice pins"]
    assert reasons(client.get(URL, {"action": "retention"})) == ["system trims one"]
    assert reasons(client.get(URL, {"session": one.pk})) == ["system trims one", "alice pins"]
    assert reasons(client.get(URL, {"session": two.pk, "actor": "alice"})) == ["alice acks two"]
    [form] = select(client.get(URL), "form[method=get]")
    for name, label in (("actor", "Who"), ("action", "Action"), ("session", "Session")):
        assert text(form.cssselect(f"label[for=id_{name}]")[0]) == label
        assert form.cssselect(f"select#id_{name}[name={name}]")
    assert (form.get("hx-target"), form.get("hx-push-url")) == ("#audit-results", "true")


def test_detector_events_are_shown_and_filter_apart_as_the_systems(client, bob, alice, make_session, make_checkpoint):
    session = make_session("looping")
    make_checkpoint(session, {"a": 1}, status="halted", status_reason="loop detector tripped")
    detect_session(session)
    pin_checkpoint(session.head, actor=Actor.for_user(alice), reason="alice pins")
    client.force_login(bob)
    html = client.get(URL).content.decode()
    assert "system:drift" in html and "alert_opened" in html and "loop detector tripped" in html
    assert {"@system", "@people"} <= {option.get("value") for option in select(html, "select#id_actor option")}
    assert [event.action for event in client.get(URL, {"actor": "@system"}).context["page"].rows] == ["alert_opened"]
    assert reasons(client.get(URL, {"actor": "@people"})) == ["alice pins"]
    assert len(client.get(URL, {"actor": "system:drift"}).context["page"].rows) == 1


def test_a_link_from_a_session_without_events_selects_it(client, bob, make_session):
    quiet = make_session("quiet")
    client.force_login(bob)
    response = client.get(URL, {"session": quiet.pk})
    html = response.content.decode()
    assert not response.context["form"].errors
    assert [text(option) for option in select(html, f'#id_session option[value="{quiet.pk}"][selected]')] == [
        "acme/quiet"
    ]
    assert "No entry matches these filters" in html


def test_the_session_filter_offers_the_sessions_of_recent_events_and_the_one_asked_for(
    client, bob, alice, make_session, monkeypatch
):
    monkeypatch.setattr(audit, "RECENT_EVENTS", 2)
    old, middle, new = (make_session(name) for name in ("old", "middle", "new"))
    for session in (old, middle, new):
        record_audit(Actor.for_user(alice), "acknowledge", session=session, reason=session.external_id)
    client.force_login(bob)
    offered = [str(label) for value, label in client.get(URL).context["form"].fields["session"].choices if value]
    assert offered == ["acme/middle", "acme/new"]
    response = client.get(URL, {"session": old.pk})
    assert reasons(response) == ["old"]
    assert [text(option) for option in select(response, "#id_session option[selected]")] == ["acme/old"]


def test_unknown_filter_value_is_reported_and_ignored(client, bob, make_session):
    record_audit(Actor.system(), "retention", session=make_session(), reason="kept")
    client.force_login(bob)
    response = client.get(URL, {"action": "explode", "session": "abc"})
    assert reasons(response) == ["kept"]
    assert "The filter was ignored" in response.content.decode()


def test_htmx_request_gets_only_the_results(client, bob, make_session):
    record_audit(Actor.system(), "retention", session=make_session(), reason="kept")
    client.force_login(bob)
    response = client.get(URL, {"action": "retention"}, headers=HTMX)
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="audit-results"')
    assert not select(html, "html, form") and "kept" in html


def test_empty_log_says_what_will_appear(client, bob):
    client.force_login(bob)
    assert "Nothing has been done yet" in client.get(URL).content.decode()


def test_keyset_pages_walk_every_event_once_newest_first(client, bob, make_session):
    session = make_session()
    for i in range(60):
        record_audit(Actor.system(), "retention", session=session, reason=f"{i:02d}")
    client.force_login(bob)
    seen, response = [], client.get(URL)
    while True:
        seen += reasons(response)
        if not response.context["page"].next_cursor:
            break
        response = client.get(URL, {"after": response.context["page"].next_cursor})
    assert seen == [f"{i:02d}" for i in range(59, -1, -1)]
    back = client.get(URL, {"before": response.context["page"].prev_cursor})
    assert reasons(back) == [f"{i:02d}" for i in range(34, 9, -1)]


def test_query_count_is_bounded_on_thousands_of_checkpoints(
    client, bob, alice, project, big_session, django_assert_max_num_queries
):
    sessions = add_sessions(project, 60)
    for session in sessions:
        record_audit(Actor.for_user(alice), "acknowledge", session=session, reason="looking")
    client.force_login(bob)
    with django_assert_max_num_queries(9):
        first = client.get(URL)
    assert len(first.context["page"].rows) == 25
    with django_assert_max_num_queries(9):
        client.get(URL, {"after": first.context["page"].next_cursor, "actor": "alice"}, headers=HTMX)
