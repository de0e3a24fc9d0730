"""Compare two checkpoints: what changed from A to B, or, for checkpoints on different branches, what changed on
B's branch since their common ancestor (as `git diff A...B` does).

`presenters.compare` picks what to diff and labels it; `presenters.diff` shapes the diff for reading, a screenful
at a time.
"""

from __future__ import annotations

from typing import Any

from django.http import Http404, HttpResponse
from django.views.decorators.http import require_GET

from checkpoints.models import AgentSession, Checkpoint
from checkpoints.store.masking import Masker

from ..forms import CheckpointRef, CompareForm
from ..presenters.compare import comparison
from ..presenters.secrets import masker
from .common import VIEW, HtmxHttpRequest, console, get_checkpoint_for_user, parse_int, render_page


class NotComparable(Exception):
    """What to tell the operator instead of a comparison, and the status a page (not an htmx swap) gets."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


@console(VIEW)
@require_GET
def compare(request: HtmxHttpRequest) -> HttpResponse:
    form = CompareForm(request.GET)
    try:
        a, b = _pick(request, form)
    except NotComparable as exc:
        # htmx swaps the message in place of the previous comparison (it swaps 2xx answers only)
        fields = {name: form.data.get(name, "") for name in ("session", "a", "b")}
        context: dict[str, Any] = {"form": form, "fields": fields, "error": str(exc)}
        response = render_page(request, "dashboard/compare.html", context, partial="compare-result")
        if not request.htmx:
            response.status_code = exc.status
        return response
    context = {"form": form} | comparison(
        a,
        b,
        from_a=request.GET.get("base") == "a",
        path_filter=request.GET.get("path", ""),
        expand=request.GET.get("expand", ""),
        offset=parse_int(request.GET.get("offset")) or 0,
        internal=request.GET.get("internal") == "1",
        shown=_masker(a, b),
    )
    if context["diff"].expanded is not None and request.htmx and not request.htmx.history_restore_request:
        # "show more": only the rows it adds
        return render_page(request, "dashboard/partials/diff.html", context, partial="diff-fragment")
    return render_page(request, "dashboard/compare.html", context, partial="compare-result")


def _masker(a: Checkpoint, b: Checkpoint) -> Masker:
    """What masks the comparison: both checkpoints' projects' found secrets (two projects' when they differ)."""
    shown = masker(a.session.project)
    return shown if a.session.project_id == b.session.project_id else shown.joined(masker(b.session.project))


def _pick(request: HtmxHttpRequest, form: CompareForm) -> tuple[Checkpoint, Checkpoint]:
    """The two checkpoints the request names (see CompareForm), or NotComparable saying what is wrong."""
    if not form.is_valid():
        errors = [str(error) for name in ("a", "b") for error in form.errors.get(name, []) if name in form.data]
        raise NotComparable(" ".join(["Choose two checkpoints to compare: #12 or id:345.", *errors]), 400)
    refs = {name: form.cleaned_data[name] for name in ("a", "b")}
    found = {name: _by_id(request, ref) for name, ref in refs.items() if ref.by == "id"}
    session_id = form.cleaned_data.get("session") or next((c.session_id for c in found.values()), None)
    for name, ref in refs.items():
        if name not in found:
            if session_id is None:
                question = (
                    f"{ref} is a checkpoint of which session? Compare from a session's timeline, or write id:345."
                )
                raise NotComparable(question, 400)
            found[name] = _by_seq(request, session_id, ref.number)
    return found["a"], found["b"]


def _by_id(request: HtmxHttpRequest, ref: CheckpointRef) -> Checkpoint:
    try:
        return get_checkpoint_for_user(request, ref.number)
    except Http404:
        raise NotComparable(f"No checkpoint {ref} that you can see.", 404) from None


def _by_seq(request: HtmxHttpRequest, session_id: int, seq: int) -> Checkpoint:
    session = AgentSession.objects.visible_to(request.user).filter(pk=session_id).values_list("external_id", flat=True)
    name = session.first()
    pk = Checkpoint.objects.filter(session_id=session_id, seq=seq).values_list("pk", flat=True).first()
    if name is None or pk is None:
        raise NotComparable(f"No checkpoint #{seq} in {name or 'that session'}.", 404)
    return _by_id(request, CheckpointRef("id", pk))
