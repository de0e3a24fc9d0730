"""`{% export_formats as names %}`: the formats a session can be downloaded in (the session page's "Download as…")."""

from __future__ import annotations

from django import template

from checkpoints.sources import formats

register = template.Library()


@register.simple_tag
def export_formats() -> tuple[str, ...]:
    return formats.names()
