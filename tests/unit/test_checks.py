"""The judgements (vsnap_qual.checks) and the engine's words (vsnap_qual.vllm_words), with no Docker engine
involved (the step sequences that gather what they judge: ``test_steps.py``).

Run with DOCKER_HOST=tcp://127.0.0.1:1 (no engine reachable): nothing here needs one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from tests.support.fake_lane import FakeLane, fault_lane
from vsnap_qual import checks, faults, model, options, vllm_words
from vsnap_qual.box import ExecResult
from vsnap_qual.config import LaneSpec, Variant
from vsnap_qual.engine import adapters
from vsnap_qual.engine.client import CanaryOutput
from vsnap_qual.lane.environment import lane_environment
from vsnap_qual.lane.state import FaultState
from vsnap_qual.model import CleanupAudit, Digest, FreshImport, ImportedModule, OverlayFileResult
from vsnap_qual.report import schema
from vsnap_qual.run import package_probe
from vsnap_qual.run.configure import build_config
from vsnap_qual.vllm_words import StepFailed

REF = CanaryOutput("The capital of France is", [12095], " Paris", -0.42)
AUDIT_OK = CleanupAudit(pids_gone=True, ports_closed=True, gpu_idle=None, link_remaps_equal=True, ok=True)


def _audit(**changes: Any) -> CleanupAudit:
    """A cleanup audit that found nothing left, but for ``changes``."""
    return cast(CleanupAudit, {**AUDIT_OK, **changes})


def _digests(**shas: str | None) -> dict[str, Digest]:
    return {name: Digest(sha256=sha, shape=[2], dtype="float16") for name, sha in shas.items()}


def test_digest_comparison_never_passes_when_nothing_was_observed() -> None:
    blind = checks.compare_digests(_digests(a=None, b=None), _digests(a=None, b=None))
    assert (blind["ok"], blind["unobservable"]) == (False, ["a", "b"])
    same = checks.compare_digests(_digests(a="1", b=None), _digests(a="1", b=None))
    assert same["ok"] and same["unchanged"] == 1
    changed = checks.compare_digests(_digests(a="1", b="2"), _digests(a="1", b="3", c="4"))
    assert not changed["ok"] and changed["changed"] == ["b"] and changed["extra"] == ["c"]
    assert checks.digest_findings(changed)[0].detail.startswith("parameter digests differ")


def test_a_changed_buffer_is_named_as_a_buffer_and_fails_the_digests() -> None:
    reference = {**_digests(w="1"), "rotary.cos_sin_cache": Digest(sha256="c", source="buffer")}
    reference["attn.k_scale"] = Digest(sha256="s", source="buffer")
    zeroed = {**reference, "attn.k_scale": Digest(sha256="0", source="buffer")}
    compare = checks.compare_digests(reference, zeroed)
    assert not compare["ok"] and compare["changed"] == compare["changed_buffers"] == ["attn.k_scale"]
    assert compare["buffers"] == 2 and compare["unchanged"] == 2 and compare["total"] == 3
    detail = checks.digest_findings(compare)[0].detail
    assert detail.startswith("buffer digests differ") and "buffers changed ['attn.k_scale'] (of 2 buffers)" in detail
    both = checks.compare_digests(reference, {**zeroed, "w": Digest(sha256="2")})
    detail = checks.digest_findings(both)[0].detail
    assert detail.startswith("parameter digests differ") and "changed ['w']" in detail and "buffers changed" in detail
    assert checks.compare_digests(reference, dict(reference))["ok"]


def test_canary_tolerance_and_bit_exactness() -> None:
    within = checks.compare_canary(REF, CanaryOutput(REF.prompt, [12095], " Paris", -0.4205), 1e-3)
    assert within["ok"] and not within["bit_exact"]
    flipped = checks.compare_canary(REF, CanaryOutput(REF.prompt, [11], " Lyon", -0.42), 1e-3)
    (finding,) = checks.canary_findings([flipped])
    assert not finding.ok and "expected [12095] ' Paris'" in finding.detail and "got [11] ' Lyon'" in finding.detail
    assert not checks.canary_findings([])[0].ok  # nothing compared is never a pass


def test_ordinary_reference_findings() -> None:
    empty = hashlib.sha256(b"").hexdigest()
    assert checks.failure_message(checks.ordinary_findings(_digests(a="1"), AUDIT_OK)) is None
    message = checks.failure_message(checks.ordinary_findings(_digests(a=empty, b=None), AUDIT_OK))
    assert message is not None and "digested as empty bytes" in message and "['a']" in message
    assert "all unobservable" in str(checks.failure_message(checks.ordinary_findings(_digests(a=None), AUDIT_OK)))
    leaked = _audit(ok=False, pids_gone=False, pids_alive=[7])
    assert "PIDs alive [7]" in str(checks.failure_message(checks.ordinary_findings(_digests(a="1"), leaked)))


def test_audit_rule() -> None:
    assert checks.audit_ok([], [], None, True)
    assert not checks.audit_ok([7], [], None, True)
    assert not checks.audit_ok([], [8000], None, True)
    assert not checks.audit_ok([], [], False, True)
    assert not checks.audit_ok([], [], True, False)
    assert checks.audit_problems({"error": "RuntimeFailure: x"}) == "the audit itself failed (RuntimeFailure: x)"


def _manifest(**over: Any) -> dict[str, Any]:
    manifest = {
        "schema_version": 1,
        "boundary": checks.BOUNDARY,
        "model": "org/m",
        "served_model_name": "org/m",
        "model_revision": "r" * 40,
        "tokenizer_revision": "r" * 40,
        "oracle_sampled_token_logprob": -0.42,
        "artifact_bytes": 123,
        "process_tree": [10, 11],
        "cuda_holders": [11],
        "oracle_token_ids": [12095],
        "oracle_text": " Paris",
    }
    return {**manifest, **over}


EXPECT = checks.InspectExpectations("org/m", "org/m", "r" * 40, "r" * 40, 1e-3, None, REF)


def test_inspect_checks_every_upstream_field_and_the_oracle() -> None:
    assert all(c["ok"] for c in checks.inspect_checks(_manifest(), EXPECT))
    bad = {
        c["name"]
        for c in checks.inspect_checks(
            _manifest(schema_version=True, cuda_holders=[99], oracle_text=" Lyon", artifact_bytes=0), EXPECT
        )
        if not c["ok"]
    }
    assert bad == {
        "schema_version",
        "cuda_holders_subset",
        "oracle_equals_ordinary_text",
        "artifact_bytes_positive_int",
    }


def test_inspect_compares_artifact_bytes_with_the_files_on_disk() -> None:
    """The contract's artifact_bytes is every regular file under the artifact at manifest time: a count of part of
    them (a glob for an rglob: 12 KB recorded of a 2.4 GB artifact, mutant 03 of real vLLM) is refused by name."""
    on_disk = dataclasses.replace(EXPECT, files_bytes=123)
    assert all(c["ok"] for c in checks.inspect_checks(_manifest(artifact_bytes=123), on_disk))
    found = checks.inspect_checks(_manifest(artifact_bytes=12_288), dataclasses.replace(on_disk, files_bytes=2_400_000))
    bad = [c for c in found if not c["ok"]]
    assert [c["name"] for c in bad] == ["artifact_bytes_equals_files_on_disk"]
    assert bad[0]["detail"] == {"manifest": 12_288, "files on disk but manifest.json": 2_400_000}
    # not read (a lane that did not run create in this run): only the positive-integer check
    assert "artifact_bytes_equals_files_on_disk" not in {c["name"] for c in checks.inspect_checks(_manifest(), EXPECT)}


def test_restart_and_overlay_findings() -> None:
    text = '{"a": 1, "b": 2}'
    fine = checks.restart_findings("c1", "c1", AUDIT_OK, 0, text, text)
    assert checks.failure_message(fine) is None
    moved = checks.failure_message(checks.restart_findings("c1", "c2", AUDIT_OK, 0, text, '{"a": 1, "b": 3}'))
    assert moved is not None and "container ID changed" in moved and "inspect output changed" in moved
    assert "fields b (b: 2 -> 3)" in moved
    reordered = checks.failure_message(checks.restart_findings("c1", "c1", AUDIT_OK, 0, text, '{"b": 2, "a": 1}'))
    assert reordered is not None and "same fields and values, different order or spacing" in reordered
    assert '-{"a": 1, "b": 2} | +{"b": 2, "a": 1}' in reordered  # the diff itself
    failed = checks.failure_message(checks.restart_findings("c1", "c1", AUDIT_OK, 2, text, "no such artifact"))
    assert failed is not None and "vllm snapshot inspect exited 2: 'no such artifact'" in failed
    imported = [ImportedModule(pid=None, role="worker", path=None, sha256="h")]
    assert checks.overlay_file_ok("h", imported, 0, "h")
    assert checks.overlay_file_ok("h", [], 0, "h")  # CLI-only code: the fresh interpreter's import verifies it
    assert not checks.overlay_file_ok("h", [], 0, "other")
    api_server = ImportedModule(pid=None, role="api_server", path=None, sha256="old")
    assert not checks.overlay_file_ok("h", [*imported, api_server], 0, "h")
    assert not checks.overlay_file_ok("h", imported, 1, None)
    fresh = FreshImport(exit_code=0, path="/o/vllm/x.py", sha256="h")
    unused = OverlayFileResult(relative="vllm/snapshot/unused_mod.py", host_sha256="h", imported=[], fresh_import=fresh)
    (finding,) = checks.overlay_findings([unused])
    assert finding.ok and "overlaid, not imported by the engine" in finding.detail and "{" not in finding.detail
    elsewhere = OverlayFileResult(**unused)
    elsewhere["imported"] = [ImportedModule(pid=41, role="engine_core", path="/opt/x.py", sha256="old")]
    (finding,) = checks.overlay_findings([elsewhere])
    assert not finding.ok and finding.detail.startswith("overlay not in effect: vllm/snapshot/unused_mod.py")
    assert "{" not in finding.detail and "/opt/x.py" in finding.detail


def test_kv_judgement_tolerance_and_unobservable_figures() -> None:
    assert checks.kv_judgement(1000, 1000, 1010, 0.02, "metrics")["ok"]
    wide = checks.kv_judgement(1000, 1000, 1100, 0.02, "metrics")
    assert not wide["ok"] and "differs from ordinary serving (1,100) by 9.09 %" in wide["problems"][0]
    blind = checks.kv_judgement(None, None, None, 0.02, "unavailable")
    assert not blind["ok"] and not blind["observable"] and len(blind["problems"]) == 3


def test_multi_token_canaries_report_the_first_diverging_position() -> None:
    ref = CanaryOutput("p", [1, 2, 3, 4], "abcd", -0.1, [-0.1, -0.2, -0.3, -0.4])
    same = checks.compare_canary(ref, ref, 1e-3)
    assert same["ok"] and same["bit_exact"] and same["first_divergence"] is None
    swapped = checks.compare_canary(ref, CanaryOutput("p", [1, 9, 3, 4], "a?cd", -0.1, [-0.1, -2, -0.3, -0.4]), 1e-3)
    assert not swapped["ok"] and swapped["first_divergence"] == 1
    drift = checks.compare_canary(ref, CanaryOutput("p", [1, 2, 3, 4], "abcd", -0.1, [-0.1, -0.2, -0.3, -0.5]), 1e-3)
    assert not drift["ok"] and drift["first_divergence"] == 3 and drift["max_logprob_delta"] == pytest.approx(0.1)
    one = checks.compare_canary(REF, REF, 1e-3)
    findings = checks.canary_findings([one, swapped])
    assert [f.check for f in findings] == ["canary", "multi-token canary"]
    assert findings[0].ok and not findings[1].ok and "first diverging position 1" in findings[1].detail


def test_link_remaps_name_the_file_and_the_lane() -> None:
    audit = _audit(
        ok=False,
        link_remaps_equal=False,
        lane="v1-head",
        step="restart",
        link_remaps_ours=["/dev/shm/link_remap.42|2049|7|600|0"],
    )
    text = checks.audit_problems(audit)
    assert text == "link remap left in /dev/shm by lane v1-head (found after restart): /dev/shm/link_remap.42"


def _expecting(tmp_path: Path, expect: str, arm: str, probed: dict[str, Any]) -> FakeLane[FaultState]:
    """A fault lane whose box answers the package probe with ``probed`` (its ``asked`` counts how often)."""
    lane = fault_lane(tmp_path / f"{expect}-{arm}" / "control")
    lane.spec = LaneSpec("v1", "head" if arm == "head" else "base", f"img:{arm}", expect, arm == "head")
    lane.box.log.clear()

    def probe(argv: list[str], timeout: float) -> ExecResult:
        return ExecResult(argv, 0, json.dumps(probed) + "\n", "", 0.0, 0.1)

    lane.box.on_exec = probe
    return lane


def _asked(lane: FakeLane[FaultState]) -> int:
    return sum(1 for entry in lane.box.log if entry[0] == "exec")


def test_expectations_come_from_what_the_image_implements_unless_an_option_names_them(tmp_path: Path) -> None:
    head = {"snapshot_behaviour": "head", "snapshot_behaviour_reason": "engine.py defines SnapshotSession"}
    base = {"snapshot_behaviour": "base", "snapshot_behaviour_reason": "no SnapshotSession"}
    assert package_probe.detected_behaviour(head) == ("head", "engine.py defines SnapshotSession")  # type: ignore[arg-type]
    lane = _expecting(tmp_path, "auto", "head", head)
    assert faults.lane_expectation(lane) == ("head", "detected from the image: engine.py defines SnapshotSession")
    assert faults.lane_expectation(lane) and _asked(lane) == 1  # probed once per lane
    assert faults.lane_expectation(_expecting(tmp_path, "auto", "head", base))[0] == "base"
    overridden = _expecting(tmp_path, "head", "head", base)
    assert faults.lane_expectation(overridden) == ("head", "--vsnap-expect=head") and _asked(overridden) == 0
    with pytest.raises(StepFailed, match="--vsnap-base-expect=auto: cannot tell"):
        faults.lane_expectation(_expecting(tmp_path, "auto", "base", {"snapshot_behaviour": "none"}))


def test_gpu_engaged_after_restore_is_judged_only_with_a_gpu() -> None:
    assert checks.gpu_engaged_findings([21], None, "restore-1") == []
    assert checks.failure_message(checks.gpu_engaged_findings([21], {21, 99}, "restore-1")) is None
    lost = checks.failure_message(checks.gpu_engaged_findings([21], {99}, "restore-1"))
    assert lost == "after restore-1 the CUDA holders [21] are not on the GPU (nvidia-smi lists [99])"
    assert checks.failure_message(checks.gpu_engaged_findings([], set(), "restore-2")) is not None


@pytest.mark.parametrize(
    ("files", "behaviour"),
    [
        ({"engine.py": "class SnapshotSession:\n    pass\n", "server.py": "x = 'error.json'\n"}, "head"),
        ({"server.py": "x = 1\n"}, "base"),
        ({}, "none"),
    ],
)
def test_the_package_probe_tells_the_snapshot_behaviour_from_the_installed_package(
    tmp_path: Path, files: dict[str, str], behaviour: str
) -> None:
    import subprocess
    import sys

    package = tmp_path / "vllm"
    package.mkdir()
    (package / "__init__.py").write_text("")
    if files:
        (package / "snapshot").mkdir()
        for name, text in files.items():
            (package / "snapshot" / name).write_text(text)
    done = subprocess.run(
        [sys.executable, "-c", package_probe.SCRIPT],
        env={"PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    info = json.loads(done.stdout.strip().splitlines()[-1])
    assert info["snapshot_behaviour"] == behaviour and info["snapshot_behaviour_reason"]


def test_a_captured_id_taken_by_another_host_process_is_told_apart_from_an_engine_failure() -> None:
    busy = "INFO CRIU restore.log (tail):\n(00.1) Error (criu/cr-restore.c:123): Unable to create a thread: -17\n"
    assert (
        vllm_words.captured_id_collision(busy, "")
        == "(00.1) Error (criu/cr-restore.c:123): Unable to create a thread: -17"
    )
    truncated = "INFO CRIU restore.log (tail):\nRead 10 bytes while 20 expected from core-1.img\nRestoring FAILED.\n"
    assert vllm_words.captured_id_collision(truncated, "") is None
    assert vllm_words.captured_id_collision("Unable to create a thread: -17", "") is None  # not CRIU's log tail


def test_what_the_checks_record_is_the_evidence_model() -> None:
    """Each recorded judgement validates against its model type (closed types: no field the model lacks)."""
    import jsonschema

    within = checks.compare_canary(REF, CanaryOutput(REF.prompt, [12095], " Paris", -0.4205), 1e-3)
    digests = checks.compare_digests(_digests(a="1", b="2"), _digests(a="1", b="3", c="4"))
    recorded = [
        (model.CanaryCompare, within),
        (model.DigestCompare, digests),
        (model.KvJudgement, checks.kv_judgement(4096, 4096, 4100, 0.02, "metrics")),
        *((model.InspectCheck, c) for c in checks.inspect_checks(_manifest(), EXPECT)),
        (model.InspectChange, checks.manifest_changes({"a": 1}, {"a": 2})["a"]),
    ]
    for tp, value in recorded:
        jsonschema.validate(json.loads(json.dumps(value)), schema.type_schema(tp))


def test_a_runner_the_cpu_build_lacks_is_not_applicable_only_in_cpu_smoke_mode() -> None:
    words = "ValueError: Model Runner V2 requires Triton"
    with pytest.raises(pytest.skip.Exception, match="^not applicable: vLLM's CPU build has no such runner: Value"):
        vllm_words.skip_if_limitation(words, cpu_smoke=True)
    # on a GPU image the same words are a limitation of that image: a skip that keeps the run from passing
    with pytest.raises(pytest.skip.Exception, match="^environment limitation: ValueError: Model Runner V2"):
        vllm_words.skip_if_limitation(words, cpu_smoke=False)
    vllm_words.skip_if_limitation("RuntimeError: CUDA out of memory", cpu_smoke=True)  # a defect: the step fails on


def test_a_feature_vllm_refuses_is_not_applicable_only_in_that_variants_lane() -> None:
    words = "ValueError: snapshot create does not support speculative decoding"
    spec = Variant("spec", ("--speculative-config", '{"method": "ngram"}'))
    expected = '^not applicable: vLLM refuses variant spec \\(--speculative-config \'{"method": "ngram"}\'\\): Value'
    with pytest.raises(pytest.skip.Exception, match=expected):
        vllm_words.skip_if_limitation(words, cpu_smoke=False, variant=spec)
    vllm_words.skip_if_limitation(words, cpu_smoke=False)  # the plain configuration refused: the step fails on
    vllm_words.skip_if_limitation("RuntimeError: CUDA out of memory", cpu_smoke=False, variant=spec)  # a defect: fails


def test_cpu_smoke_lanes_find_the_smoke_platform_after_the_probe(tmp_path: Path) -> None:
    parsed = options.parse_standalone(
        ["--vsnap-image=i:1", "--vsnap-model=m/m", "--vsnap-revision=" + "a" * 40, "--vsnap-gpus=none"], env={}
    )
    config = build_config(parsed, tmp_path)
    lane = config.lanes[0]
    assert lane_environment(config, lane)["PYTHONPATH"] == "/vsnap/probe"
    config = build_config({**parsed, "vsnap_cpu_smoke": True}, tmp_path)
    assert lane_environment(config, lane)["PYTHONPATH"] == "/vsnap/probe:/vsnap/smoke"


def test_a_repeated_soak_round_that_differs_fails_the_shapes() -> None:
    bad = checks.compare_canary(REF, CanaryOutput(REF.prompt, [11], " Lyon", -0.42), 1e-3)
    (finding,) = checks.shape_findings([], [bad], [])
    assert not finding.ok and "repeated request (a soak round)" in finding.detail and "Lyon" in finding.detail


def test_shape_options_parse_and_refuse() -> None:
    assert options.parse_shapes("seeded,long") == ("seeded", "long")
    assert options.parse_shapes("none") == ()
    with pytest.raises(Exception, match="unknown request shape"):
        options.parse_shapes("seeded,batched")


def test_vllms_command_error_is_quoted_with_the_argument_list_cut_to_the_program() -> None:
    said = (
        "vllm.snapshot.runtime.SnapshotRestoreError: Command '['env', 'PATH=/opt/x:/bin', '/opt/vsnap-criu/sbin/criu', "
        "'restore', '-L', '/opt/vsnap-criu/lib/criu', '--pidfile', '/a/restored.pid']' returned non-zero exit status 1."
    )
    assert vllm_words.short_command(said) == (
        "vllm.snapshot.runtime.SnapshotRestoreError: Command '[… criu restore …]' returned non-zero exit status 1."
    )
    other = "CalledProcessError: Command '['ls', '-l']' returned non-zero exit status 2."
    assert vllm_words.short_command(other) == other  # not a snapshot program: vLLM's words as they were


def test_criu_s_words_are_the_same_whether_vllm_logged_them_or_the_log_was_read() -> None:
    logged = (
        "(MainProcess pid=12247) ERROR 12-02 02:25:18 [runtime.py:546] CRIU restore.log (tail):\n"
        "(MainProcess pid=12247) ERROR 12-02 02:25:18 [runtime.py:546]   8269: Error (criu/files-reg.c:2353): Can't "
        "open file dev/shm/psm_ac8c0f76 on restore: No such file or directory\n"
    )
    read = "8269: Error (criu/files-reg.c:2353): Can't open file dev/shm/psm_ac8c0f76 on restore: No such file or "
    read += "directory"
    assert vllm_words.criu_reason(logged) == vllm_words.criu_reason(read) == [read]


def test_a_link_remap_is_the_leak_of_the_lane_whose_dump_made_it_whoever_looks_first(tmp_path: Path) -> None:
    """CRIU names a link remap by its dump's file id (``link_remap.<id>``), not by a PID: the artifact whose images
    list it is the dump that made it. With a shared /dev/shm, lane v2-head's audit sees v1-head's remap first: it
    is v1-head's, made by its create, and v2-head's own new entry stays v2-head's."""
    from vsnap_qual.box import ShmEntry
    from vsnap_qual.lane import audit

    made = ShmEntry("link_remap.5", "2049", "7", "600", 0)
    unmade = ShmEntry("link_remap.9", "2049", "8", "600", 0)
    box = SimpleNamespace(shm=lambda: [made, unmade])
    v1 = audit.AuditScope(lane="v1-head", grace=0.0, gpus=False, claims=tmp_path)
    v2 = audit.AuditScope(lane="v2-head", grace=0.0, gpus=False, claims=tmp_path)
    audit.claim_made_remaps(v1, ["/dev/shm/link_remap.5"], "create")
    listing = audit.link_remaps([made, unmade])
    seen_by_v2 = audit.attribute_link_remaps(box, v2, listing)
    assert seen_by_v2["link_remaps_others"] == {"v1-head": [made.line]}
    assert seen_by_v2["link_remaps_ours"] == [unmade.line]  # no artifact names it: first seen, by v2-head
    assert seen_by_v2["link_remaps_made_by"] == {made.line: "v1-head create"}
    seen_by_v1 = audit.attribute_link_remaps(box, v1, listing)
    assert seen_by_v1["link_remaps_ours"] == [made.line]
    assert seen_by_v1["link_remaps_others"] == {"v2-head": [unmade.line]}
    text = checks.audit_problems(_audit(**{"ok": False, "lane": "v1-head", "step": "restart", **seen_by_v1}))
    assert text == (
        "link remap left in /dev/shm by lane v1-head (found after restart): "
        "/dev/shm/link_remap.5 (made by the dump of v1-head's create)"
    )


def test_how_a_process_that_is_not_ours_ended_comes_from_the_kernels_process_events() -> None:
    """A restored server is nobody's child here: its death signal or exit code comes from the process-event
    connector. Grandchildren (orphans, as a restored tree is) are seen as well as children."""
    from vsnap_qual.lane.exits import ExitWatch, describe

    if os.geteuid() != 0:
        pytest.skip("the kernel's process events need CAP_NET_ADMIN (CI and dev machines are root)")
    killed = subprocess.Popen(["sh", "-c", "sleep 30 & echo $!; wait"], stdout=subprocess.PIPE, text=True)
    assert killed.stdout is not None
    orphan = int(killed.stdout.readline())
    exiting = subprocess.Popen(["sh", "-c", "sleep 0.3; exit 3"])
    with ExitWatch([orphan, exiting.pid]) as watch:
        time.sleep(0.1)
        os.kill(orphan, signal.SIGKILL)
        exiting.wait()
        killed.wait()
        watch.wait_for([orphan, exiting.pid])
    assert watch.ended([orphan, exiting.pid]) == f"{orphan} killed by SIGKILL; {exiting.pid} exit code 3"
    assert describe(0x86) == "killed by SIGABRT, core dumped"
    assert ExitWatch([1], why_not="the box has a PID namespace of its own").ended([1]) == (
        "exit status not observed: the box has a PID namespace of its own"
    )
    # a watched PID whose exit the watch never read: said with what holds that PID now (here: the running test)
    with ExitWatch([os.getpid()]) as quiet:
        other = subprocess.Popen(["true"])
        other.wait()
        quiet.wait_for([other.pid], 0.5)
    said = quiet.ended([os.getpid()])
    assert said.startswith("exit status not observed (the watch read ") and "other exit events" in said, said
    own = Path("/proc/self/cmdline").read_bytes().rstrip(b"\0").replace(b"\0", b" ").decode().strip()[:120]
    assert f"{os.getpid()}: held by a process in state R started at tick" in said and said.endswith(own), said


def test_lora_names_read_every_form_of_lora_modules() -> None:
    argv = ["m", "--lora-modules", "a=/x", '{"name": "b", "path": "/y"}', "--max-loras", "2", "--lora-modules=c=/z"]
    assert adapters.lora_modules(argv) == {"a": "/x", "b": "/y", "c": "/z"}
    assert adapters.lora_modules(["m", "--enable-lora"]) == {}
    with pytest.raises(ValueError, match="a JSON adapter needs a 'name'"):
        adapters.lora_modules(["--lora-modules", '{"path": "/y"}'])
