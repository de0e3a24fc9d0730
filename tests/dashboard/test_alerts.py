from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from checkpoints.models import AlertKind, AlertState, AuditEvent, DriftAlert
from checkpoints.services import drift
from dashboard.presenters.evidence import evidence_summary
from dashboard.views.alerts import PAGE_SIZE
from tests.helpers import select, text

LIST = "/alerts/"


@pytest.fixture
def alert(make_session, make_checkpoint):
    session = make_session("loop-run")
    good = make_checkpoint(session, {"step": 1}, name="last_green")
    bad = make_checkpoint(session, {"step": 2}, name="looping")
    return DriftAlert.objects.create(
        session=session,
        checkpoint=bad,
        kind="repetition",
        severity="warning",
        message="The same action (get_order) ran 4 times without progress.",
        evidence={"tool": "get_order", "count": 4, "seqs": list(range(1, 20))},
        last_good=good,
    )


@pytest.fixture
def other_alert(other_project, make_session):
    session = make_session("etl", in_project=other_project)
    return DriftAlert.objects.create(session=session, kind="failed", severity="critical", message="Disk full.")


def ack_url(alert: DriftAlert) -> str:
    return reverse("dashboard:alert_acknowledge", args=[alert.pk])


def resolve_url(alert: DriftAlert) -> str:
    return reverse("dashboard:alert_resolve", args=[alert.pk])


def rows(html: str) -> list[str]:
    """Ids of the alert rows, in page order."""
    return [row.get("id").removeprefix("alert-") for row in select(html, "tr[id^=alert-]")]


def older(html: str) -> str:
    """The query of the 'Older alerts' link, or "" on the last page."""
    links = [link for link in select(html, "a[href^='?']") if text(link).startswith("Older alerts")]
    return links[0].get("href").removeprefix("?") if links else ""


def buttons(html: str) -> list[str]:
    """What the alert rows' controls say, hidden words included (as a screen reader reads them)."""
    return [text(control) for control in select(html, "tr[id^=alert-] :is(button, summary, a.btn)")]


# ---- the list -----------------------------------------------------------------------------------


def test_alert_list_shows_each_alert_with_its_evidence_and_last_good(client, alice, alert):
    client.force_login(alice)
    response = client.get(LIST)
    html = response.content.decode()
    assert response.status_code == 200 and [text(heading) for heading in select(html, "h1")] == ["Drift alerts"]
    [row] = select(html, f"tr#alert-{alert.pk}")
    links = {link.get("href") for link in row.cssselect("a")}
    assert reverse("dashboard:session_detail", args=[alert.session_id]) in links
    assert [text(kind) for kind in row.cssselect(".kind")] == ["repetition"]
    assert row.cssselect(".badge.severity-warning") and row.cssselect(".badge.status-open")
    assert "ran 4 times without progress" in text(row)
    assert "count: 4 · seqs: [1, 2, 3, 4, 5, 6, … 19 items] · tool: get_order" in text(row)
    assert reverse("dashboard:checkpoint_detail", args=[alert.last_good_id]) in links
    assert reverse("dashboard:checkpoint_restore", args=[alert.last_good_id]) in links
    assert {"Acknowledge", "Resolve…"} <= {control.text for control in row.cssselect("button, summary")}


def test_a_loop_alert_links_the_checkpoints_that_showed_it_and_says_what_restoring_discards(
    client, alice, make_session, make_checkpoint
):
    session = make_session("looping")
    calls: list[dict] = []
    made = []
    for step in range(1, 9):
        path = "src/app.py" if step > 3 else f"src/module_{step}.py"  # three files, then the same one
        calls = [*calls, {"step": step, "name": "read_file", "arguments": {"path": path}, "result": "80 lines"}]
        made.append(make_checkpoint(session, {"step": step, "tool_calls": calls}, step=step, name="read_file"))
    drift.detect_session(session, kinds=[AlertKind.TOOL_CALL_LOOP])
    alert = DriftAlert.objects.get(kind=AlertKind.TOOL_CALL_LOOP)
    client.force_login(alice)
    [row] = select(client.get(LIST), f"tr#alert-{alert.pk}")
    assert "The same tool call came 5 times in a row (5 or more is a loop): read_file(path=src/app.py)" in text(row)
    assert "action: read_file(path=src/app.py) · count: 5" in text(row)
    seen = row.cssselect(".alert-triggered a")
    assert [text(link) for link in seen] == [f"#{c.seq}" for c in made[3:]]
    assert [link.get("href") for link in seen] == [
        reverse("dashboard:checkpoint_detail", args=[c.pk]) for c in made[3:]
    ]
    assert alert.last_good_id == made[2].pk
    assert "discards 5 checkpoints, 5 tool calls" in text(row)


def test_restore_last_good_says_what_it_discards(client, alice, alert, make_checkpoint):
    session = alert.session
    calls = [{"tool_name": "get_order"}] * 5
    for step in range(3, 6):
        make_checkpoint(session, {"step": step, "tool_calls": calls[:step]})
    client.force_login(alice)
    [row] = select(client.get(LIST), f"tr#alert-{alert.pk}")
    assert "discards 4 checkpoints, 5 tool calls" in text(row)  # #2 … #5


def test_restore_last_good_is_the_main_action_only_for_critical_alerts(client, alice, alert):
    restore = f'a[href="{reverse("dashboard:checkpoint_restore", args=[alert.last_good_id])}"]'
    client.force_login(alice)
    [link] = select(client.get(LIST), restore)
    assert link.get("class") == "btn btn-small"  # a warning: acknowledge or look first
    DriftAlert.objects.filter(pk=alert.pk).update(severity="critical")
    [link] = select(client.get(LIST), restore)
    assert link.get("class") == "btn btn-small btn-primary"


def test_no_restore_last_good_is_offered_when_last_good_is_the_head(client, alice, alert, make_checkpoint):
    # the agent moved on past the alert's checkpoint and came back to its last good one: nothing to discard
    head = make_checkpoint(alert.session, {"step": 1}, parent=alert.last_good_id)
    DriftAlert.objects.filter(pk=alert.pk).update(last_good=head)
    client.force_login(alice)
    [row] = select(client.get(LIST), f"tr#alert-{alert.pk}")
    assert "Restore last good" not in text(row) and "discards 0" not in text(row)
    assert "Acknowledge" in text(row)  # the other actions stay


def test_viewer_sees_alerts_but_no_actions(client, bob, alert):
    client.force_login(bob)
    html = client.get(LIST).content.decode()
    assert rows(html) == [str(alert.pk)]
    assert buttons(html) == []  # no Acknowledge, Resolve… or Restore last good
    assert "Actions" not in [text(heading) for heading in select(html, "th")]


def test_alert_list_filters_by_kind_severity_state_and_project(client, bob, alert, other_alert, grant):
    grant(bob, other_alert.session.project, "viewer")
    client.force_login(bob)
    assert rows(client.get(LIST).content.decode()) == [str(other_alert.pk), str(alert.pk)]
    assert rows(client.get(LIST, {"kind": "failed"}).content.decode()) == [str(other_alert.pk)]
    assert rows(client.get(LIST, {"severity": "warning"}).content.decode()) == [str(alert.pk)]
    assert rows(client.get(LIST, {"project": "acme"}).content.decode()) == [str(alert.pk)]
    assert rows(client.get(LIST, {"session": alert.session_id}).content.decode()) == [str(alert.pk)]
    DriftAlert.objects.filter(pk=alert.pk).update(state=AlertState.RESOLVED)
    assert rows(client.get(LIST).content.decode()) == [str(other_alert.pk)]  # unresolved by default
    assert rows(client.get(LIST, {"state": "resolved"}).content.decode()) == [str(alert.pk)]
    assert len(rows(client.get(LIST, {"state": ""}).content.decode())) == 2


def test_alert_list_ignores_filters_it_does_not_know(client, bob, alert):
    client.force_login(bob)
    response = client.get(LIST, {"kind": "nonsense", "after": "garbage"})
    assert response.status_code == 200 and rows(response.content.decode()) == [str(alert.pk)]


@pytest.mark.parametrize("state", ["bogus", "²", "open\x00", "x" * 5000])
def test_an_invalid_state_is_shown_as_an_error_and_the_open_alerts_listed(client, bob, alert, state):
    client.force_login(bob)
    response = client.get(LIST, {"state": state})
    html = response.content.decode()
    assert response.status_code == 200
    assert "State: Select a valid choice" in html and "The filter was ignored." in html
    assert rows(html) == [str(alert.pk)]


@pytest.mark.parametrize(
    "after", ["2026-01-01T00:00:00+00:00_²", "2026-13-01T00:00:00_1", "0001-01-01T00:00:00+14:00_1"]
)
def test_a_damaged_page_cursor_is_shown_as_an_error_and_the_first_page_listed(client, bob, alert, after):
    client.force_login(bob)
    response = client.get(LIST, {"after": after})
    html = response.content.decode()
    assert response.status_code == 200
    assert "Page: Not a page cursor." in html
    assert rows(html) == [str(alert.pk)]


def test_another_projects_alerts_are_not_listed_and_their_actions_are_404(client, alice, alert, other_alert):
    client.force_login(alice)
    html = client.get(LIST, {"state": ""}).content.decode()
    assert rows(html) == [str(alert.pk)]
    assert "globex" not in html  # not even in the project filter
    assert client.post(ack_url(other_alert)).status_code == 404
    assert client.post(resolve_url(other_alert), {"reason": "x"}).status_code == 404
    other_alert.refresh_from_db()
    assert other_alert.state == "open"


def test_alert_list_for_htmx_is_the_results_fragment(client, bob, alert):
    client.force_login(bob)
    response = client.get(LIST, {"kind": "repetition"}, headers={"HX-Request": "true"})
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="alert-results">') and not select(html, "html")
    assert rows(html) == [str(alert.pk)]


def test_alert_list_explains_alerts_when_there_are_none(client, bob):
    client.force_login(bob)
    html = client.get(LIST).content.decode()
    assert "No open drift alerts" in html and "last good checkpoint" in html


def test_alert_list_says_when_filters_match_nothing(client, bob, alert):
    client.force_login(bob)
    assert "No alerts match these filters." in client.get(LIST, {"kind": "stalled"}).content.decode()


def test_alert_list_shows_the_most_severe_first_then_the_newest(client, bob, make_session):
    now = timezone.now()
    opened = [("info", 1), ("critical", 30), ("warning", 2), ("critical", 5), ("info", 0), ("warning", 60)]
    made = {
        (severity, minutes): DriftAlert.objects.create(
            session=make_session(f"run-{severity}-{minutes}"),
            kind="stalled",
            severity=severity,
            message="m",
            opened_at=now - timedelta(minutes=minutes),
        ).pk
        for severity, minutes in opened
    }
    client.force_login(bob)
    order = [("critical", 5), ("critical", 30), ("warning", 2), ("warning", 60), ("info", 0), ("info", 1)]
    assert rows(client.get(LIST).content.decode()) == [str(made[key]) for key in order]


def test_alert_list_pages_with_a_keyset_cursor(client, bob, make_session):
    session = make_session()
    now = timezone.now()
    DriftAlert.objects.bulk_create(
        DriftAlert(
            session=session,
            kind="stalled",
            severity=("info", "critical", "warning")[i % 3],
            message=f"alert {i}",
            state="resolved",
            opened_at=now,
        )
        for i in range(120)
    )  # all opened at the same instant: the id breaks the tie within a severity
    client.force_login(bob)
    seen: list[str] = []
    query = "state=resolved"
    for expected in (30, 30, 30, 30):
        html = client.get(f"{LIST}?{query}").content.decode()
        page = rows(html)
        assert len(page) == expected
        seen += page
        query = older(html)
    assert not query
    rank = {"critical": 0, "warning": 1, "info": 2}
    severity = dict(DriftAlert.objects.values_list("pk", "severity"))
    assert len(set(seen)) == 120
    assert seen == sorted(seen, key=lambda pk: (rank[severity[int(pk)]], -int(pk)))


def test_alert_list_runs_a_bounded_number_of_queries(
    client, alice, make_session, make_checkpoint, django_assert_max_num_queries
):
    for i in range(60):
        session = make_session(f"run-{i}")
        good = make_checkpoint(session, {"step": 1})
        stalled = make_checkpoint(session, {"step": 1}, status="failed")
        DriftAlert.objects.create(
            session=session,
            kind="stalled",
            message="flat",
            last_good=good,
            checkpoint=stalled,  # what showed the drift: read for the page's rows at once, not row by row
            opened_at=timezone.now() - timedelta(minutes=i),
        )
    client.force_login(alice)
    # the user and roles, the page, its last good and drift checkpoints, the heads and paths the restore offers are
    # decided on, and what each discards: as many for 30 rows as for one
    with django_assert_max_num_queries(12):
        response = client.get(LIST)
    assert len(rows(response.content.decode())) == PAGE_SIZE


# ---- acknowledge and resolve --------------------------------------------------------------------


def test_alert_actions_on_unknown_ids_are_404(client, alice, alert):
    client.force_login(alice)
    assert client.post(reverse("dashboard:alert_acknowledge", args=[999_999])).status_code == 404
    assert client.post(reverse("dashboard:alert_resolve", args=[999_999])).status_code == 404


def test_alert_actions_without_a_csrf_token_are_refused(alice, alert):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    assert client.post(ack_url(alert)).status_code == 403
    assert client.post(resolve_url(alert)).status_code == 403
    alert.refresh_from_db()
    assert alert.state == AlertState.OPEN


def test_acknowledge_records_who_and_returns_to_the_list(client, alice, alert):
    client.force_login(alice)
    response = client.post(ack_url(alert))
    assert response.status_code == 302 and response["Location"] == reverse("dashboard:alert_list")
    alert.refresh_from_db()
    assert alert.state == AlertState.ACKNOWLEDGED and alert.acknowledged_by == alice
    audit = AuditEvent.objects.get(action="acknowledge")
    assert audit.actor == "alice" and audit.session_id == alert.session_id


def test_acknowledge_returns_to_a_safe_next(client, alice, alert):
    client.force_login(alice)
    response = client.post(ack_url(alert), {"next": "/alerts/?kind=repetition"})
    assert response["Location"] == "/alerts/?kind=repetition"


def test_acknowledge_for_htmx_returns_the_updated_row(client, alice, alert):
    client.force_login(alice)
    response = client.post(
        ack_url(alert), headers={"HX-Request": "true", "HX-Current-URL": "http://testserver/alerts/?kind=repetition"}
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert html.lstrip().startswith(f'<tr id="alert-{alert.pk}"')
    assert select(html, ".badge.status-acknowledged") and "by alice" in html
    assert [control.text for control in select(html, "button, summary")] == ["Resolve…", "Resolve"]
    assert not select(html, "form, input[name=csrfmiddlewaretoken], input[name=next]")  # the page's one form
    assert select(html, "button[form=triage]")[0].get("formaction") == resolve_url(alert)
    assert "alert-updated" in response["HX-Trigger"]
    # focus stays on the row, on its new state; the live notice says what happened
    assert select(html, f"#alert-{alert.pk}-state.alert-state[tabindex='-1'][autofocus]")
    notice = json.loads(response["HX-Trigger-After-Settle"])["notice"]
    assert notice == {"text": "Acknowledged the Repetition alert on loop-run.", "level": "success"}


def test_each_alerts_buttons_name_their_alert(client, alice, alert, make_session):
    second = DriftAlert.objects.create(session=make_session("other-run"), kind="stalled", message="flat")
    client.force_login(alice)
    html = client.get(LIST).content.decode()
    said = buttons(html)
    for each in (alert, second):
        assert any(name.startswith(f"Acknowledge alert {each.pk}, ") for name in said)
        assert f"Resolve… alert {each.pk}" in said and f"Resolve alert {each.pk}" in said
    assert f"Restore last good for alert {alert.pk}" in said
    assert not select(html, "[autofocus]")  # the page itself moves no focus


def test_resolve_records_the_reason(client, alice, alert):
    client.force_login(alice)
    response = client.post(resolve_url(alert), {"reason": "restored #1, loop gone"})
    assert response.status_code == 302
    alert.refresh_from_db()
    assert alert.state == AlertState.RESOLVED and alert.resolved_at is not None
    audit = AuditEvent.objects.get(action="resolve")
    assert audit.actor == "alice" and audit.reason == "restored #1, loop gone"


def test_the_list_carries_one_triage_form_whose_buttons_post_to_their_alert(client, alice, alert, make_session):
    """No JavaScript: a row's button submits the page's one form (one CSRF token, one return address) to its own
    alert's URL, with every row's reason named for its alert; Enter submits nothing (its first button is disabled)."""
    second = DriftAlert.objects.create(session=make_session("other-run"), kind="stalled", message="flat")
    client.force_login(alice)
    html = client.get(f"{LIST}?kind=").content.decode()
    [form] = select(html, "form#triage")
    assert form.get("method") == "post" and select(html, "form#triage input[name=csrfmiddlewaretoken]")
    assert not select(html, "tr input[name=csrfmiddlewaretoken], tr form")
    assert select(html, "form#triage input[name=next]")[0].get("value") == f"{LIST}?kind="
    assert select(html, "form#triage button")[0].get("disabled") is not None
    actions = {b.get("formaction") for b in select(html, "button[form=triage]")}
    assert {ack_url(alert), resolve_url(alert), ack_url(second), resolve_url(second)} <= actions
    # what the browser sends for "Resolve" on the second row: both reasons, the form's fields
    response = client.post(
        resolve_url(second), {f"reason-{alert.pk}": "not this", f"reason-{second.pk}": "this one", "next": LIST}
    )
    assert response.status_code == 302 and response["Location"] == LIST
    second.refresh_from_db()
    alert.refresh_from_db()
    assert second.state == AlertState.RESOLVED and alert.state == AlertState.OPEN
    assert AuditEvent.objects.get(action="resolve").reason == "this one"


def test_resolve_for_htmx_returns_the_updated_row(client, alice, alert):
    client.force_login(alice)
    response = client.post(resolve_url(alert), {"reason": ""}, headers={"HX-Request": "true"})
    html = response.content.decode()
    assert html.lstrip().startswith(f'<tr id="alert-{alert.pk}"') and select(html, ".badge.status-resolved")
    assert "Restore last good" not in html and "No action needed" in html
    assert "alert-updated" in response["HX-Trigger"]


def test_resolve_with_a_too_long_reason_shows_the_error(client, alice, alert):
    client.force_login(alice)
    response = client.post(resolve_url(alert), {"reason": "x" * 501}, headers={"HX-Request": "true"})
    html = response.content.decode()
    assert response.status_code == 200 and select(html, ".errorlist")
    assert select(
        html, f"input[type=text][name=reason-{alert.pk}][form=triage][autofocus]"
    )  # back to the refused field
    assert json.loads(response["HX-Trigger-After-Settle"])["notice"]["level"] == "error"
    alert.refresh_from_db()
    assert alert.state == AlertState.OPEN


def test_evidence_counted_in_minutes_or_seconds_reads_as_durations():
    summary = evidence_summary({"minutes": 7342, "limit_minutes": 120, "idle_seconds": 95, "count": 3})
    assert summary == "count: 3 · idle seconds: 1 min 35 s · limit minutes: 2 h · minutes: 5 d 2 h"


def test_evidence_leaves_out_what_a_checkpoint_did_not_give():
    assert evidence_summary({"reason": "", "seq": 13, "status": "halted", "error": None}) == "seq: 13 · status: halted"


def test_the_default_list_pages_unresolved_alerts_most_severe_first(client, bob, make_session):
    now = timezone.now()
    DriftAlert.objects.bulk_create(
        DriftAlert(
            session=make_session(f"run-{i}"),
            kind="stalled",
            severity=("info", "critical", "warning")[i % 3],
            state=("open", "acknowledged", "resolved", "open")[i % 4],
            message=f"alert {i}",
            opened_at=now - timedelta(minutes=i // 7),  # ties within a minute: the id breaks them
        )
        for i in range(80)
    )
    client.force_login(bob)
    seen: list[str] = []
    query = ""
    while True:
        html = client.get(f"{LIST}?{query}").content.decode()
        seen += rows(html)
        query = older(html)
        if not query:
            break
    expected = DriftAlert.objects.exclude(state="resolved").values_list("pk", "severity", "opened_at")
    rank = {"critical": 0, "warning": 1, "info": 2}
    order = sorted(expected, key=lambda row: (rank[row[1]], -row[2].timestamp(), -row[0]))
    assert seen == [str(pk) for pk, _, _ in order]
