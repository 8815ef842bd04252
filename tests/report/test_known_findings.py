"""Known findings (``--vsnap-known-findings``, ``vsnap_qual.report.known``): the file is checked whole before
anything starts; a failure an entry explains reads KNOWN with its link and does not fail the verdict by itself;
an expired, changed or unmatched entry is said; a new failure always fails.

The matching is tested on its own (pure), then over the committed real-vLLM run
``evidence/real-vllm/2026-12-03-variants-make-fb96162`` (18 steps failed on the two recorded findings) with the
real-vLLM profiles' own file, ``suites/profiles/known-findings-vllm-cpu.toml``.
"""

from __future__ import annotations

import copy
import datetime as dt
import gzip
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from vsnap_qual import model, options
from vsnap_qual.report import known, parse, render_reports
from vsnap_qual.report.junit import add_run_properties
from vsnap_qual.report.markdown import render_markdown
from vsnap_qual.report.terminal import terminal_summary_lines
from vsnap_qual.report.verdict import with_known_findings

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "evidence/real-vllm/2026-12-03-variants-make-fb96162/results.json.gz"
PROFILE_FILE = ROOT / "suites/profiles/known-findings-vllm-cpu.toml"
SEM = "vllm snapshot create left in /dev/shm what no process holds and its artifact does not name: /dev/shm/sem.mp-"
PSM = "the artifact is not self-contained: its restore needs /dev/shm/psm_"
DAY = dt.date(2026, 12, 3)


def entry(ident: str, words: str, expires: str = "2027-01-01", title: str = "") -> model.KnownFinding:
    return model.KnownFinding(id=ident, words=words, link=f"https://example.org/{ident}", expires=expires, title=title)


def check(ident: str, items: list[tuple[str, bool | None]], result: str = "it failed") -> model.Check:
    return model.Check(
        id=ident, name=ident, items=[model.CheckItem(id=i, ok=ok) for i, ok in items], ok=False, result=result,
        details=[], informational=False, short=ident, pending=False, status="FAIL",
    )  # fmt: skip


# ---- the matching, pure ------------------------------------------------------------------------------------------
def test_a_failure_in_the_entrys_words_is_known_whatever_its_ids_and_numbers() -> None:
    found = known.failures(
        {
            "v1/head/create": f"StepFailed: {SEM}sm3mz0z9 (removed with the lane)\nTraceback ...",
            "v1/base/create": f"StepFailed: {SEM}yoja3khb (removed with the lane)",
        },
        [],
    )
    matched = known.match(found, [entry("step:create", SEM)], DAY)
    assert matched.known == {"v1/head/create": "https://example.org/step:create", "v1/base/create": matched.known[
        "v1/base/create"]}  # fmt: skip
    assert [o["state"] for o in matched.outcomes] == ["known"]
    assert matched.outcomes[0]["failures"] == ["v1/head/create", "v1/base/create"]
    assert "KNOWN" in matched.outcomes[0]["said"] and "https://example.org/step:create" in matched.outcomes[0]["said"]


def test_a_changed_word_is_a_new_failure_and_the_entry_says_changed() -> None:
    found = known.failures(
        {"v1/head/create": "StepFailed: vllm snapshot create left in /tmp what no process holds"}, []
    )
    matched = known.match(found, [entry("step:create", SEM)], DAY)
    assert matched.known == {}
    assert matched.outcomes[0]["state"] == "changed"
    assert matched.outcomes[0]["failures"] == ["v1/head/create"]
    assert "in /tmp" in matched.outcomes[0]["said"]


def test_the_same_words_under_another_step_are_not_known() -> None:
    found = known.failures({"v1/head/restore-1": f"StepFailed: {PSM}18d05b8b"}, [])
    matched = known.match(found, [entry("step:fresh-box", PSM)], DAY)
    assert matched.known == {} and matched.outcomes[0]["state"] == "unmatched"


def test_an_expired_entry_no_longer_explains_its_failures_and_says_so() -> None:
    found = known.failures({"v1/head/fresh-box": f"StepFailed: {PSM}18d05b8b"}, [])
    matched = known.match(found, [entry("step:fresh-box", PSM, expires="2026-12-02")], DAY)
    assert matched.known == {}
    assert matched.outcomes[0]["state"] == "expired" and "2026-12-02" in matched.outcomes[0]["said"]
    # the expiry is the last day it applies
    assert known.match(found, [entry("step:fresh-box", PSM, expires="2026-12-03")], DAY).known


def test_a_check_is_known_through_its_steps_only_when_each_step_it_failed_on_is_known() -> None:
    lifecycle = check("lifecycle", [("lifecycle.v1.head.create", False), ("lifecycle.v1.head.restore-1", False)])
    messages = {"v1/head/create": f"StepFailed: {SEM}x", "v1/head/restore-1": "StepFailed: canary differs"}
    matched = known.match(known.failures(messages, [lifecycle]), [entry("step:create", SEM)], DAY)
    assert set(matched.known) == {"v1/head/create"}  # restore-1 is new, so the check is not known
    only_create = check("lifecycle", [("lifecycle.v1.head.create", False), ("lifecycle.v1.head.restore-1", True)])
    found = known.failures({"v1/head/create": f"StepFailed: {SEM}x"}, [only_create])
    matched = known.match(found, [entry("step:create", SEM)], DAY)
    assert set(matched.known) == {"v1/head/create", "check:lifecycle"}


def test_the_faults_check_is_known_through_its_fault_steps() -> None:
    faults = check("faults", [("faults.v1.base.wake-raise", False), ("faults.v1.head.wake-raise", True)])
    found = known.failures({"v1/base/fault:wake-raise": "StepFailed: error.json missing"}, [faults])
    matched = known.match(found, [entry("step:fault:wake-raise", "error.json missing")], DAY)
    assert set(matched.known) == {"v1/base/fault:wake-raise", "check:faults"}


def test_a_check_that_failed_on_no_step_needs_its_own_entry() -> None:
    kv = check("kv", [("kv.v1.head.restore-1", False)], result="restored 900 vs created 1,000 tokens")
    found = known.failures({}, [kv])  # the step passed: only the check failed
    assert known.match(found, [], DAY).known == {}
    assert set(known.match(found, [entry("check:kv", "restored 901 vs created 1,000 tokens")], DAY).known) == {
        "check:kv"
    }


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "known.toml"
    path.write_text(text)
    return path


GOOD = f'[[finding]]\nid = "step:create"\nwords = "{SEM}"\nlink = "https://example.org/1"\nexpires = 2027-03-31\n'


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[[finding]\n", "is not TOML"),
        ("", "holds no [[finding]] entry"),
        ('[finding]\nid = "step:create"\n', "holds no [[finding]] entry"),
        (GOOD.replace('id = "step:create"', 'id = "create"'), "is neither step:<step name> nor check:<check id>"),
        (GOOD.replace("expires = 2027-03-31", 'expires = "next spring"'), "is not a date"),
        (GOOD.replace("expires = 2027-03-31\n", ""), "lacks expires"),
        (GOOD + 'owner = "me"\n', "unknown key(s) owner"),
        (GOOD.replace(f'words = "{SEM}"', 'words = "12345678"'), "hold nothing but numbers"),
        (GOOD.replace('link = "https://example.org/1"', 'link = ""'), "link must be a non-empty string"),
        (GOOD + GOOD, "repeats the id"),
        ("findings = 1\n" + GOOD, "top-level key(s) findings"),
    ],
)
def test_a_bad_file_is_one_clear_error_naming_the_file_and_the_format(tmp_path: Path, text: str, said: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(known.KnownFindingsError) as caught:
        known.read_file(path)
    assert said in str(caught.value) and str(path) in str(caught.value)
    assert "[[finding]]" in str(caught.value)  # the fix: what an entry holds
    # the pytest option refuses it before anything starts, naming the option
    with pytest.raises(options.OptionError, match="--vsnap-known-findings"):
        options.parse_values({"vsnap_known_findings": (str(path), "--vsnap-known-findings")})


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(known.KnownFindingsError, match="cannot read"):
        known.read_file(tmp_path / "absent.toml")


def test_the_profiles_file_reads_and_the_real_vllm_profile_uses_it() -> None:
    entries = known.read_file(PROFILE_FILE)
    assert {e["id"] for e in entries} == {"step:create", "step:restore-after-stop", "step:fresh-box"}
    args = (ROOT / "suites/profiles/vllm-cpu.args").read_text().split("\n")
    assert f"--vsnap-known-findings={PROFILE_FILE.relative_to(ROOT)}" in args


# ---- over the committed real-vLLM run ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def real_run() -> model.Results:
    return parse.results(json.loads(gzip.decompress(RUN.read_bytes())))


def test_the_committed_real_vllm_failures_read_known_and_the_verdict_passes(real_run: model.Results) -> None:
    assert real_run["verdict"]["status"] == "fail"  # as recorded: judged without the file
    judged = with_known_findings(real_run, known.read_file(PROFILE_FILE), None)
    verdict = judged["verdict"]
    assert verdict["status"] == "pass", verdict["reasons"]
    assert verdict["headline"].startswith("PASS (2 known findings) (CPU smoke)")
    assert sorted(verdict.get("known_failures", {})) == sorted([*verdict["failed"], "check:lifecycle",
                                                                 "check:self-contained"])  # fmt: skip
    assert len(verdict["failed"]) == 18  # still failed steps, shown as KNOWN
    assert [o["state"] for o in verdict.get("known", [])] == ["known", "known", "known"]
    # every view shows KNOWN with the link
    link = "docs/real-vllm-differences.md#7-the-artifact-is-not-self-contained-vllm-0310-and-0320-real-criu-421"
    lines = "\n".join(terminal_summary_lines(judged, width=120))
    assert "KNOWN" in lines and link in lines and "  FAIL " not in lines
    summary = render_markdown(judged)
    assert "### Known findings" in summary and f"[{link}]({link})" in summary and "**FAIL**" not in summary


def test_a_changed_word_in_the_evidence_reads_as_a_new_failure(real_run: model.Results) -> None:
    changed = copy.deepcopy(real_run)
    step = next(s for s in changed["steps"] if s["step"] == "fresh-box" and s["outcome"] == "failed")
    step["message"] = step["message"].replace("not self-contained", "not self-sufficient", 1)
    label = f"{step['runner']}/{step['arm']}/fresh-box"
    verdict = with_known_findings(changed, known.read_file(PROFILE_FILE), None)["verdict"]
    assert verdict["status"] == "fail"
    assert label not in verdict.get("known_failures", {})
    assert "check:lifecycle" not in verdict.get("known_failures", {})  # it failed on a step no entry explains
    assert any(r.startswith(f"1 step(s) failed: {label}") for r in verdict["reasons"]), verdict["reasons"]


def test_a_changed_entry_says_changed_and_its_failures_fail(real_run: model.Results) -> None:
    entries = [e.copy() for e in known.read_file(PROFILE_FILE)]
    entries[0]["words"] = entries[0]["words"].replace("no process holds", "no process needs")
    verdict = with_known_findings(real_run, [model.KnownFinding(**e) for e in entries], None)["verdict"]
    assert verdict["status"] == "fail"
    assert [o["state"] for o in verdict.get("known", [])] == ["changed", "known", "known"]
    assert any(r.startswith("CHANGED known finding") for r in verdict["reasons"])


def test_the_html_page_and_junit_show_known_with_the_link(real_run: model.Results, tmp_path: Path) -> None:
    judged = with_known_findings(real_run, known.read_file(PROFILE_FILE), None)
    paths = render_reports(judged, tmp_path)
    page = paths.report_html.read_text()
    link = "docs/real-vllm-differences.md#7-the-artifact-is-not-self-contained-vllm-0310-and-0320-real-criu-421"
    assert 'class="pill s-KNOWN"' in page and "cell-known" in page  # the two checks, the 18 steps
    assert '<span class="pill s-skipped">KNOWN</span> the artifact is not self-contained' in page
    assert f'<a href="{link}">{link}</a>' in page
    label = judged["verdict"]["failed"][0]
    runner, arm, name = label.split("/")
    junit = tmp_path / "junit.xml"
    junit.write_text(
        f'<testsuites><testsuite name="pytest"><testcase classname="vsnap-qual.{runner}.{arm}" name="{name}">'
        '<failure message="StepFailed: it">trace</failure></testcase></testsuite></testsuites>'
    )
    add_run_properties(junit, judged)
    case = ET.parse(junit).getroot().find("testsuite/testcase")
    assert case is not None and case.find("failure") is not None
    link = judged["verdict"].get("known_failures", {})[label]
    assert case.find("failure").get("message", "").startswith(f"KNOWN ({link}): StepFailed")  # type: ignore[union-attr]
    assert case.find("properties/property[@name='vsnap_known']") is not None


def test_vsnap_qual_report_takes_the_file_and_refuses_a_bad_one_before_writing(tmp_path: Path) -> None:
    source = tmp_path / "run"
    source.mkdir()
    (source / "results.json").write_bytes(gzip.decompress(RUN.read_bytes()))
    bad = write(tmp_path, GOOD.replace("2027-03-31", '"soon"'))
    argv = [sys.executable, "-m", "vsnap_qual.cli", "report", str(source)]
    refused = subprocess.run([*argv, f"--vsnap-known-findings={bad}"], capture_output=True, text=True, check=False)
    assert refused.returncode == 2 and "--vsnap-known-findings" in refused.stderr and "is not a date" in refused.stderr
    assert sorted(p.name for p in source.iterdir()) == ["results.json"]  # nothing written
    done = subprocess.run([*argv, f"--vsnap-known-findings={PROFILE_FILE}"], capture_output=True, text=True,
                          check=False, cwd=ROOT)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads((source / "results.json").read_text())["verdict"]["status"] == "pass"
