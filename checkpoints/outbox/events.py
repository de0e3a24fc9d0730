"""Events: what happened, recorded once with a delivery to each webhook endpoint and notification rule that wants it.

Services publish inside their own transaction, so an operation that rolls back announces nothing; the first
attempts are queued when it commits (`deliveries.queue`). An event nobody wants is not written at all, and for
`checkpoint.created`, published on every ingest, knowing that costs no query most of the time: the event types a
project's endpoints and rules want are cached for `WANTED_CACHE_SECONDS` and forgotten when they change. The
cache only saves queries: when it cannot be reached the answer is read from the database, so an ingest neither
fails nor drops an event because Redis is down.

The `*_data` helpers build the bodies docs/webhooks.md documents; links are absolute console URLs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.urls import reverse

from ..models import (
    AgentSession,
    Channel,
    Checkpoint,
    Delivery,
    DeliveryStatus,
    DriftAlert,
    Event,
    EventType,
    ImportJob,
    InterruptAnswer,
    JobRun,
    Phase,
    PhaseFeedback,
    Project,
    Recovery,
    WebhookEndpoint,
)
from ..store import masking
from . import notifications
from .channels.webhook import iso_time
from .deliveries import queue
from .wanted import wanted_types

logger = logging.getLogger(__name__)

ALWAYS_OFFERED = {EventType.PHASE_WAITING, EventType.INTERRUPT_WAITING}


def wants(type: str, project_id: int | None) -> bool:
    """Whether an endpoint or rule of the project may want `type` (cached): when not, the caller need not even
    build the event's data. Events of no project (job.failed) and phase.waiting (its approvers are emailed
    without a rule) are always offered to the notification rules."""
    return project_id is None or type in ALWAYS_OFFERED or type in wanted_types(project_id)


def publish(type: str, *, project: Project | None, data: dict[str, Any], dedupe_key: str = "") -> Event | None:
    """Record that `type` happened, with a pending delivery to each endpoint and rule that wants it; None (and
    nothing written) when none does. Call it inside the transaction of the change it announces."""
    if not wants(type, project.pk if project else None):
        return None
    events = publish_all([Event(project=project, type=type, data=data, dedupe_key=dedupe_key)])
    return events[0] if events else None


def publish_all(events: Sequence[Event]) -> list[Event]:
    """`publish` for many events at once (a batch of checkpoints): one query for the endpoints of their projects,
    one insert of the events and one of the deliveries; the events saved (those somebody wants)."""
    project_ids = {event.project_id for event in events if event.project_id is not None}
    endpoints: dict[int, list[WebhookEndpoint]] = {pk: [] for pk in project_ids}
    for endpoint in WebhookEndpoint.objects.filter(project_id__in=project_ids, deleted_at__isnull=True):
        endpoints[endpoint.project_id].append(endpoint)
    saved: list[Event] = []
    deliveries: list[Delivery] = []
    for event in events:
        wanted = [
            Delivery(event=event, endpoint=endpoint, channel=Channel.WEBHOOK, target=endpoint.url)
            for endpoint in endpoints.get(event.project_id or 0, [])
            if event.type in endpoint.events
        ]
        wanted += notifications.deliveries_for(event)
        if wanted:
            saved.append(event)
            deliveries += wanted
    if not saved:
        return []
    _mask(saved)
    Event.objects.bulk_create(saved)
    for delivery in deliveries:
        if delivery.status == DeliveryStatus.PENDING and delivery.next_attempt_at is None:
            delivery.next_attempt_at = delivery.event.created_at
    Delivery.objects.bulk_create([delivery for delivery in deliveries if delivery._state.adding])
    queue(deliveries)
    return saved


def _mask(events: list[Event]) -> None:
    """Events' bodies with their projects' found secrets masked (docs/secrets.md#masking): a receiver is a person's
    inbox or chat, or a system that shows them, and a body quotes names, alert texts, answers. One query a batch;
    read from the database, not from a loaded project, so a value found in the same transaction is masked."""
    maskers = masking.for_projects({event.project_id for event in events if event.project_id is not None})
    for event in events:
        if event.project_id is not None:
            event.data = maskers[event.project_id].json(event.data)


def console_url(name: str, *args: Any, query: str = "") -> str:
    """An absolute link to a console page (`dashboard:<name>`), for receivers outside the console."""
    url = settings.CONSOLE_BASE_URL + reverse(f"dashboard:{name}", args=args)
    return f"{url}?{query}" if query else url


def session_data(session: AgentSession) -> dict[str, Any]:
    if session.get_deferred_fields():  # a job's slim copy: one query for the rest, not one a field
        session = AgentSession.objects.select_related("project").get(pk=session.pk)
    return {
        "id": session.external_id,
        "project": session.project.slug,
        "agent": session.agent,
        "title": session.title,
        "status": session.status,
        "url": console_url("session_detail", session.pk),
    }


def checkpoint_data(checkpoint: Checkpoint) -> dict[str, Any]:
    return {
        "id": checkpoint.pk,
        "seq": checkpoint.seq,
        "name": checkpoint.name,
        "kind": checkpoint.kind,
        "status": checkpoint.status,
        "step": checkpoint.step,
        "created_at": iso_time(checkpoint.created_at),
        "url": console_url("checkpoint_detail", checkpoint.pk),
    }


def alert_data(alert: DriftAlert) -> dict[str, Any]:
    return {
        "id": alert.pk,
        "kind": alert.kind,
        "severity": alert.severity,
        "message": alert.message,
        "state": alert.state,
        "url": console_url("alert_list", query=f"session={alert.session_id}&kind={alert.kind}&state="),
        "last_good": checkpoint_data(alert.last_good) if alert.last_good else None,
    }


def phase_data(phase: Phase) -> dict[str, Any]:
    return {
        "number": phase.number,
        "name": phase.name,
        "status": phase.status,
        "url": console_url("phase_detail", phase.session_id, phase.number),  # its approval form (GET)
    }


def publish_checkpoints_created(created: Sequence[tuple[AgentSession, Checkpoint]]) -> None:
    """checkpoint.created for each new (session, checkpoint), of the projects that want it: usually no query."""
    wanted: dict[int, bool] = {}
    events = []
    for session, checkpoint in created:
        if session.project_id not in wanted:
            wanted[session.project_id] = EventType.CHECKPOINT_CREATED in wanted_types(session.project_id)
        if wanted[session.project_id]:
            data = {"session": session_data(session), "checkpoint": checkpoint_data(checkpoint)}
            events.append(Event(project_id=session.project_id, type=EventType.CHECKPOINT_CREATED, data=data))
    if events:
        publish_all(events)


def publish_restored(
    session: AgentSession, restore: Checkpoint, target: Checkpoint, *, actor: str, recovery: int | None = None
) -> None:
    """session.restored; one made by a fleet recovery names it (`recovery`), and notification rules leave it to
    the batch's recovery.finished (webhooks, which agents act on, still get one per session)."""
    if not wants(EventType.SESSION_RESTORED, session.project_id):
        return
    data = {
        "session": session_data(session),
        "checkpoint": checkpoint_data(restore),
        "target": checkpoint_data(target),
        "actor": actor,
        **({"recovery": recovery} if recovery is not None else {}),
    }
    publish(EventType.SESSION_RESTORED, project=session.project, data=data)


def publish_forked(fork: AgentSession, source: Checkpoint, *, actor: str, recovery: int | None = None) -> None:
    if not wants(EventType.SESSION_FORKED, fork.project_id):
        return
    data = {
        "session": session_data(fork),
        "source_session": session_data(source.session),
        "source_checkpoint": checkpoint_data(source),
        "actor": actor,
        **({"recovery": recovery} if recovery is not None else {}),
    }
    publish(EventType.SESSION_FORKED, project=fork.project, data=data)


def publish_recovery_finished(recovery: Recovery, project: Project, *, counts: dict[str, int], actor: str) -> None:
    """recovery.finished: one per batch and project, with its counts (what notification rules send)."""
    if not wants(EventType.RECOVERY_FINISHED, project.pk):
        return
    data = {
        "recovery": {
            "id": recovery.pk,
            "action": recovery.action,
            "rule": recovery.rule,
            "reason": recovery.reason,
            "actor": actor,
            "counts": counts,
            "url": console_url("recovery_detail", recovery.pk),
        }
    }
    publish(EventType.RECOVERY_FINISHED, project=project, data=data)


def publish_alert(type: str, alert: DriftAlert, *, previous_severity: str = "") -> None:
    """alert.opened, alert.escalated (with the severity before) or alert.resolved."""
    if not wants(type, alert.session.project_id):
        return
    data: dict[str, Any] = {"session": session_data(alert.session), "alert": alert_data(alert)}
    if type == EventType.ALERT_ESCALATED:
        data["previous_severity"] = previous_severity
    dedupe_key = f"alert:{alert.session_id}:{alert.kind}"
    publish(type, project=alert.session.project, data=data, dedupe_key=dedupe_key)


def publish_phase_waiting(phase: Phase) -> None:
    data = {"session": session_data(phase.session), "phase": phase_data(phase)}
    dedupe_key = f"phase:{phase.session_id}:{phase.number}"
    publish(EventType.PHASE_WAITING, project=phase.session.project, data=data, dedupe_key=dedupe_key)


def publish_interrupt_waiting(session: AgentSession, nodes: Sequence[str]) -> None:
    """A LangGraph thread stopped at interrupt(): its project's approvers are emailed the answer form's link,
    as for a phase waiting for approval."""
    data = {
        "session": session_data(session),
        "interrupts": {"nodes": list(nodes), "url": console_url("session_interrupts", session.pk)},
    }
    dedupe_key = f"interrupt:{session.pk}"
    publish(EventType.INTERRUPT_WAITING, project=session.project, data=data, dedupe_key=dedupe_key)


def publish_interrupt_answered(session: AgentSession, answer: InterruptAnswer) -> None:
    if not wants(EventType.INTERRUPT_ANSWERED, session.project_id):
        return
    data = {
        "session": session_data(session),
        "interrupt": {
            "id": answer.interrupt_id,
            "node": answer.node,
            "value": answer.value,
            "comment": answer.comment,
            "answered_by": answer.answered_by_name,
            "url": console_url("session_interrupts", session.pk),
        },
    }
    publish(EventType.INTERRUPT_ANSWERED, project=session.project, data=data)


def publish_phase_feedback(feedback: PhaseFeedback) -> None:
    phase = feedback.phase
    if not wants(EventType.PHASE_FEEDBACK, phase.session.project_id):
        return
    data = {
        "session": session_data(phase.session),
        "phase": phase_data(phase),
        "feedback": {
            "action": feedback.action,
            "approved": feedback.approved,
            "comments": feedback.comments,
            "reviewer": feedback.reviewer_name or (feedback.reviewer.get_username() if feedback.reviewer else ""),
        },
    }
    publish(EventType.PHASE_FEEDBACK, project=phase.session.project, data=data)


def publish_job_failed(run: JobRun) -> None:
    """job.failed belongs to no project: notification rules decide who hears of it (notifications.py)."""
    data = {
        "job": {
            "name": run.job,
            "run_id": run.pk,
            "status": run.status,
            "error": run.error,
            "url": console_url("jobs"),
        }
    }
    publish(EventType.JOB_FAILED, project=None, data=data, dedupe_key=f"job:{run.job}")


def publish_import_failed(job: ImportJob) -> None:
    if not wants(EventType.IMPORT_FAILED, job.project_id):
        return
    data = {"import": {"id": job.pk, "error": job.error, "url": console_url("import_job", job.pk)}}
    publish(EventType.IMPORT_FAILED, project=job.project, data=data)


def ping_event(project: Project, *, message: str) -> Event:
    """The unsaved `ping` event of a "Send test": build its delivery, save both, then `deliveries.send_now`."""
    return Event(project=project, type=EventType.PING, data={"message": message})
