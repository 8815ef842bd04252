"""Issue 16 item 7 through the real plugin: each bad input gets exit 4 and one message naming the option and the
fix, and no container is started (Docker is real; the image is never needed: each is refused first)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from vsnap_qual import box as vbox

if TYPE_CHECKING:
    from docker.client import DockerClient

    from tests.conftest import VsnapRefused

REV = "0" * 40
SUITE = """
import pytest

@pytest.mark.vsnap_step("ordinary")
def test_uses_a_lane(vsnap_step):
    pass
"""


def _orphans(client: DockerClient) -> set[str]:
    return {
        entry["Id"]
        for entry in client.api.containers(all=True, filters={"label": vbox.LABEL_SESSION})
        if not vbox.owner_alive((entry.get("Labels") or {}).get(vbox.LABEL_OWNER, ""))
    }


def _cases(tmp_path: Path) -> list[tuple[str, list[str], dict[str, str], str, str]]:
    plain = tmp_path / "vllm-copy"  # a copy of vLLM, not a git clone
    (plain / "vllm").mkdir(parents=True)
    (plain / "vllm" / "a.py").write_text("a = 1\n")
    obj = tmp_path / "prompts.json"
    obj.write_text('{"prompts": ["a"]}')
    return [
        ("overlay-not-git", [f"--vsnap-overlay={plain}"], {}, "", f"--vsnap-overlay: {plain} is not a git checkout"),
        ("prompts-object", [f"--vsnap-prompts={obj}"], {}, "", "holds an object, not a JSON list"),
        (
            "base-is-image",
            ["--vsnap-base-image=busybox-not-needed:x"],
            {},
            "",
            "--vsnap-base-image is the image under test (busybox-not-needed:x)",
        ),
        ("misspelt-env", [], {"VSNAP_MODLE": "org/m"}, "", "VSNAP_MODLE is not a vsnap-qual option: did you mean"),
        (
            "engine-args-revision",
            ["--vsnap-engine-args=--revision main"],
            {},
            "",
            "--vsnap-engine-args: --revision is set by the harness on every engine command (set it with "
            "--vsnap-revision)",
        ),
        (
            "empty-env-over-ini",
            [],
            {"VSNAP_IMAGE": ""},
            "[pytest]\nvsnap_image = busybox-not-needed:x\n",
            "VSNAP_IMAGE is set but empty in the environment, and an empty value overrides ini vsnap_image",
        ),
    ]


def test_each_new_bad_input_is_refused_before_any_container(
    pytester: pytest.Pytester, docker_client: DockerClient, tmp_path: Path, vsnap_refused: VsnapRefused
) -> None:
    pytester.makepyfile(test_suite=SUITE)
    before = _orphans(docker_client)
    for name, args, env, ini, fragment in _cases(tmp_path):
        image = [] if ini else ["--vsnap-image=busybox-not-needed:x"]
        (pytester.path / "pytest.ini").write_text(ini or "[pytest]\n")
        vsnap_refused(name, [*image, *args], env, fragment, revision=REV)
    assert _orphans(docker_client) == before, "a bad input started a container"
