"""Being built: replaced by its owner."""

from __future__ import annotations

from django.http import Http404


def checkpoint_detail(request, **kwargs):
    raise Http404("not built yet")


def checkpoint_subtree(request, **kwargs):
    raise Http404("not built yet")


def checkpoint_download(request, **kwargs):
    raise Http404("not built yet")
