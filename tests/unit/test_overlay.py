from __future__ import annotations

import subprocess

import pytest

from vsnap_qual import overlay


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


@pytest.fixture
def checkout(tmp_path):
    repo = tmp_path / "vllm-src"
    (repo / "vllm" / "snapshot").mkdir(parents=True)
    (repo / "vllm" / "__init__.py").write_text("")
    (repo / "vllm" / "snapshot" / "server.py").write_text("x = 1\n")
    (repo / "README.md").write_text("r\n")
    _git(repo, "init", "-q")
    _git(repo, "-c", "user.email=a@b", "-c", "user.name=a", "add", ".")
    _git(repo, "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "base")
    return repo


def test_changed_and_untracked_python_files_become_the_overlay(checkout):
    (checkout / "vllm" / "snapshot" / "server.py").write_text("x = 2\n")
    (checkout / "vllm" / "snapshot" / "engine.py").write_text("y = 1\n")
    (checkout / "README.md").write_text("changed but not vllm/**.py\n")
    files = overlay.collect(checkout, "HEAD")
    assert [f.relative for f in files] == ["vllm/snapshot/engine.py", "vllm/snapshot/server.py"]
    server = files[1]
    assert server.module == "vllm.snapshot.server"
    assert (
        server.image_path("/usr/lib/python3/dist-packages/vllm")
        == "/usr/lib/python3/dist-packages/vllm/snapshot/server.py"
    )
    assert server.sha256 == overlay.sha256_file(checkout / "vllm" / "snapshot" / "server.py")
    assert overlay.OverlayFile("vllm/__init__.py", checkout, "0").module == "vllm"


def test_no_change_is_an_error_naming_the_fix(checkout):
    with pytest.raises(overlay.OverlayError, match="--vsnap-overlay-ref"):
        overlay.collect(checkout, "HEAD")


def test_explicit_files_and_bad_ref(checkout):
    files = overlay.collect(checkout, "HEAD", ("vllm/snapshot/server.py",))
    assert [f.relative for f in files] == ["vllm/snapshot/server.py"]
    with pytest.raises(overlay.OverlayError, match="does not exist"):
        overlay.collect(checkout, "HEAD", ("vllm/missing.py",))
    with pytest.raises(overlay.OverlayError, match="git diff"):
        overlay.collect(checkout, "no-such-ref")


def test_not_a_vllm_checkout(tmp_path):
    with pytest.raises(overlay.OverlayError, match="no vllm/ package"):
        overlay.collect(tmp_path, "HEAD")
