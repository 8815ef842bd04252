"""The privileges modes: what each grants, from the host's capability bounding set (pure, no Docker)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from vsnap_qual import runtimes
from vsnap_qual.box import BoxSpec
from vsnap_qual.run import preflight
from vsnap_qual.run.preflight_result import PreflightError
from vsnap_qual.runtimes import privileges
from vsnap_qual.runtimes.docker import container_kwargs

# This project's machines: every capability but CAP_SYS_RESOURCE (bit 24).
OUR_HOST = "Name:\tpython3\nCapBnd:\t000001fffeffffff\nCapAmb:\t0000000000000000\n"


def test_bounding_set_parses_and_names_the_missing_capability() -> None:
    mask = privileges.bounding_set(OUR_HOST)
    assert mask == 0x1FFFEFFFFFF
    assert privileges.missing_capabilities(mask) == ("SYS_RESOURCE",)
    assert privileges.missing_capabilities((1 << 41) - 1) == ()
    assert privileges.bounding_set("Name: x\n") is None and privileges.missing_capabilities(None) == ()


def test_all_caps_grants_all_but_the_missing_ones_unconfined_with_host_namespaces() -> None:
    settings = privileges.container_settings("all-caps", ("SYS_RESOURCE",))
    assert settings.cap_add == ("ALL",) and settings.cap_drop == ("SYS_RESOURCE",)
    assert set(settings.security_opt) == {"seccomp=unconfined", "apparmor=unconfined"} and settings.unmask_proc
    assert settings.host_pid and settings.host_ipc and settings.host_network and not settings.privileged
    own = privileges.container_settings("all-caps-own-pid", ("SYS_RESOURCE",))
    assert own.own_pid_namespace and own.host_network and own.cap_drop == ("SYS_RESOURCE",)


def test_privileged_is_refused_where_the_bounding_set_is_short_and_all_caps_is_not() -> None:
    allowed, why = privileges.host_allows("privileged", ("SYS_RESOURCE",))
    assert not allowed and "SYS_RESOURCE" in why
    assert privileges.host_allows("privileged", ())[0]
    assert privileges.host_allows("all-caps", ("SYS_RESOURCE",)) == (
        True,
        "capabilities: all but SYS_RESOURCE; seccomp, AppArmor and /proc paths unconfined",
    )
    assert privileges.criu_capable("all-caps") and not privileges.criu_capable("host-namespaces")


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("privileged", {"privileged": True, "pid_mode": "host", "ipc_mode": "host", "network_mode": "host"}),
        ("host-namespaces", {"pid_mode": "host", "ipc_mode": "host", "network_mode": "host"}),
        ("isolated", {"init": True, "ports": {"8000/tcp": ("127.0.0.1", 8000)}}),
    ],
)
def test_docker_arguments_per_mode(mode: str, expected: dict[str, object]) -> None:
    spec = BoxSpec(name="n", engine="i", image_id="sha256:x", labels={}, environment={}, privileges=mode, ports=(8000,))
    assert container_kwargs(spec) == expected


def test_all_caps_docker_arguments_drop_what_this_host_lacks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(privileges, "local_missing_capabilities", lambda: ("SYS_RESOURCE",))
    spec = BoxSpec(name="n", engine="i", image_id="sha256:x", labels={}, environment={}, privileges="all-caps-own-pid")
    kwargs = container_kwargs(spec)
    assert kwargs["cap_add"] == ["ALL"] and kwargs["cap_drop"] == ["SYS_RESOURCE"]
    assert "pid_mode" not in kwargs and kwargs["init"] is True and kwargs["network_mode"] == "host"
    assert "seccomp=unconfined" in cast(list[str], kwargs["security_opt"])


def test_io_uring_must_be_disabled_for_everyone(tmp_path: Path) -> None:
    assert preflight.io_uring_problem("2\n") is None and preflight.io_uring_problem(None) is None
    for value in ("0", "1"):
        assert "needs 2" in str(preflight.io_uring_problem(value))
    sysctl = tmp_path / "io_uring_disabled"
    sysctl.write_text("0\n")
    with pytest.raises(PreflightError, match="kernel.io_uring_disabled is 0.*sysctl -w"):
        preflight.check_io_uring(sysctl)
    sysctl.write_text("2\n")
    preflight.check_io_uring(sysctl)


def test_preflight_refuses_an_io_uring_host_before_touching_docker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sysctl = tmp_path / "io_uring_disabled"
    sysctl.write_text("0\n")
    monkeypatch.setattr(preflight, "IO_URING_SYSCTL", sysctl)
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:1")  # nothing may reach Docker before the refusal
    config = SimpleNamespace(report_dir=tmp_path / "report")
    with pytest.raises(PreflightError, match="^host: kernel.io_uring_disabled is 0"):
        preflight.run_preflight(config, runtimes.create("docker"))  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["privileged", "all-caps", "all-caps-own-pid", "host-namespaces"])
def test_a_fresh_box_has_an_ipc_namespace_and_a_dev_shm_of_its_own_in_every_mode(mode: str) -> None:
    """A fresh box stands for a new pod or node: whatever the mode shares with the host, its /dev/shm is empty and
    its own (large enough for vLLM's engine core), so an artifact that leans on segments outside it fails there."""
    spec = BoxSpec(name="n", engine="i", image_id="sha256:x", labels={}, environment={}, privileges=mode,
                   private_ipc=True)  # fmt: skip
    kwargs = container_kwargs(spec)
    assert kwargs["ipc_mode"] == "private" and kwargs["shm_size"] == "8g"
    shared = container_kwargs(BoxSpec(name="n", engine="i", image_id="sha256:x", labels={}, environment={},
                                      privileges=mode))  # fmt: skip
    assert shared.get("ipc_mode") in ("host", None) and "shm_size" not in shared
