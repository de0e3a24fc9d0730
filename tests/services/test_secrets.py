"""Secrets found at ingest, whichever way a checkpoint arrives (API, batch, file import, LangGraph put and writes):
the finding names the session, the checkpoint that added the value, the path and the detector, with a keyed
fingerprint, and nothing stored holds the value; a failing scanner costs no checkpoint; the alert routes."""

from __future__ import annotations

import json
from unittest import mock

import pytest
from django.core import serializers
from django.db import connection
from django.test.utils import CaptureQueriesContext

from checkpoints.models import (
    AgentSession,
    AlertKind,
    AlertSeverity,
    AuditEvent,
    Checkpoint,
    Delivery,
    DriftAlert,
    Event,
    SecretFinding,
)
from checkpoints.outbox.notifications import create_rule
from checkpoints.services import Actor, CheckpointInput, ingest_checkpoints
from checkpoints.services import langgraph as lg
from checkpoints.services import secrets as service
from checkpoints.services.file_import import import_path
from checkpoints.store import secrets as scanner
from tests.kits.interrupts import CHECKPOINT_ID

pytestmark = pytest.mark.django_db

GITHUB = "ghp_" + "Zq9Xw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe9Dc8"
ANTHROPIC = "sk-ant-api03-" + "Qx7vL2mN9pR4sT6uW8yZ0aB3cD5eF1gH" * 3
ACTOR = Actor.system("test")


def conversation(*contents):
    return {"messages": [{"role": "tool", "content": text} for text in contents]}


def everything_stored_about_findings() -> str:
    """Every row a finding can leave a trace in: findings, alerts, audit events, deliveries."""
    rows = [
        *SecretFinding.objects.all(),
        *DriftAlert.objects.all(),
        *AuditEvent.objects.all(),
        *Event.objects.all(),
        *Delivery.objects.all(),
    ]
    return serializers.serialize("json", rows)


def test_a_key_added_at_step_5_is_found_once_at_the_checkpoint_that_added_it(make_session, make_checkpoint):
    session = make_session()
    contents = [f"step {n}: ran ls" for n in range(1, 5)]
    for n in range(1, 5):
        make_checkpoint(session, conversation(*contents[:n]))
    contents.append(f"step 5: env says GITHUB_TOKEN={GITHUB}")
    introducing = make_checkpoint(session, conversation(*contents))
    for n in range(6, 9):  # the key stays in the state; only what each step adds is scanned
        contents.append(f"step {n}: ran ls")
        make_checkpoint(session, conversation(*contents))

    [finding] = SecretFinding.objects.all()
    assert (finding.project_id, finding.session_id) == (session.project_id, session.pk)
    assert (finding.checkpoint_id, finding.checkpoint_seq) == (introducing.pk, 5)
    assert finding.path == "state.messages[4].content"
    assert finding.detector == "github_token"
    assert finding.fingerprint == scanner.fingerprint(GITHUB) and finding.length == len(GITHUB)
    assert GITHUB not in everything_stored_about_findings()


def test_the_same_value_added_again_moves_last_seen_and_another_session_has_its_own_finding(
    make_session, make_checkpoint
):
    first, second = make_session("run-1"), make_session("run-2")
    make_checkpoint(first, {"out": f"key {ANTHROPIC}"})
    make_checkpoint(first, {"out": "nothing"})
    make_checkpoint(first, {"out": f"key again {ANTHROPIC}"})
    make_checkpoint(second, {"out": ANTHROPIC})
    rows = list(SecretFinding.objects.order_by("session_id").values_list("session_id", "checkpoint_seq", "fingerprint"))
    fingerprint = scanner.fingerprint(ANTHROPIC)
    assert rows == [(first.pk, 1, fingerprint), (second.pk, 1, fingerprint)]
    seen = SecretFinding.objects.get(session=first)
    assert seen.last_seen_at > seen.first_seen_at


def test_a_batch_and_the_metadata_are_scanned_as_one_checkpoint_is(make_session):
    session = make_session()
    ingest_checkpoints(
        [
            (
                session,
                [
                    CheckpointInput(state={"a": "plain"}),
                    CheckpointInput(state={"a": "plain", "b": f"x {GITHUB}"}),
                    CheckpointInput(state={"a": "plain"}, metadata={"tool": {"api_key": "Zx8Qw2Lp9Vb4Nc7Mk3Jh"}}),
                ],
            )
        ]
    )
    found = sorted(SecretFinding.objects.values_list("checkpoint_seq", "path", "detector"))
    assert found == [(2, "state.b", "github_token"), (3, "metadata.tool.api_key", "keyword_entropy")]


def test_a_file_import_is_scanned(project, tmp_path):
    path = tmp_path / "bp-session-9.json"
    records = [
        {"id": "bp-session-9:1", "name": "start", "timestamp": "2026-04-01T12:00:00+00:00", "data": {"step": 1}},
        {
            "id": "bp-session-9:2",
            "name": "tool",
            "timestamp": "2026-04-01T12:01:00+00:00",
            "data": {"step": 2, "output": f"export HF=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 and {GITHUB}"},
        },
    ]
    path.write_text(json.dumps(records), encoding="utf-8")
    report = import_path(path, fmt="breakpilot", project=project, actor=ACTOR)
    assert report.errors == []
    found = SecretFinding.objects.values_list("checkpoint_seq", "path", "detector")
    assert sorted(found) == [(2, "state.output", "github_token"), (2, "state.output", "hugging_face_token")]


def put(project, checkpoint_id, values, parent=None):
    return lg.put_checkpoint(
        project,
        lg.PutInput(
            thread_id="chat-1",
            checkpoint_ns="",
            checkpoint={"v": 4, "id": checkpoint_id, "ts": "2026-11-27T10:00:00+00:00"},
            metadata={"source": "loop", "step": 1},
            values=values,
            parent_checkpoint_id=parent,
        ),
    )[0]


def test_langgraph_puts_and_writes_are_scanned(project):
    checkpoint = put(project, CHECKPOINT_ID, {"messages": [{"type": "human", "content": "hi"}]})
    lg.put_writes(
        project,
        thread_id="chat-1",
        checkpoint_ns="",
        checkpoint_id=CHECKPOINT_ID,
        task_id="task-0",
        task_path="~__pregel_pull, tools",
        writes=[("messages", [{"type": "tool", "content": f"token={GITHUB}"}])],
    )
    put(
        project,
        "1f0c0000-0000-6000-8000-000000000002",
        {"messages": [{"type": "human", "content": "hi"}, {"type": "ai", "content": ANTHROPIC}]},
        parent=CHECKPOINT_ID,
    )
    found = sorted(SecretFinding.objects.values_list("checkpoint_seq", "path", "detector"))
    assert found == [
        (1, "writes.messages[0].content", "github_token"),
        (2, "state.messages[1].content", "anthropic_key"),
    ]
    assert SecretFinding.objects.get(detector="github_token").checkpoint_id == checkpoint.pk


def test_a_failing_scanner_loses_no_checkpoint_and_is_counted(make_session, make_checkpoint, caplog):
    session = make_session()
    with mock.patch.object(scanner, "scan", side_effect=RuntimeError("detector crashed")):
        checkpoint = make_checkpoint(session, {"out": GITHUB})
    assert Checkpoint.objects.filter(pk=checkpoint.pk).exists()
    assert not SecretFinding.objects.exists()
    assert "the secret scan failed" in caplog.text


def test_failing_to_record_findings_loses_no_checkpoint(make_session, make_checkpoint, caplog):
    session = make_session()
    with mock.patch.object(service, "_raise_alert", side_effect=RuntimeError("database trouble")):
        checkpoint = make_checkpoint(session, {"out": GITHUB})
        make_checkpoint(session, {"out": GITHUB, "next": 1})
    assert Checkpoint.objects.filter(session=session).count() == 2
    assert checkpoint.pk
    assert not SecretFinding.objects.exists()  # its savepoint rolled back, not the ingest
    assert "recording secret findings" in caplog.text


def test_scanning_can_be_turned_off(make_session, make_checkpoint, settings):
    settings.SECRETS_SCAN = False
    make_checkpoint(make_session(), {"out": GITHUB})
    assert not SecretFinding.objects.exists()


def test_a_checkpoint_without_secrets_costs_no_query(make_session, make_checkpoint):
    session = make_session()
    make_checkpoint(session, conversation("one"))
    with CaptureQueriesContext(connection) as with_scan:
        make_checkpoint(session, conversation("one", "two"))
    with mock.patch.object(service.settings, "SECRETS_SCAN", False), CaptureQueriesContext(connection) as without:
        make_checkpoint(session, conversation("one", "two", "three"))
    assert len(with_scan) == len(without)


def test_the_first_finding_opens_an_info_alert_that_notification_rules_route(project, make_session, make_checkpoint):
    create_rule(
        project,
        actor=ACTOR,
        name="secrets to the team",
        channel="email",
        target="security@example.com",
        events=["alert.opened"],
        alert_kinds=["secret_found"],
        min_severity="info",
        quiet_minutes=0,
        enabled=True,
    )
    session = make_session()
    make_checkpoint(session, {"out": f"key {GITHUB}"})
    make_checkpoint(session, {"out": f"key {GITHUB}", "more": ANTHROPIC})
    [alert] = DriftAlert.objects.filter(kind=AlertKind.SECRET_FOUND)
    assert alert.severity == AlertSeverity.INFO and alert.session_id == session.pk
    assert alert.checkpoint.seq == 1
    assert "2 secrets found" in alert.message  # the open alert says more, no second alert
    [delivery] = Delivery.objects.all()
    assert delivery.event.type == "alert.opened" and delivery.rule.name == "secrets to the team"
    assert "secret_found" in json.dumps(delivery.event.data)
    assert GITHUB not in everything_stored_about_findings() and ANTHROPIC not in everything_stored_about_findings()


def test_a_projects_own_patterns_are_checked_audited_and_used(project, make_session, make_checkpoint):
    service.set_secret_patterns(project, actor=ACTOR, text="employee-id: EMP-[0-9]{6}\n\nbadge: BDG[0-9]{4}")
    assert project.secret_patterns == [["employee-id", "EMP-[0-9]{6}"], ["badge", "BDG[0-9]{4}"]]
    event = AuditEvent.objects.get(action="set_secret_patterns")
    assert event.details["added"] == ["badge", "employee-id"] and "EMP-" not in json.dumps(event.details)
    session = AgentSession.objects.get(pk=make_session().pk)  # its project not loaded: read through the cache
    make_checkpoint(session, {"note": "payroll for EMP-004211"})
    assert list(SecretFinding.objects.values_list("detector", flat=True)) == ["custom:employee-id"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("no colon here", "line 1: write `name: pattern`"),
        ("a: (x)\\1", "line 1: RE2 cannot compile it"),
        ("a: x(?=y)", "line 1: RE2 cannot compile it"),
        ("a: x\na: y", "line 2: the name 'a' is used twice"),
        ("bad name!: x", "line 1: write `name: pattern`"),
        ("a: " + "x" * 1001, "at most 1000 characters"),
        ("\n".join(f"p{n}: x{n}" for n in range(51)), "at most 50 patterns"),
    ],
)
def test_a_bad_pattern_list_is_refused_with_the_line_and_changes_nothing(project, text, message):
    with pytest.raises(service.InvalidInput, match=message.replace("(", r"\(").replace("`", ".")):
        service.set_secret_patterns(project, actor=ACTOR, text=text)
    project.refresh_from_db()
    assert project.secret_patterns == []
    assert not AuditEvent.objects.filter(action="set_secret_patterns").exists()
