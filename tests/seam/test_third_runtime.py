"""The runtime seam holds: a third runtime, one module registered from outside the harness
(``tests/seam/memory_runtime.py``, loaded with ``-p``), runs the qualification suites' lifecycle unchanged and every
fault whose kind needs no shell (each kind acting through the box's named operations), a fault kind of a conftest's
own, one module, runs on it like a built-in one, and a run on a runtime other than Docker never imports the docker
SDK."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).parent
REVISION = "0123456789abcdef0123456789abcdef01234567"

#: A plugin that records, as the session ends, whether the docker SDK was ever imported in this process.
SPY = """
import json, os, sys

def pytest_unconfigure(config):
    with open(os.environ["VSNAP_TEST_MODULES"], "w") as out:
        json.dump(sorted(m for m in sys.modules if m == "docker" or m.startswith("docker.")), out)
"""


def _run(
    tmp_path: Path, *args: str, expect: tuple[str, ...] = ("--vsnap-expect=base", "--vsnap-base-expect=base")
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], list[str]]:
    (tmp_path / "spy_plugin.py").write_text(SPY)
    report = tmp_path / "report"
    modules = tmp_path / "modules.json"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), str(tmp_path), str(ROOT)]),
        "VSNAP_TEST_MODULES": str(modules),
    }
    done = subprocess.run(
        [
            sys.executable, "-m", "pytest", str(ROOT / "suites"), "-p", "memory_runtime", "-p", "spy_plugin",
            "-p", "no:cacheprovider", "--vsnap-runtime=memory", "--vsnap-image=memory:head",
            "--vsnap-base-image=memory:base", "--vsnap-model=org/tiny", f"--vsnap-revision={REVISION}",
            *expect, "--vsnap-soak=0.5", "--vsnap-observe=2",
            # the in-memory engine decodes nothing: its "decode speed" is an HTTP round trip's (2x apart between
            # steps on CI's busy 2 cores, twice); there is no decoding to time
            "--vsnap-decode-runs=0",
            "--vsnap-cleanup-grace=1",
            f"--vsnap-report-dir={report}", *args,
        ],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    results = json.loads((report / "results.json").read_text()) if (report / "results.json").exists() else {}
    return done, results, json.loads(modules.read_text()) if modules.exists() else ["(not recorded)"]


def test_a_runtime_registered_from_outside_runs_the_whole_lifecycle(tmp_path: Path) -> None:
    done, results, docker_modules = _run(tmp_path, "-m", "not fault")
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    steps = {(s["lane"], s["step"]): s for s in results["steps"]}
    for lane in ("v1-head", "v2-head", "v1-base", "v2-base"):
        for step in ("ordinary", "create", "inspect", "restore-1", "restart", "restore-2", "restore-after-stop",
                     "fresh-box"):  # fmt: skip
            assert steps[(lane, step)]["outcome"] == "passed", (lane, step, steps[(lane, step)]["message"])
    restore = steps[("v1-head", "restore-1")]["results"]
    assert all(c["bit_exact"] for c in restore["canary_compare"]) and len(restore["canary_compare"]) == 6
    assert restore["digest_compare"]["unchanged"] == 3 and restore["kv_tokens"] == 4096
    assert steps[("v1-base", "vs-head")]["outcome"] == "passed"
    fresh = steps[("v1-head", "fresh-box")]["results"]
    assert fresh["box"] != environment_of(results, "v1-head")["container_id"], "a box of its own"
    assert all(c["bit_exact"] for c in fresh["canary_compare"]), "restored from the artifact's copy alone"
    assert results["verdict"]["status"] == "pass" and "narrowed" in results["verdict"]["headline"]
    environment = next(lane["environment"] for lane in results["lanes"] if lane["environment"])
    assert environment["container_id"].startswith("memory:"), "the runtime's own box identity is recorded"
    assert docker_modules == [], f"a memory-runtime run imported the docker SDK: {docker_modules}"
    # the run records pytest's own counts (a step that does not apply is not a skip), as its summary line says them
    summary = re.search(r"=+ (\d+ passed[^=]*?) in [\d.]+s", output)
    assert summary, output[-2000:]
    said = ", ".join(f"{n} {category}" for category, n in results["run"]["pytest_counts"].items())
    assert said == summary.group(1) and "not applicable" in said, (said, summary.group(1))
    html = (tmp_path / "report" / "report.html").read_text()
    assert f"pytest: {said}" in html
    # and the command that reproduces it, as given, with the harness's own commit (this checkout's HEAD)
    invoked = results["run"]["invocation"]
    assert invoked["dir"] == str(tmp_path) and invoked["python"] == sys.executable
    assert invoked["args"][:2] == [str(ROOT / "suites"), "-p"] and invoked["args"][-2:] == ["-m", "not fault"]
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert results["run"]["harness_source"]["commit"] == head.strip()
    summary_md = (tmp_path / "report" / "summary.md").read_text()
    assert "Command to reproduce this run" in summary_md and "'not fault'" in summary_md


#: the kinds that act through the box's named operations alone, and those that need a shell of the box's own
NO_SHELL = ("hook", "signal", "create", "port", "manifest", "image", "kill")
SHELL_ONLY = ("identity", "pid", "weights")


def test_every_fault_whose_kind_needs_no_shell_runs_on_a_runtime_registered_from_outside(tmp_path: Path) -> None:
    """``-m fault`` on the in-memory box, whose engine honours the probe's hooks as the reference engine does: each
    fault of a kind that needs no shell is injected, fires and is judged as expected on both arms (the head arm by
    the head expectations: ``error.json`` with the phase, nothing bound before the private canary; the base arm by
    the released ones); the kinds that need a shell say so, as not applicable; each step records its kind."""
    done, results, _ = _run(
        tmp_path, "-m", "fault", "--vsnap-runners=v1", "--vsnap-fault-timeout=2",
        expect=("--vsnap-expect=head", "--vsnap-base-expect=base"),
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    steps = {(s["lane"], s["step"]): s for s in results["steps"]}
    faults = [s for s in results["steps"] if s["step"].startswith("fault:")]
    assert {s["results"].get("kind") for s in faults} == {*NO_SHELL, *SHELL_ONLY}, "every step records its kind"
    for step in faults:
        kind, where = step["results"]["kind"], (step["lane"], step["step"], step["message"][:300])
        if kind in SHELL_ONLY:
            assert step["outcome"] == "skipped" and "the box runs no s" in step["message"], where
            continue
        assert step["outcome"] == "passed", where
        res = step["results"]
        assert res["observed"]["fired"] or not res["expected"]["fires"], where
        assert res["mismatches"] == [] and res["followup_restore"]["canary_ok"], where
    head = steps[("v1-head", "fault:wake-raise")]["results"]["observed"]
    assert (head["phase"], head["http_bound"], head["fired_records"][0]["point"]) == (
        "recovery: restore memory", False, "wake-raise"
    )  # fmt: skip
    base = steps[("v1-base", "fault:canary-perturb")]["results"]["observed"]
    assert base["error_json"] is None and base["http_bound"] and "snapshot oracle mismatch" in base["stderr_tail"]
    for lane in ("v1-head", "v1-base"):
        killed = steps[(lane, "fault:kill-create")]["results"]
        assert killed["injected"]["sent"] and killed["killed_artifact"]["outcome"] != "absent", killed["injected"]
        assert steps[(lane, "fault:term-restore")]["results"]["injected"]["sent"]
        assert steps[(lane, "fault:port-in-use")]["results"]["injected"]["bound_at_restore"]
    assert results["verdict"]["status"] == "pass", results["verdict"]["reasons"]
    assert "random kills" in results["verdict"]["coverage_line"], results["verdict"]["coverage_line"]


#: a fault kind of a conftest's own, in one module: its injector, its fault and the hook that adds it
FLIP_KIND = """
from vsnap_qual import faults
from vsnap_qual.contract import ARTIFACT

MANIFEST = f"{ARTIFACT}/manifest.json"


class FlipManifestByte(faults.Injector):
    \"\"\"One byte of the artifact's manifest flipped (``{`` becomes ``z``), through the box's named operations.\"\"\"

    undo_before_followup = True

    def inject(self, lane, injected, env):
        before = lane.box.read_bytes(MANIFEST) or b""
        flipped = bytes([before[0] ^ 1]) + before[1:]
        lane.box.write_bytes(MANIFEST, flipped)
        injected["flipped"] = flipped != before and lane.box.read_bytes(MANIFEST) == flipped

    def fired(self, obs, injected):
        return bool(injected.get("flipped"))


KIND = faults.Kind(
    "manifest-byte",
    FlipManifestByte(),
    faults=(
        faults.Fault(
            "manifest-byte", "one byte of the manifest flipped", "manifest-byte",
            head=faults.Expect(1, False, None, True, message="invalid snapshot manifest"),
        ),
    ),
)


def pytest_vsnap_add_faults(catalogue):
    catalogue.add_kind(KIND)
"""


def test_a_kind_of_a_conftests_own_is_one_module_and_runs_on_the_runtime_registered_from_outside(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new fault kind is one module (``FLIP_KIND``, loaded with ``-p``: its injector, its fault, its hook): the
    suites run it on the in-memory box through named box operations, record its kind and judge it as any fault."""
    pytester.makepyfile(flip_kind=FLIP_KIND)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(pytester.path), str(HERE), str(ROOT)]))
    report = pytester.path / "report"
    result = pytester.runpytest_subprocess(
        str(ROOT / "suites"), "-p", "memory_runtime", "-p", "flip_kind", "-p", "no:cacheprovider",
        "--vsnap-runtime=memory", "--vsnap-image=memory:head", "--vsnap-model=org/tiny", f"--vsnap-revision={REVISION}",
        "--vsnap-expect=head", "--vsnap-runners=v1", "--vsnap-fault-timeout=2", "--vsnap-cleanup-grace=1",
        "--vsnap-observe=0", f"--vsnap-report-dir={report}", "-m", "fault", "-k", "fault_artifact or manifest-byte",
        timeout=600,
    )  # fmt: skip
    assert result.ret == 0, result.stdout.str()[-4000:]
    results = json.loads((report / "results.json").read_text())
    (step,) = [s for s in results["steps"] if s["step"] == "fault:manifest-byte"]
    res = step["results"]
    assert step["outcome"] == "passed", step["message"]
    assert (res["kind"], res["injected"]) == ("manifest-byte", {"flipped": True})
    assert res["observed"]["exit_code"] == 1 and res["observed"]["artifact_unchanged"] is True
    assert res["followup_restore"]["canary_ok"], "the harness's own corruption was undone before the follow-up"
    assert "v1/head/fault:manifest-byte" in results["coverage"]["required"]


def environment_of(results: dict[str, Any], lane: str) -> dict[str, Any]:
    return next(x["environment"] for x in results["lanes"] if x["environment"] and x["environment"]["lane"] == lane)


def test_the_endpoint_is_the_runtimes_not_the_lanes_port(tmp_path: Path) -> None:
    """The memory box publishes each lane port under another local port: every request the harness made went
    there, so nothing assumes it reaches the box's own port number on loopback."""
    from tests.support.memory_box import MemoryBox
    from vsnap_qual.box import Bind, BoxSpec

    spec = BoxSpec(name="n", engine="e", image_id="i", labels={}, environment={},
                   binds=[Bind("/vsnap/control", tmp_path, read_only=False)])  # fmt: skip
    box = MemoryBox(spec)
    host, real = box.endpoint(18000)
    assert (host, box.endpoint(18000)[1]) == ("127.0.0.1", real) and real != 18000


def test_the_docker_sdk_is_not_imported_on_the_way_to_a_host_lane() -> None:
    """Everything a host-runtime run loads (plugin, config, preflight, the host runtime, the lane, the steps, the
    faults, the report) loads no docker SDK."""
    code = (
        "import sys, vsnap_qual.plugin, vsnap_qual.runtimes.host, vsnap_qual.lane, vsnap_qual.faults, "
        "vsnap_qual.faults.tools, vsnap_qual.cli.doctor, vsnap_qual.report, vsnap_qual.cli\n"
        "from vsnap_qual import runtimes\n"
        "runtimes.create('host')\n"
        "print(sorted(m for m in sys.modules if m == 'docker' or m.startswith('docker.')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    docker = subprocess.run(
        [sys.executable, "-c", code.replace("'host'", "'docker'")], capture_output=True, text=True, cwd=ROOT,
        timeout=120,
    )  # fmt: skip
    assert "'docker'" in docker.stdout, "the check sees the SDK when the Docker runtime is chosen"


@pytest.mark.parametrize("name", ["docker", "host"])
def test_a_name_already_taken_is_refused(name: str) -> None:
    from vsnap_qual import runtimes

    with pytest.raises(ValueError, match="already registered"):
        runtimes.register(name, lambda settings: None)  # type: ignore[arg-type,return-value]


def test_the_stall_fault_waits_out_a_deadline_derived_from_its_lanes_own_create_and_restore(tmp_path: Path) -> None:
    """Issue 45: the fault artifact is created with a recovery deadline derived from what the lane's lifecycle
    measured before it (its create, its restore until bound: ``faults.deadline``), under ``--vsnap-fault-timeout``;
    the stall fault waits out that deadline, and its recovery still exits 1 before HTTP with its record (the
    in-memory engine raises at the deadline frozen into the artifact, in its words)."""
    done, results, _ = _run(
        tmp_path, "--vsnap-runners=v1", "--vsnap-fault-timeout=30",
        "-k", "head and (ordinary_reference or test_create or test_inspect or restore_1 or fault_artifact "
        "or recovery-deadline)",
        expect=("--vsnap-expect=head", "--vsnap-base-expect=base"),
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    steps = {s["step"]: s for s in results["steps"] if s["lane"] == "v1-head"}
    assert {"ordinary", "create", "restore-1", "fault-artifact", "fault:recovery-deadline"} <= set(steps), list(steps)
    made = steps["fault-artifact"]["results"]
    chosen = made["recovery_deadline"]
    # the in-memory engine creates and restores in well under a second: the floor (10 s), not the option (30 s)
    assert chosen["derived_s"] == chosen["deadline_s"] == made["snapshot_timeout_s"] == 10.0, chosen
    assert chosen["restores"] == 1 and 0 < chosen["restore_ready_s"] < 3 and 0 < chosen["create_s"] < 3, chosen
    assert chosen["rule"].startswith("max(10, 3 × ") and "under --vsnap-fault-timeout=30 s" in chosen["rule"]
    stall = steps["fault:recovery-deadline"]
    res = stall["results"]
    assert stall["outcome"] == "passed", stall["message"]
    assert res["recovery_deadline"] == chosen, "the fault's record says the deadline it waited out"
    observed = res["observed"]
    assert (observed["exit_code"], observed["http_bound"], observed["phase"]) == (1, False, "recovery: restore memory")
    # the engine's own words: the deadline frozen into the artifact at create is the derived one
    assert "recovery exceeded VLLM_SNAPSHOT_TIMEOUT_S=10" in observed["stderr_tail"], observed["stderr_tail"]
    assert 10 <= observed["seconds"] < 30, "the stall was cut at the derived deadline, not the option's"
    summary = (tmp_path / "report" / "summary.md").read_text()
    assert "recovery deadline 10 s: max(10, 3 × " in summary, "the report's fault table says the deadline"


def test_refusals_one_after_another_are_proved_restorable_by_one_follow_up_restore(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 45 item 5: two refusals that follow one another in the lane's selection (the built-in bad manifest and
    a conftest's flipped manifest byte, both refused with the artifact byte-identical) are each run and audited; the
    first defers its follow-up restore to the second's, which restores once for both and says so in its record."""
    pytester.makepyfile(flip_kind=FLIP_KIND)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(pytester.path), str(HERE), str(ROOT)]))
    report = pytester.path / "report"
    result = pytester.runpytest_subprocess(
        str(ROOT / "suites"), "-p", "memory_runtime", "-p", "flip_kind", "-p", "no:cacheprovider",
        "--vsnap-runtime=memory", "--vsnap-image=memory:head", "--vsnap-model=org/tiny", f"--vsnap-revision={REVISION}",
        "--vsnap-expect=head", "--vsnap-runners=v1", "--vsnap-fault-timeout=2", "--vsnap-cleanup-grace=1",
        "--vsnap-observe=0", f"--vsnap-report-dir={report}", "-m", "fault",
        "-k", "fault_artifact or manifest-field or manifest-byte", timeout=600,
    )  # fmt: skip
    assert result.ret == 0, result.stdout.str()[-4000:]
    results = json.loads((report / "results.json").read_text())
    steps = {s["step"]: s for s in results["steps"] if s["lane"] == "v1-head"}
    first, last = steps["fault:manifest-field"], steps["fault:manifest-byte"]
    assert first["outcome"] == last["outcome"] == "passed", (first["message"], last["message"])
    group = ["manifest-field", "manifest-byte"]
    assert first["results"]["group_followup"] == {"group": group, "deferred_to": "fault:manifest-byte"}
    assert "followup_restore" not in first["results"], "its follow-up restore is the group's"
    assert "follow-up restore" not in first["results"]["phases"]
    assert first["results"]["observed"]["exit_code"] == 1 and first["results"]["observed"]["artifact_unchanged"]
    assert first["results"]["cleanup"]["ok"], "audited as before"
    assert last["results"]["group_followup"] == {"group": group, "covered": group}
    assert last["results"]["followup_restore"]["canary_ok"]
    summary = (report / "summary.md").read_text()
    assert "follow-up restore with its group's, at fault:manifest-byte" in summary, summary


@pytest.mark.parametrize("overlap", ["lanes", "off"])
def test_a_runners_two_arms_run_at_once_and_the_base_arm_judges_the_head_arms_handed_on_answers(
    tmp_path: Path, overlap: str
) -> None:
    """Issue 45: under ``-n 2`` and ``--vsnap-overlap=lanes`` the head and base arm of one runner run at once, each
    on a worker of its own; the base arm compares with the head arm's ordinary reference as the head's worker handed
    it on (``handoff/``), and the run says which lanes overlapped and what they shared. ``off``: one worker, one
    after another, as before."""
    done, results, _ = _run(tmp_path, "-m", "not fault", "--vsnap-runners=v1", "-n", "2", f"--vsnap-overlap={overlap}")
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    steps = {(s["lane"], s["step"]): s for s in results["steps"]}
    vs_head = steps[("v1-base", "vs-head")]
    assert vs_head["outcome"] == "passed", vs_head["message"]
    assert len(vs_head["results"]["canary_compare"]) == 6 and vs_head["results"]["kv_head"] == 4096
    found = results["run"]["overlap"]
    summary = (tmp_path / "report" / "summary.md").read_text()
    handed = tmp_path / "report" / "handoff" / "v1-head.ordinary.json"
    if overlap == "lanes":
        assert (found["scope"], found["at_once"], found["lanes"]) == ("lane", 2, ["v1-head", "v1-base"])
        assert [pair["lanes"] for pair in found["overlapped"]] == [["v1-base", "v1-head"]]
        assert found["overlapped"][0]["seconds"] > 0 and handed.is_file()
        assert "lanes overlapped (--vsnap-overlap=lanes, 2 workers)" in summary and "(no GPU)" in summary
    else:
        assert (found["scope"], found["at_once"], found["overlapped"]) == ("runner", 1, [])
        assert not handed.exists() and "lanes ran one after another per worker" in summary
