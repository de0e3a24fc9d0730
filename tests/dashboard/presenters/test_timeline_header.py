"""Above the timeline: the charts and the index of the events an operator looks for."""

from __future__ import annotations

import pytest

from checkpoints.models import DriftAlert
from checkpoints.services import Actor, fork_session
from dashboard.presenters import timeline_header
from dashboard.presenters.timeline_header import session_overview, timeline_index

from ..trees import grow


@pytest.fixture
def session(make_session):
    return make_session("run-1")


def test_the_index_lists_restores_forks_failures_and_alerts_newest_first(session, bob):
    grow(session, 8, restores={7: 2}, failed={3, 5})
    fork = fork_session(session.checkpoints.get(seq=4), actor=Actor.system("test"))
    DriftAlert.objects.create(
        session=session, kind="failed", severity="critical", checkpoint=session.checkpoints.get(seq=5)
    )
    index = dict(timeline_index(session, [fork]))
    labels = {title: [mark.label for mark in marks] for title, marks in index.items()}
    assert labels == {
        "Restores": ["#7 back to #2"],
        "Forks": [f"#4 {fork.external_id}"],
        "Failures": ["#5 step_5", "#3 step_3"],
        "Alerts": ["#5 failed (open)"],
    }
    assert all(mark.bad for mark in index["Failures"])


def test_a_session_without_events_has_an_empty_index_and_counts_its_checkpoints(session):
    grow(session, 3)
    overview = session_overview(session)
    assert timeline_index(session, []) == []
    assert overview["stats"]["count"] == 3 and overview["open_alerts"] == 0
    assert overview["charts"]["error_note"] == "No failed checkpoints or tool calls."


def test_no_charts_for_a_session_without_checkpoints(session):
    assert session_overview(session)["charts"] is None


def test_a_long_sessions_size_chart_comes_from_its_rollups_with_the_points_its_rows_give(make_session, monkeypatch):
    from datetime import UTC, datetime, timedelta

    from checkpoints.services import CheckpointInput, ingest_checkpoints
    from checkpoints.services.cleanup import delete_checkpoints

    session = make_session("long")
    start = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
    items = [
        CheckpointInput(state={"notes": ["x" * (i % 13)] * (i % 9)}, created_at=start + timedelta(minutes=7 * i))
        for i in range(120)
    ]
    ingest_checkpoints([(session, items)])
    gone = session.checkpoints.filter(seq__in=[1, 2, 30, 61, 62, 63, 90]).values_list("pk", flat=True)
    delete_checkpoints(list(gone), actor=Actor.system("retention"))
    session.refresh_from_db()
    monkeypatch.setattr(timeline_header, "CHART_POINTS", 2)  # buckets of 60 seqs: three rollup blocks each

    from_rollups = timeline_header.session_overview(session)["charts"]["size"]
    monkeypatch.setattr(timeline_header, "ROLLUP_BLOCK", 10**6)
    from_rows = timeline_header.session_overview(session)["charts"]["size"]

    assert from_rollups == from_rows
    assert [seq for seq, _ in from_rows[0]["points"]] == [3, 120]


@pytest.mark.parametrize(
    ("every", "unit"),
    [("minutes=5", "hour"), ("minutes=20", "day"), ("hours=3", "day"), ("days=1", "week"), ("days=4", "month")],
)
def test_the_rate_and_error_charts_keep_to_about_sixty_bars_however_long_the_session_ran(make_session, every, unit):
    from datetime import UTC, datetime, timedelta

    from checkpoints.services import CheckpointInput, ingest_checkpoints

    session = make_session(f"every-{every}")
    gap = timedelta(**{every.split("=")[0]: int(every.split("=")[1])})
    start = datetime(2024, 1, 1, tzinfo=UTC)
    items = [CheckpointInput(state={"i": i}, step=i, created_at=start + gap * i) for i in range(400)]
    ingest_checkpoints([(session, items)])
    session.refresh_from_db()

    charts = session_overview(session)["charts"]

    assert charts["unit"] == unit and charts["rate_label"] == f"Steps per {unit}"
    assert 1 < len(charts["rate"]) <= timeline_header.CHART_BARS
    assert sum(count for _, count in charts["rate"]) == 400  # every checkpoint counted in some bar
    assert len(charts["size"][0]["points"]) <= timeline_header.CHART_POINTS
