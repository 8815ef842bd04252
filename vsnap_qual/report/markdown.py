"""``summary.md``: the PR validation table, under 1 MiB so step summaries and CI annotations accept it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vsnap_qual.report.assemble import as_dict, option_value
from vsnap_qual.report.frames import Comparisons, compare_all
from vsnap_qual.report.redact import Redactor
from vsnap_qual.report.verdict import recorded_checks

#: GitHub step summaries and Buildkite annotations reject larger bodies (1 MiB); stay clearly below.
SUMMARY_LIMIT_BYTES = 1_000_000
_CELL_LIMIT = 4_000
_ICON = {"pass": "✅", "fail": "❌", "partial": "⚠️", "incomplete": "⚠️"}
_STATUS = {
    "pass": "pass",
    "FAIL": "**FAIL**",
    "info": "info",
    "not run": "not run",
    "incomplete": "_incomplete_",
}


def cell(text: Any, limit: int = _CELL_LIMIT) -> str:
    """``text`` made safe for one Markdown table cell (pipes escaped, one line, bounded length)."""
    flat = " ".join(str(text).split()).replace("|", "\\|")
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def render_markdown(
    results: Mapping[str, Any],
    comparisons: Comparisons | None = None,
    *,
    redactor: Redactor | None = None,
    limit_bytes: int = SUMMARY_LIMIT_BYTES,
) -> str:
    """The run's ``summary.md``: verdict, validation table, environment, what failed; truncated to fit."""
    comparisons = comparisons or compare_all(results)
    redactor = redactor or Redactor()
    run = results.get("run") or {}
    verdict = results.get("verdict") or {}
    status = str(verdict.get("status") or "incomplete")
    image = option_value(results, "image") or ""
    model = option_value(results, "model") or ""
    revision = option_value(results, "revision") or ""

    head = [
        f"## vsnap-qual: {_ICON.get(status, '')} {verdict.get('headline') or status.upper()}".rstrip(),
        "",
    ]
    facts = []
    if image:
        facts.append(f"image `{image}`")
    if option_value(results, "base-image"):
        facts.append(f"base `{option_value(results, 'base-image')}`")
    if model:
        facts.append(f"model `{model}`" + (f" @ `{str(revision)[:12]}`" if revision else ""))
    if results.get("runners"):
        facts.append("runners " + ", ".join(results["runners"]))
    facts.append(f"run `{run.get('run_id') or 'unknown'}`")
    head += [" · ".join(facts), ""]
    if verdict.get("coverage_line"):
        head += [f"Coverage: {verdict['coverage_line']}", ""]
    if not run.get("complete"):
        last = run.get("last_step")
        where = f"last step recorded: `{last['label']}` ({last['outcome']})" if last else "no step recorded"
        head += [f"> **Incomplete run**: it stopped before the session ended; {where}.", ""]
    for reason in verdict.get("reasons") or []:
        if run.get("complete") or "did not finish" not in reason:
            head.append(f"- {reason}")
    if verdict.get("reasons"):
        head.append("")

    table = ["| check | result |", "|---|---|"]
    for check in recorded_checks(results):
        details = "".join(f"<br>{cell(d, 600)}" for d in check.details)
        status = _STATUS.get(check.status, check.status)
        table.append(f"| {cell(check.name)} | {status}: {cell(check.result)}{details} |")
    table.append("")

    environment = _environment(results)
    failures = _failures(results)
    footer = ["", "_Full evidence: `report.html` (every table, charts, log tails) and `results.json`._", ""]
    sections = [head, table, environment, failures]
    return redactor.text(_fit(sections, footer, limit_bytes))


def _environment(results: Mapping[str, Any]) -> list[str]:
    rows = []
    for lane in results.get("lanes") or []:
        env = as_dict(lane.get("environment"))
        if not env:
            continue
        versions = as_dict(env.get("versions"))
        image = as_dict(env.get("image"))
        labels = as_dict(image.get("labels"))
        gpu = as_dict(env.get("gpu"))
        rows.append(
            "| "
            + " | ".join(
                cell(v, 200)
                for v in (
                    f"{lane['runner']}/{lane['arm']}",
                    image.get("ref") or "",
                    str(labels.get("ai.vllm.build.commit") or labels.get("org.opencontainers.image.revision") or "")[
                        :12
                    ],
                    versions.get("vllm") or "",
                    versions.get("torch") or "",
                    versions.get("cuda") or "",
                    versions.get("driver") or "",
                    versions.get("criu") or "",
                    gpu.get("name") or "none",
                )
            )
            + " |"
        )
    if not rows:
        return []
    return [
        "### Environment",
        "",
        "| lane | image | commit | vLLM | torch | CUDA | driver | CRIU | GPU |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]


def _failures(results: Mapping[str, Any]) -> list[str]:
    failed = [s for s in results.get("steps", []) if s.get("outcome") == "failed"]
    if not failed:
        return []
    lines = ["### Failed steps", ""]
    for step in failed:
        label = f"{step.get('runner')}/{step.get('arm')}/{step.get('step')}"
        message = cell(step.get("message") or "", 500)
        lines.append(f"- `{label}`" + (f": {message}" if message else ""))
    lines.append("")
    return lines


def _fit(sections: list[list[str]], footer: list[str], limit_bytes: int) -> str:
    """Join sections; when too large, drop whole lines from the end and say so."""
    footer_text = "\n".join(footer)
    note = "\n_… summary truncated to stay under the size limit; see `report.html`._\n"
    budget = limit_bytes - len(footer_text.encode()) - len(note.encode())
    out: list[str] = []
    used = 0
    truncated = False
    for section in sections:
        for line in section:
            size = len(line.encode()) + 1
            if used + size > budget:
                truncated = True
                break
            out.append(line)
            used += size
        if truncated:
            break
    text = "\n".join(out)
    return text + (note if truncated else "\n") + footer_text
