"""Bad input gets one clear message naming the option and the fix, exit code 4, and starts no container."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from vsnap_qual import box as runtime
from vsnap_qual.runtimes.docker import nvidia_runtime_present

if TYPE_CHECKING:
    from docker.client import DockerClient

    from tests.conftest import VsnapRefused

REV = "0" * 40
#: a bad input: (id, extra args, extra env, expected message fragment)
BadInput = tuple[str, list[str], dict[str, str], str]
SUITE = """
import pytest

@pytest.mark.vsnap_step("ordinary")
def test_uses_a_lane(vsnap_step):
    pass
"""


@pytest.fixture
def bad_inputs(tmp_path: Path) -> list[BadInput]:
    """(id, extra args, extra env, expected message fragment) for each bad input."""
    malformed = tmp_path / "prompts.json"
    malformed.write_text('["ok", ')
    not_vllm = tmp_path / "not-vllm"
    not_vllm.mkdir()
    unchanged = tmp_path / "unchanged"
    (unchanged / "vllm").mkdir(parents=True)
    (unchanged / "vllm" / "a.py").write_text("a = 1\n")
    for args in (["init", "-q"], ["add", "."], ["-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "x"]):
        subprocess.run(["git", "-C", str(unchanged), *args], check=True, capture_output=True)
    cache = tmp_path / "hf"
    snap = cache / "hub" / "models--org--m" / "snapshots" / REV
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    (snap / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "model-00001.safetensors"}}))
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    return [
        ("revision", ["--vsnap-revision=main"], {}, "--vsnap-revision: 'main' is not an immutable revision"),
        ("runner", ["--vsnap-runners=v3"], {}, "--vsnap-runners: unknown runner v3"),
        ("gpus", ["--vsnap-gpus=gpu0"], {}, "--vsnap-gpus: 'gpu0'"),
        ("utilization", ["--vsnap-gpu-memory-utilization=2"], {}, "--vsnap-gpu-memory-utilization: 2.0 must be"),
        ("prompts", [f"--vsnap-prompts={malformed}"], {}, "--vsnap-prompts: prompts file"),
        ("engine-args", ["--vsnap-engine-args=--port 9"], {}, "--vsnap-engine-args: --port is set by the harness"),
        ("timeouts", ["--vsnap-timeouts=serve=-1"], {}, "--vsnap-timeouts:"),
        ("env-dtype", [], {"VSNAP_DTYPE": "int8"}, "(value from environment VSNAP_DTYPE)"),
        ("report-dir", [f"--vsnap-report-dir={blocker}/reports"], {}, "--vsnap-report-dir:"),
        ("model-cache", [f"--vsnap-model-cache={cache}"], {}, "model-00001.safetensors (listed by the index) missing"),
        ("overlay-not-vllm", [f"--vsnap-overlay={not_vllm}"], {}, "no vllm/ package directory"),
        ("overlay-unchanged", [f"--vsnap-overlay={unchanged}"], {}, "no vllm/**.py file changed"),
        ("docker-unreachable", [], {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}, "Docker engine unreachable"),
        ("gpus-without-runtime", ["--vsnap-gpus=all"], {}, "--vsnap-gpus=all: Docker has no NVIDIA runtime"),
        ("pull", ["--vsnap-pull=sometimes"], {}, "--vsnap-pull: 'sometimes': use 'auto'"),
        (
            "pull-never",
            ["--vsnap-image=vsnap-no-such-image:never", "--vsnap-pull=never"],
            {},
            "--vsnap-image: image 'vsnap-no-such-image:never' is not present locally and --vsnap-pull=never forbids "
            "pulling it: `docker pull vsnap-no-such-image:never` first",
        ),
        (
            "image-missing",
            ["--vsnap-image=vsnap-no-such-image:never"],
            {},
            "--vsnap-image: image 'vsnap-no-such-image:never' is not present",
        ),
    ]


def _labelled(client: DockerClient) -> set[str]:
    """Labelled containers whose owning pytest process has exited: the bad-input runs have, by the time this is
    read; other sessions running tests on this host in parallel (their owners alive) are not counted."""
    return {
        entry["Id"]
        for entry in client.api.containers(all=True, filters={"label": runtime.LABEL_SESSION})
        if not runtime.owner_alive((entry.get("Labels") or {}).get(runtime.LABEL_OWNER, ""))
    }


def test_each_bad_input_is_refused_before_any_container(
    pytester: pytest.Pytester,
    bad_inputs: list[BadInput],
    docker_client: DockerClient,
    tmp_path: Path,
    vsnap_refused: VsnapRefused,
) -> None:
    if nvidia_runtime_present(docker_client):
        bad_inputs = [b for b in bad_inputs if b[0] != "gpus-without-runtime"]
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        busy_port = busy.getsockname()[1]
        bad_inputs.append(("port-busy", [f"--vsnap-port-base={busy_port}"], {}, f"port {busy_port} is in use"))
        pytester.makepyfile(test_suite=SUITE)
        before = _labelled(docker_client)
        assert len(bad_inputs) >= 12
        for name, args, env, fragment in bad_inputs:
            vsnap_refused(name, ["--vsnap-image=busybox-not-needed:x", *args], env, fragment, revision=REV)
        assert _labelled(docker_client) == before, "a bad input started a labelled container"


def test_a_report_dir_holding_another_runs_evidence_is_refused_and_left_unchanged(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    """Runs never merge: evidence is only appended to, so a second run into a used directory would fold two
    runs into one verdict. The refusal comes before preflight (no Docker needed) and touches nothing there."""
    used = tmp_path / "used"
    used.mkdir()
    evidence = used / "evidence.jsonl"
    evidence.write_text(json.dumps({"kind": "session", "time": "t", "run_id": "20260101-000000-aaaa"}) + "\n")
    before = sorted(p.name for p in used.iterdir()), evidence.read_bytes()
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest_subprocess(
        "-p",
        "vsnap_qual",
        "--vsnap-image=busybox-not-needed:x",
        "--vsnap-model=org/m",
        f"--vsnap-revision={REV}",
        f"--vsnap-report-dir={used}",
        "--collect-only",
    )
    text = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, text[-2000:]
    assert "--vsnap-report-dir:" in text and "run 20260101-000000-aaaa" in text and "rm -rf" in text, text[-2000:]
    assert "Traceback" not in text
    assert (sorted(p.name for p in used.iterdir()), evidence.read_bytes()) == before


def test_a_host_python_without_vllm_is_refused_in_words(pytester: pytest.Pytester, tmp_path: Path) -> None:
    """``--vsnap-python`` naming a Python without vllm: said as such (with the Python's version), not as the
    package probe's raw JSON."""
    venv = tmp_path / "bare"
    subprocess.run(["python3", "-m", "venv", "--without-pip", str(venv)], check=True)
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest_subprocess(
        "-p", "vsnap_qual", "--vsnap-runtime=host", f"--vsnap-python={venv}/bin/python", "--vsnap-model=org/m",
        f"--vsnap-revision={REV}", f"--vsnap-report-dir={tmp_path / 'r'}", f"--vsnap-host-root={tmp_path / 'lanes'}",
    )  # fmt: skip
    text = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, text[-2000:]
    assert f"--vsnap-python: vllm is not installed for {venv}/bin/python (Python 3." in text, text[-2000:]
    assert '"package_dir"' not in text and "Traceback" not in text
