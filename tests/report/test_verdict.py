"""The one verdict: judged once at assembly from the steps' recorded judgements, stating its coverage."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.report.synthetic_runs import MakeRun, RunSpec, open_results, required_coverage
from vsnap_qual import checks
from vsnap_qual.faults import BUILTIN_FAULTS
from vsnap_qual.report import render_reports, write_reports
from vsnap_qual.report.assemble import assemble_file, read_evidence
from vsnap_qual.report.frames import compare_all
from vsnap_qual.report.verdict import judge

FAULTS = len(BUILTIN_FAULTS)
REQUIRED = 4 * (10 + FAULTS)  # 2 runners × 2 arms: 9 lifecycle steps (overlay or vs-head), the fault artifact


def _rewrite(directory: Path, keep: Callable[[dict[str, object]], bool]) -> Path:
    """The same evidence with only the records ``keep`` accepts."""
    path = directory / "evidence.jsonl"
    records = [r for r in read_evidence(path).records if keep(r)]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_full_coverage_passes_and_says_what_it_covered(make_run: MakeRun) -> None:
    verdict = assemble_file(make_run("ok", RunSpec(changed_digests=())) / "evidence.jsonl")["verdict"]
    assert (verdict["status"], verdict["headline"], verdict["reasons"]) == ("pass", "PASS", [])
    cov = verdict["coverage"]
    assert cov["required"] == REQUIRED and len(cov["passed"]) == REQUIRED
    assert not (cov["skipped"] or cov["not_reached"] or cov["left_out"])
    line = verdict["coverage_line"]
    assert f"{REQUIRED}/{REQUIRED} required steps passed" in line
    assert "runners v1, v2" in line and "arms head, base" in line
    assert f"{FAULTS} fault points" in line and "overlay verified" in line
    assert "each restored server watched 30 s after its restore" in line
    assert "request shapes repeated, seeded, concurrent, long" in line
    drifts = sum(1 for f in cov["faults"] if f.startswith("identity-"))
    kills = sum(1 for f in cov["faults"] if f.split("-")[0] in ("kill", "term"))
    assert drifts and kills == 4
    assert f"{FAULTS} fault points per lane ({drifts} of them identity drifts, {kills} random kills)" in line
    alone = sum(1 for p in cov["passed"] if p.endswith("/fresh-box"))
    assert alone and f"{alone}/{alone} restores in a fresh box (the artifact alone)" in line


def test_the_same_evidence_without_its_fault_steps_is_partial(make_run: MakeRun) -> None:
    directory = make_run("nofaults", RunSpec(changed_digests=()))
    path = _rewrite(directory, lambda r: not str(r.get("step", "")).startswith("fault"))
    verdict = assemble_file(path)["verdict"]
    assert verdict["status"] == "partial" and verdict["headline"] == "PARTIAL"
    assert len(verdict["coverage"]["not_reached"]) == 4 * (FAULTS + 1)
    said = f"{4 * (FAULTS + 1)} required step(s) not reached: v1/head/fault-artifact"
    assert any(said in r for r in verdict["reasons"])


def test_a_skipped_required_step_is_partial_and_names_why(make_run: MakeRun) -> None:
    spec = RunSpec(changed_digests=(), skipped_steps=(("v1/head/overlay", "environment limitation: no overlay"),))
    verdict = assemble_file(make_run("skip", spec) / "evidence.jsonl")["verdict"]
    assert verdict["status"] == "partial"
    assert verdict["coverage"]["skipped"] == [
        {"step": "v1/head/overlay", "message": "environment limitation: no overlay"}
    ]
    assert any("v1/head/overlay (environment limitation: no overlay)" in r for r in verdict["reasons"])


def test_an_explicitly_narrowed_run_passes_and_the_badge_says_what_was_left_out(make_run: MakeRun) -> None:
    spec = RunSpec(changed_digests=(), left_out=("*/fault*",), markexpr="not fault")
    directory = make_run("narrowed", spec)
    verdict = assemble_file(directory / "evidence.jsonl")["verdict"]
    assert verdict["status"] == "pass" and verdict["narrowed"] is True
    assert verdict["headline"] == f"PASS (narrowed: fault steps ×{4 * (FAULTS + 1)} left out)"
    assert f"left out by -m 'not fault': fault steps ×{4 * (FAULTS + 1)}" in verdict["reasons"]
    paths = write_reports(directory, github_step_summary=False)
    assert f"PASS (narrowed: fault steps ×{4 * (FAULTS + 1)} left out)" in paths.summary_md.read_text()
    assert f"PASS (narrowed: fault steps ×{4 * (FAULTS + 1)} left out)" in paths.report_html.read_text()


def test_a_teardown_error_fails_the_verdict_with_its_message(make_run: MakeRun) -> None:
    error = ("teardown", "suites/test_faults.py::TestFaults::test_fault[v2-base-image-truncated]", "NotFound: gone")
    directory = make_run("teardown", RunSpec(changed_digests=(), harness_errors=(error,)))
    paths = write_reports(directory, github_step_summary=False)
    verdict = paths.results["verdict"]
    assert verdict["status"] == "fail"
    reason = f"harness error (teardown) in {error[1]}: NotFound: gone"
    assert reason in verdict["reasons"]
    assert verdict["harness_errors"][0]["message"] == "NotFound: gone"
    assert "NotFound: gone" in paths.summary_md.read_text()


def test_digest_row_uses_the_runs_own_rule_when_every_parameter_is_unobservable(make_run: MakeRun) -> None:
    """``checks.compare_digests`` fails a comparison where nothing could be observed; the report must show that
    recorded judgement, not a pass of its own (no parameter changed, none missing)."""
    results = assemble_file(make_run("blind", RunSpec(changed_digests=())) / "evidence.jsonl")
    steps = {(s["runner"], s["arm"], s["step"]): s for s in results["steps"]}
    for step in steps.values():
        for entry in (open_results(step).get("digests") or {}).values():
            entry["sha256"] = None  # the probe could observe no parameter
    for (runner, arm, name), step in steps.items():
        if "digest_compare" in step["results"]:
            reference = open_results(steps[(runner, arm if name != "vs-head" else "head", "ordinary")])["digests"]
            own = open_results(step).get("digests") or open_results(steps[(runner, arm, "ordinary")])["digests"]
            open_results(step)["digest_compare"] = checks.compare_digests(reference, own)
    verdict = judge(results, compare_all(results))
    digest = next(c for c in verdict["checks"] if c["short"] == "digests")
    assert digest["status"] == "FAIL", digest
    assert (
        verdict["status"] == "fail"
        and "check failed: parameter digests (ordinary vs restored): v1: 0/30 unchanged (30 unobservable); v2: "
        "0/30 unchanged (30 unobservable)"
        in verdict["reasons"]
    )


def test_views_render_the_recorded_verdict_and_never_judge_again(make_run: MakeRun, tmp_path: Path) -> None:
    results = assemble_file(make_run("failing", RunSpec()) / "evidence.jsonl")
    assert results["verdict"]["status"] == "fail"
    results["verdict"]["headline"] = "RECORDED-HEADLINE"
    results["verdict"]["checks"][0]["result"] = "recorded lifecycle text"
    paths = render_reports(results, tmp_path / "out")
    for text in (paths.report_html.read_text(), paths.summary_md.read_text()):
        assert "RECORDED-HEADLINE" in text and "recorded lifecycle text" in text
    assert json.loads(paths.results_json.read_text())["verdict"]["headline"] == "RECORDED-HEADLINE"


def test_cpu_smoke_is_never_a_bare_pass_and_a_runner_the_cpu_build_lacks_is_named_not_counted(
    make_run: MakeRun,
) -> None:
    reason = "not applicable: vLLM's CPU build has no such runner: Model Runner V2 requires Triton"
    v2 = [label for label in required_coverage(RunSpec())["required"] if label.startswith("v2/")]
    spec = RunSpec(changed_digests=(), canary_deltas=(), cpu_smoke=True, skipped_steps=[(s, reason) for s in v2])
    verdict = assemble_file(make_run("smoke", spec) / "evidence.jsonl")["verdict"]
    assert (verdict["status"], verdict["headline"]) == ("pass", "PASS (CPU smoke)")
    cov = verdict["coverage"]
    assert len(cov["not_applicable"]) == len(v2) == REQUIRED // 2 and not cov["skipped"]
    half = REQUIRED // 2
    assert verdict["coverage_line"].startswith(f"{half}/{half} required steps passed ({len(v2)} not applicable)")
    qualified = verdict["qualified"]
    assert any(line.startswith("CPU smoke mode: real vLLM's CPU build") for line in qualified)
    assert "Not qualified: GPU memory release and restore" in " ".join(qualified)
    assert [line for line in qualified if line.startswith("not applicable")] == [
        "not applicable: lanes v2/head, v2/base, vLLM's CPU build has no such runner: Model Runner V2 requires Triton",
    ], "one line per reason, naming its lanes: the engine's words said once"
    # the same steps skipped for another reason are a gap: partial, never a pass
    gap = RunSpec(changed_digests=(), canary_deltas=(), cpu_smoke=True, skipped_steps=[(s, "no GPU") for s in v2])
    assert assemble_file(make_run("gap", gap) / "evidence.jsonl")["verdict"]["status"] == "partial"


def test_what_was_qualified_comes_from_the_targets_labels(make_run: MakeRun) -> None:
    directory = make_run("labelled", RunSpec(changed_digests=()))
    path = directory / "evidence.jsonl"
    records: list[dict[str, Any]] = read_evidence(path).records
    for record in records:
        if record["kind"] == "environment":
            record["image"]["labels"]["ai.vsnap.engine"] = "vsnap reference engine (a miniature vLLM), not vLLM"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    verdict = assemble_file(path)["verdict"]
    assert verdict["qualified"] == ["engine: vsnap reference engine (a miniature vLLM), not vLLM"]
    assert verdict["headline"] == "PASS"
    # unlabelled: the vLLM versions the lanes ran
    plain = assemble_file(make_run("plain", RunSpec(changed_digests=())) / "evidence.jsonl")["verdict"]
    assert plain["qualified"] == ["engine: head arm vLLM 0.33.1.dev42+g593df82f, base arm vLLM 0.33.1.dev42+g593df82f"]


def _interrupt(directory: Path, during: str | None) -> Path:
    """The evidence as a run stopped (SIGTERM) while ``during`` (a step label) ran: later steps not recorded."""
    path = directory / "evidence.jsonl"
    records, kept, stopping = read_evidence(path).records, [], False
    for record in records:
        label = f"{record.get('runner')}/{record.get('arm')}/{record.get('step')}"
        if record["kind"] == "step" and (stopping or label == during):
            if not stopping:
                record = {**record, "outcome": "skipped",
                          "message": "interrupted: the run was stopped (SIGTERM) while this step ran"}  # fmt: skip
                kept.append(record)
            stopping = True
            continue
        if record["kind"] == "session_end":
            record = {**record, "exitstatus": 2, "interrupted": "SIGTERM"}
        kept.append(record)
    path.write_text("".join(json.dumps(r) + "\n" for r in kept))
    return path


def test_a_stopped_run_is_interrupted_and_a_failure_before_the_stop_stays_a_fail(make_run: MakeRun) -> None:
    verdict = assemble_file(_interrupt(make_run("stopped", RunSpec(changed_digests=())), "v1/head/create"))["verdict"]
    assert (verdict["status"], verdict["headline"]) == ("interrupted", "INTERRUPTED (during v1/head/create)")
    assert verdict["reasons"][0].startswith("the run was interrupted (SIGTERM) while v1/head/create ran;")
    assert not verdict["failed"]
    spec = RunSpec(changed_digests=(), failed_steps=(("v1", "head", "create"),))
    failed = assemble_file(_interrupt(make_run("failed-then-stopped", spec), "v1/head/restore-1"))["verdict"]
    assert (failed["status"], failed["headline"]) == ("fail", "FAIL (interrupted)")
    assert failed["failed"] == ["v1/head/create"]
