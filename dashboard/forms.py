"""Forms of the console's actions and filters: they parse and bound what a request may ask for."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import forms
from django.template.defaultfilters import filesizeformat
from django.utils.dateparse import parse_datetime

from checkpoints.archives import ARCHIVE_SUFFIXES, archive_suffix
from checkpoints.models import AlertKind, AlertSeverity, AlertState

REASON_MAX = 500


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


class CompareForm(forms.Form):
    a = forms.IntegerField(min_value=1, label="Checkpoint A (id)")
    b = forms.IntegerField(min_value=1, label="Checkpoint B (id)")


UNRESOLVED = "unresolved"


class AlertFilterForm(forms.Form):
    """The alert list's filters. Without a `state` parameter the list shows unresolved alerts."""

    kind = forms.ChoiceField(required=False, choices=[("", "Any kind"), *AlertKind.choices])
    severity = forms.ChoiceField(required=False, choices=[("", "Any severity"), *AlertSeverity.choices])
    state = forms.ChoiceField(
        required=False,
        choices=[(UNRESOLVED, "Open or acknowledged"), *AlertState.choices, ("", "Any state")],
    )
    project = forms.ChoiceField(required=False, choices=[("", "Any project")])
    session = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)
    after = forms.CharField(required=False, widget=forms.HiddenInput)

    def __init__(self, data: Any, *, projects: list[tuple[str, str]]) -> None:
        if "state" not in data:
            data = {**data.dict(), "state": UNRESOLVED}
        super().__init__(data)
        self.fields["project"].choices = [("", "Any project"), *projects]

    def clean_after(self) -> tuple[datetime, int] | None:
        """Keyset cursor `<opened_at ISO>_<id>` of the last row of the previous page."""
        value = self.cleaned_data["after"]
        if not value:
            return None
        when, _, pk = value.rpartition("_")
        opened_at = parse_datetime(when) if when else None
        if opened_at is None or not pk.isdigit():
            raise forms.ValidationError("Not a page cursor.")
        return opened_at, int(pk)


class UploadForm(forms.Form):
    project = forms.SlugField(
        max_length=100,
        help_text="An existing project, or a new name (letters, digits, - and _) to create one.",
        widget=forms.TextInput(attrs={"list": "project-slugs", "autocomplete": "off", "spellcheck": "false"}),
    )
    archive = forms.FileField(
        label="Archive",
        help_text="A .zip, .tar.gz, .tgz or .tar of checkpoint files in any of the five formats.",
        widget=forms.FileInput(attrs={"accept": ",".join(ARCHIVE_SUFFIXES)}),
    )

    def __init__(self, *args: Any, max_bytes: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_bytes = max_bytes

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
    """A reviewer's decision on a phase; the phase-dependent rules live in checkpoints.phases.record_feedback."""

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
        data = super().clean()
        if data.get("action") == "retry_with_changes" and not data.get("requested_changes"):
            self.add_error("requested_changes", "List at least one change, one per line.")
        return data
