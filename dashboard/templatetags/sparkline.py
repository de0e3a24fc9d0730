"""`{% sparkline values %}`: a small inline SVG line chart, drawn on the server (no JavaScript, no images)."""

from __future__ import annotations

from collections.abc import Sequence

from django import template
from django.template.defaultfilters import filesizeformat
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

register = template.Library()


@register.simple_tag
def sparkline(values: Sequence[int], label: str = "State size", width: int = 120, height: int = 28) -> SafeString:
    """A line through `values` (oldest first), scaled to its own range; its <title> says what it shows in words."""
    if not values:
        return mark_safe('<span class="muted">—<span class="visually-hidden"> no checkpoints</span></span>')
    low, high = min(values), max(values)
    span = (high - low) or 1
    pad = 3  # room for the end dot and the stroke
    step = (width - 2 * pad) / max(len(values) - 1, 1)
    points = [
        (pad + i * step, height - pad - (value - low) / span * (height - 2 * pad) if high > low else height / 2)
        for i, value in enumerate(values)
    ]
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
    area = f"{points[0][0]:.1f},{height} {line} {points[-1][0]:.1f},{height}"
    count = len(values)
    title = (
        f"{label} over the last {count} checkpoint{'s' if count != 1 else ''}: "
        f"{filesizeformat(values[0])} to {filesizeformat(values[-1])}, peak {filesizeformat(high)}"
    )
    end_x, end_y = points[-1]
    return format_html(
        '<svg class="sparkline" role="img" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
        'xmlns="http://www.w3.org/2000/svg"><title>{title}</title>'
        '<polygon points="{area}" fill="currentColor" fill-opacity="0.12"/>'
        '<polyline points="{line}" fill="none" stroke="currentColor" stroke-width="1.5" stroke-linejoin="round"/>'
        '<circle cx="{x}" cy="{y}" r="2.5" fill="currentColor"/></svg>',
        w=width,
        h=height,
        title=title,
        area=area,
        line=line,
        x=f"{end_x:.1f}",
        y=f"{end_y:.1f}",
    )
