"""--vsnap-expect / --vsnap-base-expect default to auto: `make qualify`'s two reference flavours (head implements
the head behaviour, base the released one) must be told apart from their installed snapshot packages, with the
same probe the lanes run (package_probe.SCRIPT, in a one-shot container of the real image)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.integration.suite_helpers import REFERENCE_BASE, REFERENCE_HEAD
from vsnap_qual import box as vbox
from vsnap_qual import options
from vsnap_qual.run import package_probe
from vsnap_qual.run.configure import build_config
from vsnap_qual.runtimes import docker as docker_runtime

if TYPE_CHECKING:
    from docker.client import DockerClient


@pytest.mark.parametrize(("image", "behaviour"), [(REFERENCE_HEAD, "head"), (REFERENCE_BASE, "base")])
def test_auto_chooses_each_reference_flavours_behaviour(
    docker_client: DockerClient, reference_images: None, image: str, behaviour: str
) -> None:
    info = docker_runtime.probe_package(docker_client, docker_client.images.get(image).id, "vsnap-test-expect", 120)
    chosen, reason = package_probe.detected_behaviour(info)
    assert chosen == behaviour, reason
    assert "SnapshotSession" in reason


def test_make_qualifys_arms_run_with_auto_expectations(tmp_path: Path) -> None:
    """`make qualify` passes no expectation: both arms' lanes carry auto (chosen per lane from the image)."""
    argv = [*_profile(), f"--vsnap-base-image={REFERENCE_BASE}"]
    config = build_config(options.parse_standalone(argv, env={}), tmp_path)
    assert {lane.arm: lane.expect for lane in config.lanes} == {"head": "auto", "base": "auto"}


def _profile() -> list[str]:
    from tests.integration.suite_helpers import ROOT

    path = ROOT / "suites" / "profiles" / "reference.args"
    lines = [ln.strip() for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert not any(ln.startswith(("--vsnap-expect", "--vsnap-base-expect")) for ln in lines)
    return lines


def test_nothing_is_left_of_the_probes(docker_client: DockerClient) -> None:
    left = docker_client.api.containers(all=True, filters={"label": f"{vbox.LABEL_SESSION}=vsnap-test-expect"})
    assert left == []
