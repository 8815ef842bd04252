"""``vsnap-qual report`` exits with the recorded verdict; ``vsnap-qual compare`` exits 1 on a regression.

The CLI runs as a subprocess (as CI runs it) on report directories whose evidence is written through the model
(``synthetic_runs``: every record validated against ``vsnap_qual.model``) and assembled by ``write_reports``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.report.synthetic_runs import MakeRun, RunSpec
from vsnap_qual.report import write_reports

ROOT = Path(__file__).resolve().parents[2]
PASSING = RunSpec(changed_digests=(), canary_deltas=())


def vsnap_qual(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vsnap_qual.cli", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def runs(make_run: MakeRun) -> dict[str, Path]:
    """Report directories, each with its results.json: pass, fail, partial, and more."""
    specs = {
        "pass": PASSING,
        "pass-other-kv": RunSpec(
            changed_digests=(),
            canary_deltas=(),
            kv={
                ("v1", "head"): (61_440, 60_000),
                ("v1", "base"): (61_440, 61_296),
                ("v2", "head"): (63_104, 63_088),
                ("v2", "base"): (63_104, 63_088),
            },
        ),
        "fail": RunSpec(),  # v2/head/restore-2: a changed digest
        "fail-more": RunSpec(canary_token_flips=(("v1", "restore-1", 0),)),  # also a canary token flip
        "partial": RunSpec(
            changed_digests=(), skipped_steps=(("v1/head/overlay", "environment limitation: no overlay"),)
        ),
    }
    out = {}
    for name, spec in specs.items():
        directory = make_run(name, spec)
        assert write_reports(directory, github_step_summary=False).verdict == name.split("-")[0]
        out[name] = directory
    return out


def test_report_exits_with_the_verdict(runs: dict[str, Path], make_run: MakeRun) -> None:
    assert vsnap_qual("report", runs["pass"]).returncode == 0
    failed = vsnap_qual("report", runs["fail"] / "results.json")
    assert failed.returncode == 1 and failed.stdout.startswith("FAIL: wrote")
    assert vsnap_qual("report", runs["partial"]).returncode == 3
    killed = make_run("killed", RunSpec(complete=False, stop_after_steps=9, changed_digests=()))
    assert vsnap_qual("report", killed).returncode == 4
    missing = vsnap_qual("report", runs["pass"] / "nope.json")
    assert missing.returncode == 2 and "does not exist" in missing.stderr


def test_report_exit_pytest_gives_pytests_status_for_the_same_verdict(runs: dict[str, Path], make_run: MakeRun) -> None:
    """The README's one exit-code table: ``--exit=pytest`` is pytest's own status for each verdict."""
    assert vsnap_qual("report", runs["pass"], "--exit=pytest").returncode == 0
    assert vsnap_qual("report", runs["fail"], "--exit=pytest").returncode == 1
    assert vsnap_qual("report", runs["partial"], "--exit=pytest").returncode == 1  # pytest: 1, as a FAIL
    killed = make_run("killed", RunSpec(complete=False, stop_after_steps=9, changed_digests=()))
    assert vsnap_qual("report", killed, "--exit=pytest").returncode == 2  # as pytest's INTERRUPTED
    missing = vsnap_qual("report", runs["pass"] / "nope.json", "--exit=pytest")
    assert missing.returncode == 4 and "does not exist" in missing.stderr  # pytest's usage error


def test_report_help_names_the_exit_codes() -> None:
    text = " ".join(vsnap_qual("report", "--help").stdout.split())
    assert "0 PASS" in text and "1 FAIL" in text and "3 PARTIAL" in text and "4 INCOMPLETE" in text


def test_compare_pass_to_fail_exits_non_zero(runs: dict[str, Path]) -> None:
    regressed = vsnap_qual("compare", runs["pass"], runs["fail"])
    assert regressed.returncode == 1
    assert "regression (--fail-on=verdict): verdict PASS → FAIL" in regressed.stderr
    assert "Validation checks whose status changed" in regressed.stdout and "digests: pass → FAIL" in regressed.stdout
    assert vsnap_qual("compare", runs["pass"], runs["partial"]).returncode == 1
    # the same run, or a better one, is no regression
    assert vsnap_qual("compare", runs["pass"], runs["pass"]).returncode == 0
    assert vsnap_qual("compare", runs["fail"], runs["pass"]).returncode == 0
    assert vsnap_qual("compare", runs["pass"], runs["fail"], "--fail-on=never").returncode == 0


def test_compare_fail_on_check_sees_a_check_the_verdict_hides(runs: dict[str, Path]) -> None:
    # FAIL → FAIL: the verdict did not move, but the canary check held before and no longer does
    assert vsnap_qual("compare", runs["fail"], runs["fail-more"]).returncode == 0
    by_check = vsnap_qual("compare", runs["fail"], runs["fail-more"], "--fail-on=check")
    assert by_check.returncode == 1
    assert "check canary.single-token: pass → FAIL" in by_check.stderr
    assert "check item canary.single-token.v1.head.restore-1: ok → not ok" in by_check.stderr
    assert "step v1/head/restore-1: passed → failed" in by_check.stderr


def test_compare_fail_on_figure_sees_a_changed_figure(runs: dict[str, Path]) -> None:
    assert vsnap_qual("compare", runs["pass"], runs["pass-other-kv"], "--fail-on=check").returncode == 0
    by_figure = vsnap_qual("compare", runs["pass"], runs["pass-other-kv"], "--fail-on=figure")
    assert by_figure.returncode == 1 and "kv v1/head" in by_figure.stderr


def test_compare_refuses_an_unknown_level(runs: dict[str, Path]) -> None:
    refused = vsnap_qual("compare", runs["pass"], runs["fail"], "--fail-on=sometimes")
    assert refused.returncode == 2 and "--fail-on" in refused.stderr


def test_a_results_json_from_before_check_ids_compares_by_id(runs: dict[str, Path], tmp_path: Path) -> None:
    import json

    old = json.loads((runs["pass"] / "results.json").read_text())
    for check in old["verdict"]["checks"]:  # as written before checks had ids and items
        del check["id"], check["items"]
    (tmp_path / "old.json").write_text(json.dumps(old))
    same = vsnap_qual("compare", tmp_path / "old.json", runs["pass"], "--fail-on=check")
    assert same.returncode == 0, same.stderr
    assert "Validation checks whose status changed" not in same.stdout
