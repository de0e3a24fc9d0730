"""Server-rendered SVG charts: no JavaScript, themed by CSS classes, each with a title, a description and axis labels.

`{% line_chart series title="…" y_format="bytes" %}` draws series of (x, number) points, x a datetime or a
checkpoint seq; a series with "axis": "right" gets its own scale on the right.
`{% bar_chart bars title="…" slot=timedelta %}` draws one bar per time slot (hour, day…).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import count
from typing import Any

from django import template
from django.template.defaultfilters import filesizeformat
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

register = template.Library()

WIDTH, HEIGHT = 480, 200
TOP, BOTTOM, MARGIN = 22, 40, 62  # MARGIN: room for an axis' tick labels
STEPS = (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10)
EVEN_STEPS = (1, 2, 4, 6, 8, 10)  # counts: the mid tick stays a whole number
_ids = count(1)


def format_value(value: float, kind: str) -> str:
    if kind == "bytes":
        return str(filesizeformat(value)).replace("\xa0", " ")
    if kind == "percent":
        return f"{value:.1f}%" if 0 < value < 10 and value != int(value) else f"{value:.0f}%"
    return f"{value:,.0f}" if value >= 10 or value == int(value) else f"{value:.1f}"


def nice_ceiling(value: float, kind: str = "count") -> float:
    """A round top for the y axis at or above `value` (round in KB, MB… for bytes), halved cleanly by the mid tick."""
    if value <= 0:
        return 2.0 if kind == "count" else 1.0
    if kind == "percent" and value > 50:
        return 100.0
    unit = 1024 ** max(0, math.floor(math.log(value, 1024))) if kind == "bytes" else 1
    scaled = value / unit
    power = 10 ** math.floor(math.log10(scaled))
    if kind == "count":
        power = max(power, 1)
    steps = EVEN_STEPS if kind == "count" else STEPS
    top = next(power * step for step in steps if power * step >= scaled * (1 - 1e-9))
    return float(max(top, 2) if kind == "count" else top) * unit


def _time_label(moment: datetime, span: timedelta) -> str:
    local = timezone.localtime(moment) if timezone.is_aware(moment) else moment
    if span <= timedelta(days=1):
        return local.strftime("%H:%M")
    if span <= timedelta(days=14):
        return local.strftime("%b %d %H:%M")
    return local.strftime("%b %d %Y")


@dataclass
class Axis:
    top: float
    format: str
    label: str
    css: str = ""


@dataclass
class Plot:
    """The drawing area inside the SVG: x and y in data units map to pixels."""

    right_axis: bool

    @property
    def left(self) -> float:
        return MARGIN

    @property
    def width(self) -> float:
        return WIDTH - MARGIN - (MARGIN if self.right_axis else 14)

    @property
    def height(self) -> float:
        return HEIGHT - TOP - BOTTOM

    def y(self, value: float, axis: Axis) -> float:
        return TOP + self.height * (1 - value / axis.top)


def _frame(
    plot: Plot, *, title: str, description: str, axes: list[Axis], x_label: str, x_first: str, x_last: str, body: str
) -> SafeString:
    chart_id = f"chart-{next(_ids)}"
    left, right, base = plot.left, plot.left + plot.width, TOP + plot.height
    parts: list[str] = [  # markup from format_html, and `body`, which the callers built safe
        format_html(
            '<svg class="chart-svg" viewBox="0 0 {} {}" role="img" aria-labelledby="{}-t {}-d">'
            '<title id="{}-t">{}</title><desc id="{}-d">{}</desc>',
            WIDTH,
            HEIGHT,
            chart_id,
            chart_id,
            chart_id,
            title,
            chart_id,
            description,
        )
    ]
    for fraction in (0, 0.5, 1):
        y = f"{TOP + plot.height * (1 - fraction):.1f}"
        parts.append(format_html('<line class="grid-line" x1="{}" x2="{}" y1="{}" y2="{}"/>', left, right, y, y))
        for axis, x, anchor in zip(axes, (left - 6, right + 6), ("end", "start"), strict=False):
            parts.append(
                format_html(
                    '<text class="tick {}" x="{}" y="{}" text-anchor="{}" dominant-baseline="middle">{}</text>',
                    axis.css,
                    x,
                    y,
                    anchor,
                    format_value(axis.top * fraction, axis.format),
                )
            )
    parts.append(
        format_html(
            '<line class="axis" x1="{}" x2="{}" y1="{}" y2="{}"/><line class="axis" x1="{}" x2="{}" y1="{}" y2="{}"/>',
            left,
            right,
            base,
            base,
            left,
            left,
            TOP,
            base,
        )
    )
    parts.append(body)
    parts.append(
        format_html(
            '<text class="tick" x="{}" y="{}" text-anchor="start">{}</text>'
            '<text class="tick" x="{}" y="{}" text-anchor="end">{}</text>'
            '<text class="axis-label" x="{}" y="{}" text-anchor="middle">{}</text>',
            left,
            base + 15,
            x_first,
            right,
            base + 15,
            x_last,
            left + plot.width / 2,
            HEIGHT - 4,
            x_label,
        )
    )
    for axis, x, anchor in zip(axes, (4, WIDTH - 4), ("start", "end"), strict=False):
        parts.append(
            format_html(
                '<text class="axis-label {}" x="{}" y="{}" text-anchor="{}">{}</text>',
                axis.css,
                x,
                TOP - 9,
                anchor,
                axis.label,
            )
        )
    parts.append(mark_safe("</svg>"))
    # S308: the parts are format_html's output, a literal, and `body`, which the callers built with format_html
    return mark_safe("".join(str(part) for part in parts))  # noqa: S308


def _figure(title: str, svg: SafeString, legend: SafeString | None = None, note: str = "", css: str = "") -> SafeString:
    return format_html(
        '<figure class="chart {}"><figcaption class="chart-title">{}</figcaption>{}{}{}</figure>',
        css,
        title,
        svg,
        legend or "",
        format_html('<p class="chart-note muted small">{}</p>', note) if note else "",
    )


def _drawn(points: list[tuple[str, str]]) -> list[str]:
    """A polyline's points, as drawn, without the inner points of a level run or repeats: a flat stretch of a long
    session is two points, not two hundred, and the line looks the same to the tenth of a pixel."""
    kept: list[tuple[str, str]] = []
    for index, point in enumerate(points):
        if kept and point == kept[-1]:
            continue
        after = points[index + 1] if index + 1 < len(points) else None
        if kept and after is not None and kept[-1][1] == point[1] == after[1]:
            continue
        kept.append(point)
    return [f"{x},{y}" for x, y in kept]


def _empty(title: str, message: str) -> SafeString:
    return format_html(
        '<figure class="chart"><figcaption class="chart-title">{}</figcaption><p class="chart-empty muted">{}</p></figure>',
        title,
        message,
    )


@register.simple_tag
def line_chart(
    series: Sequence[dict[str, Any]],
    title: str,
    y_format: str = "count",
    y_label: str = "",
    x_label: str = "Time",
    right_label: str = "",
) -> SafeString:
    """Lines: each series is {"label", "points": [(x, number)], "css", optionally "axis": "right"}.

    x is a datetime, or a checkpoint seq (labelled #n). Both axes use `y_format`.
    """
    drawn = [line for line in series if line["points"]]
    if not drawn:
        return _empty(title, "No data yet.")
    sides = {side: [line for line in drawn if line.get("axis", "left") == side] for side in ("left", "right")}
    if not sides["left"]:
        sides = {"left": sides["right"], "right": []}
    axes = [
        Axis(
            nice_ceiling(max(value for line in lines for _, value in line["points"]), y_format),
            y_format,
            label,
            f"axis-{lines[0]['css']}" if sides["right"] else "",
        )
        for lines, label in ((sides["left"], y_label or title), (sides["right"], right_label))
        if lines
    ]
    plot = Plot(right_axis=len(axes) == 2)
    xs = [x for line in drawn for x, _ in line["points"]]
    first, last = min(xs), max(xs)
    by_time = isinstance(first, datetime)
    extent = (last - first).total_seconds() if by_time else last - first
    extent = extent or 1

    def position(x: Any) -> float:
        offset = (x - first).total_seconds() if by_time else x - first
        return plot.left + plot.width * offset / extent

    def label(x: Any) -> str:
        return _time_label(x, last - first) if by_time else f"#{x}"

    on_right = {id(line) for line in sides["right"]}
    paths, legend, summary = [], [], []
    for line in drawn:
        axis = axes[1] if plot.right_axis and id(line) in on_right else axes[0]
        # whole units of a 480-wide viewBox: under a pixel on screen, and a 200-point line is 1.6 kB lighter
        drawn_points = _drawn([(f"{position(x):.0f}", f"{plot.y(value, axis):.0f}") for x, value in line["points"]])
        coordinates = " ".join(drawn_points)
        if len(drawn_points) == 1:  # a single point: a visible mark rather than an empty line
            x, y = coordinates.split(",")
            paths.append(format_html('<circle class="series {}" cx="{}" cy="{}" r="3"/>', line["css"], x, y))
        else:
            paths.append(format_html('<polyline class="series {}" points="{}"/>', line["css"], coordinates))
        final = format_value(line["points"][-1][1], y_format)
        peak = format_value(max(value for _, value in line["points"]), y_format)
        summary.append(f"{line['label']}: {final} at the end, peak {peak}")
        side = (" · right axis" if axis is axes[1] else " · left axis") if plot.right_axis else ""
        legend.append((line["css"], line["label"], f"{final}{side}"))
    description = f"From {label(first)} to {label(last)}. " + "; ".join(summary) + "."
    svg = _frame(
        plot,
        title=title,
        description=description,
        axes=axes,
        x_label=x_label,
        x_first=label(first),
        x_last=label(last),
        body="".join(str(path) for path in paths),
    )
    items = format_html_join(
        "",
        '<li><svg class="swatch" viewBox="0 0 24 8" aria-hidden="true"><line class="series {}" x1="0" x2="24" '
        'y1="4" y2="4"/></svg>{} <span class="muted">({})</span></li>',
        legend,
    )
    return _figure(title, svg, format_html('<ul class="chart-legend">{}</ul>', items))


@register.simple_tag
def bar_chart(
    bars: Sequence[tuple[datetime, float]],
    title: str,
    slot: timedelta,
    y_format: str = "count",
    y_label: str = "",
    x_label: str = "Time",
    unit: str = "",
    note: str = "",
    css: str = "",
) -> SafeString:
    """One bar per time slot starting at each datetime; slots without a bar are drawn empty."""
    if not bars:
        return _empty(title, "No data yet.")
    plot = Plot(right_axis=False)
    axis = Axis(nice_ceiling(max(value for _, value in bars), y_format), y_format, y_label or title)
    first = min(at for at, _ in bars)
    last = max(at for at, _ in bars) + slot
    slots = max(1, round((last - first) / slot))
    width = plot.width / slots
    gap = min(1, width * 0.15)
    span = last - first
    moment = max(span, timedelta(days=2))  # bar tooltips always name the day
    rects = format_html_join(
        "",
        '<rect class="bar" x="{}" y="{}" width="{}" height="{}"><title>{}: {}{}</title></rect>',
        (
            (
                f"{plot.left + width * round((at - first) / slot) + gap:.2f}",
                f"{plot.y(value, axis):.2f}",
                f"{max(width - 2 * gap, 0.5):.2f}",
                f"{plot.height * value / axis.top:.2f}",
                _time_label(at, moment),
                format_value(value, y_format),
                f" {unit}" if unit else "",
            )
            for at, value in bars
        ),
    )
    peak_at, peak = max(bars, key=lambda bar: bar[1])
    description = (
        f"{len(bars)} of {slots} slots from {_time_label(first, span)} to {_time_label(last, span)}; "
        f"highest {format_value(peak, y_format)} at {_time_label(peak_at, moment)}."
    )
    svg = _frame(
        plot,
        title=title,
        description=description,
        axes=[axis],
        x_label=x_label,
        x_first=_time_label(first, span),
        x_last=_time_label(last, span),
        body=str(rects),
    )
    return _figure(title, svg, note=note, css=css)
