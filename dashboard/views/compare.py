"""Compare two checkpoints: what changed from A to B, or, for checkpoints on different branches, what changed on
B's branch since their common ancestor (as `git diff A...B` does).

The diff is `services.diff_checkpoints`; `presenters.diff` shapes it for reading, a screenful at a time.
"""

from __future__ import annotations

from django.http import HttpResponse
from django.views.decorators.http import require_GET

from checkpoints.lineage import Relation, relate
from checkpoints.services import diff_checkpoints

from ..forms import CompareForm
from ..presenters.diff import present_diff
from .common import VIEW, HtmxHttpRequest, console, get_checkpoint_for_user, parse_int, render_page


@console(VIEW)
@require_GET
def compare(request: HtmxHttpRequest) -> HttpResponse:
    form = CompareForm(request.GET)
    if not form.is_valid():
        context = {"form": form, "error": "Choose two checkpoints to compare: ?a=<id>&b=<id>, both numbers."}
        response = render_page(request, "dashboard/compare.html", context)
        response.status_code = 400
        return response
    a = get_checkpoint_for_user(request, form.cleaned_data["a"])
    b = get_checkpoint_for_user(request, form.cleaned_data["b"])
    lineage = relate(a, b)
    direct = lineage.relation != Relation.DIVERGED or request.GET.get("base") == "a"
    base = a if direct or lineage.ancestor is None else lineage.ancestor
    query = {"a": a.pk, "b": b.pk, **({"base": "a"} if direct and lineage.relation == Relation.DIVERGED else {})}
    diff = present_diff(
        diff_checkpoints(base, b),
        query=query,
        path_filter=request.GET.get("path", ""),
        expand=request.GET.get("expand", ""),
        offset=parse_int(request.GET.get("offset")) or 0,
        old_pk=base.pk,
        new_pk=b.pk,
    )
    old_label = f"A · #{a.seq}" if base is a else f"#{base.seq} · common ancestor"
    context = {"form": form, "a": a, "b": b, "base": base, "lineage": lineage, "diff": diff, "diff_in_place": True}
    context |= {"old_label": old_label, "new_label": f"B · #{b.seq}"}
    if diff.expanded is not None and request.htmx and not request.htmx.history_restore_request:
        # "show more": only the rows it adds
        return render_page(request, "dashboard/partials/diff.html", context, partial="diff-fragment")
    return render_page(request, "dashboard/compare.html", context, partial="compare-result")
