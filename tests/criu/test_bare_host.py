"""The kit unpacked on this machine itself, no container (as on the GPU host): dump and restore through the wrapper
where files are not on overlayfs. Inside Docker the restored process's mappings come through overlayfs backing
files; on a bare host they are the very files criu's own process runs, which is where a wrong loader choice breaks
the restore (PR_SET_MM_MAP: EBUSY). Needs root, as criu does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.criu.kitsupport import HERE

pytestmark = pytest.mark.docker  # the prefix comes out of the kit image


@pytest.fixture(scope="module")
def bare_kit(kit_image: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    if os.geteuid() != 0:
        pytest.skip("criu needs root on the host (CI runs as root)")
    dest = tmp_path_factory.mktemp("bare-kit")
    name = f"vsnap-criutest-export-{os.getpid()}"
    subprocess.run(["docker", "create", "--name", name, kit_image], check=True, capture_output=True, timeout=60)
    try:
        subprocess.run(["docker", "cp", f"{name}:/opt/vsnap-criu", str(dest)], check=True, timeout=120)
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60)
    return dest / "vsnap-criu"


def test_bare_host_round_trip_keeps_pid_and_state(bare_kit: Path) -> None:
    env = {**os.environ, "PATH": f"{bare_kit}/sbin:{bare_kit}/bin:{os.environ['PATH']}"}
    plugins = f"{bare_kit}/lib/criu"
    p = subprocess.run(
        [sys.executable, str(HERE / "criu_driver.py"), "--dump-plugin-dir", plugins, "--restore-plugin-dir", plugins],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout.strip().splitlines()[-1])
    assert res["dump_rc"] == 0, res
    assert res["gone_after_dump"] and res["answer_after_dump"] is None, res
    assert res["restore_rc"] == 0, res
    token, pid, counter = res["before"].split()
    assert int(pid) == res["target_pid"]
    assert res["after"] == f"{token} {pid} {int(counter) + 1}", res
