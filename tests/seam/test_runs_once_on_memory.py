"""Issue 45 item 4 on the in-memory runtime (``tests/seam/memory_runtime.py``): a fault of a kind refused before
any engine starts (``faults.once.ONCE_KINDS``; here the manifest kind, the one such kind the shell-less box can
present) runs once per image and arm, on the first runner the selection gives it, and the other runner's lanes say
where it ran and why; a kind that starts an engine runs on every lane; ``--vsnap-runners=v2`` alone and
``--vsnap-fault-runners=every`` run it where they say; a lane whose every selected fault runs elsewhere makes no
fault artifact; a bad value is refused before anything starts; and where the lane that ran it finds an engine
reached after all, its step fails naming the option, since the other lanes did not run it."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from tests.seam.test_third_runtime import _run
from vsnap_qual import model

HEAD_BASE = ("--vsnap-expect=head", "--vsnap-base-expect=base")


def _steps(results: dict[str, Any], step: str) -> dict[str, dict[str, Any]]:
    return {s["lane"]: s for s in results["steps"] if s["step"] == step}


def _ok(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]


def test_a_refusal_kind_runs_once_per_image_and_arm_and_an_engine_kind_on_every_lane(tmp_path: Path) -> None:
    done, results, _ = _run(
        tmp_path, "-m", "fault", "--vsnap-fault-timeout=2", "-k",
        "fault_artifact or manifest or wake-raise or recovery-deadline", expect=HEAD_BASE,
    )  # fmt: skip
    _ok(done)
    manifest = _steps(results, "fault:manifest-field")
    for ran, other in (("v1-head", "v2-head"), ("v1-base", "v2-base")):
        assert manifest[ran]["outcome"] == "passed", manifest[ran]["message"]
        assert manifest[ran]["results"]["runs_once"] == {"why": model.RUNS_ONCE, "stands_for": [other]}
        assert manifest[other]["outcome"] == "skipped"
        assert (
            manifest[other]["message"] == f"{model.NOT_APPLICABLE_PREFIX}{other}: {model.RUNS_ONCE}; it runs on {ran}"
        )
        assert manifest[other]["results"]["runs_once"] == {"why": model.RUNS_ONCE, "ran_on": ran}
    wake = _steps(results, "fault:wake-raise")  # it starts an engine: every lane runs it
    assert {lane: s["outcome"] for lane, s in wake.items()} == dict.fromkeys(
        ("v1-head", "v1-base", "v2-head", "v2-base"), "passed"
    )
    assert all("runs_once" not in s["results"] for s in wake.values())
    verdict = results["verdict"]
    assert verdict["status"] == "pass", verdict["reasons"]
    assert f"manifest (1 faults) on v1 only, not on v2: {model.RUNS_ONCE}" in verdict["coverage_line"]
    assert not [line for line in verdict["qualified"] if model.RUNS_ONCE in line]  # a lane-level line it is not
    (faults,) = [c for c in verdict["checks"] if c["id"] == "faults"]
    assert f"2 run on another runner's lane ({model.RUNS_ONCE})" in faults["result"]
    summary = (tmp_path / "report" / "summary.md").read_text()
    assert f"v2/head: not run here: {model.RUNS_ONCE}; run on v1-head instead" in summary
    assert f"ran here for v2-head too: {model.RUNS_ONCE}" in summary
    html = (tmp_path / "report" / "report.html").read_text()
    assert "where and how" in html and "run on v1-base instead" in html and "ran here for v2-base too" in html
    # the stall fault's derived deadline (faults/deadline.py), in the HTML fault table as in summary.md (item 3)
    deadline = _steps(results, "fault:recovery-deadline")["v2-base"]["results"]["recovery_deadline"]
    words = f"recovery deadline {deadline['deadline_s']:g} s: {deadline['rule']}"
    assert words in summary and words in html, words


def test_runners_v2_alone_and_every_runner_run_it_where_they_say(tmp_path: Path) -> None:
    (tmp_path / "v2").mkdir()
    (tmp_path / "every").mkdir()
    done, results, _ = _run(
        tmp_path / "v2", "-m", "fault", "--vsnap-fault-timeout=2", "--vsnap-runners=v2", "-k",
        "fault_artifact or manifest", expect=HEAD_BASE,
    )  # fmt: skip
    _ok(done)
    manifest = _steps(results, "fault:manifest-field")
    assert {lane: s["outcome"] for lane, s in manifest.items()} == {"v2-head": "passed", "v2-base": "passed"}
    assert all("runs_once" not in s["results"] for s in manifest.values())
    done, results, _ = _run(
        tmp_path / "every", "-m", "fault", "--vsnap-fault-timeout=2", "--vsnap-fault-runners=every", "-k",
        "fault_artifact or manifest", expect=HEAD_BASE,
    )  # fmt: skip
    _ok(done)
    manifest = _steps(results, "fault:manifest-field")
    assert {s["outcome"] for s in manifest.values()} == {"passed"} and len(manifest) == 4
    assert all("runs_once" not in s["results"] for s in manifest.values())
    assert "once per image and arm" not in results["verdict"]["coverage_line"]


def test_a_lane_whose_every_selected_fault_runs_elsewhere_makes_no_fault_artifact(tmp_path: Path) -> None:
    done, results, _ = _run(
        tmp_path, "-m", "fault", "--vsnap-fault-timeout=2", "-k", "fault_artifact or manifest", expect=HEAD_BASE
    )
    _ok(done)
    made = _steps(results, "fault-artifact")
    assert made["v1-head"]["outcome"] == "passed" and made["v1-base"]["outcome"] == "passed"
    for lane, ran in (("v2-head", "v1-head"), ("v2-base", "v1-base")):
        assert made[lane]["outcome"] == "skipped", made[lane]
        assert made[lane]["message"].endswith(f"{model.RUNS_ONCE}; they run on {ran}")
    assert results["verdict"]["status"] == "pass", results["verdict"]["reasons"]


def test_a_bad_value_is_refused_before_anything_starts(tmp_path: Path) -> None:
    done, results, _ = _run(tmp_path, "-m", "fault", "--vsnap-fault-runners=twice")
    output = done.stdout + done.stderr
    assert done.returncode == 4, output[-3000:]
    assert "--vsnap-fault-runners" in output and "'once'" in output and "'every'" in output, output[-3000:]
    assert not results and not (tmp_path / "report").exists()


#: an engine that no longer refuses a bad manifest before it starts: it restores and serves whatever the manifest's
#: schema version says (loaded with -p beside the in-memory runtime)
LATE_CHECK = """
import json
from tests.support.memory_box import MemoryBox

_restore = MemoryBox._restore


def _late(self, args, running, env):
    path = f"{args[0]}/manifest.json"
    manifest = json.loads(self.files[path])
    manifest["schema_version"] = 1
    self.files[path] = json.dumps(manifest, sort_keys=True).encode()
    return _restore(self, args, running, env)


MemoryBox._restore = _late
"""


def test_the_lane_that_ran_it_fails_where_its_own_record_shows_an_engine_reached(tmp_path: Path) -> None:
    (tmp_path / "late_manifest_check.py").write_text(LATE_CHECK)
    done, results, _ = _run(
        tmp_path, "-p", "late_manifest_check", "-m", "fault", "--vsnap-fault-timeout=2", "--vsnap-cleanup-grace=1",
        "-k", "fault_artifact or manifest", expect=HEAD_BASE,
    )  # fmt: skip
    assert done.returncode == 1, (done.stdout + done.stderr)[-4000:]
    manifest = _steps(results, "fault:manifest-field")
    ran = manifest["v1-head"]
    assert ran["outcome"] == "failed"
    premise = [m for m in ran["results"]["mismatches"] if "--vsnap-fault-runners=every" in m]
    assert premise and "v2-head" in premise[0] and "exited 0: a restored server ran" in premise[0], ran["message"]
    assert "--vsnap-fault-runners=every" in ran["message"]
    assert manifest["v2-head"]["outcome"] == "skipped"  # it did not run there: the failure above says so
    assert results["verdict"]["status"] == "fail"
