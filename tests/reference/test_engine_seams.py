"""The reference engine's CLI errors and vLLM seams: offline model resolution, create failures that leave no
artifact, general plugins in every engine process (and `VLLM_PLUGINS` filtering), `/collective_rpc` shapes."""

from __future__ import annotations

import urllib.error
from pathlib import Path

import pytest

from tests.reference.refsupport import (
    ARTIFACT,
    ENGINE_ARGS,
    MODEL,
    Lane,
    LaneFactory,
    free_port,
    http_json,
    wait_health,
)

MISSING_REVISION = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def seams_lane(lane_factory: LaneFactory, tmp_path_factory: pytest.TempPathFactory) -> Lane:
    lane: Lane = lane_factory("head", control_dir=tmp_path_factory.mktemp("seams") / "control")
    return lane


@pytest.mark.docker
def test_missing_model_revision_fails_fast(seams_lane: Lane) -> None:
    served = seams_lane.exec(["vllm", "serve", MODEL, "--revision", MISSING_REVISION, "--port", str(free_port())], 60)
    assert served.code == 1
    assert "LocalEntryNotFoundError: Cannot find an appropriate cached snapshot folder" in served.stderr
    created = seams_lane.exec(
        [
            "vllm",
            "snapshot",
            "create",
            MODEL,
            "--revision",
            MISSING_REVISION,
            "--snapshot-dir",
            "/vsnap/work/x",
        ],
        120,
    )
    assert created.code == 1
    assert "SnapshotCreateError: snapshot child exited before ready:" in created.stderr
    assert "LocalEntryNotFoundError" in created.stderr  # the whole child.log is in the exception text
    assert seams_lane.exec(["test", "-e", "/vsnap/work/x"]).code == 1


@pytest.mark.docker
def test_create_refuses_an_existing_target_and_inspect_a_missing_one(seams_lane: Lane) -> None:
    assert seams_lane.sh("mkdir -p -m 0700 /vsnap/work/exists").code == 0
    created = seams_lane.exec(["vllm", "snapshot", "create", *ENGINE_ARGS, "--snapshot-dir", "/vsnap/work/exists"], 60)
    assert created.code == 1
    assert created.stderr.rstrip().endswith("snapshot target already exists: /vsnap/work/exists")
    inspected = seams_lane.exec(["vllm", "snapshot", "inspect", "/vsnap/work/nonexistent"], 60)
    assert inspected.code == 1
    assert inspected.stderr.rstrip().endswith(
        "SnapshotSecurityError: snapshot path does not exist: /vsnap/work/nonexistent"
    )
    assert (
        seams_lane.sh("chmod 0755 /vsnap/work/exists && vllm snapshot inspect /vsnap/work/exists")
        .stderr.rstrip()
        .endswith("snapshot directory must have mode 0700: /vsnap/work/exists")
    )


@pytest.mark.docker
def test_general_plugins_load_once_in_every_engine_process(seams_lane: Lane) -> None:
    control = Path(
        next(m["Source"] for m in seams_lane.container.attrs["Mounts"] if m["Destination"] == "/vsnap/control")
    )
    loaded = control / "refplug"
    for path in loaded.glob("loaded-*"):  # earlier tests of this module started engines too
        path.unlink()
    port = free_port()
    seams_lane.background(
        f"echo $$ > /tmp/seams.pid; exec vllm serve {' '.join(ENGINE_ARGS)} --host 127.0.0.1 --port {port} "
        "> /tmp/seams.log 2>&1"
    )
    wait_health(port)
    records = {path.name: path.read_text() for path in loaded.glob("loaded-*")}
    roles = sorted(
        "vllm.v1.engine.core" if "vllm.v1.engine.core" in cmdline else "api_server" for cmdline in records.values()
    )
    assert roles == ["api_server", "vllm.v1.engine.core"], records

    # /collective_rpc error shapes (dev mode).
    with pytest.raises(urllib.error.HTTPError) as missing:
        http_json(port, "/collective_rpc", {})
    assert missing.value.code == 400
    with pytest.raises(urllib.error.HTTPError) as unknown:
        http_json(port, "/collective_rpc", {"method": "no_such_method"})
    assert unknown.value.code == 500
    seams_lane.sh("kill -TERM $(cat /tmp/seams.pid)")

    # The snapshot child is an engine process too; VLLM_PLUGINS filters by entry-point name.
    for path in loaded.glob("loaded-*"):
        path.unlink()
    assert seams_lane.exec(["vllm", "snapshot", "create", *ENGINE_ARGS, "--snapshot-dir", ARTIFACT], 300).code == 0
    cmdlines = [path.read_text() for path in loaded.glob("loaded-*")]
    assert sum("vllm.snapshot.server" in cmdline for cmdline in cmdlines) == 1
    assert sum("vllm.v1.engine.core" in cmdline for cmdline in cmdlines) == 1
    for path in loaded.glob("loaded-*"):
        path.unlink()
    port = free_port()
    seams_lane.background(
        f"echo $$ > /tmp/seams.pid; VLLM_PLUGINS=someone_else exec vllm serve {MODEL} --revision "
        f"{ENGINE_ARGS[2]} --host 127.0.0.1 --port {port} > /tmp/seams2.log 2>&1"
    )
    wait_health(port)
    assert list(loaded.glob("loaded-*")) == []
    seams_lane.sh("kill -TERM $(cat /tmp/seams.pid)")
