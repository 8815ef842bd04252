"""The report's SVG charts (``report.html``): horizontal bars from zero, bars either side of a zero line, stacked
bars, and the three pieces of layout they share, each a pure function tested on its own (tests/report/test_charts.py):

- :func:`symmetric_scale`: a fixed axis from −limit to +limit that never shrinks below a floor, so a difference of
  a few thousandths of a percent draws as a sliver at zero, not as a full-width bar (no autoscale to the data);
- :func:`nice_ticks`: round tick values from zero (1, 2 or 5 times a power of ten apart), every axis labelled;
- :func:`legend_layout`: every legend entry whole, wrapped onto more rows before one would pass the chart's width,
  and :func:`colours`: a distinct colour per series (never one reused; more series than colours is an error the
  caller folds away first).

Hand-drawn, not a charting library's: the page is one offline file that runs no script, and its three small bar
charts need no more than these functions. Of the libraries that write SVG from Python, matplotlib would add tens of
megabytes (and fonts drawn as paths) to every install for them, and pygal's tooltips need its JavaScript.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

#: distinct colours (Okabe-Ito's and Tableau's qualitative palettes, none repeated); a chart's series each take one
COLOURS: tuple[str, ...] = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#1c2329",
                            "#8C564B", "#7F7F7F", "#BCBD22", "#17BECF", "#F0E442")  # fmt: skip
#: the width of one character of the charts' 12 px sans-serif text, a little over DejaVu Sans' widest lower case
#: average (legend and label placement errs wide, never clipped)
CHAR_PX = 7.6
LABEL_W = 150
_BAR_H, _GAP, _ROW_H = 14, 10, 18


def colours(series: Sequence[str]) -> dict[str, str]:
    """A distinct colour per series name, in order; more series than :data:`COLOURS` is refused (fold them first)."""
    names = list(dict.fromkeys(series))
    if len(names) > len(COLOURS):
        raise ValueError(f"{len(names)} series but {len(COLOURS)} distinct colours: fold the rest into one")
    return dict(zip(names, COLOURS, strict=False))


def text_px(text: str) -> float:
    """How wide ``text`` draws at the charts' 12 px, erring wide."""
    return CHAR_PX * len(text)


@dataclass(frozen=True)
class LegendEntry:
    name: str
    colour: str
    x: float
    #: the text's baseline; the swatch sits 9 px above it
    y: float


def legend_layout(
    series: Sequence[str], palette: dict[str, str], *, left: float, right: float, top: float = 15
) -> tuple[list[LegendEntry], float]:
    """Each entry (a 10 px swatch, 4 px, its name, 16 px) placed left to right from ``left``, a new row started
    before an entry would pass ``right``: nothing is cut. Returns the entries and the baseline of the last row."""
    entries, x, y = [], left, top
    for name in series:
        width = 14 + text_px(name)
        if x > left and x + width > right:
            x, y = left, y + _ROW_H
        entries.append(LegendEntry(name, palette[name], x, y))
        x += width + 16
    return entries, y


def _legend_svg(entries: Sequence[LegendEntry]) -> list[str]:
    return [
        f'<rect x="{e.x:.1f}" y="{e.y - 9:.1f}" width="10" height="10" fill="{e.colour}"/>'
        f'<text x="{e.x + 14:.1f}" y="{e.y:.1f}" class="legend">{escape(e.name)}</text>'
        for e in entries
    ]


def nice_step(raw: float) -> float:
    """The smallest of 1, 2, 5 × 10^k that is at least ``raw`` (> 0)."""
    power = 10.0 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw * (1 - 1e-12))


def nice_ticks(top: float, *, count: int = 4) -> list[float]:
    """Round tick values from 0 to at least ``top``, about ``count`` steps apart."""
    if top <= 0:
        return [0.0, 1.0]
    step = nice_step(top / count)
    return [round(i * step, 12) for i in range(math.ceil(top / step - 1e-9) + 1)]


@dataclass(frozen=True)
class Scale:
    """A fixed axis from −``limit`` to +``limit``, zero in the middle, labelled at ``ticks``."""

    limit: float
    ticks: tuple[float, ...]

    def px(self, value: float, half_width: float) -> float:
        """How far from the zero line ``value`` draws, in px (signed)."""
        return half_width * value / self.limit


def symmetric_scale(values: Sequence[float], *, floor: float) -> Scale:
    """The smallest of 1, 2, 5 × 10^k at least ``floor`` and at least every ``|value|``, both ways from zero: the
    axis is fixed by the floor, not stretched to the largest value, so a value far below the floor draws near
    zero."""
    if floor <= 0:
        raise ValueError("a symmetric scale needs a positive floor")
    limit = nice_step(max([floor, *(abs(v) for v in values)]))
    half = limit / 2
    return Scale(limit, (-limit, -half, 0.0, half, limit))


def _tick_text(value: float, tick_format: Callable[[float], str]) -> str:
    return "0" if value == 0 else tick_format(value)


def bars(
    groups: Sequence[tuple[str, Sequence[tuple[str, float | None]]]],
    *,
    unit_format: Callable[[float], str],
    title: str,
    series: Sequence[str],
    axis: str,
    tick_format: Callable[[float], str] = "{:g}".format,
) -> Markup:
    """A horizontal grouped bar chart: a group per label, a bar per series from zero, the value at the bar end, a
    labelled axis under the bars (``axis`` its name)."""
    values = [v for _, found in groups for _, v in found if v is not None]
    if not values:
        return Markup("")
    chart_w, pad = 560, 110
    ticks = nice_ticks(max(values))
    top = ticks[-1]
    width = LABEL_W + chart_w + pad
    palette = colours(series)
    legend, legend_y = legend_layout(series, palette, left=LABEL_W, right=width - 4)
    y0 = legend_y + 14
    plot_h = sum(len(found) * (_BAR_H + 2) + _GAP for _, found in groups)
    height = y0 + plot_h + 40
    parts = [
        f'<svg role="img" width="{width}" height="{height:.0f}" viewBox="0 0 {width} {height:.0f}" class="chart">',
        f"<title>{escape(title)}</title>",
        *_legend_svg(legend),
    ]
    y = y0
    for label, found in groups:
        group_h = len(found) * (_BAR_H + 2)
        parts.append(_group_label(label, y + group_h / 2))
        for name, value in found:
            if value is not None:
                length = chart_w * value / top
                said = escape(unit_format(value))
                parts.append(
                    f'<rect x="{LABEL_W}" y="{y:.1f}" width="{max(length, 1.0):.1f}" height="{_BAR_H}" '
                    f'fill="{palette[name]}"><title>{escape(label)} {escape(name)}: {said}</title></rect>'
                    f'<text x="{LABEL_W + max(length, 1.0) + 4:.1f}" y="{y + _BAR_H - 3:.1f}" '
                    f'class="value">{said}</text>'
                )
            y += _BAR_H + 2
        y += _GAP
    parts += _x_axis(ticks, lambda v: LABEL_W + chart_w * v / top, y0 - 4, y, axis, tick_format)
    parts.append("</svg>")
    return Markup("".join(parts))


def delta_bars(
    groups: Sequence[tuple[str, Sequence[tuple[str, float | None]]]],
    *,
    title: str,
    series: Sequence[str],
    floor: float,
    axis: str,
    unit_format: Callable[[float], str],
    tick_format: Callable[[float], str] = "{:+g}".format,
) -> Markup:
    """Horizontal bars from a zero line in the middle, left for a negative difference and right for a positive
    one, on a fixed symmetric scale (:func:`symmetric_scale` with ``floor``) with labelled ticks; each bar labelled
    with ``unit_format`` (the digits that show the difference)."""
    values = [v for _, found in groups for _, v in found if v is not None]
    if not values:
        return Markup("")
    half, pad = 260, 100
    scale = symmetric_scale(values, floor=floor)
    zero = LABEL_W + pad + half
    width = zero + half + pad
    palette = colours(series)
    legend, legend_y = legend_layout(series, palette, left=LABEL_W, right=width - 4)
    y0 = legend_y + 14
    plot_h = sum(len(found) * (_BAR_H + 2) + _GAP for _, found in groups)
    height = y0 + plot_h + 40
    parts = [
        f'<svg role="img" width="{width}" height="{height:.0f}" viewBox="0 0 {width} {height:.0f}" '
        'class="chart kv-delta">',
        f"<title>{escape(title)}</title>",
        *_legend_svg(legend),
    ]
    y = y0
    for label, found in groups:
        group_h = len(found) * (_BAR_H + 2)
        parts.append(_group_label(label, y + group_h / 2))
        for name, value in found:
            if value is not None:
                said = escape(unit_format(value))
                length = abs(scale.px(value, half))
                left = zero - length if value < 0 else zero
                parts.append(
                    f'<rect x="{left:.2f}" y="{y:.1f}" width="{length:.2f}" height="{_BAR_H}" fill="{palette[name]}" '
                    f'class="bar"><title>{escape(label)} {escape(name)}: {said}</title></rect>'
                )
                x, anchor = (left - 4, "end") if value < 0 else (zero + length + 4, "start")
                parts.append(
                    f'<text x="{x:.1f}" y="{y + _BAR_H - 3:.1f}" text-anchor="{anchor}" class="value">{said}</text>'
                )
            y += _BAR_H + 2
        y += _GAP
    parts += _x_axis(scale.ticks, lambda v: zero + scale.px(v, half), y0 - 4, y, axis, tick_format)
    parts.append("</svg>")
    return Markup("".join(parts))


def stacked(
    lanes: Sequence[tuple[str, Sequence[tuple[str, float]]]],
    series: Sequence[str],
    *,
    title: str,
    unit_format: Callable[[float], str],
    axis: str,
    tick_format: Callable[[float], str] = "{:g}".format,
) -> Markup:
    """One horizontal stacked bar per lane (where its time went, series by series), from zero, labelled axis."""
    totals = [sum(v for _, v in segments) for _, segments in lanes]
    if not lanes or not any(totals):
        return Markup("")
    chart_w, pad, bar_h = 620, 100, 20
    ticks = nice_ticks(max(totals))
    top = ticks[-1]
    width = LABEL_W + chart_w + pad
    palette = colours(series)
    legend, legend_y = legend_layout(series, palette, left=LABEL_W, right=width - 4)
    y0 = legend_y + 14
    height = y0 + len(lanes) * (bar_h + _GAP) + 40
    parts = [
        f'<svg role="img" width="{width}" height="{height:.0f}" viewBox="0 0 {width} {height:.0f}" class="chart">',
        f"<title>{escape(title)}</title>",
        *_legend_svg(legend),
    ]
    y = y0
    for (label, segments), total in zip(lanes, totals, strict=True):
        parts.append(_group_label(label, y + bar_h / 2))
        x = float(LABEL_W)
        for name, value in segments:
            length = chart_w * value / top
            parts.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{length:.1f}" height="{bar_h}" fill="{palette[name]}">'
                f"<title>{escape(label)} {escape(name)}: {escape(unit_format(value))}</title></rect>"
            )
            x += length
        parts.append(f'<text x="{x + 4:.1f}" y="{y + bar_h - 5:.1f}" class="value">{escape(unit_format(total))}</text>')
        y += bar_h + _GAP
    parts += _x_axis(ticks, lambda v: LABEL_W + chart_w * v / top, y0 - 4, y, axis, tick_format)
    parts.append("</svg>")
    return Markup("".join(parts))


def _group_label(label: str, middle: float) -> str:
    """A group's (or a lane's) label, right-aligned left of the bars, at its vertical middle."""
    return f'<text x="{LABEL_W - 8}" y="{middle + 4:.1f}" text-anchor="end" class="label">{escape(label)}</text>'


def _x_axis(
    ticks: Sequence[float],
    at: Callable[[float], float],
    top: float,
    bottom: float,
    name: str,
    tick_format: Callable[[float], str],
) -> list[str]:
    """Grid lines at the ticks, the zero line darker, a labelled tick under each, and the axis's name below."""
    parts = []
    for tick in ticks:
        x, line = at(tick), "axis" if tick == 0 else "grid"
        parts.append(
            f'<line x1="{x:.1f}" y1="{top:.1f}" x2="{x:.1f}" y2="{bottom:.1f}" class="{line}"/>'
            f'<text x="{x:.1f}" y="{bottom + 14:.1f}" text-anchor="middle" class="tick">'
            f"{escape(_tick_text(tick, tick_format))}</text>"
        )
    middle = (at(ticks[0]) + at(ticks[-1])) / 2
    parts.append(
        f'<text x="{middle:.1f}" y="{bottom + 30:.1f}" text-anchor="middle" class="axis-name">{escape(name)}</text>'
    )
    return parts
