"""The committed H200 runs and the H100 runs (evidence/gpu/) back what the docs say about them (the GPU is not
in CI; its results.json is)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, TypeVar

import pytest

from vsnap_qual.timing import run_figures

ROOT = Path(__file__).resolve().parents[2]
GPU_RUN = ROOT / "evidence" / "gpu"


T = TypeVar("T")


def _known(value: T | None) -> T:
    """A figure every committed run has (None only where a run lacks the steps it is computed from)."""
    assert value is not None, "the committed run lacks the steps this figure is computed from"
    return value


def _latest() -> tuple[str, str, Any]:
    """The run evidence/gpu/README.md calls the latest full run, the verdict it states, and its results.json."""
    readme = (GPU_RUN / "README.md").read_text()
    heading = re.search(r"^## Latest full run \(`([^`]+)`[^)]*\): (\w+)", readme, re.M)
    assert heading, "evidence/gpu/README.md has no '## Latest full run (`<dir>`, …): <VERDICT>' heading"
    name, stated = heading.groups()
    return name, stated, json.loads((GPU_RUN / name / "results.json").read_text())


def _steps(results: dict[str, Any], *names: str) -> list[dict[str, Any]]:
    return [s for s in results["steps"] if s["step"] in names]


def test_the_latest_gpu_run_is_stated_with_its_own_verdict_and_is_a_real_h200_run() -> None:
    name, stated, results = _latest()
    assert results["verdict"]["status"].upper() == stated, f"{name}: the docs say {stated}"
    summary = (GPU_RUN / name / "summary.md").read_text()
    assert summary.startswith(f"## vsnap-qual: {'✅' if stated == 'PASS' else '❌'} {stated}")
    for lane in results["lanes"]:
        env = lane["environment"]
        assert env["gpu"]["name"] == "NVIDIA H200" and env["gpu"]["count"] == 1
        assert re.fullmatch(r"Version: 4\.2\.\d+", env["versions"]["criu"])
        assert re.fullmatch(r"\d+\.\d+\.\d+", env["versions"]["driver"])
        assert env["image"]["labels"]["ai.vsnap.runtime"] == "host"
        assert not any("simulated" in key for key in env["image"]["labels"]), "the H200 run simulates nothing"


def test_the_latest_gpu_runs_gpu_checks_are_in_its_evidence() -> None:
    name, _, results = _latest()
    uuid = {lane["environment"]["lane"]: lane["environment"]["gpu"]["uuid"] for lane in results["lanes"]}
    inspects = _steps(results, "inspect")
    assert len(inspects) == 4
    for step in inspects:
        check = next(c for c in step["results"]["checks"] if c["name"] == "gpu_uuid")
        assert check["ok"] and check["detail"] == uuid[step["lane"]]
    restores = _steps(results, "restore-1", "restore-2")
    assert len(restores) == 8
    for step in restores:
        engaged = step["results"]["gpu_engaged"]
        assert engaged["holders"] and engaged["holders"] == engaged["gpu_apps"], step["lane"]
    audits = [(s["results"] or {}).get("cleanup", {}) for s in results["steps"]]
    judged = [audit for audit in audits if audit.get("judged")]
    assert judged and all(c["gpu_idle"] for c in judged)
    assert "compute apps after the run: 0" in (GPU_RUN / name / "host.txt").read_text()


def test_the_readmes_h200_figures_are_the_latest_runs_medians() -> None:
    """The figures in docs/measured.md and evidence/gpu/README.md are bench/run_figures.py's of the latest run."""
    name, _, results = _latest()
    found = run_figures.figures(results)
    cold, restore = _known(found["cold_start_ready_s"]), _known(found["restore_ready_s"])
    assert (cold["n"], restore["n"]) == (4, 8), "two runners x two arms: 4 cold starts, 8 restores"
    readme = (ROOT / "docs" / "measured.md").read_text().splitlines()
    row = next(line for line in readme if line.startswith("| H200, host runtime"))
    assert f"{restore['median']:.2f} s vs {cold['median']:.2f} s" in row, f"docs/measured.md's H200 row is not {name}'s"
    figures = (GPU_RUN / "README.md").read_text()
    for expected in (
        f"| ordinary cold start, `vllm serve` → `/health` | {cold['median']:.2f} s",
        f"| restore, `vllm snapshot restore` → serving listener | {restore['median']:.2f} s",
        f"| {found['engine_s']:.0f} s / {found['steps_s']:.0f} s |",
        f"| whole suite wall time | {_known(found['wall_s']):.0f} s",
    ):
        assert expected in figures, f"evidence/gpu/README.md lacks {expected!r} ({name})"


def test_the_identity_runs_words_in_the_docs_are_its_evidence() -> None:
    """evidence/gpu/README.md's identity section: each drift reached the restore's own process (held) and was
    refused naming only its field, with the values the README quotes."""
    name = "2026-12-02-identity-v2-9ed0f21"
    readme = (GPU_RUN / "README.md").read_text()
    section = readme.split(f"(`{name}`", 1)[1].split("\n## ", 1)[0]
    results = json.loads((GPU_RUN / name / "results.json").read_text())
    stated = re.search(r"PASS, (\d+) of (\d+) required steps", section)
    assert results["verdict"]["status"] == "pass" and stated, section[:300]
    drifts = [s for s in results["steps"] if s["step"].startswith("fault:identity")]
    assert len(drifts) == 16 and {s["lane"] for s in drifts} == {"v2-head", "v2-base"}
    for step in drifts:
        injected, observed = step["results"]["injected"], step["results"]["observed"]
        assert step["outcome"] == "passed" and injected["held"] is True, step["step"]
        assert observed["error_lines"][-1].endswith(f"snapshot mismatch: {injected['field']}"), step["step"]
        assert f"`{injected['field']}`" in section, injected["field"]
    presented = {s["step"]: s["results"]["injected"]["presented"] for s in drifts if s["lane"] == "v2-head"}
    assert presented["fault:identity-kernel"] in section and presented["fault:identity-gpu"] in section
    assert presented["fault:identity-env-changed"].startswith("VLLM_NO_USAGE_STATS=")
    assert "`VLLM_NO_USAGE_STATS` unset" in section


def test_the_harness_time_runs_figures_in_the_docs_are_computed_from_their_evidence() -> None:
    """evidence/gpu/README.md's issue-27 table: each ratio and median is what bench/run_figures.py computes from the
    committed results.json of the run it names (before: the identity run; after: the harness-time run)."""
    readme = (GPU_RUN / "README.md").read_text()
    section = readme.split("(`2026-12-02-harness-time-v2-79525b5`", 1)[1].split("\n## ", 1)[0]
    figures = run_figures
    before = figures.figures(json.loads((GPU_RUN / "2026-12-02-identity-v2-9ed0f21" / "results.json").read_text()))
    after = figures.figures(json.loads((GPU_RUN / "2026-12-02-harness-time-v2-79525b5" / "results.json").read_text()))
    assert (
        after["verdict"] == "pass"
        and "PASS, 57 of 57" in readme.split("(`2026-12-02-harness-time-v2-79525b5`", 1)[1][:40]
    )
    for found in (before, after):
        wall = _known(found["wall_s"])
        ratio = f"{wall:.0f} s / {found['engine_s']:.0f} s = **{wall / found['engine_s']:.2f}**"
        assert ratio in section, ratio
        assert f"**{_known(found['fault_harness_s'])['median']:.2f} s**" in section
    less = (_known(after["wall_s"]) - after["idle_s"]) / after["engine_s"]
    assert f"(441 − {after['idle_s']:.1f}) / 351 = {less:.3f}" in section
    table = (GPU_RUN / "2026-12-02-harness-time-v2-79525b5" / "figures.txt").read_text()
    assert table.startswith("verdict                      pass") and "fault phase (harness s)" in table


def test_the_baseline_options_runs_figures_in_the_docs_are_computed_from_its_evidence() -> None:
    """Issue 27 with the baseline's options (no window, the 3 s soak): the ratios and the median docs/measured.md and
    evidence/gpu/README.md state are bench/run_figures.py's of the committed results.json."""
    name = "2026-12-02-harness-time-v2-observe0-83b3051"
    found = run_figures.figures(json.loads((GPU_RUN / name / "results.json").read_text()))
    assert found["verdict"] == "pass"
    wall, engine, idle = _known(found["wall_s"]), found["engine_s"], found["idle_s"]
    section = (GPU_RUN / "README.md").read_text().split(f"(`{name}`", 1)[1].split("\n## ", 1)[0]
    assert f"{wall:.0f} s / {engine:.0f} s = **{wall / engine:.2f}**" in section
    assert f"({wall:.0f} − {idle:.0f}) / {engine:.0f} = **{(wall - idle) / engine:.2f}**" in section
    assert f"**{_known(found['fault_harness_s'])['median']:.2f} s**" in section
    assert "compute apps after the run: 0" in (GPU_RUN / name / "host.txt").read_text()


def _held_s(results: dict[str, Any]) -> float:
    """The captured-ID waits' ``held_s`` of a run: a killed tree's teardown, counted as the engine's."""
    held = 0.0
    for step in results["steps"]:
        res = step.get("results") or {}
        waits = [
            *(res.get("captured_id_waits") or {}).values(),
            (res.get("followup_restore") or {}).get("captured_ids_wait") or {},
        ]
        held += sum(float(w.get("held_s") or 0.0) for w in waits)
    return held


def test_the_teardown_runs_figures_in_the_docs_are_computed_from_its_evidence() -> None:
    """Issue 27 at the baseline's options, a killed tree's teardown counted as the engine's: the ratios (as counted
    now, and with the teardown counted as the harness's) and the median docs/measured.md and evidence/gpu/README.md
    state are bench/run_figures.py's of the committed results.json."""
    name = "2026-12-03-teardown-engine-cfab946"
    results = json.loads((GPU_RUN / name / "results.json").read_text())
    found = run_figures.figures(results)
    assert found["verdict"] == "pass"
    wall, engine, idle, held = _known(found["wall_s"]), found["engine_s"], found["idle_s"], _held_s(results)
    assert held > 0, "no teardown recorded: the run predates wait_engine_gone"
    section = (GPU_RUN / "README.md").read_text().split(f"(`{name}`", 1)[1].split("\n## ", 1)[0]
    assert f"{wall:.0f} s / {engine:.0f} s = **{wall / engine:.2f}**" in section
    assert f"{wall:.0f} s / ({engine:.0f} − {held:.1f}) s = {wall / (engine - held):.2f}" in section
    assert f"**{(wall - idle) / engine:.2f}** ({idle:.0f} s idle)" in section
    assert f"**{_known(found['fault_harness_s'])['median']:.2f} s** (n = 48" in section
    row = next(line for line in (ROOT / "docs" / "measured.md").read_text().splitlines() if name in line)
    assert f"{_known(found['fault_harness_s'])['median']:.2f} s" in row and f"wall / engine {wall / engine:.2f}" in row
    assert f"{wall / (engine - held):.2f} with a killed tree's teardown counted as the harness's" in row
    assert f"{(wall - idle) / engine:.2f} less the soak's idle" in row
    assert "compute apps after the run: 0" in (GPU_RUN / name / "host.txt").read_text()


def test_the_h200_chaos_runs_words_in_the_docs_are_its_evidence() -> None:
    """Issue 29 on the H200: the kills, the sweep and the finding the docs state are what its results.json says."""
    from vsnap_qual.report import chaos

    name = "2026-12-02-chaos-v2-head-n20-a5ff883"
    results = json.loads((GPU_RUN / name / "results.json").read_text())
    fig = chaos.figures(results)
    rows = fig["rows"].values()
    runs = sum(r["runs"] for r in rows)
    assert runs == 80 and fig["missed"] == 0
    assert sum(r["leaks after the sweep"] for r in rows) == 0  # "0 of 80 left anything after the harness's sweep"
    assert [f["phase"] for f in fig["failed"]] == ["criu restore"] * 9  # the finding: all while CRIU restored
    assert {f["step"].split(".")[0] for f in fig["failed"]} == {"fault:term-restore"}
    held = [
        s for s in results["steps"]
        if s["step"].startswith("fault:term-restore") and s["outcome"] == "failed"
        and s["results"]["cleanup"].get("gpu_idle") is False
    ]  # fmt: skip
    assert len(held) == 1  # "once still holding GPU memory"
    creates = [r for (command, _, _), r in fig["rows"].items() if command == "create"]
    assert sum(r["artifact"]["refused by inspect"] for r in creates) == 40
    section = (GPU_RUN / "README.md").read_text().split(f"(`{name}`", 1)[1].split("\n## ", 1)[0]
    assert "80 kills, 0 leaks after the sweep; 9 findings" in section and "(40 of 40" in section
    assert "compute apps after the run: 0" in (GPU_RUN / name / "gpu-tier.log").read_text()
    for lane in results["lanes"]:
        assert lane["environment"]["gpu"]["name"] == "NVIDIA H200"


def test_the_h200_chaos_at_the_final_rules_is_its_evidence() -> None:
    """Issue 29 on the H200 at the commit that records the finding: what the docs and docs/measured.md say of it."""
    from vsnap_qual.report import chaos

    name = "2026-12-02-chaos-v2-head-n8-4708c77"
    results = json.loads((GPU_RUN / name / "results.json").read_text())
    fig = chaos.figures(results)
    rows = fig["rows"]
    assert sum(r["runs"] for r in rows.values()) == 32 and fig["missed"] == 0 and fig["failed"] == []
    assert sum(r["leaks after the sweep"] for r in rows.values()) == 0
    assert sum(r["artifact"]["refused by inspect"] for (c, _, _), r in rows.items() if c == "create") == 16
    assert sum(r["artifact"]["restores again"] for (c, _, _), r in rows.items() if c == "restore") == 16
    terms = [s for s in results["steps"] if s["step"].startswith("fault:term-restore")]
    assert len(terms) == 8 and all(s["results"]["injected"]["own_cleanup"].startswith("not judged") for s in terms)
    parked = [s for s in terms if s["results"]["cleanup"].get("leftover_processes")]
    assert len(parked) == 1 and set(parked[0]["results"]["cleanup"]["leftover_wchan"].values()) == {"futex_do_wait"}
    assert (GPU_RUN / name / "figures.txt").read_text().strip() == chaos.render(fig)
    assert str(fig["seeds"][0]) in (GPU_RUN / "README.md").read_text()
    assert "compute apps after the run: 0" in (GPU_RUN / name / "host.txt").read_text()
    assert "32 kills, PASS 32/32" in (ROOT / "docs" / "measured.md").read_text()


def test_the_prefix_cache_runs_words_in_the_docs_are_its_evidence() -> None:
    """Issue 28's prefix-cache check on the H200: the prompt, the hits ask by ask and the not-judged variant the
    docs state are what its results.json recorded."""
    name = "2026-12-03-prefix-cache-439dc3d"
    results = json.loads((GPU_RUN / name / "results.json").read_text())
    section = (GPU_RUN / "README.md").read_text().split(f"(`{name}`", 1)[1].split("\n## ", 1)[0]
    assert results["verdict"]["status"] == "pass" and "PASS, 34 of 34" in section
    restores = [s for s in results["steps"] if "prefix_cache_judgement" in (s.get("results") or {})]
    plain = [s["results"]["prefix_cache_judgement"] for s in restores if "nopc" not in s["lane"]]
    off = [s["results"]["prefix_cache_judgement"] for s in restores if "nopc" in s["lane"]]
    assert len(plain) == len(off) == 8 and "after each of the 8 restores" in section
    assert all(j["ok"] and j["hits_ordinary"] == j["hits_restored"] == [0, 32] for j in plain)
    assert all(j["ok"] and j["hits_not_judged"].startswith("prefix caching off") for j in off)
    ordinary = next(s for s in results["steps"] if s["step"] == "ordinary")["results"]["prefix_cache"]
    assert (ordinary["prompt_tokens"], ordinary["block_size"]) == (40, 16) and "40 token ids, block size 16" in section


def test_the_final_runs_ratio_and_its_outlier_are_its_evidence() -> None:
    """The stop's last H200 run: the ratio the docs give, and the one fault whose audit made it miss 1.15."""
    name = "2026-12-03-all-checks-6a0923b"
    results = json.loads((GPU_RUN / name / "results.json").read_text())
    found = run_figures.figures(results)
    wall, engine = _known(found["wall_s"]), found["engine_s"]
    section = (GPU_RUN / "README.md").read_text().split(f"(`{name}`", 1)[1].split("\n## ", 1)[0]
    assert (
        found["verdict"] == "pass"
        and f"**`wall / engine` {wall / engine:.2f}** ({wall:.0f} s / {engine:.0f} s)" in section
    )
    term = next(s for s in results["steps"] if s["step"] == "fault:term-restore" and s["lane"] == "v2-head")
    assert term["results"]["phases"]["audit"] > 10 and term["results"]["cleanup"]["judged"] is False
    assert f"**{_known(found['fault_harness_s'])['median']:.2f} s**" in section


def test_the_parked_grace_runs_ratio_is_its_evidence() -> None:
    """Issue 27 at the commit that ends the audit's wait for a parked tree: the ratio and the median the docs give,
    and the docs' word that this run met no parked tree (so the cut is guarded on CPU, not shown here)."""
    name = "2026-12-03-parked-grace-18cd881"
    results = json.loads((GPU_RUN / name / "results.json").read_text())
    found = run_figures.figures(results)
    wall, engine, idle = _known(found["wall_s"]), found["engine_s"], found["idle_s"]
    section = (GPU_RUN / "README.md").read_text().split(f"(`{name}`", 1)[1].split("\n## ", 1)[0]
    ratio = wall / engine
    assert found["verdict"] == "pass" and round(ratio, 2) <= 1.15 and f"unrounded {ratio:.3f}" in section
    assert f"**`wall / engine` {ratio:.2f}** ({wall:.0f} s / {engine:.0f} s), {(wall - idle) / engine:.2f}" in section
    assert f"**{_known(found['fault_harness_s'])['median']:.2f} s**" in section
    kills = [s for s in results["steps"] if s["step"] in ("fault:term-restore", "fault:kill-restore")]
    assert len(kills) == 4 and not any(s["results"]["cleanup"].get("leftover_processes") for s in kills)
    assert not any("parked_for_good_after_s" in (s["results"] or {}).get("cleanup", {}) for s in results["steps"])
    assert "met no parked tree" in section
    row = next(line for line in (ROOT / "docs" / "measured.md").read_text().splitlines() if name in line)
    assert f"{_known(found['fault_harness_s'])['median']:.2f} s (was 4.19 s); wall / engine {wall / engine:.2f}" in row
    assert "compute apps after the run: 0" in (GPU_RUN / name / "host.txt").read_text()


def test_the_second_parked_grace_runs_ratio_is_its_evidence() -> None:
    """The same code's next H200 run: its ratio and median as the docs state them, no kill left anything."""
    name = "2026-12-03-parked-grace-1cfee7b"
    results = json.loads((GPU_RUN / name / "results.json").read_text())
    found = run_figures.figures(results)
    wall, engine, idle = _known(found["wall_s"]), found["engine_s"], found["idle_s"]
    median = _known(found["fault_harness_s"])["median"]
    docs = (GPU_RUN / "README.md").read_text()
    assert found["verdict"] == "pass" and wall / engine <= 1.15 and median <= 1.0
    ratio = f"{wall / engine:.2f}** ({wall:.0f} s / {engine:.0f} s), {(wall - idle) / engine:.2f}"
    assert f"**`wall / engine`\n  {ratio}" in docs
    assert f"median **{median:.2f} s**. Its four random kills" in docs
    kills = [s for s in results["steps"] if s["step"].startswith(("fault:term-", "fault:kill-"))]
    assert len(kills) == 8 and not any(s["results"]["cleanup"].get("leftover_processes") for s in kills)
    row = next(line for line in (ROOT / "docs" / "measured.md").read_text().splitlines() if name in line)
    assert f"{median:.2f} s, {wall / engine:.2f}." in row
    assert "compute apps after the run: 0" in (GPU_RUN / name / "host.txt").read_text()


def test_the_create_shm_runs_figures_and_creates_are_its_evidence() -> None:
    """The first H200 run with the create's /dev/shm check: both creates judged and clean, nothing unread, and the
    ratio the docs give (over the limit, said so) with the audit that made it."""
    name = "2026-12-03-create-shm-f8a668e"
    results = json.loads((GPU_RUN / name / "results.json").read_text())
    found = run_figures.figures(results)
    wall, engine, idle = _known(found["wall_s"]), found["engine_s"], found["idle_s"]
    creates = _steps(results, "create")
    assert len(creates) == 2 and all(s["results"]["shm_left"] == [] for s in creates)
    assert not any("shm_unread" in s["results"] or "shm_left_not_judged" in s["results"] for s in creates)
    assert not any("shm_left_not_judged" in (s["results"] or {}) for s in _steps(results, "fault-artifact"))
    section = (GPU_RUN / "README.md").read_text().split(f"(`{name}`", 1)[1].split("\n## ", 1)[0]
    ratio = wall / engine
    assert found["verdict"] == "pass" and f"Unrounded {ratio:.3f}: over issue 27's 1.15" in section
    assert f"**`wall / engine` {ratio:.2f}** ({wall:.0f} s / {engine:.0f} s), {(wall - idle) / engine:.2f}" in section
    assert f"median **{_known(found['fault_harness_s'])['median']:.2f} s**" in section
    term = next(s for s in results["steps"] if s["lane"] == "v2-head" and s["step"] == "fault:term-create")
    audit = term["results"]["phases"]["audit"]
    assert f"waited {audit:.1f} s" in section and not term["results"]["cleanup"]["leftover_processes"]
    row = next(line for line in (ROOT / "docs" / "measured.md").read_text().splitlines() if name in line)
    assert f"{_known(found['fault_harness_s'])['median']:.2f} s, {ratio:.2f} (unrounded {ratio:.3f}" in row
    assert "compute apps after the run: 0" in (GPU_RUN / name / "host.txt").read_text()


def test_the_teardown_credit_runs_figures_are_its_evidence() -> None:
    """The H200 run after a faulted command's own teardown became the engine's time: the credits the docs name,
    the ratio (over the limit, said so) and the parked tree it met."""
    name = "2026-12-04-teardown-credit-9ffe76a"
    results = json.loads((GPU_RUN / name / "results.json").read_text())
    found = run_figures.figures(results)
    wall, engine, idle = _known(found["wall_s"]), found["engine_s"], found["idle_s"]
    section = (GPU_RUN / "README.md").read_text().split(f"(`{name}`", 1)[1].split("\n## ", 1)[0]
    section = " ".join(section.split())
    cleanups = [(s["results"] or {}).get("cleanup") or {} for s in results["steps"]]
    credits = sorted(c["leftovers_went_after_s"] for c in cleanups if "leftovers_went_after_s" in c)
    assert credits and not any(c.get("leftover_processes") for c in cleanups if "leftovers_went_after_s" in c)
    assert f"in {len(credits)} faults: " + ", ".join(f"{x:.2f} s" for x in credits[:-1]) in section
    assert f"and {credits[-1]:.2f} s" in section
    ratio = wall / engine
    assert found["verdict"] == "pass" and f"Unrounded {ratio:.3f}: over issue 27's 1.15 again" in section
    assert f"**`wall / engine` {ratio:.2f}** ({wall:.0f} s / {engine:.0f} s), {(wall - idle) / engine:.2f}" in section
    assert f"median **{_known(found['fault_harness_s'])['median']:.2f} s**" in section
    assert f"own time was {wall - engine:.0f} s" in section
    parked = [c["parked_for_good_after_s"] for c in cleanups if "parked_for_good_after_s" in c]
    assert parked == [1.84] and "ended after 1.84 s" in section
    assert all(s["results"]["shm_left"] == [] for s in _steps(results, "create"))
    row = next(line for line in (ROOT / "docs" / "measured.md").read_text().splitlines() if name in line)
    assert f"{_known(found['fault_harness_s'])['median']:.2f} s, {ratio:.2f} (unrounded {ratio:.3f}" in row
    assert "compute apps after the run: 0" in (GPU_RUN / name / "host.txt").read_text()


@pytest.mark.parametrize(
    ("name", "commit", "runner"),
    [
        ("2026-12-07-v1-full-d575706", "d575706", "v1"),
        ("2026-12-07-v2-full-ab39f7d", "ab39f7d", "v2"),
        ("2026-12-07-v1-merged-8a76b59", "8a76b59", "v1"),
    ],
)
def test_the_h100_runs_stated_figures_are_their_evidence(name: str, commit: str, runner: str) -> None:
    """The full tier on an H100, one runner a run (issue 43's restructure with V1, then main with issue 44's API
    checks with V2; issue 45's GPU baseline): the verdict, step counts, wall, card, runner and leftover compute apps
    each section states are what its committed files say; its timings are an H100's, so the section must say the
    card."""
    import gzip

    from vsnap_qual.timing import critical_path

    run = GPU_RUN / name
    results = json.loads(gzip.decompress((run / "results.json.gz").read_bytes()))
    section = (GPU_RUN / "README.md").read_text().split(f"(`{name}`", 1)[1].split("\n## ", 1)[0]
    verdict = results["verdict"]
    counts, coverage = verdict["counts"], verdict["coverage"]
    host = (run / "host.txt").read_text()
    wall = re.search(r"^wall_s: (\d+)$", host, re.M)
    assert wall is not None, "host.txt records the tier's wall_s"
    assert section.startswith(f", {commit}): {verdict['headline']}, {counts['passed']} of {coverage['required']}; ")
    assert f"wall {wall[1]} s" in section.splitlines()[0]
    not_applicable = re.search(r"^(\d+) passed, (\d+) not applicable in ", (run / "pytest.log").read_text(), re.M)
    assert not_applicable is not None
    stated = f"**{verdict['headline']}, {not_applicable[1]} passed, {not_applicable[2]} not applicable**"
    assert f"{stated} (`pytest.log`), {wall[1]} s wall" in section
    assert int(not_applicable[1]) == counts["passed"] and not counts["failed"] and not verdict["narrowed"]
    faults = next(c for c in verdict["checks"] if c["id"] == "faults")
    assert faults["result"].startswith(f"{len(faults['items'])}/{len(faults['items'])} as expected")
    assert f"{len(faults['items'])}/{len(faults['items'])} faults as expected" in section
    assert coverage["runners"] == [runner] and coverage["arms"] == ["head", "base"]
    assert f"**runner {runner.upper()} only**" in section
    cards = {lane["environment"]["gpu"]["name"] for lane in results["lanes"]}
    assert cards == {"NVIDIA H100 80GB HBM3"} and "gpu: NVIDIA H100 80GB HBM3," in host
    assert "**Another card: an NVIDIA H100 80GB HBM3**" in section and "not the H200" in section
    api = next((c for c in verdict["checks"] if c["id"] == "api"), None)
    if commit != "d575706":  # the API checks (issue 44) landed after d575706
        assert api is not None and api["status"] == "pass"
        restores = len(_steps(results, "restore-1")) * 4
        assert all(f"{kind} {restores}/{restores}" in api["result"] for kind in ("stream", "chat", "tokenize"))
        assert f"`/v1/models` and `/tokenize` {restores}/{restores} each" in " ".join(section.split())
    leftover = re.search(r"^compute apps after the run: (\d+)$", host, re.M)
    assert leftover is not None and f"compute apps after the run: {leftover[1]}" in section and leftover[1] == "0"
    found = run_figures.figures(results)
    cold, restore = _known(found["cold_start_ready_s"]), _known(found["restore_ready_s"])
    assert f"**restore {restore['median']:.2f} s vs cold start {cold['median']:.2f} s**" in section
    verdict_time = critical_path.time_to_verdict(results)
    steps_wall, engine_path = verdict_time.wall.steps_s, verdict_time.path("engine").seconds
    assert steps_wall is not None and engine_path is not None
    flat = " ".join(section.split())
    assert f"measured wall of the steps {steps_wall:.1f} s against a **critical path of {engine_path:.1f} s**" in flat
    assert f"**{steps_wall / engine_path:.2f}×**" in section
    figures = (run / "figures.txt").read_text()
    assert f"| critical path, engine seconds, chains apart | {engine_path:.1f} s" in figures
