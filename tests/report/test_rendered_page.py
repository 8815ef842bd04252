"""The report page as a real browser lays it out: headless chromium renders the committed H100 and H200 runs'
reports and a real-vLLM run's with this checkout's templates, and its own layout (``getBoundingClientRect``,
measured by a script added to a copy of the page; the report itself runs none) must show

- the KV chart's axis, its tick labels and its name, and a near-zero difference as a bar a few pixels wide at most
  (a fixed ±1 % scale, never autoscaled to the full width);
- every legend entry, tick label and value label inside its chart (nothing clipped by the SVG's edge);
- nothing wider than the viewport (the real-vLLM environment table's GPU column once overflowed 1,400 px).

A full-page screenshot of each is left in ``$VSNAP_TEST_ARTIFACTS`` (``.ci/run`` sets it), else the test's temporary
directory. Needs chromium (``make browser``; ``CHROMIUM`` names another binary)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
RUNS = {
    "h100": ROOT / "evidence" / "gpu" / "2026-12-07-v1-full-d575706" / "results.json.gz",
    "h200": ROOT / "evidence" / "gpu" / "2026-12-04-teardown-credit-9ffe76a" / "results.json",
    "real-vllm": ROOT / "evidence" / "real-vllm" / "2026-12-02-full-f7df29a" / "results.json",
}
VIEWPORT = (1280, 900)

#: Measures the page in the browser and writes what it found into the DOM that --dump-dom prints.
MEASURE = """
<script>
(function () {
  const vw = document.documentElement.clientWidth;
  const box = (el) => { const r = el.getBoundingClientRect(); return {left: r.left, right: r.right, top: r.top,
    bottom: r.bottom, width: r.width, height: r.height}; };
  const shown = (el) => el.getClientRects().length > 0;
  const name = (el) => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
    (typeof el.className === 'string' && el.className ? '.' + el.className.split(' ').join('.') : '');
  const wide = [];
  for (const el of document.querySelectorAll('body *')) {
    if (!shown(el)) continue;
    const r = box(el);
    const parent = el.parentElement;
    const parentWide = parent && parent !== document.body && shown(parent) && box(parent).right > vw + 0.5;
    if (r.right > vw + 0.5 && !parentWide) wide.push(name(el) + ' ' + Math.round(r.left) + '..' + Math.round(r.right));
  }
  const charts = [];
  for (const svg of document.querySelectorAll('svg.chart')) {
    if (!shown(svg)) continue;
    const s = box(svg);
    const texts = [];
    for (const t of svg.querySelectorAll('text')) {
      const r = box(t);
      texts.push({cls: t.getAttribute('class') || '', text: t.textContent, left: r.left - s.left,
        right: r.right - s.left, top: r.top - s.top, bottom: r.bottom - s.top});
    }
    const bars = [];
    for (const rect of svg.querySelectorAll('rect')) {
      const title = rect.querySelector('title');
      if (title) bars.push({title: title.textContent, width: box(rect).width, fill: rect.getAttribute('fill')});
    }
    const axis = svg.querySelectorAll('line.axis, line.grid');
    const xs = Array.from(axis).map((l) => box(l).left);
    charts.push({cls: svg.getAttribute('class'), title: (svg.querySelector('title') || {}).textContent,
      width: s.width, height: s.height, texts: texts, bars: bars,
      axis_span: xs.length ? Math.max(...xs) - Math.min(...xs) : 0});
  }
  const out = {viewport: vw, scroll_width: document.documentElement.scrollWidth,
    height: document.documentElement.scrollHeight, wide: wide, charts: charts};
  const pre = document.createElement('pre');
  pre.id = 'vsnap-measured';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>
"""


def _chromium() -> str:
    found = shutil.which(os.environ.get("CHROMIUM", "chromium"))
    if found is None:
        pytest.skip("no chromium: `make browser` installs it (apt-get install -y chromium), or set CHROMIUM")
    return found


def _browser(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         "--force-device-scale-factor=1", *args],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def _render(source: Path, out: Path) -> Path:
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from vsnap_qual.cli import main; sys.exit(main())", "report",
         str(source), "--out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode in (0, 1, 3, 4), done.stderr  # the run's own verdict; 2 is "could not read"
    return out / "report.html"


def measure(page: Path) -> dict[str, Any]:
    """The browser's layout of ``page`` (a copy with :data:`MEASURE` added before ``</body>``)."""
    probe = page.with_name("measured.html")
    probe.write_text(page.read_text().replace("</body>", MEASURE + "</body>"))
    done = _browser(f"--window-size={VIEWPORT[0]},{VIEWPORT[1]}", "--dump-dom", probe.as_uri())
    start = done.stdout.find('<pre id="vsnap-measured">')
    assert start >= 0, f"the browser printed no measurement: {done.stderr[-2000:]}"
    text = done.stdout[start + len('<pre id="vsnap-measured">') : done.stdout.index("</pre>", start)]
    found: dict[str, Any] = json.loads(text.replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"))
    return found


def screenshot(page: Path, name: str, height: int, fallback: Path) -> Path:
    where = Path(os.environ.get("VSNAP_TEST_ARTIFACTS") or fallback)
    where.mkdir(parents=True, exist_ok=True)
    out = where / f"report-{name}.png"
    _browser(f"--window-size={VIEWPORT[0]},{min(height, 16000)}", f"--screenshot={out}", page.as_uri())
    return out


def check_layout(found: dict[str, Any]) -> list[str]:
    """What the browser's layout shows wrong, in words (nothing: the page is right)."""
    problems = []
    if found["scroll_width"] > found["viewport"] or found["wide"]:
        problems.append(f"wider than the {found['viewport']} px viewport: {found['wide'][:8]}")
    for chart in found["charts"]:
        for text in chart["texts"]:
            inside = text["left"] >= -0.5 and text["right"] <= chart["width"] + 0.5
            if not inside or text["top"] < -0.5 or text["bottom"] > chart["height"] + 0.5:
                problems.append(f"{chart['title']}: {text['cls']} {text['text']!r} cut by the chart's edge")
        fills = [bar["fill"] for bar in chart["bars"]]
        names = [bar["title"].split(": ")[0].split(" ", 1)[-1] for bar in chart["bars"]]
        if len(set(zip(names, fills, strict=True))) != len(set(names)) or len(set(fills)) != len(set(names)):
            problems.append(f"{chart['title']}: a colour shared by two series")
    kv = [c for c in found["charts"] if "kv-delta" in c["cls"]]
    if not kv:
        problems.append("no KV chart")
    for chart in kv:
        ticks = [t["text"] for t in chart["texts"] if t["cls"] == "tick"]
        if ticks[:1] != ["−1%"] or "0" not in ticks or ticks[-1:] != ["+1%"]:
            problems.append(f"KV chart: axis ticks {ticks}, not a labelled ±1 % axis")
        if not any(t["cls"] == "axis-name" and "Δ" in t["text"] for t in chart["texts"]):
            problems.append("KV chart: no axis name")
        for bar in chart["bars"]:
            value = float(bar["title"].rsplit(": ", 1)[1].rstrip("%").replace("−", "-").replace("+", ""))
            share = bar["width"] / (chart["axis_span"] / 2) if chart["axis_span"] else 1.0
            if abs(value) < 0.05 and (bar["width"] > 3 or share > 0.05):
                problems.append(f"KV chart: {bar['title']} drawn {bar['width']:.0f} px wide ({share:.0%} of the axis)")
    return problems


@pytest.mark.parametrize("run", sorted(RUNS))
def test_the_committed_report_is_laid_out_honestly_in_a_real_browser(run: str, tmp_path: Path) -> None:
    page = _render(RUNS[run], tmp_path / "report")
    found = measure(page)
    shot = screenshot(page, run, int(found["height"]), tmp_path)
    assert shot.read_bytes().startswith(b"\x89PNG"), "the browser took the screenshot"
    assert not check_layout(found), f"{check_layout(found)} (screenshot: {shot})"
    kv = next(c for c in found["charts"] if "kv-delta" in c["cls"])
    assert kv["bars"] and all(bar["width"] < 3 for bar in kv["bars"]), kv["bars"]  # both runs: within 0.004 %
    legends = [t["text"] for c in found["charts"] for t in c["texts"] if t["cls"] == "legend"]
    assert {"snapshot", "restored", "cold start (serve)", "restore", "faults"} <= set(legends), legends
