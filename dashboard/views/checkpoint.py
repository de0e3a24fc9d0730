"""A checkpoint: metadata, the conversation as a transcript, the state as a lazily loaded tree, JSON download;
each with the secrets found in the project masked for everyone (docs/secrets.md): a value is revealed one finding
at a time, with a reason, on the Secrets page.

`presenters.state_tree`, `presenters.transcript` and `presenters.checkpoint` shape what the page shows.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse, HttpResponseBadRequest
from django.shortcuts import render
from django.utils.http import content_disposition_header
from django.utils.text import get_valid_filename
from django.views.decorators.http import require_GET

from checkpoints import store
from checkpoints.store import jsoncodec
from checkpoints.store.diff import format_path

from ..presenters.checkpoint import changed_here, related, visible_state
from ..presenters.secrets import masker
from ..presenters.state_tree import BadPath, parse_path, resolve, state_tree, subtree
from ..presenters.transcript import Transcript
from .common import HtmxHttpRequest, console, get_checkpoint_for_user, parse_int, render_page


@console()
@require_GET
def checkpoint_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    checkpoint = get_checkpoint_for_user(request, pk)
    mask = masker(checkpoint.session.project)
    state = mask(store.load_shared(bytes(checkpoint.root)))
    checkpoint.status_reason = mask.text(checkpoint.status_reason)  # the page's copy: an error may quote a value
    checkpoint.metadata = mask(checkpoint.metadata)
    before = parse_int(request.GET.get("before"))
    if request.htmx and before is not None:
        context: dict[str, Any] = {"checkpoint": checkpoint, "transcript": Transcript.of(state, before=before)}
        return render(request, "dashboard/checkpoint_detail.html#earlier", context)
    internal = request.GET.get("internal") == "1"
    shown, hidden_channels = visible_state(state, checkpoint.session, internal=internal)
    context = {
        "checkpoint": checkpoint,
        "session": checkpoint.session,
        "tree": state_tree(shown),
        "hidden_channels": hidden_channels,
        "internal": internal,
        "transcript": Transcript.of(state, before=before),
        **related(checkpoint, request.user),
        **changed_here(checkpoint, internal=internal, shown=mask),
    }
    return render_page(request, "dashboard/checkpoint_detail.html", context, "checkpoint")


@console()
@require_GET
def checkpoint_subtree(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    checkpoint = get_checkpoint_for_user(request, pk)
    state = masker(checkpoint.session.project)(store.load_shared(bytes(checkpoint.root)))
    try:
        path = parse_path(request.GET.get("path", "[]"))
        value = resolve(state, path)
        offset = parse_int(request.GET.get("offset", "0"))
        if offset is None:
            raise BadPath("offset must be a whole number")
    except BadPath as exc:
        return HttpResponseBadRequest(f"Bad path: {exc}", content_type="text/plain; charset=utf-8")
    node = subtree(value, path, offset)
    context = {"checkpoint": checkpoint, "session": checkpoint.session, "node": node, "path_label": format_path(path)}
    return render_page(request, "dashboard/state_subtree.html", context, "items")


@console()
@require_GET
def checkpoint_download(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    checkpoint = get_checkpoint_for_user(request, pk)
    state = masker(checkpoint.session.project)(store.load_shared(bytes(checkpoint.root)))
    response = HttpResponse(jsoncodec.canonical(state), content_type="application/json")
    name = get_valid_filename(f"{checkpoint.session.external_id}-{checkpoint.seq}.json")
    response["Content-Disposition"] = content_disposition_header(True, name)
    return response
