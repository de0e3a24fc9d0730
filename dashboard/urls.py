from __future__ import annotations

from django.urls import path

from .views import (
    actions,
    alerts,
    audit,
    checkpoint,
    compare,
    imports,
    jobs,
    overview,
    phases,
    retention,
    sessions,
    timeline,
)

app_name = "dashboard"

urlpatterns = [
    path("", overview.overview, name="overview"),
    path("sessions/", sessions.session_list, name="session_list"),
    path("sessions/<int:pk>/", timeline.session_detail, name="session_detail"),
    path("sessions/<int:pk>/undo/", actions.undo_restore, name="session_undo"),
    path("sessions/<int:pk>/export/", imports.session_export, name="session_export"),
    path("sessions/<int:pk>/phases/<int:number>/", phases.phase_detail, name="phase_detail"),
    path("sessions/<int:pk>/phases/<int:number>/feedback/", phases.phase_feedback, name="phase_feedback"),
    path("checkpoints/<int:pk>/", checkpoint.checkpoint_detail, name="checkpoint_detail"),
    path("checkpoints/<int:pk>/tree/", checkpoint.checkpoint_subtree, name="checkpoint_subtree"),
    path("checkpoints/<int:pk>/download/", checkpoint.checkpoint_download, name="checkpoint_download"),
    path("checkpoints/<int:pk>/restore/", actions.restore, name="checkpoint_restore"),
    path("checkpoints/<int:pk>/fork/", actions.fork, name="checkpoint_fork"),
    path("checkpoints/<int:pk>/pin/", actions.pin, name="checkpoint_pin"),
    path("compare/", compare.compare, name="compare"),
    path("alerts/", alerts.alert_list, name="alert_list"),
    path("alerts/<int:pk>/acknowledge/", alerts.acknowledge, name="alert_acknowledge"),
    path("alerts/<int:pk>/resolve/", alerts.resolve, name="alert_resolve"),
    path("audit/", audit.audit_log, name="audit_log"),
    path("retention/", retention.retention, name="retention"),
    path("imports/", imports.import_upload, name="import_upload"),
    path("imports/<int:pk>/", imports.import_job, name="import_job"),
    path("jobs/", jobs.job_list, name="jobs"),
    path("jobs/<int:pk>/run/", jobs.job_run, name="job_run"),
]
