"""Edit a checkpoint's state as a new head: a value at a JSON pointer, a reason, the diff, then Save."""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpResponse
from django.urls import reverse
from django.views.decorators.http import require_http_methods
from jsonpointer import JsonPointer, JsonPointerException

from checkpoints import store
from checkpoints.models import Checkpoint, SourceFormat
from checkpoints.services import (
    Actor,
    CheckpointError,
    EditPreview,
    InvalidInput,
    StateEdit,
    check_editable,
    preview_edit,
)
from checkpoints.services import (
    edit_state as edit_state_service,
)

from ..forms import EditStateForm
from ..presenters.diff import present_diff
from ..presenters.secrets import masker
from ..undo import offer_undo
from .common import OPERATE, HtmxHttpRequest, console, get_checkpoint_for_user, navigate, render_page

PREFILL_MAX = 200_000  # characters of the current value put in the editor; a bigger one is edited by a smaller path


def _current_text(checkpoint: Checkpoint, pointer: str) -> tuple[str, str]:
    """The value at `pointer` in the checkpoint's state as indented JSON for the editor, and a note when there is
    none to show (a new key, a bad pointer, a value too big to edit here). Found secrets are masked: saving the
    value back writes the masked text in their place (docs/secrets.md#masking)."""
    try:
        value = JsonPointer(pointer).resolve(
            masker(checkpoint.session.project)(store.load_shared(bytes(checkpoint.root)))
        )
    except (JsonPointerException, LookupError, TypeError):
        return "", "Nothing is stored at this path yet: saving adds it (its parent must exist)."
    text = json.dumps(value, ensure_ascii=False, indent=2)
    if len(text) > PREFILL_MAX:
        return "", f"The value here is {len(text):,} characters of JSON: edit a smaller part of it (a longer path)."
    return text, ""


def _top_keys(checkpoint: Checkpoint) -> list[tuple[str, str]]:
    """(key, pointer) of the state's top-level keys: where an operator usually starts."""
    state = store.load_shared(bytes(checkpoint.root))
    keys = list(state)[:200] if isinstance(state, dict) else []
    return [(key, JsonPointer.from_parts([key]).path) for key in keys]


def _error_field(exc: InvalidInput) -> str | None:
    """The form field a service refusal is about (the edit's path or value, the reason), else the whole form."""
    if exc.field == "reason":
        return "reason"
    if exc.field.startswith("values.") or exc.field in ("edits.0", "state"):
        return "value" if "not a JSON pointer" not in str(exc) and "names no place" not in str(exc) else "path"
    return None


@console(OPERATE)
@require_http_methods(["GET", "POST"])
def edit_state(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    checkpoint = get_checkpoint_for_user(request, pk)
    session = checkpoint.session
    note = ""
    try:
        check_editable(checkpoint)
    except CheckpointError as exc:
        refused = {"checkpoint": checkpoint, "session": session, "refusal": str(exc)}
        return render_page(request, "dashboard/state_edit.html", refused, partial="edit-form")
    if request.method == "POST":
        form = EditStateForm(request.POST)
    else:
        pointer = request.GET.get("path", "")[:2000]
        text, note = _current_text(checkpoint, pointer)
        form = EditStateForm(initial={"path": pointer, "value": text})
    preview: EditPreview | None = None
    if request.method == "POST" and form.is_valid():
        edits = [StateEdit(form.cleaned_data["path"], form.cleaned_data["value"])]
        try:
            if form.cleaned_data["action"] == "save":
                edited = edit_state_service(
                    checkpoint, edits, actor=Actor.for_user(request.user), reason=form.cleaned_data["reason"]
                )
                offer_undo(
                    request,
                    session,
                    f"Saved the edit of #{checkpoint.seq} as new checkpoint #{edited.seq}: the agent resumes from it. "
                    "Undo returns to the head before it.",
                )
                return navigate(request, reverse("dashboard:checkpoint_detail", args=[edited.pk]))
            preview = preview_edit(checkpoint, edits)
        except InvalidInput as exc:
            form.add_error(_error_field(exc), str(exc))
        except CheckpointError as exc:
            form.add_error(None, str(exc))
    context: dict[str, Any] = {
        "checkpoint": checkpoint,
        "session": session,
        "form": form,
        "note": note,
        "preview": preview,
        "diff": present_diff(masker(session.project).diff(preview.diff), query={}) if preview else None,
        "old_label": f"#{checkpoint.seq} now",
        "new_label": "After the edit",
        "top_keys": _top_keys(checkpoint),
        "is_thread": session.source_format == SourceFormat.LANGGRAPH,
        "head": session.head,
    }
    return render_page(request, "dashboard/state_edit.html", context, partial="edit-form")
