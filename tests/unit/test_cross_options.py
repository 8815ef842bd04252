"""Options that contradict each other, or values that cannot work, are refused before anything starts with one
message naming the option and the fix (issue 26: each of these used to fail minutes into a GPU run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vsnap_qual import options
from vsnap_qual.overlay import OverlayFile
from vsnap_qual.run.configure import build_config
from vsnap_qual.run.preflight import check_overlay_compiles
from vsnap_qual.run.preflight_result import PreflightError

BASE = ["--vsnap-image=img:1", "--vsnap-model=m/m", "--vsnap-revision=" + "a" * 40]


def _refused(*argv: str, tmp_path: Path) -> str:
    with pytest.raises((options.OptionError, pytest.UsageError)) as info:
        build_config(options.parse_standalone([*BASE, *argv], env={}), tmp_path)
    return str(info.value)


@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        (["--vsnap-kv-tolerance=5"], ["--vsnap-kv-tolerance: 5 must be a fraction within (0, 1)", "write 0.05"]),
        (["--vsnap-kv-tolerance=0"], ["--vsnap-kv-tolerance: 0 must be a fraction within (0, 1), e.g. 0.02 for 2 %"]),
        (["--vsnap-kv-tolerance=1"], ["--vsnap-kv-tolerance: 1 must be a fraction", "for 1 % write 0.01"]),
        (["--vsnap-max-model-len=8"], ["--vsnap-max-model-len: 8 is below the minimum 32"]),
        (["--vsnap-timeouts=serve=0"], ["--vsnap-timeouts: serve=0: 0.0 must be > 0 seconds"]),
        (["--vsnap-timeouts=http=120,create=-1"], ["--vsnap-timeouts: create=-1:"]),
        (
            ["--vsnap-canary-tokens=100000"],
            ["--vsnap-max-model-len=512 is too short for --vsnap-canary-tokens=100000", "need at least 100009",
             "raise --vsnap-max-model-len, lower --vsnap-canary-tokens"],
        ),
    ],
)  # fmt: skip
def test_values_that_cannot_work_are_refused_naming_the_option(
    tmp_path: Path, argv: list[str], fragments: list[str]
) -> None:
    message = _refused(*argv, tmp_path=tmp_path)
    for fragment in fragments:
        assert fragment in message, message


def test_the_longest_prompt_counts_and_a_config_that_fits_passes(tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("short one\n" + " ".join(["word"] * 40) + "\n")
    message = _refused(
        f"--vsnap-prompts={prompts}", "--vsnap-canary-prompts=3", "--vsnap-max-model-len=48", tmp_path=tmp_path
    )
    assert ", 40 words, at least as many tokens)" in message and "need at least 57" in message, message
    fits = build_config(
        options.parse_standalone(
            [*BASE, f"--vsnap-prompts={prompts}", "--vsnap-canary-prompts=3", "--vsnap-max-model-len=57"]
            + ["--vsnap-decode-runs=0"],  # the decode speed's 64 tokens would not fit (the test below)
            env={},
        ),
        tmp_path,
    )
    assert fits.max_model_len == 57 and fits.kv_tolerance == 0.02
    assert build_config(options.parse_standalone([*BASE, "--vsnap-kv-tolerance=0.05"], env={}), tmp_path).kv_tolerance


def test_a_context_too_short_for_the_decode_speed_generation_is_refused_naming_both_fixes(tmp_path: Path) -> None:
    message = _refused("--vsnap-max-model-len=60", "--vsnap-canary-tokens=4", tmp_path=tmp_path)
    assert "too short for the decode-speed generation" in message and "64 tokens need at least" in message, message
    assert "--vsnap-decode-runs=0" in message and "raise --vsnap-max-model-len" in message
    argv = [*BASE, "--vsnap-max-model-len=60", "--vsnap-canary-tokens=4", "--vsnap-decode-runs=0"]
    assert build_config(options.parse_standalone(argv, env={}), tmp_path).decode_runs == 0


def _overlay(tmp_path: Path, text: str) -> list[OverlayFile]:
    path = tmp_path / "vllm" / "snapshot" / "server.py"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    return [OverlayFile("vllm/snapshot/server.py", path, "0" * 64)]


def test_an_overlaid_file_that_does_not_compile_is_named_with_its_line(tmp_path: Path) -> None:
    files = _overlay(tmp_path, "import os\n\ndef serve(:\n    pass\n")
    with pytest.raises(PreflightError) as info:
        check_overlay_compiles(files, "3.11.7")
    message = str(info.value)
    assert message.startswith("--vsnap-overlay: vllm/snapshot/server.py does not compile (line 3"), message
    assert "def serve(:" in message and str(files[0].host_path) in message
    assert not list(tmp_path.rglob("__pycache__")), "the check wrote bytecode into the checkout"


def test_compiling_overlay_files_pass_and_a_newer_target_python_is_not_judged_by_this_one(tmp_path: Path) -> None:
    check_overlay_compiles(_overlay(tmp_path / "a", "def serve():\n    return 1\n"), None)
    check_overlay_compiles(_overlay(tmp_path / "b", "def serve(:\n"), "3.99.0")  # its syntax, not ours to judge


def test_preflight_refuses_an_overlay_that_does_not_compile_before_any_lane(tmp_path: Path) -> None:
    """Through the plugin (the memory runtime: no Docker): refused at preflight, exit 4, the file and line named,
    nothing written."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    checkout = tmp_path / "vllm-src"
    server = checkout / "vllm" / "snapshot" / "server.py"
    server.parent.mkdir(parents=True)
    server.write_text("def serve():\n    return 1\n")
    git = ["git", "-C", str(checkout), "-c", "user.email=a@b", "-c", "user.name=a"]
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "x"]):
        subprocess.run([*git, *args], check=True, capture_output=True)
    server.write_text("def serve():\n    return 1\n\n\ndef broken(:\n    pass\n")
    report = tmp_path / "report"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", str(root / "suites"), "-p", "no:cacheprovider", "-p", "memory_runtime",
         "--vsnap-runtime=memory", "--vsnap-image=memory:head", "--vsnap-model=org/tiny",
         "--vsnap-revision=" + "0" * 40, f"--vsnap-overlay={checkout}", f"--vsnap-report-dir={report}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "tests" / "seam"), str(root)])},
    )  # fmt: skip
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout[-2000:] + done.stderr[-2000:]
    assert "--vsnap-overlay: vllm/snapshot/server.py does not compile (line 5" in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and not report.exists()
