from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from checkpoints.models import AgentSession, AuditEvent, DriftAlert, WatchedSource
from checkpoints.services import drift, watched

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


@pytest.fixture
def source(project, make_session, tmp_path) -> WatchedSource:
    folder = tmp_path / "agents"
    for name in ("run-1", "run-2"):
        session = make_session(name)
        AgentSession.objects.filter(pk=session.pk).update(source_path=str(folder / name))
    make_session("elsewhere")  # imported from another folder: never alerted
    return WatchedSource.objects.create(project=project, path=str(folder), format="ares")


def source_missing() -> list[tuple[str, str]]:
    alerts = DriftAlert.objects.filter(kind="source_missing").order_by("session__external_id")
    return list(alerts.values_list("session__external_id", "state"))


def test_a_missing_folder_opens_one_audited_alert_per_session_from_it_once(source):
    watched.report_folder_missing(source, now=T0)
    watched.report_folder_missing(source, now=T0 + timedelta(minutes=5))

    assert source_missing() == [("run-1", "open"), ("run-2", "open")]
    opened = AuditEvent.objects.filter(actor="system:watch", action="alert_opened")
    assert sorted(opened.values_list("session__external_id", flat=True)) == ["run-1", "run-2"]
    source.refresh_from_db()
    assert (source.last_scan_at, "is gone" in source.last_error) == (T0 + timedelta(minutes=5), True)


def test_a_missing_folder_whose_audit_row_fails_leaves_no_alert_and_no_error_behind(source, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("audit table unavailable")

    monkeypatch.setattr(drift, "audit_alert", broken)
    with pytest.raises(RuntimeError):
        watched.report_folder_missing(source, now=T0)

    assert source_missing() == []
    source.refresh_from_db()
    assert (source.last_scan_at, source.last_error) == (None, "")


def test_a_folder_back_resolves_its_alerts_with_an_audit_row_each(source):
    watched.report_folder_missing(source, now=T0)
    watched.report_folder_back(source, now=T0 + timedelta(minutes=5))

    assert source_missing() == [("run-1", "resolved"), ("run-2", "resolved")]
    resolved = AuditEvent.objects.filter(actor="system:watch", action="alert_resolved", reason__contains="is back")
    assert resolved.count() == 2


def test_a_scan_keeps_what_was_seen_unless_it_imported(source):
    watched.record_scan(source, now=T0, seen={"a.json": [3, 1]}, error="a.json: bad")
    watched.record_scan(source, now=T0 + timedelta(minutes=5))

    source.refresh_from_db()
    assert (source.seen, source.last_error, source.last_scan_at) == (
        {"a.json": [3, 1]},
        "a.json: bad",
        T0 + timedelta(minutes=5),
    )
