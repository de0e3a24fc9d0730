"""The session timeline: a session's checkpoint tree, newest first, with its branches, phases and charts.

`presenters.timeline` lays out the page's rows; `presenters.timeline_header` what the full page shows above them.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse, QueryDict
from django.shortcuts import render
from django.views.decorators.http import require_GET

from ..presenters.branches import Folding
from ..presenters.timeline import expanded_run, timeline_page
from ..presenters.timeline_header import session_overview, timeline_index
from .common import HtmxHttpRequest, console, get_session_for_user, parse_int, render_page

TOGGLES_MAX = 100  # most `open` / `fold` parameters read from one URL


@console()
@require_GET
def session_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    session = get_session_for_user(request, pk)
    expand, folding = _parse_range(request.GET.get("expand")), _folding(request.GET)
    if request.htmx and expand and "before" not in request.GET and "after" not in request.GET:
        run = expanded_run(session, expand, folding=folding, user=request.user)
        return render(request, "dashboard/session_detail.html#run", {"session": session, "span": expand, "run": run})
    page = timeline_page(
        session,
        before=parse_int(request.GET.get("before")),
        after=parse_int(request.GET.get("after")),
        at=parse_int(request.GET.get("at")),
        expand=expand,
        folding=folding,
        user=request.user,
    )
    context: dict[str, Any] = {"session": session, "page": page}
    if not request.htmx:
        context.update(session_overview(session), landmarks=timeline_index(session, page.forks, near=page.top))
    return render_page(request, "dashboard/session_detail.html", context, "timeline")


def _parse_range(value: str | None) -> tuple[int, int] | None:
    """'40-51' → (40, 51); anything else → None."""
    low, _, high = (value or "").partition("-")
    lo, hi = parse_int(low), parse_int(high)
    return (lo, hi) if lo is not None and hi is not None and lo <= hi else None


def _folding(query: QueryDict) -> Folding:
    """`open=40&fold=7`: the side branches (by first seq) shown open or folded against the default."""

    def seqs(name: str) -> frozenset[int]:
        return frozenset(seq for seq in map(parse_int, query.getlist(name)[:TOGGLES_MAX]) if seq)

    return Folding(seqs("open"), seqs("fold"))
