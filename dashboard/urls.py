from __future__ import annotations

from django.urls import path, register_converter

from .views import (
    actions,
    alerts,
    audit,
    checkpoint,
    compare,
    imports,
    interrupts,
    jobs,
    notifications,
    overview,
    phases,
    project_settings,
    purges,
    recoveries,
    retention,
    secrets,
    sessions,
    state_edit,
    timeline,
    tokens,
)


class IdConverter:
    """A whole number a database id or number column can hold: a larger one matches no page (404), instead of
    reaching a lookup that Django keeps in range for a field but not for a foreign key (SQLite: OverflowError)."""

    regex = "[0-9]+"

    def to_python(self, value: str) -> int:
        number = int(value)
        if number >= 2**63:
            raise ValueError(value)
        return number

    def to_url(self, value: int) -> str:
        return str(value)


register_converter(IdConverter, "id")

app_name = "dashboard"

urlpatterns = [
    path("", overview.overview, name="overview"),
    path("sessions/", sessions.session_list, name="session_list"),
    path("sessions/<id:pk>/", timeline.session_detail, name="session_detail"),
    path("sessions/<id:pk>/undo/", actions.undo_restore, name="session_undo"),
    path("sessions/<id:pk>/interrupts/", interrupts.session_interrupts, name="session_interrupts"),
    path("sessions/<id:pk>/interrupts/answer/", interrupts.answer_interrupt, name="interrupt_answer"),
    path("sessions/<id:pk>/export/", imports.session_export, name="session_export"),
    path("sessions/<id:pk>/phases/<id:number>/", phases.phase_detail, name="phase_detail"),
    path("sessions/<id:pk>/phases/<id:number>/feedback/", phases.phase_feedback, name="phase_feedback"),
    path("checkpoints/<id:pk>/", checkpoint.checkpoint_detail, name="checkpoint_detail"),
    path("checkpoints/<id:pk>/tree/", checkpoint.checkpoint_subtree, name="checkpoint_subtree"),
    path("checkpoints/<id:pk>/download/", checkpoint.checkpoint_download, name="checkpoint_download"),
    path("checkpoints/<id:pk>/restore/", actions.restore, name="checkpoint_restore"),
    path("checkpoints/<id:pk>/fork/", actions.fork, name="checkpoint_fork"),
    path("checkpoints/<id:pk>/pin/", actions.pin, name="checkpoint_pin"),
    path("checkpoints/<id:pk>/edit/", state_edit.edit_state, name="checkpoint_edit"),
    path("compare/", compare.compare, name="compare"),
    path("alerts/", alerts.alert_list, name="alert_list"),
    path("alerts/<id:pk>/acknowledge/", alerts.acknowledge, name="alert_acknowledge"),
    path("alerts/<id:pk>/resolve/", alerts.resolve, name="alert_resolve"),
    path("recoveries/new/", recoveries.recovery_new, name="recovery_new"),
    path("recoveries/<id:pk>/", recoveries.recovery_detail, name="recovery_detail"),
    path("recoveries/<id:pk>/undo/", recoveries.recovery_undo, name="recovery_undo"),
    path("audit/", audit.audit_log, name="audit_log"),
    path("retention/", retention.retention, name="retention"),
    path("retention/dry-run/", retention.retention_dry_run, name="retention_dry_run"),
    path("imports/", imports.import_upload, name="import_upload"),
    path("imports/<id:pk>/", imports.import_job, name="import_job"),
    path("jobs/", jobs.job_list, name="jobs"),
    path("jobs/<id:pk>/run/", jobs.job_run, name="job_run"),
    path("notifications/", notifications.notification_projects, name="notification_projects"),
    path("projects/<slug:slug>/settings/", project_settings.project_settings, name="project_settings"),
    path("projects/<slug:slug>/secrets/", secrets.secrets, name="secrets"),
    path("projects/<slug:slug>/secrets/<id:pk>/reveal/", secrets.secret_reveal, name="secret_reveal"),
    path("projects/<slug:slug>/secrets/<id:pk>/dismiss/", secrets.secret_dismiss, name="secret_dismiss"),
    path("projects/<slug:slug>/purges/new/", purges.purge_new, name="purge_new"),
    path("projects/<slug:slug>/purges/<id:pk>/", purges.purge_detail, name="purge_detail"),
    path("tokens/", tokens.token_projects, name="token_projects"),
    path("projects/<slug:slug>/tokens/", tokens.tokens, name="tokens"),
    path("projects/<slug:slug>/tokens/<id:pk>/revoke/", tokens.token_revoke, name="token_revoke"),
    path("notifications/<slug:slug>/", notifications.notifications, name="notifications"),
    path("notifications/<slug:slug>/rules/new/", notifications.rule_create, name="notification_rule_create"),
    path("notifications/<slug:slug>/rules/<id:pk>/", notifications.rule_edit, name="notification_rule_edit"),
    path("notifications/<slug:slug>/rules/<id:pk>/delete/", notifications.rule_delete, name="notification_rule_delete"),
    path("notifications/<slug:slug>/rules/<id:pk>/test/", notifications.rule_test, name="notification_rule_test"),
]
