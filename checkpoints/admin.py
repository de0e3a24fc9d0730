from __future__ import annotations

from django.contrib import admin

from . import models


@admin.register(models.Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "created_at"]
    search_fields = ["slug", "name"]


@admin.register(models.AgentSession)
class AgentSessionAdmin(admin.ModelAdmin):
    list_display = ["external_id", "project", "agent", "status", "last_seq", "updated_at"]
    list_filter = ["status", "project"]
    search_fields = ["external_id", "title", "agent"]
    raw_id_fields = ["project", "head", "forked_from"]
    readonly_fields = ["last_seq", "restore_generation", "live_root"]
    show_full_result_count = False


@admin.register(models.Checkpoint)
class CheckpointAdmin(admin.ModelAdmin):
    list_display = [
        "session",
        "seq",
        "name",
        "kind",
        "status",
        "pinned",
        "created_at",
        "raw_bytes",
        "stored_bytes",
    ]
    list_filter = ["kind", "status", "pinned"]
    search_fields = ["name", "session__external_id"]
    raw_id_fields = ["session", "parent"]
    readonly_fields = ["root", "state_hash", "raw_bytes", "stored_bytes"]
    list_select_related = ["session__project"]
    show_full_result_count = False


@admin.register(models.Phase)
class PhaseAdmin(admin.ModelAdmin):
    list_display = ["session", "number", "name", "status", "retry_count"]
    list_filter = ["status"]
    raw_id_fields = ["session"]


@admin.register(models.AgentOutput)
class AgentOutputAdmin(admin.ModelAdmin):
    list_display = ["phase", "agent_name", "status", "model", "created_at"]
    raw_id_fields = ["phase"]


@admin.register(models.PhaseFeedback)
class PhaseFeedbackAdmin(admin.ModelAdmin):
    list_display = ["phase", "action", "approved", "reviewer", "created_at"]
    list_filter = ["action"]
    raw_id_fields = ["phase", "reviewer"]


@admin.register(models.DriftAlert)
class DriftAlertAdmin(admin.ModelAdmin):
    list_display = ["session", "kind", "severity", "state", "opened_at"]
    list_filter = ["kind", "severity", "state"]
    raw_id_fields = ["session", "checkpoint", "last_good", "acknowledged_by"]


@admin.register(models.RetentionPolicy)
class RetentionPolicyAdmin(admin.ModelAdmin):
    list_display = ["kind", "project", "keep_last", "keep_last_scope", "max_age", "enabled"]
    list_filter = ["kind", "enabled"]


@admin.register(models.ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["name", "project", "prefix", "scopes", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["project"]
    readonly_fields = ["prefix", "token_hash", "last_used_at"]


@admin.register(models.AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    list_display = ["created_at", "actor", "action", "target"]
    list_filter = ["action"]
    search_fields = ["actor", "target", "reason"]
    raw_id_fields = ["actor_user", "actor_token", "project", "session", "checkpoint"]

    def has_change_permission(self, request, obj=None) -> bool:  # append-only
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(models.WatchedSource)
class WatchedSourceAdmin(admin.ModelAdmin):
    list_display = ["path", "format", "project", "enabled", "last_scan_at"]
    list_filter = ["format", "enabled"]
