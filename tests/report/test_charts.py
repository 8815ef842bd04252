"""The report's chart layout (``vsnap_qual.report.charts``): a fixed symmetric scale (a near-zero difference draws
near zero, never stretched to the full width), round labelled ticks, a distinct colour per series, and legends that
wrap instead of running past the chart. tests/report/test_rendered_page.py checks the same in a real browser."""

from __future__ import annotations

import re

import pytest

from vsnap_qual.report import charts, figures


def test_a_near_zero_difference_draws_near_zero_on_the_fixed_scale() -> None:
    scale = charts.symmetric_scale([-0.0036, -0.0036], floor=1.0)
    assert scale.limit == 1.0 and scale.ticks == (-1.0, -0.5, 0.0, 0.5, 1.0)
    assert abs(scale.px(-0.0036, 260)) < 1, "one block in 28,000 is a sliver, not a full-width bar"
    assert scale.px(-1.0, 260) == -260 and scale.px(0.5, 260) == 130


@pytest.mark.parametrize(
    ("values", "limit"), [([0.0], 1.0), ([-1.0], 1.0), ([1.2], 2.0), ([-3.2, 0.4], 5.0), ([-7.0], 10.0), ([42], 50.0)]
)
def test_the_scale_widens_to_a_round_limit_only_past_its_floor(values: list[float], limit: float) -> None:
    scale = charts.symmetric_scale(values, floor=1.0)
    assert scale.limit == limit and scale.ticks[0] == -limit and scale.ticks[-1] == limit and 0.0 in scale.ticks
    assert all(abs(scale.px(v, 100)) <= 100 for v in values), "every bar inside the axis"


def test_a_scale_needs_a_floor() -> None:
    with pytest.raises(ValueError, match="positive floor"):
        charts.symmetric_scale([1.0], floor=0)


@pytest.mark.parametrize(
    ("top", "ticks"),
    [(99.9, [0, 50, 100]), (4.59, [0, 2, 4, 6]), (1749.8, [0, 500, 1000, 1500, 2000]), (0.7, [0, 0.2, 0.4, 0.6, 0.8])],
)
def test_ticks_are_round_and_reach_past_the_largest_value(top: float, ticks: list[float]) -> None:
    assert charts.nice_ticks(top) == ticks


def test_every_series_has_its_own_colour_and_too_many_are_refused() -> None:
    names = [f"series {i}" for i in range(len(charts.COLOURS))]
    palette = charts.colours(names)
    assert len(set(palette.values())) == len(names)
    with pytest.raises(ValueError, match="distinct colours"):
        charts.colours([*names, "one more"])


def test_a_long_legend_wraps_onto_rows_and_no_entry_passes_the_right_edge() -> None:
    series = ["overlay", "ordinary", "create", "inspect", "restore-1", "restart", "restore-2", "restore-after-stop",
              "fresh-box", "faults"]  # fmt: skip
    entries, last = charts.legend_layout(series, charts.colours(series), left=150, right=866)
    assert [e.name for e in entries] == series, "every entry, in order"
    assert last > 15, "two rows at least: the entries do not fit one"
    for entry in entries:
        assert entry.x + 14 + charts.text_px(entry.name) <= 866, entry
    rows = {e.y for e in entries}
    for y in rows:
        row = sorted((e for e in entries if e.y == y), key=lambda e: e.x)
        for before, after in zip(row, row[1:], strict=False):
            assert before.x + 14 + charts.text_px(before.name) < after.x, (before, after)


def test_the_kv_chart_svg_has_a_labelled_axis_and_a_sliver_for_a_tiny_difference() -> None:
    svg = str(
        charts.delta_bars(
            [("v1/head", [("snapshot", -0.0036), ("restored", -0.0036)]), ("v1/base", [("snapshot", -0.6)])],
            title="KV",
            series=("snapshot", "restored"),
            floor=1.0,
            axis="Δ %",
            unit_format=figures.percent,
            tick_format=lambda v: f"{v:+g}%",
        )
    )
    ticks = re.findall(r'class="tick">([^<]+)</text>', svg)
    assert ticks == ["-1%", "-0.5%", "0", "+0.5%", "+1%"], ticks
    assert 'class="axis-name">Δ %</text>' in svg
    widths = {t: float(w) for w, t in re.findall(r'width="([\d.]+)" height="14"[^>]*><title>([^<]+)</title>', svg)}
    assert widths["v1/head snapshot: −0.0036%"] < 1 and 150 < widths["v1/base snapshot: −0.60%"] < 160, widths
