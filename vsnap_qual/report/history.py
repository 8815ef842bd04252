"""Trends across runs (``vsnap-qual history DIR...``): per-lane figures night by night, each step's outcome per
night, and a gate against the median of recent compatible passed runs (docs/history.md).

Each run is read from its recorded ``results.json`` (or ``results.json.gz``); nothing is judged again. A run's
figures, per lane (``runner/arm``), from its steps' last records:

- ``restore/cold``: the restores' median ready time (``restore-1``, ``restore-2``) over the ordinary cold start's
  (lower is better);
- ``KV tokens``: the KV capacity the first restore reported (higher is better);
- ``decode tokens/s``: the restores' median decode speed (higher is better);
- ``harness s``: the lane's steps' seconds less the engine's own (lower is better); the gate compares it only
  with runs whose lane ran the same steps (a narrowed run does less).

Runs are *compatible* when they share the head image's family (its reference less tag and digest), the GPU (model
and count, or none) and the engine (its ``ai.vsnap.engine`` label, else ``vLLM <major.minor>``; CPU smoke mode
apart): :func:`compatibility`. Charts and the step grid are drawn per compatible group, so an H200 night never
shares an axis with a CPU one. The gate (:func:`gate`) takes the newest run and, per lane and figure, the median
of the last ``window`` compatible *passed* runs before it; a figure worse than that median by more than
``tolerance`` (a fraction) fails.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from markupsafe import Markup

from vsnap_qual import model, procedure
from vsnap_qual.report import charts, figures
from vsnap_qual.report.assemble import RESULTS_FILE, load_results

__all__ = ["FIGURES", "Figure", "GateFailure", "Run", "compatibility", "find_runs", "gate", "render_html",
           "render_markdown", "run_of"]  # fmt: skip

Better = Literal["lower", "higher"]


@dataclass(frozen=True)
class Figure:
    """One trended figure: its key, its name as shown, which way is better, and how a value is written."""

    key: str
    name: str
    better: Better
    unit: str


FIGURES: tuple[Figure, ...] = (
    Figure("restore_cold", "restore / cold start", "lower", "×"),
    Figure("kv_tokens", "KV cache tokens after restore", "higher", "tokens"),
    Figure("decode_tps", "decode speed after restore", "higher", "tokens/s"),
    Figure("harness_s", "harness time", "lower", "s"),
)
_RESTORES = ("restore-1", "restore-2")


@dataclass(frozen=True)
class Run:
    """One run as the history reads it: where it came from, when it started, its verdict, its compatibility key,
    each lane's figures and each ``lane/step``'s outcome (a lane's fault steps as one ``faults`` row)."""

    source: str
    run_id: str
    started: str
    status: str
    headline: str
    key: tuple[str, str, str]
    figures: dict[str, dict[str, float]] = field(default_factory=dict)
    outcomes: dict[str, str] = field(default_factory=dict)
    #: each lane's step names that ran: harness time compares only runs whose lane ran the same steps
    ran: dict[str, frozenset[str]] = field(default_factory=dict)


def load(path: Path) -> model.Results:
    """A ``results.json`` or ``results.json.gz``, read as the model (``assemble.load_results``); ``ValueError``
    naming the problem."""
    try:
        return load_results(path)
    except OSError as exc:
        raise ValueError(f"{path} cannot be read: {exc}") from None


def find_runs(paths: Iterable[Path]) -> list[Path]:
    """Every ``results.json`` (or ``.gz``) a path is or holds (directories searched through), each once."""
    found: dict[Path, None] = {}
    for path in paths:
        if path.is_file():
            found[path] = None
        elif path.is_dir():
            for hit in sorted([*path.rglob(RESULTS_FILE), *path.rglob(RESULTS_FILE + ".gz")]):
                if hit.with_suffix("") not in found and not (hit.suffix == ".gz" and hit.with_suffix("").is_file()):
                    found[hit] = None
        else:
            raise ValueError(f"{path} does not exist")
    return list(found)


def _family(ref: str) -> str:
    ref = ref.split("@", 1)[0]
    last = ref.rsplit("/", 1)[-1]
    return ref[: len(ref) - len(last)] + last.split(":", 1)[0] if ":" in last else ref


def image_family(ref: str) -> str:
    """An image reference less its tag and digest (``vllm/vllm-openai:nightly-a`` → ``vllm/vllm-openai``): also
    which kept runs the plan line estimates from (``timing.plan``)."""
    return _family(ref)


def compatibility(results: model.Results) -> tuple[str, str, str]:
    """(image family, GPU, engine) of a run's head arm (else its first lane): runs compare only within one."""
    envs = [lane["environment"] for lane in results["lanes"] if lane["environment"]]
    envs = sorted(envs, key=lambda e: e["arm"] != "head")
    if not envs:
        return ("unknown image", "unknown GPU", "unknown engine")
    env = envs[0]
    image = env["image"]
    gpu = env["gpu"] or {}
    gpu_name = f"{gpu['name']} ×{gpu.get('count') or 1}" if gpu.get("name") else "no GPU"
    label = (image.get("labels") or {}).get("ai.vsnap.engine", "")
    version = env["versions"].get("vllm") or ""
    engine = label or ("vLLM " + ".".join(version.split(".")[:2]) if version else "unknown engine")
    if results["run"]["options"].get("cpu_smoke"):
        engine += " (CPU smoke)"
    return (_family(image.get("ref") or "unknown image"), gpu_name, engine)


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def run_of(results: model.Results, source: str) -> Run:
    """The history's reading of one run (see the module docstring for each figure)."""
    latest = {(s["runner"], s["arm"], s["step"]): s for s in results["steps"]}
    lanes = list(dict.fromkeys((s["runner"], s["arm"]) for s in results["steps"]))
    known = results["verdict"].get("known_failures") or {}
    per_lane: dict[str, dict[str, float]] = {}
    outcomes: dict[str, str] = {}
    ran: dict[str, frozenset[str]] = {}
    for runner, arm in lanes:
        lane = f"{runner}/{arm}"
        found: dict[str, float] = {}
        ordinary = latest.get((runner, arm, "ordinary"))
        restores = [latest[(runner, arm, r)] for r in _RESTORES if (runner, arm, r) in latest]
        cold = _number(ordinary["results"].get("ready_seconds")) if ordinary else None
        ready = [v for r in restores if (v := _number(r["results"].get("ready_seconds"))) is not None]
        if cold and ready:
            found["restore_cold"] = statistics.median(ready) / cold
        if restores and (kv := _number(restores[0]["results"].get("kv_tokens"))) is not None:
            found["kv_tokens"] = kv
        speeds = [
            v
            for r in restores
            if isinstance(speed := r["results"].get("decode_speed"), dict)
            and (v := _number(speed.get("median_tps"))) is not None
        ]
        if speeds:
            found["decode_tps"] = statistics.median(speeds)
        steps = [s for (r, a, _), s in latest.items() if (r, a) == (runner, arm) and s["seconds"]]
        if steps:
            found["harness_s"] = sum(s["seconds"] - (s["engine_seconds"] or 0.0) for s in steps)
        ran[lane] = frozenset(s["step"] for s in steps)
        per_lane[lane] = found
        faults = [s for (r, a, name), s in latest.items() if (r, a) == (runner, arm) and procedure.is_fault_step(name)]
        for (r, a, name), step in latest.items():
            if (r, a) == (runner, arm) and not procedure.is_fault_step(name):
                label = procedure.label(runner, arm, name)
                outcomes[f"{lane}/{name}"] = "KNOWN" if label in known else step["outcome"]
        if faults:
            bad = sum(s["outcome"] == "failed" for s in faults)
            outcomes[f"{lane}/faults"] = f"{len(faults) - bad}/{len(faults)}"
    return Run(
        source=source,
        run_id=results["run"]["run_id"] or source,
        started=results["run"]["started"] or results["generated"],
        status=results["verdict"]["status"],
        headline=results["verdict"]["headline"],
        key=compatibility(results),
        figures=per_lane,
        outcomes=outcomes,
        ran=ran,
    )


def read_runs(paths: Sequence[Path]) -> list[Run]:
    """Every run under ``paths``, oldest first; ``ValueError`` when none is found or one cannot be read."""
    files = find_runs(paths)
    if not files:
        raise ValueError(f"no {RESULTS_FILE} (or {RESULTS_FILE}.gz) under {', '.join(map(str, paths))}")
    runs = [run_of(load(f), str(f)) for f in files]
    return sorted(runs, key=lambda r: (r.started, r.run_id))


def groups(runs: Sequence[Run]) -> dict[tuple[str, str, str], list[Run]]:
    """The runs by compatibility key, each oldest first; the group of the newest run first."""
    out: dict[tuple[str, str, str], list[Run]] = {}
    for run in sorted(runs, key=lambda r: (r.started, r.run_id), reverse=True):
        out.setdefault(run.key, []).insert(0, run)
    return out


@dataclass(frozen=True)
class GateFailure:
    """A figure of the newest run worse than its baseline by more than the tolerance."""

    lane: str
    figure: Figure
    value: float
    median: float
    baseline: tuple[str, ...]

    def __str__(self) -> str:
        worse = "above" if self.figure.better == "lower" else "below"
        return (
            f"{self.lane} {self.figure.name}: {_value(self.figure, self.value)} is {worse} the median "
            f"{_value(self.figure, self.median)} of the last {len(self.baseline)} compatible passed run(s) "
            f"({', '.join(self.baseline)}) by {abs(self.value / self.median - 1):.0%}"
        )


@dataclass(frozen=True)
class GateResult:
    """The gate on the newest run: what failed, what was compared, and what had no baseline."""

    run: Run | None
    failures: list[GateFailure]
    compared: list[str]
    no_baseline: list[str]


def gate(runs: Sequence[Run], *, window: int = 7, tolerance: float = 0.25) -> GateResult:
    """The newest run's figures against the median of the last ``window`` compatible passed runs before it."""
    if not runs:
        return GateResult(None, [], [], [])
    ordered = sorted(runs, key=lambda r: (r.started, r.run_id))
    newest = ordered[-1]
    earlier = [r for r in ordered[:-1] if r.key == newest.key and r.status == "pass"]
    failures: list[GateFailure] = []
    compared: list[str] = []
    no_baseline: list[str] = []
    for lane, values in newest.figures.items():
        for fig in FIGURES:
            value = values.get(fig.key)
            if value is None:
                continue
            baseline = [
                r
                for r in earlier
                if fig.key in r.figures.get(lane, {})
                and (fig.key != "harness_s" or r.ran.get(lane) == newest.ran[lane])
            ][-window:]
            if not baseline:
                no_baseline.append(f"{lane} {fig.name}")
                continue
            median = statistics.median(r.figures[lane][fig.key] for r in baseline)
            compared.append(
                f"{lane} {fig.name}: {_value(fig, value)} vs median {_value(fig, median)} (n={len(baseline)})"
            )
            if median <= 0:
                continue
            worse = value > median * (1 + tolerance) if fig.better == "lower" else value < median * (1 - tolerance)
            if worse:
                failures.append(GateFailure(lane, fig, value, median, tuple(r.run_id for r in baseline)))
    return GateResult(newest, failures, compared, no_baseline)


def _value(fig: Figure, value: float) -> str:
    if fig.unit == "×":
        return f"{value:.2f}×"
    if fig.unit == "tokens":
        return figures.count(value)
    if fig.unit == "s":
        return figures.seconds(value)
    return f"{value:,.1f} {fig.unit}"


def _key_text(key: tuple[str, str, str]) -> str:
    return f"image {key[0]} · GPU {key[1]} · engine {key[2]}"


COMPATIBLE = (
    "Compatible runs share the head image's family (its reference less tag and digest), the GPU (model and count, "
    "or none) and the engine (its ai.vsnap.engine label, else vLLM major.minor; CPU smoke mode apart)."
)


def _mark(outcome: str | None) -> str:
    return {"passed": "ok", "failed": "FAIL", "skipped": "skip", None: "–"}.get(outcome, outcome or "–")


def render_markdown(runs: Sequence[Run], result: GateResult | None, *, tolerance: float, window: int) -> str:
    """``history.md``: per compatible group, one table a lane (a row a run), the step × night grid, and the gate."""
    lines = ["# vsnap-qual history", "", f"{len(runs)} run(s). {COMPATIBLE}", ""]
    if result is not None:
        lines += _gate_markdown(result, tolerance=tolerance, window=window)
    for key, group in groups(runs).items():
        lines += [f"## {_key_text(key)}", ""]
        lanes = list(dict.fromkeys(lane for r in group for lane in r.figures))
        for lane in lanes:
            lines += [f"### {lane}", "", "| started | run | verdict | " + " | ".join(f.name for f in FIGURES) + " |"]
            lines.append("|---|---|---|" + "---:|" * len(FIGURES))
            for r in group:
                values = r.figures.get(lane, {})
                cells = [_value(f, values[f.key]) if f.key in values else "–" for f in FIGURES]
                lines.append(f"| {r.started[:16]} | `{r.run_id}` | {r.headline[:60]} | " + " | ".join(cells) + " |")
            lines.append("")
        rows = list(dict.fromkeys(step for r in group for step in r.outcomes))
        lines += ["### Steps × nights", "", "| step | " + " | ".join(r.started[:10] for r in group) + " |"]
        lines.append("|---|" + "---|" * len(group))
        lines += [f"| {row} | " + " | ".join(_mark(r.outcomes.get(row)) for r in group) + " |" for row in rows]
        lines.append("")
    return "\n".join(lines) + "\n"


def _gate_markdown(result: GateResult, *, tolerance: float, window: int) -> list[str]:
    if result.run is None:
        return []
    head = (
        f"## Gate: {'FAIL' if result.failures else 'pass'} for `{result.run.run_id}` ({result.run.started[:16]}), "
        f"against the median of the last {window} compatible passed runs, tolerance {tolerance:.0%}"
    )
    lines = [head, "", f"Compatible: {_key_text(result.run.key)}.", ""]
    lines += [f"- **worse**: {failure}" for failure in result.failures]
    lines += [f"- {line}" for line in result.compared if not any(line.startswith(f"{f.lane} {f.figure.name}:")
                                                                    for f in result.failures)]  # fmt: skip
    if result.no_baseline:
        lines.append(f"- no compatible passed run before it for: {', '.join(result.no_baseline)}")
    return [*lines, ""]


# ---- the HTML page: SVG line charts drawn here, axes from zero ----------------------------------------------------
#: distinct colours, a lane each (the report's charts' own: ``charts.COLOURS``); past them, the same colours dashed
_COLOURS = charts.COLOURS
_W, _H, _LEFT, _RIGHT, _TOP, _BOTTOM = 640, 240, 70, 16, 16, 40


def _ticks(top: float) -> list[float]:
    """Round tick values from 0 to at least ``top``: 1, 2 or 5 times a power of ten apart (``charts.nice_ticks``)."""
    return charts.nice_ticks(top)


def line_chart(fig: Figure, group: Sequence[Run], lanes: Sequence[str]) -> Markup:
    """One figure's SVG line chart over a compatible group's runs: the y axis from zero, labelled; a line a lane,
    each its own colour (dashed past the palette); the legend whole below it."""
    values = [r.figures.get(lane, {}).get(fig.key) for r in group for lane in lanes]
    present = [v for v in values if v is not None]
    if not present:
        return Markup("<p class='note'>{}: not recorded in these runs.</p>").format(fig.name)
    ticks = _ticks(max(present) * 1.05)
    top = ticks[-1]
    plot_w, plot_h = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM
    n = len(group)

    def x(i: int) -> float:
        return _LEFT + (plot_w * (i + 0.5) / n)

    def y(v: float) -> float:
        return _TOP + plot_h * (1 - v / top)

    legend_rows = (len(lanes) + 3) // 4
    height = _H + 18 * legend_rows
    parts = [
        Markup('<svg class="chart" role="img" width="{}" height="{}" viewBox="0 0 {} {}">').format(
            _W, height, _W, height
        ),
        Markup("<title>{} ({}, {} is better)</title>").format(fig.name, fig.unit, fig.better),
    ]
    for tick in ticks:
        parts.append(
            Markup('<line x1="{}" x2="{}" y1="{:.1f}" y2="{:.1f}" class="grid"/>'
                   '<text x="{}" y="{:.1f}" class="tick" text-anchor="end">{}</text>').format(
                _LEFT, _W - _RIGHT, y(tick), y(tick), _LEFT - 6, y(tick) + 4, _tick_text(fig, tick))
        )  # fmt: skip
    parts.append(
        Markup('<line x1="{}" x2="{}" y1="{:.1f}" y2="{:.1f}" class="axis"/><line x1="{}" x2="{}" y1="{}" y2="{:.1f}" '
               'class="axis"/>').format(_LEFT, _W - _RIGHT, y(0), y(0), _LEFT, _LEFT, _TOP, y(0))
    )  # fmt: skip
    step = max(1, n // 8)
    for i, run in enumerate(group):
        if i % step == 0 or i == n - 1:
            parts.append(
                Markup('<text x="{:.1f}" y="{:.1f}" class="tick" text-anchor="middle">{}</text>').format(
                    x(i), y(0) + 16, run.started[5:10]
                )
            )
    for j, lane in enumerate(lanes):
        colour = _COLOURS[j % len(_COLOURS)]
        dash = ' stroke-dasharray="5 3"' if j >= len(_COLOURS) else ""
        points = [
            (x(i), y(v), r, v) for i, r in enumerate(group) if (v := r.figures.get(lane, {}).get(fig.key)) is not None
        ]
        if len(points) > 1:
            path = " ".join(f"{px:.1f},{py:.1f}" for px, py, _, _ in points)
            parts.append(Markup('<polyline points="{}" fill="none" stroke="{}" stroke-width="2"{}/>').format(
                path, colour, Markup(dash)))  # fmt: skip
        for px, py, run, v in points:
            dot = Markup('<circle cx="{:.1f}" cy="{:.1f}" r="3.5" fill="{}"><title>{} {}: {} ({})</title></circle>')
            parts.append(dot.format(px, py, colour, lane, run.run_id, _value(fig, v), run.headline))
        lx, ly = _LEFT + (j % 4) * (plot_w / 4), _H + 18 * (j // 4)
        parts.append(
            Markup('<line x1="{:.1f}" x2="{:.1f}" y1="{}" y2="{}" stroke="{}" stroke-width="3"{}/>'
                   '<text x="{:.1f}" y="{}" class="legend">{}</text>').format(
                lx, lx + 18, ly - 4, ly - 4, colour, Markup(dash), lx + 22, ly, lane)
        )  # fmt: skip
    parts.append(Markup("</svg>"))
    return Markup("").join(parts)


def _tick_text(fig: Figure, value: float) -> str:
    if fig.unit == "×":
        return f"{value:g}×"
    if fig.unit == "s":
        return f"{value:g} s"
    return f"{value:,.0f}" if value >= 1000 else f"{value:g}"


_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px; color: #1d1d1f; max-width: 1400px; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 32px; } h3 { font-size: 15px; }
.note { color: #555; } .fail { color: #b00020; font-weight: 600; } .pass { color: #17692c; font-weight: 600; }
.charts { display: flex; flex-wrap: wrap; gap: 16px; }
.chart .grid { stroke: #e4e4e4; } .chart .axis { stroke: #333; } .chart .tick { font-size: 11px; fill: #333; }
.chart .legend { font-size: 12px; fill: #1d1d1f; }
figure { margin: 0; } figcaption { font-weight: 600; margin-bottom: 4px; }
table { border-collapse: collapse; font-size: 12px; } td, th { border: 1px solid #ddd; padding: 2px 6px; }
.grid-wrap { overflow-x: auto; max-width: 100%; }
td.o-passed { background: #e6f4ea; } td.o-failed { background: #fde7e9; } td.o-KNOWN { background: #fff4d6; }
td.o-skipped { background: #f3f3f3; }
"""


def render_html(runs: Sequence[Run], result: GateResult | None, *, tolerance: float, window: int) -> str:
    """``history.html``: one self-contained page (no script, no outside file)."""
    body = [Markup("<h1>vsnap-qual history</h1><p class='note'>{} run(s). {}</p>").format(len(runs), COMPATIBLE)]
    if result is not None and result.run is not None:
        verdict = (
            Markup("<span class='fail'>FAIL</span>") if result.failures else Markup("<span class='pass'>pass</span>")
        )
        body.append(
            Markup("<h2>Gate: {} for {} ({})</h2><p>Against the median of the last {} compatible passed runs, "
                   "tolerance {:.0%}. Compatible: {}.</p><ul>").format(
                verdict, result.run.run_id, result.run.started[:16], window, tolerance, _key_text(result.run.key))
        )  # fmt: skip
        body += [Markup("<li class='fail'>worse: {}</li>").format(str(f)) for f in result.failures]
        body += [Markup("<li>{}</li>").format(line) for line in result.compared]
        if result.no_baseline:
            body.append(
                Markup("<li>no compatible passed run before it for: {}</li>").format(", ".join(result.no_baseline))
            )
        body.append(Markup("</ul>"))
    for key, group in groups(runs).items():
        lanes = list(dict.fromkeys(lane for r in group for lane in r.figures))
        body.append(Markup("<h2>{}</h2><p class='note'>{} run(s), {} to {}</p><div class='charts'>").format(
            _key_text(key), len(group), group[0].started[:16], group[-1].started[:16]))  # fmt: skip
        for fig in FIGURES:
            body.append(Markup("<figure><figcaption>{} ({}; {} is better)</figcaption>{}</figure>").format(
                fig.name, fig.unit, fig.better, line_chart(fig, group, lanes)))  # fmt: skip
        body.append(Markup("</div><h3>Steps × nights</h3><div class='grid-wrap'><table><tr><th>step</th>"))
        body += [Markup("<th title='{}'>{}</th>").format(r.run_id, r.started[5:10]) for r in group]
        body.append(Markup("</tr>"))
        for row in dict.fromkeys(step for r in group for step in r.outcomes):
            body.append(Markup("<tr><td>{}</td>").format(row))
            for r in group:
                outcome = r.outcomes.get(row)
                body.append(Markup("<td class='o-{}'>{}</td>").format(outcome or "none", _mark(outcome)))
            body.append(Markup("</tr>"))
        body.append(Markup("</table></div>"))
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>vsnap-qual history</title>"
        f"<style>{_STYLE}</style></head><body>{Markup('').join(body)}</body></html>\n"
    )


def write(
    runs: Sequence[Run], out: Path, *, gate_result: GateResult | None, tolerance: float, window: int
) -> list[Path]:
    """Write ``history.html`` and ``history.md`` under ``out``; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    html, md = out / "history.html", out / "history.md"
    html.write_text(render_html(runs, gate_result, tolerance=tolerance, window=window), encoding="utf-8")
    md.write_text(render_markdown(runs, gate_result, tolerance=tolerance, window=window), encoding="utf-8")
    return [html, md]
