"""A lane the platform does not have (vLLM's CPU build has no V2 runner) as the report shows it: its faults read
"not applicable", never a red 0/12, and the reason is said once for all its lanes, vLLM's words cut once in the page
and the summary (``figures.quote``), whole in results.json."""

from __future__ import annotations

import json
import re

from tests.report.synthetic_runs import MakeRun, RunSpec, required_coverage
from vsnap_qual.report import figures, write_reports
from vsnap_qual.report.verdict import shown_qualified

PYDANTIC = (
    "not applicable: vLLM's CPU build has no such runner: Value error, Model Runner V2 requires Triton. "
    "[type=value_error, input_value=ArgsKwargs((), {'model_config': ModelConfig(model='tiny', runner='auto', "
    "tokenizer_mode='auto', dtype=torch.bfloat16, seed=0, max_model_len=512), 'shutdown_timeout': 0}), "
    "input_type=ArgsKwargs]"
)


def test_a_lane_whose_faults_do_not_apply_is_not_a_red_zero(make_run: MakeRun) -> None:
    v2 = [label for label in required_coverage(RunSpec())["required"] if label.startswith("v2/")]
    spec = RunSpec(changed_digests=(), canary_deltas=(), cpu_smoke=True, skipped_steps=[(s, PYDANTIC) for s in v2])
    paths = write_reports(make_run("smoke", spec), github_step_summary=False)
    html = paths.report_html.read_text()
    matrix = html[html.index('<section id="matrix">') : html.index('<section id="canary">')]
    rows = {m.group(1): m.group(2) for m in re.finditer(r"<tr><td>(v\d/\w+)</td>(.*?)</tr>", matrix, re.S)}
    assert '<td class="cell-none">not applicable</td>' in rows["v2/head"], rows["v2/head"][-300:]
    assert re.search(r'<td class="cell-passed">\d+/\d+</td>', rows["v1/head"]), "the v1 lanes' faults as before"
    assert "0/" not in rows["v2/head"] and "cell-failed" not in rows["v2/head"]
    qualified = html[html.index("What was qualified") : html.index("</ul>", html.index("What was qualified"))]
    said = re.findall(r"<li>(not applicable[^<]*)</li>", qualified)
    assert len(said) == 1 and said[0].startswith("not applicable: lanes v2/head, v2/base, vLLM&#39;s CPU build"), said
    assert said[0].endswith("… [cut: whole in the evidence]") and "shutdown_timeout" not in said[0]
    summary = paths.summary_md.read_text()
    assert summary.count("Model Runner V2 requires Triton") == 1 and "shutdown_timeout" not in summary
    recorded = json.loads(paths.results_json.read_text())["verdict"]["qualified"]
    assert any("'shutdown_timeout': 0})" in line for line in recorded), "whole in the evidence"


def test_a_quote_is_cut_once_at_a_word_and_a_short_one_is_left_alone() -> None:
    assert figures.quote("  Model   Runner V2\nrequires Triton. ") == "Model Runner V2 requires Triton."
    cut = figures.quote("word " * 100, limit=40)
    assert cut == "word word word word word word word word … [cut: whole in the evidence]", cut
    # lines recorded before the lanes were grouped are grouped when shown
    old = [
        "engine: x",
        "not applicable: lane v2/head, why " + "x" * 300,
        "not applicable: lane v2/base, why " + "x" * 300,
    ]
    shown = shown_qualified(old)
    assert (
        shown[0] == "engine: x" and len(shown) == 2 and shown[1].startswith("not applicable: lanes v2/head, v2/base, ")
    )
    assert len(shown[1]) < 250
