"""``summary.md``: the PR validation table, under 1 MiB so step summaries and CI annotations accept it."""

from __future__ import annotations

import shlex

from vsnap_qual import model
from vsnap_qual.redact import Redactor
from vsnap_qual.report.frames import Comparisons, FaultRow, compare_all, rows
from vsnap_qual.report.recorded import option_value
from vsnap_qual.report.verdict import shown_qualified

#: GitHub step summaries and Buildkite annotations reject larger bodies (1 MiB); stay clearly below.
SUMMARY_LIMIT_BYTES = 1_000_000
_CELL_LIMIT = 4_000
#: The image label that says what the image simulates (the reference engine's GPU, real vLLM CPU's nvidia-smi
#: identity shim); shown beside the lane's GPU.
SIMULATED_LABEL = "ai.vsnap.simulated"
_ICON = {"pass": "✅", "fail": "❌", "partial": "⚠️", "incomplete": "⚠️", "interrupted": "⏹️"}
_STATUS = {
    "pass": "pass",
    "FAIL": "**FAIL**",
    "info": "info",
    "not run": "not run",
    "incomplete": "_incomplete_",
}


def cell(text: object, limit: int = _CELL_LIMIT) -> str:
    """``text`` made safe for one Markdown table cell (pipes escaped, one line, bounded length)."""
    flat = " ".join(str(text).split()).replace("|", "\\|")
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def render_markdown(
    results: model.Results,
    comparisons: Comparisons | None = None,
    *,
    redactor: Redactor | None = None,
    limit_bytes: int = SUMMARY_LIMIT_BYTES,
) -> str:
    """The run's ``summary.md``: verdict, validation table, environment, what failed; truncated to fit."""
    comparisons = comparisons or compare_all(results)
    redactor = redactor or Redactor()
    run = results["run"]
    verdict = results["verdict"]
    status = verdict["status"]

    said = verdict.get("target")  # what was qualified, on the first line: a reference engine is not vLLM
    head = [
        f"## vsnap-qual: {_ICON.get(status, '')} {verdict['headline'] or status.upper()}".rstrip()
        + (f" · {cell(said, 300)}" if said else ""),
        "",
    ]
    qualified = shown_qualified(verdict.get("qualified") or [])
    if qualified:  # what was qualified, before anything else: a reference engine or a smoke run is not vLLM on a GPU
        head += [f"> **What was qualified**: {'; '.join(qualified)}", ""]
    head += [" · ".join(_facts(results)), ""]
    head += _configuration(results)
    head += reproduce(results)
    if verdict["coverage_line"]:
        head += [f"Coverage: {verdict['coverage_line']}", ""]
    if not run["complete"]:
        last = run["last_step"]
        where = f"last step recorded: `{last['label']}` ({last['outcome']})" if last else "no step recorded"
        head += [f"> **Incomplete run**: it stopped before the session ended; {where}.", ""]
    for reason in verdict["reasons"]:
        if run["complete"] or "did not finish" not in reason:
            head.append(f"- {reason}")
    if verdict["reasons"]:
        head.append("")

    known = verdict.get("known_failures") or {}
    table = ["| check | result |", "|---|---|"]
    for check in verdict["checks"]:
        details = "".join(f"<br>{cell(d, 600)}" for d in check["details"])
        shown = "**KNOWN**" if f"check:{check['id']}" in known else _STATUS.get(check["status"], check["status"])
        table.append(f"| {cell(check['name'])} | {shown}: {cell(check['result'])}{details} |")
    table.append("")

    environment = _environment(results)
    fault_lines = _faults(comparisons)
    failures = _failures(results)
    footer = ["", "_Full evidence: `report.html` (every table, charts, log tails) and `results.json`._", ""]
    sections = [head, _known(verdict), table, environment, fault_lines, failures]
    return redactor.text(_fit(sections, footer, limit_bytes))


def _lane_environments(results: model.Results) -> list[tuple[str, model.Environment]]:
    return [(f"{lane['runner']}/{lane['arm']}", env) for lane in results["lanes"] if (env := lane["environment"])]


def image_identity(image: model.Image, code: bool = True) -> str:
    """``ID sha256:0123456789ab`` and the first repo digest, as recorded for the lane's image (``code``: each as
    Markdown code; plain for a terminal)."""
    tick = "`" if code else ""
    parts = []
    if image.get("id"):
        parts.append(f"ID {tick}{image.get('id', '')[:19]}{tick}")
    digests = image.get("repo_digests", [])
    if digests:
        name, _, digest = digests[0].partition("@")
        parts.append(f"digest {tick}{digest[:19] or name}{tick}")
    return ", ".join(parts) or "no ID recorded"


def image_commit(image: model.Image) -> str:
    """The image's build commit from its labels, or ``unlabelled`` (never a blank cell)."""
    labels = image.get("labels") or {}
    commit = labels.get("ai.vllm.build.commit") or labels.get("org.opencontainers.image.revision")
    return commit[:12] if commit else "unlabelled"


def gpu_text(gpu: model.Gpu | None, labels: dict[str, str] | None) -> str:
    """The lane's GPU name, or ``none`` and what the image simulates in its place when its label says so (an
    image that simulates a GPU where the host has none runs on a real one where there is one)."""
    if gpu and gpu.get("name"):
        return str(gpu["name"])
    simulated = (labels or {}).get(SIMULATED_LABEL)
    return f"none (simulated: {simulated})" if simulated else "none"


def _facts(results: model.Results) -> list[str]:
    """What was qualified: each arm's image with its ID or digest, the model, the runners, the run and CI build."""
    facts = []
    first_by_arm: dict[str, model.Image] = {}
    for _lane, env in _lane_environments(results):
        first_by_arm.setdefault(env["arm"], env["image"])
    for arm, option in (("head", "image"), ("base", "base-image")):
        ref = option_value(results, option)
        image = first_by_arm.get(arm, model.Image())
        if ref or image:
            what = "image" if arm == "head" else "base"
            identity = f" ({image_identity(image)})" if image else ""
            facts.append(f"{what} `{image.get('ref') or ref}`{identity}")
    if results["runners"]:
        facts.append("runners " + ", ".join(results["runners"]))
    facts.append(f"run `{results['run']['run_id'] or 'unknown'}`")
    facts.append(f"vsnap-qual {results['run'].get('harness_version') or 'unknown'}" + harness_commit(results))
    overlap = overlap_text(results["run"])
    if overlap:
        facts.append(overlap)
    build = next((ci for _l, env in _lane_environments(results) if (ci := env.get("ci"))), model.CiBuild())
    if build.get("build_url"):
        facts.append(f"[CI build]({build.get('build_url')})")
    return facts


def overlap_text(run: model.RunInfo) -> str:
    """Issue 45: whether the run's lanes ran at once, what they shared, and which did overlap ("" when the run
    does not say: evidence from before issue 45)."""
    found = run.get("overlap")
    if not found:
        return ""
    if found["scope"] != "lane" or found["at_once"] < 2:
        said = f"lanes ran one after another per worker ({found['why']})"
        if found["at_once"] > 1:
            said += f"; {found['shared']}"
        return said
    met = ", ".join(f"{'+'.join(pair['lanes'])} {pair['seconds']:.0f} s" for pair in found["overlapped"])
    return (
        f"lanes overlapped (--vsnap-overlap={found['mode']}, {found['workers']} workers): up to {found['at_once']} at "
        f"once, sharing {found['shared']}; ran at the same time: {met or 'none'}"
    )


def harness_commit(results: model.Results) -> str:
    """`` at `0123456789ab` (uncommitted changes)`` when the harness ran from a git checkout, else ""."""
    source = results["run"].get("harness_source")
    if not source:
        return ""
    dirty = {True: " (uncommitted changes)", False: "", None: " (its state unknown)"}[source.get("dirty")]
    return f" at `{source['commit'][:12]}`{dirty}"


def command_line(found: model.Invocation) -> str:
    """The command a run was started with (``run.invocation`` records it), to run again: ``cd DIR && VSNAP_X=1
    PYTHON -m pytest ARGS``, each part shell-quoted."""
    env = " ".join(f"{name}={shlex.quote(value)}" for name, value in found["environment"].items())
    command = shlex.join([found["python"], "-m", "pytest", *found["args"]])
    return f"cd {shlex.quote(found['dir'])} && " + (f"{env} " if env else "") + command


def reproduce(results: model.Results) -> list[str]:
    """The exact command the run was started with, in a ``<details>`` block: its directory, the ``VSNAP_*``
    option variables it read, the Python and pytest's arguments as given (``@file`` arguments unexpanded)."""
    found = results["run"].get("invocation")
    if not found:
        return []
    version = results["run"].get("harness_version") or "unknown"
    return [
        "<details><summary>Command to reproduce this run</summary>",
        "",
        "```bash",
        command_line(found),
        "```",
        "",
        f"With vsnap-qual {version}{harness_commit(results)}; a report directory that holds this run is refused "
        "(another run's evidence): remove it first or give another `--vsnap-report-dir`.",
        "",
        "</details>",
        "",
    ]


def _configuration(results: model.Results) -> list[str]:
    """The engine configuration and the overlay checkout, as the run recorded them."""
    model_name = option_value(results, "model") or ""
    revision = option_value(results, "revision") or ""
    lines = []
    engine = []
    if model_name:
        engine.append(f"model `{model_name}`" + (f" @ `{str(revision)[:12]}`" if revision else ""))
    for label, option in (("dtype", "dtype"), ("max-model-len", "max-model-len")):
        value = option_value(results, option)
        if value not in (None, ""):
            engine.append(f"{label} `{value}`")
    extra = option_value(results, "engine-args")
    extra_text = " ".join(str(a) for a in extra) if isinstance(extra, list) else str(extra or "")
    engine.append(f"engine args `{extra_text}`" if extra_text.strip() else "engine args: none beyond the harness's")
    lines.append("Engine: " + " · ".join(engine))
    variants = option_value(results, "variants")
    if isinstance(variants, dict) and variants:
        said = [f"`{name}` (`{shlex.join(str(a) for a in args)}`)" for name, args in variants.items()]
        lines.append(
            "Variants: " + ", ".join(said) + " — each a column group of its own (`<runner>+<variant>`), with its own "
            "ordinary reference"
        )
    checkout = next((found for _l, env in _lane_environments(results) if (found := env.get("overlay_checkout"))), None)
    if checkout:
        lines.append("Overlay: " + overlay_checkout_text(checkout))
    elif option_value(results, "overlay"):
        lines.append(f"Overlay: `{option_value(results, 'overlay')}` (its commit was not recorded)")
    else:
        lines.append("Overlay: none")
    return [*[f"{line}  " for line in lines[:-1]], lines[-1], ""]


def overlay_checkout_text(checkout: model.OverlayCheckout) -> str:
    """``/src/vllm at 0123456789ab, dirty (3 uncommitted changes), files changed since HEAD (= 0123…)``."""
    text = f"`{checkout.get('path')}`"
    if checkout.get("commit"):
        text += f" at `{str(checkout.get('commit'))[:12]}`"
    if checkout.get("dirty") is True:
        text += f", **dirty** ({checkout.get('changed', '?')} uncommitted change(s))"
    elif checkout.get("dirty") is False:
        text += ", clean"
    ref = checkout.get("ref")
    if ref:
        ref_commit = str(checkout.get("ref_commit") or "")[:12]
        text += f"; overlaid: the files changed since `{ref}`" + (f" (`{ref_commit}`)" if ref_commit else "")
    if checkout.get("error"):
        text += f" (git: {checkout.get('error')})"
    return text


def fault_result_text(row: FaultRow) -> str:
    """One fault step's recorded result in plain words: ``exit 1 before HTTP, error.json phase "…", cleanup
    verified, the artifact restores afterwards`` (the step's outcome and its recorded observations)."""
    parts = []
    code = row.get("exit_code")
    bound = row.get("http_bound")
    when = " before HTTP" if bound is False else (" after HTTP was bound" if bound is True else "")
    parts.append((f"exit {code}" if code is not None else "no exit code") + when)
    if row.get("phase"):
        parts.append(f'error.json phase "{row["phase"]}"')
    if row.get("fired") is False:
        parts.append(
            "the fault did not fire" + (" (no such hook on this arm)" if row.get("expected_fires") is False else "")
        )
    if row.get("expected_artifact_unchanged") is True and row.get("artifact_unchanged") is not None:
        # said only where the fault's expectation is about it (a check before any mutation)
        parts.append("artifact unchanged" if row["artifact_unchanged"] else "artifact changed")
    if row.get("tamper"):
        parts.append(f"the tampered weights: {row['tamper']}")
    if row.get("deadline"):
        parts.append(str(row["deadline"]))
    if row.get("kill") or row.get("kill_swept_ok") is not None:
        parts.extend(kill_words(row))
    elif row.get("cleanup_judged") is False:
        parts.append("cleanup recorded as it exited, not judged")
    elif row.get("cleanup_ok") is True:
        parts.append("cleanup verified")
    elif row.get("cleanup_ok") is False:
        parts.append("cleanup incomplete")
    if row.get("kill_artifact") and row.get("followup_exit") is None:
        pass  # said by kill_words
    elif row.get("followup_exit") == 0 and row.get("followup_canary_ok"):
        parts.append("the artifact restores afterwards")
    elif row.get("followup_exit") is not None:
        parts.append(f"follow-up restore exit {row['followup_exit']}")
    if row.get("followup_group"):
        parts.append(str(row["followup_group"]))
    if row.get("runs_once"):
        if row.get("not_applicable"):  # not run on this lane: where it ran and why, not a bare skip
            return str(row["runs_once"])
        parts.append(str(row["runs_once"]))
    text = ", ".join(parts)
    if row.get("outcome") == "failed":
        return f"**FAIL**: {text}; {row.get('mismatches') or row.get('message') or 'no mismatch recorded'}"
    if row.get("not_applicable"):  # the engine's words are said once, under "What was qualified"
        return "not applicable (why: What was qualified)"
    if row.get("outcome") != "passed":
        return f"{row.get('outcome')}: {row.get('message') or text}"
    return text


def kill_words(row: FaultRow) -> list[str]:
    """A killed command's outcome: when the signal went and what was running, the cleanup (vLLM's own where it
    is judged, and after the harness's sweep) and, for a killed create, what became of its target."""
    words = [f"{row['kill']} ({row.get('kill_phase') or 'phase not recorded'})" if row.get("kill") else "not killed"]
    if row.get("cleanup_judged") is not False:
        words.append("vLLM's own cleanup verified" if row.get("cleanup_ok") else "vLLM's own cleanup incomplete")
    elif row.get("kill_left"):
        words.append(f"{row['kill_left']} process(es) of the killed tree left, swept by the harness")
    swept = row.get("kill_swept_ok")
    words.append("nothing left after the sweep" if swept else "something outlived the harness's sweep")
    if row.get("kill_artifact") and row.get("followup_exit") is None:
        words.append(f"its target: {row['kill_artifact']}")
    return words


def chaos_base(fault: str) -> str:
    """``kill-create`` for ``kill-create.7`` (a chaos repeat), else the fault's id as it is."""
    base, _, repeat = fault.rpartition(".")
    return base if base and repeat.isdigit() else fault


def _chaos_lines(group: list[FaultRow]) -> str:
    """One kill fault's repeats on one or more lanes, counted: runs as expected, phases reached, what was left
    before the sweep, what outlived it, what became of the artifact; each failed repeat named."""
    passed = sum(r.get("outcome") == "passed" for r in group)
    phases: dict[str, int] = {}
    outcomes: dict[str, int] = {}
    for r in group:
        phase = str(r.get("kill_phase") or "not killed")
        phases[phase] = phases.get(phase, 0) + 1
        outcome = str(r.get("kill_artifact") or "?")
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    left = sum(1 for r in group if r.get("kill_left"))
    leaks = sum(1 for r in group if r.get("kill_swept_ok") is not True)
    failed = [f"`{r['fault']}` on {r['runner']}/{r['arm']}" for r in group if r.get("outcome") != "passed"]
    text = (
        f"{passed}/{len(group)} as expected; killed during "
        + ", ".join(f"{k} {v}" for k, v in sorted(phases.items()))
        + f"; left something before the harness's sweep in {left}, after it in {leaks}; the artifact: "
        + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
    )
    return text + (f"; **FAIL**: {', '.join(failed[:10])}" if failed else "")


def _faults(comparisons: Comparisons) -> list[str]:
    """A line per fault point: its recorded result in plain words, lanes with the same result together; a kill
    fault repeated by ``--vsnap-chaos`` is one line per fault and lane, counted (``_chaos_lines``)."""
    found = rows(comparisons.faults, FaultRow)
    if not found:
        return []
    repeated = {chaos_base(str(r["fault"])) for r in found if chaos_base(str(r["fault"])) != r["fault"]}
    by_fault: dict[str, list[FaultRow]] = {}
    chaos_rows: dict[str, list[FaultRow]] = {}
    for row in found:
        base = chaos_base(str(row["fault"]))
        if base in repeated:
            chaos_rows.setdefault(base, []).append(row)
            continue
        by_fault.setdefault(str(row["fault"]), []).append(row)
    lines_chaos = []
    for base, group in chaos_rows.items():
        lanes: dict[str, list[FaultRow]] = {}
        for row in group:
            lanes.setdefault(f"{row['runner']}/{row['arm']}", []).append(row)
        shown = "; ".join(f"{lane}: {cell(_chaos_lines(g), 800)}" for lane, g in lanes.items())
        title = next((r.get("title") for r in group if r["fault"] == base), None) or base
        lines_chaos.append(f"- injected {cell(title, 200)} (`{base}` ×{max(len(g) for g in lanes.values())}) — {shown}")
    lines = ["### Injected faults", ""]
    for fault, group in by_fault.items():
        results: dict[str, list[str]] = {}
        for row in group:
            results.setdefault(fault_result_text(row), []).append(f"{row['runner']}/{row['arm']}")
        shown = "; ".join(f"{', '.join(lanes)}: {cell(text, 600)}" for text, lanes in results.items())
        lines.append(f"- injected {cell(group[0].get('title') or fault, 200)} (`{fault}`) — {shown}")
    lines += [*lines_chaos, ""]
    return lines


def _environment(results: model.Results) -> list[str]:
    lines = []
    for lane, env in _lane_environments(results):
        versions = env["versions"]
        image = env["image"]
        values = (
            lane,
            image.get("ref") or "",
            image_identity(image),
            image_commit(image),
            versions.get("vllm") or "n/a",
            versions.get("torch") or "n/a",
            versions.get("cuda") or "n/a",
            versions.get("driver") or "n/a",
            (versions.get("criu") or "n/a").removeprefix("Version: "),  # `criu --version`'s first line
            gpu_text(env["gpu"], image.get("labels")),
        )
        lines.append("| " + " | ".join(cell(v, 200) for v in values) + " |")
    if not lines:
        return []
    return [
        "### Environment",
        "",
        "| lane | image | image ID / digest | commit | vLLM | torch | CUDA | driver | CRIU | GPU |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *lines,
        "",
    ]


def _known(verdict: model.Verdict) -> list[str]:
    """The known findings the run was judged with, each with its link and what it did (``report.known``)."""
    outcomes = verdict.get("known") or []
    if not outcomes:
        return []
    lines = ["### Known findings", ""]
    for outcome in outcomes:
        entry = outcome["finding"]
        link = entry["link"]
        linked = f"[{link}]({link})"
        name = cell(entry["title"] or entry["id"], 200)
        failures = ", ".join(f"`{f}`" for f in outcome["failures"][:8])
        more = f" and {len(outcome['failures']) - 8} more" if len(outcome["failures"]) > 8 else ""
        state = outcome["state"].upper()
        lines.append(
            f"- **{state}** {name} ({linked}, until {entry['expires']}; `{entry['id']}`: "
            f"“{cell(entry['words'], 200)}”)" + (f": {failures}{more}" if failures else "")
        )
    lines.append("")
    return lines


def _failures(results: model.Results) -> list[str]:
    failed = [s for s in results["steps"] if s["outcome"] == "failed"]
    if not failed:
        return []
    known = results["verdict"].get("known_failures") or {}
    lines = ["### Failed steps", ""]
    for step in failed:
        label = f"{step['runner']}/{step['arm']}/{step['step']}"
        message = cell(step["message"], 500)
        mark = f" **KNOWN** ({known[label]})" if label in known else ""
        lines.append(f"- `{label}`{mark}" + (f": {message}" if message else ""))
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
