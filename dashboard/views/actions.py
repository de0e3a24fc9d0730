"""Being built: replaced by its owner."""

from __future__ import annotations

from django.http import Http404


def undo_restore(request, **kwargs):
    raise Http404("not built yet")


def restore(request, **kwargs):
    raise Http404("not built yet")


def fork(request, **kwargs):
    raise Http404("not built yet")


def pin(request, **kwargs):
    raise Http404("not built yet")
