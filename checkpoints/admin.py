"""The admin site, for manual clean-up: browse everything, fix by hand, delete only what is not protected.

Big tables (checkpoints, chunks, audit events) never get a full COUNT(*) (`CappedCountPaginator`), never a
million-row <select> (raw-id widgets), never a facet count or a date hierarchy (a DISTINCT over the table).
Every action goes through a service that writes the audit row, with the admin user as the actor.
"""

from __future__ import annotations

import json
from functools import cached_property
from typing import Any

import orjson
from axes.admin import AccessAttemptAdmin
from axes.models import AccessAttempt
from django import forms
from django.contrib import admin, messages
from django.contrib.admin import ShowFacets, helpers
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db import connection, transaction
from django.db.models import Count, Q, QuerySet
from django.db.models.expressions import Combinable
from django.db.models.functions import Length
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.text import Truncator

from . import models, store, tasks
from .jobs.retention import describe, plan_retention
from .outbox.deliveries import retry_now
from .outbox.notifications import (
    RULE_EVENTS,
    RULE_FIELDS,
    create_rule,
    delete_rule,
    target_error,
    update_rule,
)
from .outbox.webhooks import delete_webhook
from .registry.detectors import DETECTORS
from .services import (
    Actor,
    InvalidInput,
    acknowledge_alert,
    cleanup,
    pin_checkpoint,
    request_job_run,
    resolve_alert,
    revoke_token,
    set_token_scopes,
)
from .services.logins import reset_login_attempts
from .services.memberships import revoke_membership, save_membership
from .services.typeguard import parse_allowlist, set_type_allowlist
from .store import jsoncodec, masking
from .store.tallies import SESSION_FIELDS

STATE_PREVIEW_BYTES = 20_000


class CappedCountPaginator(Paginator):
    """Counts at most `cap` rows (a LIMITed subquery); past that, PostgreSQL's planner estimates the rows (at least
    the cap) and anything else reports the cap. Counting exactly reads every matching row: 10,000 of a name search
    took longer than the page. An unfiltered list of a table PostgreSQL's statistics put past the cap is not
    counted at all: its size is the table's `pg_class.reltuples` (what ANALYZE and autovacuum last saw)."""

    cap = 1_000
    object_list: QuerySet[Any]  # the admin pages querysets, never lists

    @cached_property
    def count(self) -> int:
        rows = self.object_list.order_by().values("pk")
        estimate = self._table_estimate(rows)
        if estimate is not None:
            return estimate
        capped = rows[: self.cap + 1].count()
        if capped <= self.cap or connection.vendor != "postgresql":
            return min(capped, self.cap)
        sql, params = rows.query.sql_with_params()
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
            [[plan]] = cursor.fetchone()
        return max(int(plan["Plan"]["Plan Rows"]), self.cap)

    def _table_estimate(self, rows: QuerySet[Any]) -> int | None:
        """The table's estimated rows when the list is the whole table (no filter, no search) and past the cap."""
        if connection.vendor != "postgresql" or rows.query.where or rows.query.distinct:
            return None
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT reltuples::bigint FROM pg_class WHERE oid = to_regclass(%s)",
                [connection.ops.quote_name(rows.model._meta.db_table)],
            )
            row = cursor.fetchone()
        # -1: never analyzed; below the cap an exact (capped) count is cheap and right
        return int(row[0]) if row and row[0] > self.cap else None


LIST_TEXT = 120  # characters of a free-text column a changelist row shows


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows nobody edits by hand: audit events are append-only, chunks belong to the store and GC."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class BigTableAdmin(admin.ModelAdmin):
    """A list of a table that grows with use (millions of rows at scale): its count is capped or estimated, never a
    COUNT(*) of the table, and its ordering (with the primary key the changelist appends) is one an index reads in
    order, so a page reads its rows and stops. tests/admin/test_admin_scale.py proves both on PostgreSQL."""

    paginator = CappedCountPaginator
    show_full_result_count = False
    show_facets = ShowFacets.NEVER
    list_per_page = 50  # 100 rows of checkpoints weighed 106–126 kB: a first view stays under 100 kB (#23 item 7)


class MaskedListAdmin(admin.ModelAdmin):
    """A list whose rows quote states, shown to staff as the console shows them to people (docs/secrets.md,
    "Masking"): the project's found values masked in `masked_in_list`, in memory (a list here edits nothing)."""

    masked_in_list: tuple[str, ...] = ()

    def project_id_of(self, obj: Any) -> int | None:
        return getattr(obj, "project_id", None)

    def mask(self, rows: list[Any], names: tuple[str, ...]) -> None:
        if not rows or not names:
            return
        projects = [self.project_id_of(row) for row in rows]
        maskers = masking.for_projects(pk for pk in projects if pk is not None)
        for row, project_id in zip(rows, projects, strict=True):
            shown = maskers.get(project_id) if project_id is not None else None
            if shown is not None and shown.active:
                for name in names:
                    setattr(row, name, shown.json(getattr(row, name)))

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        changelist = super().get_changelist_instance(request)
        changelist.result_list = list(changelist.result_list)
        self.mask(changelist.result_list, self.masked_in_list)
        return changelist


class MaskedAdmin(MaskedListAdmin):
    """Rows that quote states, masked on the list (`masked_in_list`) and on the row's page (`masked`). Masked in
    memory, on admins that save nothing (`has_change_permission` is False): a masked text is never written back."""

    masked: tuple[str, ...] = ()

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_object(self, request: HttpRequest, object_id: str, from_field: str | None = None) -> Any:
        row = super().get_object(request, object_id, from_field)
        if row is not None:
            self.mask([row], self.masked)
        return row


def _actor(request: HttpRequest) -> Actor:
    if isinstance(request.user, AnonymousUser):  # never: the admin lets in signed-in staff only
        raise PermissionDenied
    return Actor.for_user(request.user)


def _names(labels: list[str], limit: int = 20) -> str:
    more = len(labels) - limit
    return ", ".join(labels[:limit]) + (f" and {more} more" if more > 0 else "")


def _report(modeladmin: admin.ModelAdmin, request: HttpRequest, result: cleanup.Deletion, what: str) -> None:
    modeladmin.message_user(request, f"Deleted {len(result.deleted)} {what}.", messages.SUCCESS)
    if result.refused:
        modeladmin.message_user(
            request,
            f"Refused {len(result.refused)} protected checkpoint{'s' * (len(result.refused) != 1)} (pinned, a "
            f"session head, a fork source, a restore target or an unresolved alert's checkpoint): "
            f"{_names(result.refused)}.",
            messages.WARNING,
        )


class MembershipsAudited(admin.ModelAdmin):
    """Roles granted, changed or taken back here (inline or not) go through the access services: audited."""

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if isinstance(obj, models.ProjectMembership):
            save_membership(obj, actor=_actor(request))
        else:
            super().save_model(request, obj, form, change)

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        if isinstance(obj, models.ProjectMembership):
            revoke_membership(obj, actor=_actor(request))
        else:
            super().delete_model(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        if queryset.model is models.ProjectMembership:
            for membership in queryset.select_related("user", "project"):
                revoke_membership(membership, actor=_actor(request))
        else:
            super().delete_queryset(request, queryset)

    def save_formset(self, request: HttpRequest, form: Any, formset: Any, change: bool) -> None:
        if formset.model is not models.ProjectMembership:
            return super().save_formset(request, form, formset, change)
        memberships = formset.save(commit=False)
        for membership in formset.deleted_objects:
            revoke_membership(membership, actor=_actor(request))
        for membership in memberships:
            save_membership(membership, actor=_actor(request))


class MembershipInline(admin.TabularInline):
    model = models.ProjectMembership
    extra = 1
    fields = ["user", "role", "created_at"]
    readonly_fields = ["created_at"]
    autocomplete_fields = ["user"]
    verbose_name = "member"
    verbose_name_plural = "members (who sees this project, and with which role; staff see every project)"


class UserMembershipInline(MembershipInline):
    fields = ["project", "role", "created_at"]
    autocomplete_fields = ["project"]
    verbose_name = "project role"
    verbose_name_plural = "project roles (the projects this person sees; staff see every project with their groups)"


class ProjectForm(forms.ModelForm):
    """The allow-list checked as the console's settings page checks it."""

    def clean_type_allowlist(self) -> list[str]:
        entries = self.cleaned_data["type_allowlist"]
        if not isinstance(entries, list) or not all(isinstance(entry, str) for entry in entries):
            raise forms.ValidationError("a JSON list of type names")
        try:
            return parse_allowlist("\n".join(entries))
        except InvalidInput as exc:
            raise forms.ValidationError(str(exc).removeprefix("type_allowlist: ")) from None


# The console's name where Django would say "Django administration"
admin.site.site_header = "Checkpoint Console administration"
admin.site.site_title = "Checkpoint Console admin"
admin.site.index_title = "Records and settings"


@admin.register(models.Project)
class ProjectAdmin(MembershipsAudited):
    form = ProjectForm
    list_display = ["slug", "name", "created_at"]
    search_fields = ["slug", "name"]
    date_hierarchy = "created_at"
    inlines = [MembershipInline]

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        """A changed allow-list goes through set_type_allowlist (audited); the other fields save as usual."""
        entries = obj.type_allowlist
        if change and "type_allowlist" in form.changed_data:
            obj.type_allowlist = form.initial["type_allowlist"]
            super().save_model(request, obj, form, change)
            set_type_allowlist(obj, actor=_actor(request), entries=entries)
        else:
            super().save_model(request, obj, form, change)


@admin.register(models.ProjectMembership)
class ProjectMembershipAdmin(MembershipsAudited):
    list_display = ["user", "project", "role", "created_at"]
    list_filter = ["role", "project"]
    search_fields = ["user__username", "project__slug"]
    autocomplete_fields = ["user", "project"]
    list_select_related = ["user", "project"]


User = get_user_model()
admin.site.unregister(User)


@admin.register(User)
class ConsoleUserAdmin(MembershipsAudited, UserAdmin):
    inlines = [*UserAdmin.inlines, UserMembershipInline]


@admin.register(models.AgentSession)
class AgentSessionAdmin(MaskedListAdmin, BigTableAdmin):
    list_display = ["external_id", "project", "agent", "title", "status", "last_seq", "updated_at", "checkpoints_link"]
    list_filter = ["status", "project", "agent", "source_format", ("updated_at", admin.DateFieldListFilter)]
    search_fields = ["external_id", "title", "agent"]
    raw_id_fields = ["project", "head", "forked_from"]
    readonly_fields = ["last_seq", "restore_generation", "live_state_at", "created_at", "updated_at", *SESSION_FIELDS]
    exclude = ["live_root"]
    list_select_related = ["project"]
    date_hierarchy = "updated_at"
    actions = ["archive_sessions", "purge_sessions", "clear_recovery"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[models.AgentSession]:
        return super().get_queryset(request).defer("metadata", "live_root")

    # A session's title and metadata are editable here, so they cannot be masked in memory like the read-only
    # admins' rows (a save would write the mask over them): when they quote a found value, the form leaves them
    # out and shows them masked, read-only; the rest of the session stays editable. The list masks titles.
    MASKED = ("title", "metadata")
    masked_in_list = ("title",)

    def _masked(self, session: models.AgentSession | None) -> dict[str, Any]:
        """The masked title and metadata when masking changes them, else {}; worked out once for the page's row
        (the fields, the read-only fields and both displays ask)."""
        if session is None:
            return {}
        if not hasattr(session, "_masked_in_admin"):
            shown = masking.for_projects([session.project_id]).get(session.project_id)
            masked = (
                {name: shown.json(getattr(session, name)) for name in self.MASKED} if shown and shown.active else {}
            )
            changed = any(masked[name] != getattr(session, name) for name in masked)
            session._masked_in_admin = masked if changed else {}  # type: ignore[attr-defined]
        result: dict[str, Any] = session._masked_in_admin  # type: ignore[attr-defined]
        return result

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = list(super().get_fields(request, obj))
        if self._masked(obj):
            fields = [name for name in fields if name not in self.MASKED] + ["shown_title", "shown_metadata"]
        return fields

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        readonly = list(super().get_readonly_fields(request, obj))
        return [*readonly, "shown_title", "shown_metadata"] if self._masked(obj) else readonly

    @admin.display(description="title (masked: it quotes a found secret)")
    def shown_title(self, session: models.AgentSession) -> str:
        return str(self._masked(session).get("title", session.title))

    @admin.display(description="metadata (masked: it quotes a found secret)")
    def shown_metadata(self, session: models.AgentSession) -> str:
        return json.dumps(self._masked(session).get("metadata", session.metadata), indent=2, ensure_ascii=False)

    @admin.display(description="checkpoints")
    def checkpoints_link(self, session: models.AgentSession) -> str:
        url = reverse("admin:checkpoints_checkpoint_changelist")
        return format_html('<a href="{}?session__id__exact={}">checkpoints</a>', url, session.pk)

    @admin.action(description="Archive selected sessions")
    def archive_sessions(self, request: HttpRequest, queryset: QuerySet[models.AgentSession]) -> None:
        archived = [
            str(s) for s in queryset.select_related("project") if cleanup.archive_session(s, actor=_actor(request))
        ]
        self.message_user(request, f"Archived {len(archived)} session{'s' * (len(archived) != 1)}: {_names(archived)}.")

    @admin.action(description="Purge selected sessions (delete them with their checkpoints)…")
    def purge_sessions(self, request: HttpRequest, queryset: QuerySet[models.AgentSession]) -> HttpResponse | None:
        sessions = list(queryset.select_related("project").order_by("pk"))
        if request.POST.get("post") != "yes":
            counts = dict(
                models.Checkpoint.objects.filter(session__in=sessions)
                .order_by()
                .values_list("session_id")
                .annotate(n=Count("pk"))
            )
            context = {
                **self.admin_site.each_context(request),
                "title": "Purge sessions?",
                "opts": self.model._meta,
                "sessions": [(s, counts.get(s.pk, 0)) for s in sessions],
                "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            }
            return TemplateResponse(request, "admin/checkpoints/purge_confirm.html", context)
        total = sum(cleanup.purge_session(s, actor=_actor(request)) for s in sessions)
        self.message_user(
            request,
            f"Purged {len(sessions)} session{'s' * (len(sessions) != 1)} ({_names([str(s) for s in sessions])}) "
            f"and {total} checkpoints.",
        )
        return None

    @admin.action(description="Clear recovery checkpoints of selected sessions")
    def clear_recovery(self, request: HttpRequest, queryset: QuerySet[models.AgentSession]) -> None:
        result = cleanup.Deletion()
        for session in queryset.select_related("project"):
            result.extend(cleanup.clear_recovery_checkpoints(session, actor=_actor(request)))
        _report(self, request, result, "recovery checkpoints")


@admin.register(models.Checkpoint)
class CheckpointAdmin(MaskedAdmin, BigTableAdmin):
    list_display = ["id", "session", "seq", "name", "kind", "status", "pinned", "step", "created_at", "raw_bytes"]
    list_display_links = ["id", "seq"]
    list_filter = [
        "kind",
        "status",
        "pinned",
        "session__project",
        "session__agent",
        ("created_at", admin.DateFieldListFilter),
    ]
    search_fields = ["name", "=session__external_id"]  # see get_search_results
    show_full_result_count = False  # "N results" without a second count of every checkpoint
    raw_id_fields = ["session", "parent"]
    list_select_related = ["session__project"]
    ordering = ["-id"]  # newest first, straight off the primary key

    def get_ordering(self, request: HttpRequest) -> list[str | Combinable] | tuple[str | Combinable, ...]:
        """One session's checkpoints (the sessions list links here) newest first along its (session, seq) index:
        by id, PostgreSQL either sorts all of a big session's rows or walks the primary key past every newer
        checkpoint of the store to find a small session's."""
        if "session__id__exact" in request.GET:
            return ["-session_id", "-seq"]  # unique together: the changelist appends no -pk to sort by
        return self.ordering or ()

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        """A piece of the name or a session's own id. The sessions and the names are looked up first: an OR across
        the join to sessions would make PostgreSQL read every checkpoint. Names are matched among each session's
        name tallies (a pg_trgm index serves them, migration 0037_name_search_by_tallies), not on the checkpoint rows:
        a trigram index there cost every checkpoint its entries, for a search only the admin makes."""
        term = search_term.strip()
        if not term:
            return queryset, False
        sessions = list(models.AgentSession.objects.filter(external_id__iexact=term).values_list("pk", flat=True))
        return queryset.filter(models.name_contains(term) | Q(session_id__in=sessions)), False

    fields = readonly_fields = (  # everything shown, nothing editable
        "session",
        "seq",
        "parent",
        "name",
        "kind",
        "status",
        "status_reason",
        "step",
        "phase",
        "pinned",
        "created_at",
        "received_at",
        "raw_bytes",
        "stored_bytes",
        "operation_id",
        "operation_done",
        "expires_at",
        "idempotency_key",
        "metadata",
        "root_hex",
        "state_hash_hex",
        "state",
    )
    actions = ["pin", "unpin", "delete_safely"]
    masked = ("name", "status_reason", "metadata")
    masked_in_list = ("name",)

    class Media:
        css = {"all": ["console/admin.css"]}  # the state preview's box: no inline styles under the CSP

    def get_queryset(self, request: HttpRequest) -> QuerySet[models.Checkpoint]:
        return super().get_queryset(request).defer("metadata", "status_reason", "root", "state_hash")

    def project_id_of(self, checkpoint: models.Checkpoint) -> int:
        return checkpoint.session.project_id

    def get_object(self, request: HttpRequest, object_id: str, from_field: str | None = None) -> Any:
        queryset = models.Checkpoint.objects.select_related("session__project")
        try:
            checkpoint = queryset.get(pk=int(object_id))
        except (ValueError, models.Checkpoint.DoesNotExist):
            return None
        self.mask([checkpoint], self.masked)
        return checkpoint

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # replaced by delete_safely, which refuses protected checkpoints
        return actions

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # checkpoints come from agents and imports

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is not None and cleanup.is_protected(obj):
            return False
        return super().has_delete_permission(request, obj)

    def delete_view(self, request: HttpRequest, object_id: str, extra_context: Any = None) -> HttpResponse:
        checkpoint = self.get_object(request, object_id)
        if checkpoint is not None and cleanup.is_protected(checkpoint):
            self.message_user(
                request,
                f"Refused: {checkpoint.session} {checkpoint} is protected (pinned, a session head, a fork source, "
                f"a restore target or an unresolved alert's checkpoint).",
                messages.ERROR,
            )
            return HttpResponseRedirect(reverse("admin:checkpoints_checkpoint_change", args=[checkpoint.pk]))
        return super().delete_view(request, object_id, extra_context)

    def delete_model(self, request: HttpRequest, obj: models.Checkpoint) -> None:
        cleanup.delete_checkpoints([obj.pk], actor=_actor(request))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[models.Checkpoint]) -> None:
        cleanup.delete_checkpoints(list(queryset.values_list("pk", flat=True)), actor=_actor(request))

    @admin.display(description="root")
    def root_hex(self, checkpoint: models.Checkpoint) -> str:
        return checkpoint.root_hex

    @admin.display(description="state hash")
    def state_hash_hex(self, checkpoint: models.Checkpoint) -> str:
        return checkpoint.state_hash_hex

    @admin.display(description="state (read-only)")
    def state(self, checkpoint: models.Checkpoint) -> str:
        try:
            data = store.load_state_json(bytes(checkpoint.root))
        except store.StateNotFound:
            return "(state missing from the store)"
        shown = masking.for_project(checkpoint.session.project)
        text = jsoncodec.dumps(shown.json(jsoncodec.loads(data)), option=orjson.OPT_INDENT_2).decode()
        note = ""
        if len(text) > STATE_PREVIEW_BYTES:
            note = f"\n… truncated: {len(text):,} characters in all; the full state is in the console and the API."
            text = text[:STATE_PREVIEW_BYTES]
        return format_html('<pre class="state-preview">{}{}</pre>', text, note)

    def _pin(self, request: HttpRequest, queryset: QuerySet[models.Checkpoint], pinned: bool) -> None:
        changed = [
            f"{c.session} {c}"
            for c in queryset.select_related("session__project").exclude(pinned=pinned)
            if pin_checkpoint(c, actor=_actor(request), pinned=pinned, reason="admin")
        ]
        verb = "Pinned" if pinned else "Unpinned"
        self.message_user(request, f"{verb} {len(changed)} checkpoint{'s' * (len(changed) != 1)}: {_names(changed)}.")

    @admin.action(description="Pin selected checkpoints")
    def pin(self, request: HttpRequest, queryset: QuerySet[models.Checkpoint]) -> None:
        self._pin(request, queryset, True)

    @admin.action(description="Unpin selected checkpoints")
    def unpin(self, request: HttpRequest, queryset: QuerySet[models.Checkpoint]) -> None:
        self._pin(request, queryset, False)

    @admin.action(description="Delete selected checkpoints (protected ones are refused)", permissions=["delete"])
    def delete_safely(self, request: HttpRequest, queryset: QuerySet[models.Checkpoint]) -> None:
        result = cleanup.delete_checkpoints(list(queryset.values_list("pk", flat=True)), actor=_actor(request))
        _report(self, request, result, "checkpoints")


@admin.register(models.Chunk)
class ChunkAdmin(ReadOnlyAdmin, BigTableAdmin):
    """Read-only: garbage collection is what deletes chunks."""

    list_display = ["hash_hex", "raw_size", "stored_size", "is_patch", "created_at"]
    list_display_links = None
    list_filter = [("created_at", admin.DateFieldListFilter)]
    ordering = ["hash"]  # the primary key: created_at has no index (a chunk's age matters only to garbage collection)

    def get_queryset(self, request: HttpRequest) -> QuerySet[models.Chunk]:
        return super().get_queryset(request).defer("data").annotate(stored=Length("data"))

    @admin.display(description="hash")
    def hash_hex(self, chunk: models.Chunk) -> str:
        return bytes(chunk.hash).hex()

    @admin.display(description="stored bytes")
    def stored_size(self, chunk: Any) -> int:
        return chunk.stored

    @admin.display(description="patch", boolean=True)
    def is_patch(self, chunk: models.Chunk) -> bool:
        return chunk.base is not None


@admin.register(models.LangGraphCheckpoint)
class LangGraphCheckpointAdmin(ReadOnlyAdmin, BigTableAdmin):
    """Read-only: what LangGraph knows of a checkpoint goes with it (delete the checkpoint to remove it)."""

    list_display = ["checkpoint_id", "checkpoint_ns", "session", "console", "current", "run_id"]
    list_filter = ["current"]
    search_fields = ["=checkpoint_id", "=run_id", "=session__external_id"]
    list_select_related = ["session", "console"]
    ordering = ["-console_id"]
    exclude = ["header"]


@admin.register(models.LangGraphWrites)
class LangGraphWritesAdmin(ReadOnlyAdmin, BigTableAdmin):
    """Read-only: a checkpoint's pending writes go with it."""

    list_display = ["checkpoint_id", "checkpoint_ns", "task_id", "session", "interrupted", "resumed", "failed"]
    list_filter = ["interrupted", "resumed", "failed"]
    search_fields = ["=checkpoint_id", "=task_id", "=session__external_id"]
    list_select_related = ["session"]
    ordering = ["-id"]
    exclude = ["writes", "values_root"]


@admin.register(models.InterruptAnswer)
class InterruptAnswerAdmin(ReadOnlyAdmin):
    """Read-only: an answer is given in the console's form or the API (audited), and the graph may have taken it."""

    list_display = ["interrupt_id", "session", "node", "answered_by_name", "answered_at", "consumed_at"]
    search_fields = ["=interrupt_id", "=session__external_id"]
    list_select_related = ["session"]
    ordering = ["-answered_at", "-id"]


@admin.register(models.LangGraphTombstone)
class LangGraphTombstoneAdmin(ReadOnlyAdmin):
    """Read-only: removing a tombstone would let a late put bring the deleted history back."""

    list_display = ["external_id", "project", "deleted_at"]
    search_fields = ["=external_id"]
    list_select_related = ["project"]


@admin.register(models.Phase)
class PhaseAdmin(admin.ModelAdmin):
    list_display = ["session", "number", "name", "status", "retry_count", "started_at", "completed_at"]
    list_filter = ["status", "session__project", "session__agent"]
    search_fields = ["name", "=session__external_id"]
    raw_id_fields = ["session"]
    list_select_related = ["session__project"]
    show_full_result_count = False


@admin.register(models.AgentOutput)
class AgentOutputAdmin(admin.ModelAdmin):
    list_display = ["phase", "agent_name", "status", "model", "created_at"]
    list_filter = ["status", ("created_at", admin.DateFieldListFilter)]
    search_fields = ["agent_name", "model"]
    raw_id_fields = ["phase"]
    list_select_related = ["phase"]
    show_full_result_count = False


@admin.register(models.PhaseFeedback)
class PhaseFeedbackAdmin(admin.ModelAdmin):
    list_display = ["phase", "action", "approved", "reviewer", "reviewer_name", "created_at"]
    list_filter = ["action", "approved", ("created_at", admin.DateFieldListFilter)]
    search_fields = ["reviewer_name", "comments"]
    raw_id_fields = ["phase", "reviewer"]
    list_select_related = ["phase", "reviewer"]
    show_full_result_count = False


@admin.register(models.DriftAlert)
class DriftAlertAdmin(MaskedAdmin, BigTableAdmin):
    """Read here, changed by the actions (the alert services, audited)."""

    list_display = ["id", "session", "kind", "severity", "state", "opened_at", "acknowledged_by", "resolved_at"]
    list_filter = [
        "state",
        "kind",
        "severity",
        "session__project",
        "session__agent",
    ]
    search_fields = ["message", "=session__external_id"]
    raw_id_fields = ["session", "checkpoint", "last_good", "acknowledged_by"]
    list_select_related = ["session__project", "acknowledged_by"]
    date_hierarchy = "opened_at"
    actions = ["acknowledge", "resolve"]
    masked = ("message", "evidence")

    def project_id_of(self, alert: models.DriftAlert) -> int:
        return alert.session.project_id

    @admin.action(description="Acknowledge selected alerts")
    def acknowledge(self, request: HttpRequest, queryset: QuerySet[models.DriftAlert]) -> None:
        alerts = list(queryset.filter(state=models.AlertState.OPEN).select_related("session__project"))
        for alert in alerts:
            acknowledge_alert(alert, actor=_actor(request))
        self.message_user(request, f"Acknowledged {len(alerts)} alert{'s' * (len(alerts) != 1)}.")

    @admin.action(description="Resolve selected alerts")
    def resolve(self, request: HttpRequest, queryset: models.DriftAlertQuerySet) -> None:
        alerts = list(queryset.unresolved().select_related("session__project"))
        for alert in alerts:
            resolve_alert(alert, actor=_actor(request), reason="admin")
        self.message_user(request, f"Resolved {len(alerts)} alert{'s' * (len(alerts) != 1)}.")


class RetentionPolicyForm(forms.ModelForm):
    class Meta:
        model = models.RetentionPolicy
        fields = [
            "project",
            "kind",
            "enabled",
            "keep_last",
            "keep_last_scope",
            "max_age",
            "keep_first",
            "keep_latest_per_name",
            "until_operation_done",
            "applies_to_langgraph",
        ]
        help_texts = {
            "project": "Leave empty for the global policy of this kind; a project's policy overrides the global one.",
            "kind": "The checkpoint kind this policy applies to. A kind with no policy is kept forever.",
            "keep_last": "Keep the newest N checkpoints of this kind (empty: no such rule; 0: keep none by count).",
            "keep_last_scope": "Count the newest N per session (by seq) or per agent across its sessions in a "
            "project (by creation time).",
            "max_age": "Keep checkpoints younger than this (e.g. '7 00:00:00' for 7 days). Empty: no age rule.",
            "keep_first": "Always keep each session's first checkpoint.",
            "keep_latest_per_name": "Always keep each session's newest checkpoint of every name.",
            "until_operation_done": "Keep checkpoints whose operation has not finished (pre_operation).",
            "applies_to_langgraph": "Also apply to LangGraph threads, which are otherwise kept whole until the agent "
            "prunes them. Each namespace's latest checkpoint and one waiting on an interrupt are kept all the same.",
            "enabled": "A disabled policy deletes nothing. A checkpoint kept by no rule is deleted, except pinned "
            "ones, session heads, fork sources, restore targets and unresolved alerts' checkpoints.",
        }


@admin.register(models.RetentionPolicy)
class RetentionPolicyAdmin(admin.ModelAdmin):
    form = RetentionPolicyForm
    list_display = ["kind", "project", "rules", "applies_to_langgraph", "enabled"]
    list_filter = ["kind", "enabled", "applies_to_langgraph", "project"]
    raw_id_fields = ["project"]
    list_select_related = ["project"]
    fieldsets = [
        (None, {"fields": ["project", "kind", "enabled", "applies_to_langgraph"]}),
        (
            "Keep rules",
            {
                "description": "A checkpoint of this kind is deleted when no rule below keeps it.",
                "fields": [
                    ("keep_last", "keep_last_scope"),
                    "max_age",
                    "keep_first",
                    "keep_latest_per_name",
                    "until_operation_done",
                ],
            },
        ),
    ]

    @admin.display(description="rules")
    def rules(self, policy: models.RetentionPolicy) -> str:
        return describe(policy)

    def get_urls(self) -> list[Any]:
        run = path("run/", self.admin_site.admin_view(self.run_retention_view), name="checkpoints_retention_run")
        return [run, *super().get_urls()]

    def run_retention_view(self, request: HttpRequest) -> HttpResponse:
        """GET: a dry run with the counts by kind; POST: queue retention for real (the `apply_retention` task)."""
        if not request.user.has_perm("checkpoints.delete_checkpoint"):
            raise PermissionDenied
        if request.method == "POST":
            # queued as the console's "Run now" queues it: the task records the run, this the request
            request_job_run("Apply retention", actor=_actor(request), details={"task": "apply_retention"})
            triggered_by = f"admin:{request.user.get_username()}"
            transaction.on_commit(lambda: tasks.apply_retention.delay(triggered_by=triggered_by))
            self.message_user(request, "Retention run queued: it shows under Jobs in the console when it finishes.")
            return HttpResponseRedirect(reverse("admin:checkpoints_retentionpolicy_changelist"))
        plan = plan_retention()
        context = {
            **self.admin_site.each_context(request),
            "title": "Run retention now?",
            "opts": self.model._meta,
            "plan": plan,
            "by_kind": sorted(plan.by_kind.items()),
        }
        return TemplateResponse(request, "admin/checkpoints/retention_confirm.html", context)


class NotificationRuleForm(forms.ModelForm):
    events = forms.MultipleChoiceField(
        choices=[(event.value, event.value) for event in RULE_EVENTS], widget=forms.CheckboxSelectMultiple
    )
    alert_kinds = forms.MultipleChoiceField(
        required=False,
        choices=DETECTORS.choices,
        widget=forms.CheckboxSelectMultiple,
        help_text="For alert events: only these kinds. None ticked: every kind.",
    )

    class Meta:
        model = models.NotificationRule
        fields = ["project", *RULE_FIELDS]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        error = target_error(data.get("channel"), data.get("target"))
        if error:
            self.add_error("target", error)
        return data


@admin.register(models.NotificationRule)
class NotificationRuleAdmin(admin.ModelAdmin):
    """Rules are written by the notification services (audited); a signed webhook's secret is shown once."""

    form = NotificationRuleForm
    list_display = ["name", "project", "channel", "target", "quiet_minutes", "enabled", "created_at"]
    list_filter = ["channel", "enabled", "project"]
    search_fields = ["name", "target"]
    raw_id_fields = ["project"]
    list_select_related = ["project"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return ["project"] if obj is not None else []

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        fields = {name: form.cleaned_data[name] for name in RULE_FIELDS}
        if change:
            rule, secret = update_rule(models.NotificationRule.objects.get(pk=obj.pk), actor=_actor(request), **fields)
        else:
            rule, secret = create_rule(form.cleaned_data["project"], actor=_actor(request), **fields)
        obj.pk, obj.secret, obj.created_at = rule.pk, rule.secret, rule.created_at
        if secret:
            self.message_user(request, f"Signing secret of {rule.name} (shown once): {secret}", messages.WARNING)

    def delete_model(self, request: HttpRequest, obj: models.NotificationRule) -> None:
        delete_rule(obj, actor=_actor(request))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[models.NotificationRule]) -> None:
        for rule in queryset.select_related("project"):
            delete_rule(rule, actor=_actor(request))


class ApiTokenForm(forms.ModelForm):
    scopes = forms.MultipleChoiceField(
        choices=[(scope.value, f"{scope.value}: {scope.label}") for scope in models.Scope],
        widget=forms.CheckboxSelectMultiple,
        required=False,
        help_text="What the token may do; each API endpoint names the scope it needs (x-required-scope).",
    )

    class Meta:
        model = models.ApiToken
        fields = ["name", "scopes"]


@admin.register(models.ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    form = ApiTokenForm
    list_display = ["name", "project", "prefix", "scopes", "created_at", "last_used_at", "revoked_at", "expires_at"]
    list_filter = ["project", ("revoked_at", admin.EmptyFieldListFilter), ("created_at", admin.DateFieldListFilter)]
    search_fields = ["name", "=prefix"]
    list_select_related = ["project"]
    fields = ["name", "project", "prefix", "scopes", "created_at", "last_used_at", "revoked_at", "expires_at"]
    readonly_fields = ["project", "prefix", "created_at", "last_used_at", "revoked_at", "expires_at"]
    actions = ["revoke"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        # One place makes tokens, the console's Tokens page (linked from this list's "Add in the console"): it
        # checks the operator's role in the project, shows the secret once with the code that uses it, and a
        # second way to show a secret would be a second thing to keep out of caches, logs and redirects.
        return False

    def save_model(self, request: HttpRequest, obj: models.ApiToken, form: forms.ModelForm, change: bool) -> None:
        """The scopes through set_token_scopes, which audits the change; a new name as the admin saves one."""
        if "scopes" in form.changed_data:
            scopes, obj.scopes = obj.scopes, models.ApiToken.objects.get(pk=obj.pk).scopes
            set_token_scopes(obj, scopes=scopes, actor=_actor(request))
        if others := [name for name in form.changed_data if name != "scopes"]:
            obj.save(update_fields=others)

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[models.ApiToken]) -> None:
        revoked = [str(t) for t in queryset.select_related("project") if revoke_token(t, actor=_actor(request))]
        self.message_user(request, f"Revoked {len(revoked)} token{'s' * (len(revoked) != 1)}: {_names(revoked)}.")


@admin.register(models.AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin, MaskedAdmin, BigTableAdmin):
    """Append-only: nothing here adds, changes or deletes an audit row."""

    masked = ("target", "reason", "details")
    masked_in_list = ("target", "reason")  # masked before short_target/short_reason cut them

    list_display = ["created_at", "actor", "action", "project", "short_target", "short_reason"]
    list_filter = ["action", "project", ("created_at", admin.DateFieldListFilter)]
    search_fields = ["=actor", "target"]
    raw_id_fields = ["actor_user", "actor_token", "project", "session", "checkpoint"]
    list_select_related = ["project"]

    # A reason is free text of any length: the list shows its start, the row's page all of it
    @admin.display(description="target")
    def short_target(self, event: models.AuditEvent) -> str:
        return Truncator(event.target).chars(LIST_TEXT)

    @admin.display(description="reason")
    def short_reason(self, event: models.AuditEvent) -> str:
        return Truncator(event.reason).chars(LIST_TEXT)


@admin.register(models.WatchedSource)
class WatchedSourceAdmin(admin.ModelAdmin):
    list_display = ["path", "format", "project", "enabled", "last_scan_at", "last_error"]
    list_filter = ["format", "enabled", "project"]
    search_fields = ["path"]
    raw_id_fields = ["project"]
    list_select_related = ["project"]
    readonly_fields = ["seen", "last_scan_at", "last_error"]


@admin.register(models.ImportJob)
class ImportJobAdmin(admin.ModelAdmin):
    list_display = [
        "original_name",
        "project",
        "status",
        "imported",
        "skipped",
        "error_count",
        "created_by",
        "created_at",
    ]
    list_filter = ["status", "project", ("created_at", admin.DateFieldListFilter)]
    search_fields = ["original_name"]
    raw_id_fields = ["project", "created_by"]
    list_select_related = ["project", "created_by"]
    date_hierarchy = "created_at"
    show_full_result_count = False


@admin.register(models.JobRun)
class JobRunAdmin(admin.ModelAdmin):
    list_display = ["job", "status", "dry_run", "triggered_by", "started_at", "finished_at"]
    list_filter = ["job", "status", "dry_run", ("started_at", admin.DateFieldListFilter)]
    search_fields = ["triggered_by"]
    date_hierarchy = "started_at"
    show_full_result_count = False

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(models.JobLock)
class JobLockAdmin(admin.ModelAdmin):
    """A stuck lock (a crashed worker) can be released here by clearing its holder."""

    list_display = ["name", "holder", "expires_at"]


admin.site.unregister(AccessAttempt)


@admin.register(AccessAttempt)
class LoginAttemptAdmin(AccessAttemptAdmin):
    """django-axes' failed sign-in counters: deleting rows lifts the lockouts they caused, audited."""

    def delete_model(self, request: HttpRequest, obj: AccessAttempt) -> None:
        reset_login_attempts([obj], actor=_actor(request))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[AccessAttempt]) -> None:
        reset_login_attempts(queryset, actor=_actor(request))


@admin.register(models.Event)
class EventAdmin(ReadOnlyAdmin, MaskedAdmin, BigTableAdmin):
    """What happened, as receivers got it: read-only (deleted after DELIVERY_KEEP_DAYS)."""

    masked = ("data",)

    list_display = ["created_at", "type", "project", "dedupe_key"]
    list_filter = ["type", "project"]
    search_fields = ["=id", "=dedupe_key"]
    list_select_related = ["project"]
    ordering = ["-created_at", "-id"]  # newest first along event_created (the ids are random UUIDs)
    fields = readonly_fields = ("id", "type", "project", "created_at", "dedupe_key", "data")


@admin.register(models.WebhookEndpoint)
class WebhookEndpointAdmin(admin.ModelAdmin):
    """Created, rotated and deleted through the API (audited, the URL checked): here to look and to delete.
    Its secret is never shown."""

    list_display = ["url", "project", "events", "description", "created_by", "created_at", "deleted_at"]
    list_filter = ["project", ("deleted_at", admin.EmptyFieldListFilter)]
    search_fields = ["url", "description"]
    list_select_related = ["project"]
    fields = readonly_fields = (
        "url", "project", "events", "description", "created_by", "created_at", "secret_rotated_at", "deleted_at",
    )  # fmt: skip
    actions = ["delete_endpoints"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a hard delete would lose which endpoint its deliveries went to

    @admin.action(description="Delete selected webhooks (they receive nothing more; deliveries kept)")
    def delete_endpoints(self, request: HttpRequest, queryset: QuerySet[models.WebhookEndpoint]) -> None:
        endpoints = list(queryset.filter(deleted_at__isnull=True).select_related("project"))
        for endpoint in endpoints:
            delete_webhook(endpoint, actor=_actor(request))
        self.message_user(request, f"Deleted {len(endpoints)} webhook{'s' * (len(endpoints) != 1)}.")


@admin.register(models.Delivery)
class DeliveryAdmin(ReadOnlyAdmin, BigTableAdmin):
    """Every attempt's outcome per event and receiver; "Retry now" sends a failed or waiting one again."""

    list_display = [
        "created_at", "event_type", "channel", "target", "status", "attempts", "response_code", "next_attempt_at",
    ]  # fmt: skip
    list_filter = ["status", "channel", "event__type", "event__project"]
    search_fields = ["=id", "=event__id", "target"]
    list_select_related = ["event"]
    ordering = ["-created_at", "-id"]  # newest first along delivery_created (the ids are random UUIDs)
    fields = readonly_fields = (
        "id", "event", "endpoint", "rule", "channel", "target", "status", "attempts", "response_code",
        "last_error", "created_at", "last_attempt_at", "next_attempt_at",
    )  # fmt: skip
    actions = ["retry"]

    @admin.display(description="event", ordering="event__type")
    def event_type(self, delivery: models.Delivery) -> str:
        return delivery.event.type

    @admin.action(description="Retry selected deliveries now")
    def retry(self, request: HttpRequest, queryset: QuerySet[models.Delivery]) -> None:
        count = retry_now(queryset, actor=_actor(request))
        self.message_user(request, f"Queued {count} deliver{'ies' if count != 1 else 'y'} for one more attempt.")
