"""Being built: replaced by its owner."""

from __future__ import annotations

from django.http import Http404


def alert_list(request, **kwargs):
    raise Http404("not built yet")


def acknowledge(request, **kwargs):
    raise Http404("not built yet")


def resolve(request, **kwargs):
    raise Http404("not built yet")
