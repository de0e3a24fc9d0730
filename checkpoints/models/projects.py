"""Projects, who may do what in them (memberships, API tokens and their scopes) and the types a project's states may name."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.dispatch import Signal
from django.utils import timezone

from checkpoint_console import typedjson

from ..roles import APPROVE, OPERATE, PURGE_SECRETS, VIEW_SESSIONS, in_every_project, roles_granting

# Sent after `ApiToken.objects….update()` or `Project.objects….update()` changed rows (saves and deletes send
# Django's own signals): the process forgets the tokens it remembers with their projects (services.tokens), whose
# type allow-list a request decodes by. Not for last_used_at alone, which every minute of use writes.
tokens_updated = Signal()


class ProjectQuerySet(models.QuerySet["Project"]):
    def update(self, **kwargs: Any) -> int:
        changed = super().update(**kwargs)
        if changed:
            tokens_updated.send(sender=self.model)
        return changed

    def allowing(self, user: Any, permission: str = VIEW_SESSIONS) -> ProjectQuerySet:
        """The projects where `user` holds `permission`: every one for superusers and for staff whose groups
        grant it, else those where one of the user's memberships grants it (any role sees its project)."""
        if in_every_project(user, permission):
            return self
        if not user.is_active:
            return self.none()
        memberships = ProjectMembership.objects.filter(user=user, role__in=roles_granting(permission))
        return self.filter(pk__in=memberships.values("project_id"))


# What LangGraph's JsonPlusSerializer rebuilds without an allow-list (its SAFE_MSGPACK_TYPES, as dotted names;
# a datetime travels as the method record datetime.datetime.fromisoformat) and LangChain's serialized messages
# and documents. An entry ending in "." is a prefix; any other names one callable exactly.
DEFAULT_TYPE_ALLOWLIST = (
    "builtins.frozenset",
    "builtins.set",
    "collections.deque",
    "datetime.date",
    "datetime.datetime",
    "datetime.datetime.fromisoformat",
    "datetime.time",
    "datetime.timedelta",
    "datetime.timezone",
    "decimal.Decimal",
    "ipaddress.IPv4Address",
    "ipaddress.IPv4Interface",
    "ipaddress.IPv4Network",
    "ipaddress.IPv6Address",
    "ipaddress.IPv6Interface",
    "ipaddress.IPv6Network",
    "langchain.schema.document.",
    "langchain.schema.messages.",
    "langchain_core.documents.base.Document",
    "langchain_core.messages.ai.AIMessage",
    "langchain_core.messages.ai.AIMessageChunk",
    "langchain_core.messages.base.BaseMessage",
    "langchain_core.messages.base.BaseMessageChunk",
    "langchain_core.messages.chat.ChatMessage",
    "langchain_core.messages.chat.ChatMessageChunk",
    "langchain_core.messages.function.FunctionMessage",
    "langchain_core.messages.function.FunctionMessageChunk",
    "langchain_core.messages.human.HumanMessage",
    "langchain_core.messages.human.HumanMessageChunk",
    "langchain_core.messages.modifier.RemoveMessage",
    "langchain_core.messages.system.SystemMessage",
    "langchain_core.messages.system.SystemMessageChunk",
    "langchain_core.messages.tool.ToolMessage",
    "langchain_core.messages.tool.ToolMessageChunk",
    "langgraph.store.base.GetOp",
    "langgraph.store.base.Item",
    "langgraph.types.Command",
    "langgraph.types.Interrupt",
    "langgraph.types.Overwrite",
    "langgraph.types.PregelTask",
    "langgraph.types.Send",
    "langgraph.types.StateSnapshot",
    "langgraph.types.TimeoutPolicy",
    "pathlib.Path",
    "pathlib.PosixPath",
    "pathlib.WindowsPath",
    "pathlib._local.Path",
    "pathlib._local.PosixPath",
    "pathlib._local.WindowsPath",
    "re.compile",
    "uuid.UUID",
    "zoneinfo.ZoneInfo",
)


def default_type_allowlist() -> list[str]:
    return list(DEFAULT_TYPE_ALLOWLIST)


def allows(allowlist: Iterable[str]) -> Callable[[str], bool]:
    """Whether a dotted callable name (see checkpoint_console.typedjson.type_names) is on the list: an entry
    equal to it, or a prefix entry ending in "." that it starts with. Built once, asked for every name."""
    entries = list(allowlist)
    exact, prefixes = set(entries), tuple(entry for entry in entries if entry.endswith("."))
    return lambda name: name in exact or name.startswith(prefixes)


def type_allowed(allowlist: Iterable[str], name: str) -> bool:
    return allows(allowlist)(name)


def refused_types(allowlist: Iterable[str], value: Any, path: str = "") -> Iterable[tuple[str, str]]:
    """(path, dotted name) of each callable a LangGraph reader would import for `value` that the list lacks."""
    allowed = allows(allowlist)
    return ((where, name) for where, name in typedjson.type_names(value, path) if not allowed(name))


class Project(models.Model):
    slug = models.SlugField(max_length=100, unique=True)
    name = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    type_allowlist = models.JSONField(
        default=default_type_allowlist,
        blank=True,
        help_text="Types LangGraph values may name (module.Name, or a prefix ending in '.'); operators edit it "
        "under Project settings.",
    )
    secret_patterns = models.JSONField(
        default=list,
        blank=True,
        help_text="The project's own secret patterns, [name, RE2 pattern] pairs; operators edit them on the "
        "project's Secrets page.",
    )
    secrets_found_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When the first secret was found in the project: until then its pages mask nothing and ask nothing.",
    )

    objects = ProjectQuerySet.as_manager()

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class ProjectScopedQuerySet(models.QuerySet[Any]):
    """Rows that belong to a project through `project_path`, kept for the projects a user may see or act in."""

    project_path = "project"

    def visible_to(self, user: Any) -> Any:
        """Rows of the projects `user` may see (any role there)."""
        return self.allowing(user, VIEW_SESSIONS)

    def allowing(self, user: Any, permission: str) -> Any:
        """Rows of the projects where `user` holds `permission`, as `Project.objects.allowing` picks them."""
        if in_every_project(user, permission):
            return self
        return self.filter(**{f"{self.project_path}__in": Project.objects.allowing(user, permission)})


class ProjectRole(models.TextChoices):
    VIEWER = "viewer", "viewer: browses"
    OPERATOR = "operator", "operator: also restores, forks, pins, undoes, triages alerts and imports"
    APPROVER = "approver", "approver: also reviews phases"


class ProjectMembership(models.Model):
    """A person's role in one project; it applies to that project's sessions and everything in them.

    Roles are not a ladder (an operator does not approve phases, an approver does not restore), so someone
    who does both holds two rows, one per role; any role lets them see the project.
    """

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships", db_index=False)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="project_memberships")
    role = models.CharField(max_length=20, choices=ProjectRole.choices)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["project", "user", "role"]
        constraints = [
            # one row per (project, user, role); also serves "the members of a project" (the admin's inline)
            models.UniqueConstraint(fields=["project", "user", "role"], name="membership_role_per_project_user"),
            models.CheckConstraint(condition=Q(role__in=ProjectRole.values), name="membership_role_known"),
        ]

    def __str__(self) -> str:
        return f"{self.user} as {self.role} in {self.project}"


class ApiTokenQuerySet(models.QuerySet["ApiToken"]):
    def update(self, **kwargs: Any) -> int:
        changed = super().update(**kwargs)
        if changed and set(kwargs) != {"last_used_at"}:
            tokens_updated.send(sender=self.model)
        return changed

    def usable(self, *, now: datetime | None = None) -> ApiTokenQuerySet:
        """Neither revoked nor expired."""
        unexpired = Q(expires_at__isnull=True) | Q(expires_at__gt=now or timezone.now())
        return self.filter(unexpired, revoked_at__isnull=True)


class Scope(models.TextChoices):
    """What an API token may do: the one registry of scopes. Each API operation names the scope it needs
    (`x-required-scope` in the OpenAPI schema) and a token holds a list of them; a feature that needs a scope of its
    own adds it here, with the sentence the admin and `create_api_token --scope` show."""

    READ = "read", "read sessions, checkpoints, diffs, live state, LangGraph threads, webhooks and their deliveries"
    WRITE = "write", "store and change: sessions, checkpoints, restores, forks, LangGraph puts and deletions, webhooks"
    # Not implied by write: an agent's write token must not answer the question its own graph asks a person.
    ANSWER = "answer", "answer a LangGraph thread's interrupts (what a person approves or decides)"
    # Not implied by write either: one call restores or forks a whole fleet of sessions.
    RECOVER = "recover", "recover many sessions in one batch (restore or fork them, undo the batch)"
    # Nothing else: a purge token can neither read states nor write them, only remove a value and follow that.
    PURGE = "purge", "purge a value from every checkpoint that holds it, and read those purges' progress"


DEFAULT_SCOPES = [Scope.READ.value, Scope.WRITE.value]  # a token created without naming its scopes

# The permission a person needs in a project to give a token of that project each scope (the console's Tokens
# page, `services.create_api_token` with a person as actor): a token never does what its maker may not. A scope
# added above needs its line here (tests/dashboard/test_tokens_page.py checks that none is missing).
SCOPE_GRANTED_BY: dict[str, str] = {
    Scope.READ: VIEW_SESSIONS,
    Scope.WRITE: OPERATE,  # restores, forks and stores checkpoints, as an operator does
    Scope.ANSWER: APPROVE,  # answers what a graph asks a person: the approver's decision in the console
    Scope.RECOVER: OPERATE,  # restores a fleet: the operator's "Recover…"
    Scope.PURGE: PURGE_SECRETS,  # rewrites history in every project sharing the value: in no role, as in the console
}


class ApiToken(models.Model):
    """A bearer token scoped to one project. Only its SHA-256 is stored; the prefix identifies it."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="tokens")
    name = models.CharField(max_length=200)
    prefix = models.CharField(max_length=16)
    token_hash = models.CharField(max_length=64, unique=True)
    scopes = models.JSONField(default=list)
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="After this the token gets 401; empty: never.")

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    def has_scope(self, scope: str) -> bool:
        return scope in self.scopes
