from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from vsnap_qual import model, overlay


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    repo = tmp_path / "vllm-src"
    (repo / "vllm" / "snapshot").mkdir(parents=True)
    (repo / "vllm" / "__init__.py").write_text("")
    (repo / "vllm" / "snapshot" / "server.py").write_text("x = 1\n")
    (repo / "README.md").write_text("r\n")
    _git(repo, "init", "-q")
    _git(repo, "-c", "user.email=a@b", "-c", "user.name=a", "add", ".")
    _git(repo, "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "base")
    return repo


def test_changed_and_untracked_python_files_become_the_overlay(checkout: Path) -> None:
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


def test_no_change_is_an_error_naming_the_fix(checkout: Path) -> None:
    with pytest.raises(overlay.OverlayError, match="--vsnap-overlay-ref"):
        overlay.collect(checkout, "HEAD")


def test_explicit_files_and_bad_ref(checkout: Path) -> None:
    files = overlay.collect(checkout, "HEAD", ("vllm/snapshot/server.py",))
    assert [f.relative for f in files] == ["vllm/snapshot/server.py"]
    with pytest.raises(overlay.OverlayError, match="does not exist"):
        overlay.collect(checkout, "HEAD", ("vllm/missing.py",))
    with pytest.raises(overlay.OverlayError, match="--vsnap-overlay-ref=no-such-ref is not a commit in"):
        overlay.collect(checkout, "no-such-ref")


def test_not_a_vllm_checkout(tmp_path: Path) -> None:
    with pytest.raises(overlay.OverlayError, match="no vllm/ package"):
        overlay.collect(tmp_path, "HEAD")


def test_a_directory_with_vllm_that_is_not_a_git_checkout_names_the_fix(tmp_path: Path) -> None:
    plain = tmp_path / "vllm-copy"
    (plain / "vllm").mkdir(parents=True)
    (plain / "vllm" / "x.py").write_text("x = 1\n")
    with pytest.raises(overlay.OverlayError) as info:
        overlay.collect(plain, "HEAD")
    message = str(info.value)
    assert "is not a git checkout" in message and "--vsnap-overlay-files=" in message
    assert "fatal" not in message, "git's own error is not the message"
    assert [f.relative for f in overlay.collect(plain, "HEAD", ("vllm/x.py",))] == ["vllm/x.py"]


def _item(
    imported: list[model.ImportedModule], fresh_sha: str | None = "h" * 64, exit_code: int = 0
) -> model.OverlayFileResult:
    return {
        "relative": "vllm/snapshot/unused_mod.py",
        "host_sha256": "h" * 64,
        "imported": imported,
        "fresh_import": {"exit_code": exit_code, "path": "/usr/lib/vllm/snapshot/unused_mod.py", "sha256": fresh_sha},
    }


def test_an_overlaid_module_no_engine_process_imports_is_reported_not_failed() -> None:
    status, text = overlay.file_finding(_item([]))
    assert status == overlay.OVERLAY_NOT_IMPORTED
    assert "overlaid, not imported by the engine" in text and "{" not in text
    ok, line = overlay.findings_line([_item([])])
    assert ok and "not imported by the engine (fresh import verified): vllm/snapshot/unused_mod.py" in line


def test_an_overlaid_module_imported_from_elsewhere_fails_in_plain_words() -> None:
    elsewhere: list[model.ImportedModule] = [
        {"pid": 41, "role": "engine_core", "path": "/opt/vllm/snapshot/unused_mod.py", "sha256": "e" * 64}
    ]
    status, text = overlay.file_finding(_item(elsewhere))
    assert status == overlay.OVERLAY_NOT_IN_EFFECT
    assert "imported it from somewhere other than the overlay" in text and "engine_core (pid 41)" in text
    ok, line = overlay.findings_line([_item([]), _item(elsewhere)])
    assert not ok and line.startswith("overlay not in effect: ") and "{" not in line and "[" not in line


def test_a_fresh_import_that_misses_the_overlay_fails_even_with_no_engine_import() -> None:
    assert overlay.file_finding(_item([], fresh_sha="o" * 64))[0] == overlay.OVERLAY_NOT_IN_EFFECT
    assert overlay.file_finding(_item([], exit_code=1))[0] == overlay.OVERLAY_NOT_IN_EFFECT
    engine: list[model.ImportedModule] = [{"pid": 7, "role": "worker", "path": "/p", "sha256": "h" * 64}]
    assert overlay.file_finding(_item(engine)) == (
        overlay.OVERLAY_IN_EFFECT,
        "vllm/snapshot/unused_mod.py: in effect in 1 engine process (worker) and a fresh import",
    )


@pytest.mark.parametrize("fresh_exit", [0, 1])
@pytest.mark.parametrize("fresh_sha", ["h" * 64, "o" * 64, None])
@pytest.mark.parametrize("imported", [[], ["h" * 64], ["h" * 64, "e" * 64], [None]])
def test_the_plain_words_agree_with_the_judgement(
    fresh_exit: int, fresh_sha: str | None, imported: list[str | None]
) -> None:
    """overlay.file_finding says "not in effect" exactly when checks.overlay_file_ok fails the file."""
    from vsnap_qual import checks

    rows: list[model.ImportedModule] = [
        {"pid": i, "role": "worker", "path": "/p", "sha256": sha} for i, sha in enumerate(imported)
    ]
    item = _item(rows, fresh_sha=fresh_sha, exit_code=fresh_exit)
    status, text = overlay.file_finding(item)
    ok = checks.overlay_file_ok("h" * 64, rows, fresh_exit, fresh_sha)
    assert (status != overlay.OVERLAY_NOT_IN_EFFECT) == ok, text
    assert not any(mark in text for mark in ("{", "[", "None")), f"not plain words: {text}"
