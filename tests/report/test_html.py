"""report.html: self-contained, no script, every section rendered."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.report.synthetic_runs import MakeRun, RunSpec
from vsnap_qual.report import write_reports
from vsnap_qual.report.assemble import assemble_file
from vsnap_qual.report.html import MAX_LOG_TAILS, render_html

SECTIONS = (
    "verdict",
    "environment",
    "overlay",
    "matrix",
    "canary",
    "digests",
    "kv",
    "timings",
    "faults",
    "cleanup",
    "logs",
)


def test_html_is_self_contained(report_dir: Path) -> None:
    html = write_reports(report_dir, github_step_summary=False).report_html.read_text()
    assert "<script" not in html.lower()
    assert not re.search(r"https?://", html)
    assert not re.search(r"""(src|href)\s*=\s*["']?(//|[a-z]+:)""", html, re.IGNORECASE)
    assert "@import" not in html and "url(" not in html
    assert "<style>" in html and "<svg" in html


def test_every_section_in_order_verdict_first(report_dir: Path) -> None:
    html = write_reports(report_dir, github_step_summary=False).report_html.read_text()
    positions = [html.index(f'<section id="{name}">') for name in SECTIONS]
    assert positions == sorted(positions)
    verdict = html[positions[0] : positions[1]]
    assert "FAIL" in verdict and "v2/head/restore-2" in verdict


def test_sections_show_the_evidence(report_dir: Path) -> None:
    html = write_reports(report_dir, github_step_summary=False).report_html.read_text()
    assert "29/30 unchanged (1 changed)" in html
    assert '<tr class="changed"><td class="mono">model.norm.weight</td>' in html
    assert "within tolerance" in html and "+4.0e−04" in html
    assert "63,104" in html and "−16" in html
    assert "communicators-raise" in html and "0.33.1.dev42+g593df82f" in html
    assert "vllm.snapshot.engine" in html
    assert "Probe <code>probe/</code> sha256 <code>abababababababab</code>" in html  # the session's probe copy
    # The failed step's log tail is inline and its file is linked relative to the report.
    assert 'href="logs/v2-head/restore-2.log"' in html
    assert "INFO 029 restore-2 v2/head" in html


def test_autoescape(make_run: MakeRun) -> None:
    # the prompt is shown where its canary diverges (prompt 3: 'Snapshots restore an engine <quickly> & "exactly"')
    directory = make_run("escape", RunSpec(canary_token_flips=(("v1", "restore-1", 3),)))
    html = write_reports(directory, github_step_summary=False).report_html.read_text()
    assert "&lt;quickly&gt; &amp; &#34;exactly&#34;" in html
    assert "<quickly>" not in html


def test_incomplete_run_is_marked(make_run: MakeRun) -> None:
    directory = make_run("killed", RunSpec(complete=False, stop_after_steps=5))
    html = write_reports(directory, github_step_summary=False).report_html.read_text()
    assert "INCOMPLETE" in html
    assert "v1/head/restore-1" in html and "did not record a <code>session_end</code>" in html


def test_failed_log_shows_the_last_traceback_before_the_tail(report_dir: Path) -> None:
    log = report_dir / "logs" / "v2-head" / "restore-2.log"
    lines = ["Traceback (most recent call last):", '  File "x.py", line 1', "RuntimeError: root cause here"]
    log.write_text("\n".join(lines + [f"shutdown noise {i}" for i in range(200)]) + "\n")
    html = write_reports(report_dir, github_step_summary=False).report_html.read_text()
    assert "Last traceback in the log:" in html and "RuntimeError: root cause here" in html
    assert "shutdown noise 199" in html and "shutdown noise 100" not in html


def test_inline_log_tails_are_bounded_when_everything_fails(make_run: MakeRun) -> None:
    failing = tuple(
        ("v1", "head", step) for step in ("ordinary", "create", "inspect", "restore-1", "restart", "restore-2")
    )
    failing += tuple(("v2", arm, step) for arm in ("head", "base") for step in ("ordinary", "create", "inspect"))
    directory = make_run("all-fail", RunSpec(failed_steps=failing))
    html = write_reports(directory, github_step_summary=False).report_html.read_text()
    assert html.count('<pre class="log">') == MAX_LOG_TAILS
    assert "more failed log(s) are linked below" in html


def test_log_paths_outside_the_report_dir_are_not_read(report_dir: Path, tmp_path: Path) -> None:
    results = assemble_file(report_dir / "evidence.jsonl")
    outside = tmp_path / "outside.log"
    outside.write_text("do-not-read-me\n")
    for step in results["steps"]:
        if step["outcome"] == "failed":
            step["logs"] = ["../outside.log"]
    html = render_html(results, log_root=report_dir, out_dir=report_dir)
    assert "do-not-read-me" not in html and "outside the report directory" in html


def test_render_without_evidence_sections(tmp_path: Path) -> None:
    (tmp_path / "evidence.jsonl").write_text("")
    html = render_html(assemble_file(tmp_path / "evidence.jsonl"), log_root=tmp_path)
    assert "No step was recorded." in html and "No digests were recorded." in html


def test_the_timings_say_the_harnesss_own_time_beside_the_engines() -> None:
    from vsnap_qual.report.html import harness_time

    steps = [
        {"step": "fault:wake-raise", "seconds": 4.0, "engine_seconds": 1.0},
        {"step": "fault:pid-occupied", "seconds": 3.0, "engine_seconds": 1.0},
        {"step": "ordinary", "seconds": 13.0, "engine_seconds": 12.0},
    ]
    said = harness_time({"steps": steps})  # type: ignore[typeddict-item]
    assert said == (
        "Steps 20 s, of which the engine's own 14 s and the harness's 6 s (steps / engine 1.43); "
        "the harness's median per fault step 2.50 s (n=2)."
    )
    assert harness_time({"steps": []}) == ""  # type: ignore[typeddict-item]


def _section(html: str, name: str) -> str:
    start = html.index(f'<section id="{name}">')
    return html[start : html.index("</section>", start)]


def test_a_bit_exact_canary_grid_is_one_line_and_otherwise_only_the_diverging_cells_show(make_run: MakeRun) -> None:
    exact = make_run("exact", RunSpec(canary_deltas=(), changed_digests=()))
    canary = _section(write_reports(exact, github_step_summary=False).report_html.read_text(), "canary")
    # 5 prompts × (head and base: restore-1, restore-2, …) per runner; no grid at all
    assert '<table class="canary">' not in canary
    lines = re.findall(r"Runner (v\d): all (\d+) canaries bit-exact across head: ([^;]+); base: ", canary)
    assert [runner for runner, _n, _steps in lines] == ["v1", "v2"], canary
    assert all(int(n) > 5 and "restore-1" in steps for _r, n, steps in lines)

    flipped = make_run("flipped", RunSpec(canary_deltas=(("v1", "restore-1", 2, 0.0004),), changed_digests=()))
    canary = _section(write_reports(flipped, github_step_summary=False).report_html.read_text(), "canary")
    assert "Runner v2: all" in canary  # the other runner stays one line
    table = canary[canary.index('<table class="canary">') :]
    assert table.count('<tr><td class="prompt">') == 1, "only the one diverging cell, beside its reference"
    assert "head restore-1" in table and "within tolerance" in table and "+4.0e−04" in table
    assert re.search(r"Runner v1: 1 of (\d+) canaries not bit-exact", canary)
    token = make_run("token", RunSpec(canary_token_flips=(("v1", "restore-1", 3),), changed_digests=()))
    canary = _section(write_reports(token, github_step_summary=False).report_html.read_text(), "canary")
    assert "mismatch" in canary and "first diverging position 0<" in canary  # a position, never "0.0"


def test_the_kv_chart_plots_the_difference_from_ordinary_with_the_digits_that_show_it(make_run: MakeRun) -> None:
    kv = {
        ("v1", "head"): (1_000_000, 999_984),  # one 16-token block of a million: 0.0016 %
        ("v1", "base"): (1_000_000, 1_000_000),
        ("v2", "head"): (63_104, 63_088),
        ("v2", "base"): (63_104, 63_104),
    }
    html = write_reports(make_run("kv", RunSpec(kv=kv)), github_step_summary=False).report_html.read_text()
    chart = _section(html, "kv")
    svg = chart[chart.index('<svg role="img"') : chart.index("</svg>")]
    assert "Δ % against the ordinary reference" in svg
    labels = re.findall(r'class="value">([^<]+)</text>', svg)
    assert "−0.0016%" in labels and "−0.03%" in labels and "0.00%" in labels, labels
    assert not any(re.fullmatch(r"[−+]0\.0*%", label) for label in labels), labels  # a difference is never zero
    # a fixed symmetric axis, labelled: the one-block bar is a sliver left of the zero line in the middle, and the
    # 0.03 % one is short too (no autoscale stretching the largest difference to the full width)
    ticks = re.findall(r'class="tick">([^<]+)</text>', svg)
    assert ticks == ["−1%", "−0.5%", "0", "+0.5%", "+1%"], ticks
    assert 'class="axis-name">Δ KV-cache tokens' in svg
    zero = float(re.search(r'<line x1="([\d.]+)"[^>]*class="axis"', svg).group(1))  # type: ignore[union-attr]
    bars = re.findall(r'<rect x="([\d.]+)" y="[\d.]+" width="([\d.]+)" height="14"[^>]*><title>([^<]+)</title>', svg)
    one_block = next((x, w) for x, w, title in bars if title == "v1/head snapshot: −0.0016%")
    assert abs(float(one_block[0]) + float(one_block[1]) - zero) < 0.01 and float(one_block[1]) < 1
    v2 = next(float(w) for x, w, title in bars if title == "v2/head snapshot: −0.03%")
    assert v2 < 10, "0.03 % of the axis's ±1 % half-width (260 px)"


def test_the_header_says_how_long_the_run_took_and_pytests_counts(make_run: MakeRun) -> None:
    counted = RunSpec(pytest_counts={"passed": 78, "not applicable": 6})
    html = write_reports(make_run("counted", counted), github_step_summary=False).report_html.read_text()
    header = html[html.index('<header class="top">') : html.index("</header>")]
    took = re.search(r"took ([\d.]+) s", header)
    assert took, header
    verdict = _section(html, "verdict")
    assert "pytest: 78 passed, 6 not applicable" in verdict and "skipped" not in verdict.split("Coverage")[0]
    # a run that recorded no pytest counts (before they were) says its steps' outcomes, as before
    old = write_reports(make_run("uncounted"), github_step_summary=False).report_html.read_text()
    assert re.search(r"\d+ steps passed, \d+ failed, \d+ skipped", _section(old, "verdict"))
    killed = write_reports(make_run("killed", RunSpec(complete=False, stop_after_steps=5)), github_step_summary=False)
    assert "(it did not finish)" in killed.report_html.read_text()


def test_a_prompts_one_token_and_multi_token_canaries_are_two_canaries() -> None:
    """The same prompt runs as vLLM's one-token canary and as a multi-token one: a divergence of either is shown,
    never hidden behind the other (a grid keyed by the prompt alone kept only one of them)."""
    from vsnap_qual.report.html import _canary

    prompt = "The capital of France is"
    one = {"prompt": prompt, "token_ids": [1], "text": " Paris", "logprob": -0.1}
    many = {"prompt": prompt, "token_ids": list(range(16)), "text": " Paris ...", "logprob": -0.1}

    def compare(canary: dict[str, Any], ok: bool) -> dict[str, Any]:
        return {"prompt": prompt, "expected": canary, "actual": canary, "token_ids_equal": ok, "text_equal": True,
                "logprob_delta": 0.0, "bit_exact": ok, "ok": ok, "tokens": len(canary["token_ids"])}  # fmt: skip

    def run(one_ok: bool, many_ok: bool) -> Any:
        step = {"runner": "v1", "arm": "head", "outcome": "passed"}
        return {
            "runners": ["v1"],
            "arms": ["head"],
            "steps": [
                {**step, "step": "ordinary", "results": {"canary": [one, many]}},
                {
                    **step,
                    "step": "restore-1",
                    "results": {
                        "canary": [one, many],
                        "canary_compare": [compare(one, one_ok), compare(many, many_ok)],
                    },
                },
            ],
        }

    # the one-token canary diverges, the multi-token one does not
    (block,) = _canary(run(one_ok=False, many_ok=True))
    assert (block["prompts"], block["compared"]) == (2, 2)
    assert [(d["prompt"], d["column"]) for d in block["diverging"]] == [(prompt, "head restore-1")]
    (block,) = _canary(run(one_ok=True, many_ok=False))
    assert [d["prompt"] for d in block["diverging"]] == [f"{prompt} (16 tokens)"]


def test_criu_is_its_version_and_an_all_bit_exact_step_table_is_folded(make_run: MakeRun) -> None:
    directory = make_run("folded", RunSpec(canary_deltas=(), changed_digests=()))
    path = directory / "evidence.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for record in lines:
        if record["kind"] == "environment":
            record["versions"]["criu"] = "Version: 4.2.1"  # `criu --version`'s first line, as older lanes recorded
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    html = write_reports(directory, github_step_summary=False).report_html.read_text()
    assert "Version: 4.2.1" not in _section(html, "environment") and "<td>4.2.1</td>" in html
    canary = _section(html, "canary")
    assert re.search(r"<details><summary>Per step: \d+ steps, every canary bit-exact</summary>", canary)
    flipped = make_run("unfolded", RunSpec(changed_digests=()))  # one canary within tolerance: the table is open
    assert (
        "every canary bit-exact</summary>"
        not in write_reports(flipped, github_step_summary=False).report_html.read_text()
    )
