"""Forms of the console's actions and filters: they parse and bound what a request may ask for."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from typing import Any

from django import forms
from django.core.validators import RegexValidator
from django.template.defaultfilters import filesizeformat
from django.utils.dateparse import parse_datetime

from checkpoints.models import AlertSeverity, AlertState, Project, Scope
from checkpoints.outbox import channels
from checkpoints.outbox.notifications import RULE_EVENTS, target_error
from checkpoints.registry.detectors import DETECTORS
from checkpoints.services import InvalidInput
from checkpoints.services.secrets import parse_patterns
from checkpoints.services.typeguard import parse_allowlist
from checkpoints.sources.archives import ARCHIVE_SUFFIXES, archive_suffix
from checkpoints.store import jsoncodec
from checkpoints.store.jsoncodec import InvalidJSON

REASON_MAX = 500


def choice_field(form: forms.BaseForm, name: str) -> forms.ChoiceField:
    """The form's choice field `name`, to be given its choices once the request is known."""
    field = form.fields[name]
    if not isinstance(field, forms.ChoiceField):
        raise TypeError(f"{type(form).__name__}.{name} is not a choice field")
    return field


class RestoreForm(forms.Form):
    reason = forms.CharField(
        required=False,
        max_length=REASON_MAX,
        strip=True,
        widget=forms.Textarea(
            attrs={"rows": 2, "placeholder": "e.g. looping since step 40; back to the last good run"}
        ),
        help_text="Optional. Recorded in the audit log and shown to the agent with the restore.",
    )


class EditStateForm(forms.Form):
    """One value of a checkpoint's state to set: where (a JSON pointer), what (JSON text), why; Preview shows the
    diff, Save stores it as the new head."""

    VALUE_MAX = 1_000_000  # characters: a pasted value, not a state upload (the API takes those)

    path = forms.CharField(
        required=False,
        max_length=2000,
        strip=False,  # a key may begin or end with a space
        label="Path",
        help_text="A JSON pointer: /memory/goal, /messages/3/content, /plan/- to append to a list; empty for the "
        "whole state.",
    )
    value = forms.CharField(
        max_length=VALUE_MAX,
        strip=False,
        label="New value (JSON)",
        widget=forms.Textarea(attrs={"rows": 12, "spellcheck": "false", "class": "mono json-editor"}),
        help_text='JSON: a string is quoted ("text"); numbers, true, false, null, objects and lists as they are.',
    )
    reason = forms.CharField(
        required=False,
        max_length=REASON_MAX,
        strip=True,
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "e.g. the goal it inferred was wrong; set it right"}),
        help_text="Required to save. Recorded in the audit log and in the new checkpoint.",
    )
    action = forms.ChoiceField(choices=[("preview", "Preview"), ("save", "Save")], required=False)

    def clean_value(self) -> Any:
        try:
            return jsoncodec.loads(self.cleaned_data["value"])
        except InvalidJSON as exc:
            raise forms.ValidationError(f"Not JSON: {str(exc)[:300]}") from None

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if cleaned.get("action") == "save" and not cleaned.get("reason"):
            self.add_error("reason", "Say why the state is edited: the audit log and the agent's history keep it.")
        return cleaned


class UndoForm(forms.Form):
    reason = forms.CharField(required=False, max_length=REASON_MAX, strip=True)


class ForkForm(forms.Form):
    title = forms.CharField(
        max_length=300,
        strip=True,
        help_text="The new session starts from this checkpoint's state; the original session is not changed.",
    )


class PinForm(forms.Form):
    pinned = forms.TypedChoiceField(
        choices=[("1", "Pin"), ("0", "Unpin")], coerce=lambda value: value == "1", empty_value=None
    )


class ResolveForm(forms.Form):
    reason = forms.CharField(required=False, max_length=REASON_MAX, strip=True)


@dataclass(frozen=True)
class CheckpointRef:
    """A checkpoint as the Compare form names it: by seq within a session, or by id."""

    by: str  # "seq" or "id"
    number: int

    def __str__(self) -> str:
        return f"#{self.number}" if self.by == "seq" else f"id:{self.number}"


_REF = re.compile(r"(?:(?P<id>id:)\s*|(?P<hash>#)\s*)?(?P<number>[0-9]{1,18})", re.IGNORECASE)


class CompareForm(forms.Form):
    """Two checkpoints to compare. What the form sends carries `session` (empty when none is chosen): then
    `12` or `#12` is the checkpoint #12 of that session, as every label in the console shows it. Links carry
    ids and no `session`: `?a=345&b=346`. `id:345` names a checkpoint by id anywhere, `#12` a seq anywhere."""

    a = forms.CharField(max_length=40, label="Checkpoint A")
    b = forms.CharField(max_length=40, label="Checkpoint B")
    session = forms.IntegerField(required=False, min_value=1, max_value=2**63 - 1, widget=forms.HiddenInput)

    def __init__(self, data: Any) -> None:
        super().__init__(data)
        self.typed = "session" in data  # sent by the form, not by a link

    def clean_a(self) -> CheckpointRef:
        return self._ref(self.cleaned_data["a"])

    def clean_b(self) -> CheckpointRef:
        return self._ref(self.cleaned_data["b"])

    def _ref(self, text: str) -> CheckpointRef:
        match = _REF.fullmatch(text.strip())
        if match is None or int(match["number"]) < 1:
            raise forms.ValidationError(f"{text!r} names no checkpoint.")
        by_id = match["id"] or not (match["hash"] or self.typed)
        return CheckpointRef("id" if by_id else "seq", int(match["number"]))


UNRESOLVED = "unresolved"


def utc_datetime(text: str) -> datetime | None:
    """An ISO 8601 time as an aware UTC datetime, or None for anything else: also for impossible dates
    (month 13) and for times that leave Python's range once converted to UTC (year 1 at +14:00)."""
    try:
        moment = parse_datetime(text)
        if moment is None:
            return None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return moment.astimezone(UTC)
    except (ValueError, OverflowError):
        return None


def _window_end(text: str) -> datetime | None:
    """One end of an "opened" window: a time (ISO 8601, UTC unless it says otherwise), or None when empty."""
    if not text:
        return None
    found = utc_datetime(text)
    if found is None:
        raise forms.ValidationError("Enter a date and time, e.g. 2026-03-12 02:10.")
    return found


def window_value(moment: datetime) -> str:
    """A time as a datetime-local input shows it (UTC, to the second): how a filter's window is passed on."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")


def _any_kind() -> list[tuple[str, str]]:
    return [("", "Any kind"), *DETECTORS.choices()]


class AlertFilterForm(forms.Form):
    """The alert list's filters. Without a `state` parameter the list shows unresolved alerts."""

    kind = forms.ChoiceField(required=False, choices=_any_kind)
    severity = forms.ChoiceField(required=False, choices=[("", "Any severity"), *AlertSeverity.choices])
    state = forms.ChoiceField(
        required=False,
        choices=[(UNRESOLVED, "Open or acknowledged"), *AlertState.choices, ("", "Any state")],
    )
    project = forms.ChoiceField(required=False, choices=[("", "Any project")])
    # the fleet recovery's window (FleetFilter.opened_since/until): the alerts opened in it, and "Recover…" passes it on
    opened_since = forms.CharField(
        required=False,
        max_length=40,
        label="Opened since (UTC)",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )
    opened_until = forms.CharField(
        required=False, max_length=40, label="until (UTC)", widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )
    session = forms.IntegerField(required=False, min_value=1, max_value=2**63 - 1, widget=forms.HiddenInput)
    after = forms.CharField(required=False, label="Page", widget=forms.HiddenInput)

    def __init__(self, data: Any, *, projects: list[tuple[str, str]]) -> None:
        if "state" not in data:
            data = {**data.dict(), "state": UNRESOLVED}
        super().__init__(data)
        choice_field(self, "project").choices = [("", "Any project"), *projects]

    def clean_opened_since(self) -> datetime | None:
        return _window_end(self.cleaned_data["opened_since"])

    def clean_opened_until(self) -> datetime | None:
        until = _window_end(self.cleaned_data["opened_until"])
        since = self.cleaned_data.get("opened_since")
        if since and until and since > until:
            raise forms.ValidationError("The window ends before it starts.")
        return until

    def clean_after(self) -> tuple[str, datetime, int] | None:
        """Keyset cursor `<severity>_<opened_at ISO>_<id>` of the last row of the previous page."""
        value = self.cleaned_data["after"]
        if not value:
            return None
        severity, _, rest = value.partition("_")
        when, _, pk = rest.rpartition("_")
        opened_at = utc_datetime(when)
        valid_pk = pk.isascii() and pk.isdigit() and int(pk) < 2**63
        if severity not in AlertSeverity.values or opened_at is None or not valid_pk:
            raise forms.ValidationError("Not a page cursor.")
        return severity, opened_at, int(pk)


class UploadForm(forms.Form):
    project = forms.SlugField(
        max_length=100,
        help_text="An existing project, or a new name (letters, digits, - and _) to create one.",
        widget=forms.TextInput(attrs={"list": "project-slugs", "autocomplete": "off", "spellcheck": "false"}),
    )
    archive = forms.FileField(
        label="Archive",
        help_text="A .zip, .tar.gz, .tgz or .tar of checkpoint files in any of the formats (a LangGraph SqliteSaver file too).",
        widget=forms.FileInput(attrs={"accept": ",".join(ARCHIVE_SUFFIXES)}),
    )

    def __init__(self, *args: Any, max_bytes: int, projects: list[str], may_create: bool, **kwargs: Any) -> None:
        """`projects`: where the uploader is an operator; `may_create`: whether a new name creates a project
        (for those who operate every project), else the field is a choice among `projects`."""
        super().__init__(*args, **kwargs)
        self.max_bytes = max_bytes
        self.projects = projects
        self.may_create = may_create
        if not may_create:
            field = self.fields["project"]
            field.widget = forms.Select(choices=[("", "Choose a project"), *((slug, slug) for slug in projects)])
            field.help_text = "A project where you are an operator."

    def clean_project(self) -> str:
        slug = self.cleaned_data["project"]
        if slug in self.projects or (self.may_create and not Project.objects.filter(slug=slug).exists()):
            return slug
        allowed = ", ".join(self.projects) or "none"
        raise forms.ValidationError(f"You can import only into a project where you are an operator ({allowed}).")

    def clean_archive(self) -> Any:
        upload = self.cleaned_data["archive"]
        if archive_suffix(upload.name) is None:
            raise forms.ValidationError(f"{upload.name} is not an archive: upload a .zip, .tar.gz, .tgz or .tar file.")
        if upload.size > self.max_bytes:
            raise forms.ValidationError(
                f"{upload.name} is {filesizeformat(upload.size)}; uploads are limited to "
                f"{filesizeformat(self.max_bytes)}. Import larger trees with manage.py import_checkpoints."
            )
        return upload


class FeedbackForm(forms.Form):
    """A reviewer's decision on a phase; the phase-dependent rules live in checkpoints.services.phases.record_feedback."""

    action = forms.ChoiceField(
        choices=[
            ("approved", "Approve"),
            ("retry_with_changes", "Request changes"),
            ("skip_phase", "Skip phase"),
            ("rejected", "Reject"),
        ],
        widget=forms.RadioSelect,
    )
    comments = forms.CharField(required=False, max_length=5000, strip=True, widget=forms.Textarea(attrs={"rows": 3}))
    requested_changes = forms.CharField(
        required=False,
        max_length=10000,
        widget=forms.Textarea(attrs={"rows": 4, "placeholder": "One change per line"}),
        help_text="One change per line. Required when requesting changes.",
    )

    def clean_requested_changes(self) -> list[str]:
        text = self.cleaned_data["requested_changes"]
        return [line.strip() for line in text.splitlines() if line.strip()]

    def clean(self) -> dict[str, Any]:
        data = self.cleaned_data
        if data.get("action") == "retry_with_changes" and not data.get("requested_changes"):
            self.add_error("requested_changes", "List at least one change, one per line.")
        return data


QUIET_MAX = 7 * 24 * 60


class RuleForm(forms.Form):
    """A notification rule; the target is checked as the service checks it (a URL a private address only when
    WEBHOOK_ALLOW_PRIVATE is set, an address list, an Apprise URL of a scheme the console sends)."""

    name = forms.CharField(max_length=200, strip=True)
    events = forms.MultipleChoiceField(
        choices=[(event.value, event.value) for event in RULE_EVENTS], widget=forms.CheckboxSelectMultiple
    )
    alert_kinds = forms.MultipleChoiceField(
        required=False,
        choices=DETECTORS.choices,
        widget=forms.CheckboxSelectMultiple,
        help_text="For alert events: only these kinds. None ticked: every kind.",
    )
    min_severity = forms.ChoiceField(
        choices=AlertSeverity.choices,
        initial=AlertSeverity.WARNING,
        label="Minimum severity",
        help_text="For alert events: alerts below it are not sent.",
    )
    channel = forms.ChoiceField(choices=channels.choices)  # the registered channels, read when a form is made
    target = forms.CharField(
        max_length=2000,
        strip=True,
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
    )
    quiet_minutes = forms.IntegerField(
        min_value=0,
        max_value=QUIET_MAX,
        initial=30,
        label="Quiet period (minutes)",
        help_text="After a notification, the same condition (the same alert, phase or job) is not sent again "
        "for this long; those deliveries are logged as suppressed. 0: send every time.",
    )
    enabled = forms.BooleanField(required=False, initial=True)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["target"].help_text = channels.target_help()  # each registered channel's target

    def clean(self) -> dict[str, Any]:
        data = self.cleaned_data
        error = target_error(data.get("channel"), data.get("target"))
        if error:
            self.add_error("target", error)
        return data


class ProjectSettingsForm(forms.Form):
    """A project's settings an operator edits: the types its LangGraph values may name."""

    type_allowlist = forms.CharField(
        required=False,
        strip=False,
        label="Types LangGraph values may name",
        help_text="One a line: module.Name (a datetime is datetime.datetime.fromisoformat), or a prefix ending in "
        "'.' (myapp.state.). Puts, writes and imports naming anything else are refused; exports leave out no "
        "type: a thread holding one is not exported. 'pickle' lets pickled values in.",
        widget=forms.Textarea(attrs={"rows": 16, "spellcheck": "false", "autocomplete": "off"}),
    )

    def clean_type_allowlist(self) -> list[str]:
        try:
            return parse_allowlist(self.cleaned_data["type_allowlist"])
        except InvalidInput as exc:
            raise forms.ValidationError(str(exc).removeprefix("type_allowlist: ")) from None


def required_reason(label: str, help_text: str) -> forms.CharField:
    """A one-line reason a secret's form requires (kept in the audit log)."""
    widget = forms.TextInput(attrs={"autocomplete": "off"})
    return forms.CharField(max_length=REASON_MAX, strip=True, label=label, help_text=help_text, widget=widget)


class RevealForm(forms.Form):
    """Why a person needs to see a found value: required, kept in the audit log."""

    reason = required_reason(
        "Why do you need to see it?", "Kept in the audit log with your name and the finding (never the value)."
    )


class DismissFindingForm(forms.Form):
    """Why a found value is closed without a purge: required, kept with the finding and in the audit log."""

    reason = required_reason(
        "Why is it not a secret to purge?",
        "A test key, a false positive, a key already rotated. Kept in the audit log with your name.",
    )


class SecretPatternsForm(forms.Form):
    """A project's own secret patterns, one `name: pattern` a line, checked as the service checks them."""

    patterns = forms.CharField(
        required=False,
        strip=False,
        label="The project's own patterns",
        help_text="One a line: name: pattern, in RE2's syntax (no look-arounds or backreferences: every pattern "
        "runs in time linear in the text). Checkpoints stored from now on are scanned with them; earlier ones "
        "are not scanned again.",
        widget=forms.Textarea(attrs={"rows": 6, "spellcheck": "false", "autocomplete": "off"}),
    )

    def clean_patterns(self) -> str:
        text: str = self.cleaned_data["patterns"]
        try:
            parse_patterns(text)
        except InvalidInput as exc:
            raise forms.ValidationError(str(exc).removeprefix("patterns: ")) from None
        return text


TOKEN_NAME_MAX = 200  # ApiToken.name's column
TOKEN_ACCESS = {
    "read": [Scope.READ.value],
    "write": [Scope.READ.value, Scope.WRITE.value],
}  # the form's choice → Scope values
# Every other scope of the registry is offered as a box of its own: none is implied by read or write.
EXTRA_SCOPES = [scope for scope in Scope if scope not in {s for chosen in TOKEN_ACCESS.values() for s in chosen}]
TOKEN_EXPIRY_DAYS = {"30": 30, "90": 90, "365": 365}


def _scope_choice(scope: Scope) -> tuple[str, str]:
    return scope.value, f"{scope.value}: {scope.label}"


class TokenForm(forms.Form):
    """A new API token of one project: its name, read-only or read and write, any other scope of the Scope
    registry, its expiry. `may_grant(scope)` says whether the person may give a token that scope (SCOPE_GRANTED_BY):
    the boxes offer only those, and a request that names another is refused with the reason."""

    name = forms.CharField(
        max_length=TOKEN_NAME_MAX,
        strip=True,
        help_text="What uses it, e.g. the agent's name or host. Shown in this list and the audit log.",
        validators=[
            RegexValidator(
                r"[\x00-\x1f\x7f-\x9f]",
                inverse_match=True,
                message="A name cannot hold control characters (tabs, line breaks…).",
            )
        ],
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
    )
    access = forms.ChoiceField(
        choices=[
            ("read", "Read only: sessions, checkpoints, diffs, LangGraph threads (dashboards, people)"),
            ("write", "Read and write: also stores checkpoints, restores, forks, LangGraph puts (agents, savers)"),
        ],
        initial="write",
        widget=forms.RadioSelect,
    )
    also = forms.MultipleChoiceField(
        required=False,
        label="Also",
        choices=[_scope_choice(scope) for scope in EXTRA_SCOPES],
        widget=forms.CheckboxSelectMultiple,
        help_text="Not implied by write: an agent's token needs none of these.",
    )
    expiry = forms.ChoiceField(
        choices=[
            ("never", "Never"),
            ("30", "In 30 days"),
            ("90", "In 90 days"),
            ("365", "In 365 days"),
            ("date", "On a date"),
        ],  # fmt: skip
        initial="90",
        label="Expires",
    )
    expires_on = forms.DateField(
        required=False,
        label="Expiry date",
        help_text="With “On a date”: the token stops working at 00:00 UTC that day.",
        widget=forms.DateInput(attrs={"type": "date"}),
    )

    def __init__(self, *args: Any, may_grant: Callable[[str], bool], role_in: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.may_grant, self.role_in = may_grant, role_in
        also = self.fields["also"]
        offered = [_scope_choice(scope) for scope in EXTRA_SCOPES if may_grant(scope.value)]
        if offered:
            also.widget.choices = offered  # the field still knows every scope: one not offered gets its reason
        else:
            also.widget = forms.MultipleHiddenInput()

    def clean(self) -> dict[str, Any]:
        data = self.cleaned_data
        if data.get("expiry") == "date" and not data.get("expires_on"):
            self.add_error("expires_on", "Choose the date the token stops working.")
        for name in ("access", "also"):
            chosen = TOKEN_ACCESS.get(data.get(name, ""), []) if name == "access" else data.get(name, [])
            refused = [scope for scope in chosen if not self.may_grant(scope)]
            if refused:
                self.add_error(
                    name,
                    f"Your role in {self.role_in} does not let you give a token {', '.join(refused)}: "
                    "a token never does what its maker may not.",
                )
        return data

    def expires_at(self, now: datetime) -> datetime | None:
        """When the token the valid form describes stops working (None: never)."""
        choice = self.cleaned_data["expiry"]
        if choice in TOKEN_EXPIRY_DAYS:
            return now + timedelta(days=TOKEN_EXPIRY_DAYS[choice])
        if choice == "date":
            return datetime.combine(self.cleaned_data["expires_on"], time.min, tzinfo=UTC)
        return None

    def scopes(self) -> list[str]:
        return [*TOKEN_ACCESS[self.cleaned_data["access"]], *self.cleaned_data.get("also", [])]


class InterruptAnswerForm(forms.Form):
    """An answer to a LangGraph interrupt: Approve (true) or Reject (false) for a yes/no question, else the
    text of the answer: JSON when it reads as JSON, otherwise sent as a string."""

    interrupt_id = forms.CharField(max_length=200, widget=forms.HiddenInput)
    decision = forms.ChoiceField(
        choices=[("approve", "Approve"), ("reject", "Reject"), ("answer", "Answer")], required=False
    )
    answer = forms.CharField(
        required=False,
        max_length=1_000_000,
        widget=forms.Textarea(attrs={"rows": 6, "class": "mono", "spellcheck": "false"}),
        help_text='JSON ({"approved": true, "note": "…"}, 42, "text"), or plain text, sent as a string.',
    )
    comment = forms.CharField(required=False, max_length=10_000, widget=forms.Textarea(attrs={"rows": 2}))

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        decision = data.get("decision") or "answer"
        if decision in ("approve", "reject"):
            data["value"] = decision == "approve"
            return data
        text = (data.get("answer") or "").strip()
        if not text:
            self.add_error("answer", "Write an answer (JSON or text).")
            return data
        try:
            data["value"] = json.loads(text)
        except (ValueError, RecursionError):
            data["value"] = text
        return data


class RecoveryForm(forms.Form):
    """A fleet recovery as the console asks it: the sessions (ticked, or all matching the page's filters), the
    action, the target rule and, to run it, the reason. The filter fields are the Alerts and Sessions pages' own
    (carried over as hidden fields) and the API's."""

    action = forms.ChoiceField(required=False, choices=[("restore", "Restore"), ("fork", "Fork")], initial="restore")
    rule = forms.ChoiceField(
        required=False,
        choices=[
            ("last_good", "Last good checkpoint"),
            ("before", "Just before a time"),
            ("named", "A named checkpoint"),
        ],
        initial="last_good",
        widget=forms.RadioSelect,
    )
    at = forms.CharField(
        required=False, label="Before (UTC)", widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )
    name = forms.CharField(required=False, max_length=200, label="Checkpoint name")
    all = forms.BooleanField(required=False, label="Every session matching the filters")
    session = forms.TypedMultipleChoiceField(required=False, coerce=int, widget=forms.MultipleHiddenInput)
    # the pages' filters
    project = forms.CharField(required=False, max_length=100, widget=forms.HiddenInput)
    agent = forms.CharField(required=False, max_length=200, widget=forms.HiddenInput)
    kind = forms.CharField(required=False, max_length=40, widget=forms.HiddenInput)
    severity = forms.ChoiceField(required=False, choices=[("", ""), *AlertSeverity.choices], widget=forms.HiddenInput)
    state = forms.ChoiceField(
        required=False, choices=[("", ""), (UNRESOLVED, UNRESOLVED), *AlertState.choices], widget=forms.HiddenInput
    )
    status = forms.CharField(required=False, max_length=20, widget=forms.HiddenInput)
    q = forms.CharField(required=False, max_length=200, widget=forms.HiddenInput)
    alert = forms.BooleanField(required=False, widget=forms.HiddenInput)
    opened_since = forms.CharField(
        required=False, label="Failures since (UTC)", widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )
    opened_until = forms.CharField(
        required=False, label="until (UTC)", widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )
    reason = forms.CharField(
        required=False,
        max_length=REASON_MAX,
        strip=True,
        widget=forms.Textarea(
            attrs={"rows": 2, "placeholder": "e.g. search API outage 02:10–02:40; back to last good"}
        ),
        help_text="Required to run. Recorded in the audit log, on every session's restore and on the batch.",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        raw = self.data.getlist("session") if hasattr(self.data, "getlist") else self.data.get("session", [])
        choice = self.fields["session"]
        assert isinstance(choice, forms.TypedMultipleChoiceField)  # noqa: S101 - declared above
        choice.choices = [
            (value, value)
            for value in raw
            if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) < 19
        ]

    def _time(self, name: str) -> datetime | None:
        try:
            return _window_end(self.cleaned_data.get(name) or "")
        except forms.ValidationError as exc:
            raise forms.ValidationError({name: exc.messages}) from None

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        for name in ("at", "opened_since", "opened_until"):
            if name in data:
                try:
                    data[f"{name}_time"] = self._time(name)
                except forms.ValidationError as exc:
                    self.add_error(None, exc)
        if not data.get("all") and not data.get("session"):
            raise forms.ValidationError("Tick the sessions to recover, or choose every session matching the filters.")
        return data


class PurgeForm(forms.Form):
    """What to purge (a finding of the project, or a pasted value), where, and why (docs/purges.md)."""

    finding = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)
    value = forms.CharField(
        required=False,
        strip=False,
        max_length=10_000,
        label="The value",
        help_text="Pasted whole, 8 characters or more; not shown again and never stored (only its keyed fingerprint).",
        widget=forms.PasswordInput(render_value=True, attrs={"autocomplete": "off", "spellcheck": "false"}),
    )
    sessions = forms.CharField(
        required=False,
        label="Only these sessions",
        help_text="Their ids, one a line; empty: every session of the project.",
        widget=forms.Textarea(attrs={"rows": 2, "spellcheck": "false"}),
    )
    reason = forms.CharField(required=False, max_length=500, label="Why")

    def session_ids(self) -> list[str]:
        return [line.strip() for line in self.cleaned_data.get("sessions", "").splitlines() if line.strip()]
