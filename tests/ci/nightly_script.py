"""``ci/nightly.sh`` run the way CI runs it, against stand-ins: a venv whose ``python`` records ``-m pip`` /
``-m pytest`` and plays pytest's exit, whose ``vsnap-qual`` plays the doctor, ``nightly-tag`` and ``merge`` (or
hands ``nightly-tag`` to the real command), and a recording ``buildkite-agent``, ``docker`` and ``python3`` on PATH.
What is asserted is what the script really does with those commands. Shared by the pipeline tests and the
registry tests (which run ``nightly-tag`` for real)."""

from __future__ import annotations

import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "ci" / "nightly.sh"
SEP = "\x1f"

RECORDER = f"""#!/bin/sh
# records its arguments (one call a line, separated by US) and plays its part
name="$(basename "$0")"
{{ for a in "$@"; do printf '%s{SEP}' "$a"; done; printf '\\n'; }} >>"$CALLS/$name"
"""

FAKE_PYTHON = (
    RECORDER
    + """
case "$2" in
  pip) exit 0 ;;
  pytest)
    for a in "$@"; do
      case "$a" in --vsnap-report-dir=*) report="${a#--vsnap-report-dir=}" ;; esac
    done
    if [ "${FAKE_PYTEST_REPORT:-0}" = "1" ]; then
      mkdir -p "$report" && echo "## vsnap-qual: PASS" >"$report/summary.md" && : >"$report/evidence.jsonl"
    fi
    if [ -n "${FAKE_PYTEST_RESULTS:-}" ]; then cp "$FAKE_PYTEST_RESULTS" "$report/results.json"; fi
    # what the plan line would estimate from: the variable, and how many kept runs it held as pytest started
    if [ -d "${VSNAP_PLAN_HISTORY:-/nonexistent}" ]; then
      kept="$(find "$VSNAP_PLAN_HISTORY" -name results.json | wc -l)"
    else
      kept=missing
    fi
    echo "${VSNAP_PLAN_HISTORY:-} $kept" >"$CALLS/plan-history"
    echo "${FAKE_PYTEST_OUTPUT:-}"
    exit "${FAKE_PYTEST_EXIT:-0}" ;;
esac
exit 0
"""
)
# vsnap-qual: `doctor` prints FAKE_DOCTOR_OUTPUT and exits FAKE_DOCTOR_EXIT; `nightly-tag` runs the real command
# when FAKE_NIGHTLY_TAG=real (PYTHON, PYTHONPATH given), else prints FAKE_NIGHTLY_TAG_OUTPUT ("|"-separated lines)
# and FAKE_NIGHTLY_TAG_ERROR on stderr and exits FAKE_NIGHTLY_TAG_EXIT; `merge DIR... --out OUT` writes
# FAKE_MERGE_SUMMARY to OUT/summary.md (none when empty) and exits FAKE_MERGE_EXIT; `history` runs the real
# command when FAKE_HISTORY=real. pytest copies FAKE_PYTEST_RESULTS (a results.json) into its report.
FAKE_VSNAP_QUAL = (
    RECORDER
    + """
case "$1" in
  doctor) echo "${FAKE_DOCTOR_OUTPUT:-PASS all}"; exit "${FAKE_DOCTOR_EXIT:-0}" ;;
  nightly-tag)
    if [ "${FAKE_NIGHTLY_TAG:-}" = "real" ]; then exec "$PYTHON" -m vsnap_qual.cli "$@"; fi
    [ -n "${FAKE_NIGHTLY_TAG_ERROR:-}" ] && echo "$FAKE_NIGHTLY_TAG_ERROR" >&2
    printf '%s\\n' "${FAKE_NIGHTLY_TAG_OUTPUT:-}" | tr '|' '\\n'
    exit "${FAKE_NIGHTLY_TAG_EXIT:-0}" ;;
  history) if [ "${FAKE_HISTORY:-}" = "real" ]; then exec "$PYTHON" -m vsnap_qual.cli "$@"; fi; exit 0 ;;
  merge)
    while [ $# -gt 0 ]; do if [ "$1" = "--out" ]; then out="$2"; fi; shift; done
    mkdir -p "$out"
    if [ -n "${FAKE_MERGE_SUMMARY:-}" ]; then printf '%s\\n' "$FAKE_MERGE_SUMMARY" >"$out/summary.md"; fi
    exit "${FAKE_MERGE_EXIT:-0}" ;;
esac
exit 0
"""
)
# buildkite-agent: `annotate` keeps its input (annotation.md) and style; `meta-data get KEY` prints FAKE_META_KEY
# (KEY with - as _), else its --default
FAKE_AGENT = (
    RECORDER
    + """
if [ "$1" = "annotate" ]; then cat >"$CALLS/annotation.md"; exit 0; fi
if [ "$1 $2" = "meta-data get" ]; then
  var="FAKE_META_$(printf '%s' "$3" | tr '-' '_')"
  eval "value=\\${$var:-}"
  if [ -n "$value" ]; then echo "$value"; elif [ "$4" = "--default" ]; then echo "$5"; else exit 1; fi
fi
exit 0
"""
)
# docker: `image inspect` answers as an agent holding FAKE_DOCKER_LOCAL's images ("image=number of repo digests",
# space-separated; others absent); `pull` exits FAKE_DOCKER_PULL_EXIT
FAKE_DOCKER = (
    RECORDER
    + """
if [ "$1" = "image" ] && [ "$2" = "inspect" ]; then
  for entry in ${FAKE_DOCKER_LOCAL:-}; do
    if [ "${entry%=*}" = "$5" ]; then echo "${entry##*=}"; exit 0; fi
  done
  echo "Error: No such image: $5" >&2; exit 1
fi
if [ "$1" = "pull" ]; then exit "${FAKE_DOCKER_PULL_EXIT:-0}"; fi
exit 0
"""
)
#: Variables of a CI definition that name this machine's paths: the stand-ins' own take their place.
MACHINE_PATHS = ("REPORT_DIR", "VSNAP_SHARD_ROOT", "VSNAP_NIGHTLY_STATE", "VENV", "PATH", "VSNAP_MODEL_CACHE")


def _write(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@dataclass
class Nightly:
    returncode: int
    stdout: str
    stderr: str
    calls_dir: Path
    report_dir: Path
    shard_root: Path
    state_dir: Path

    def calls(self, name: str) -> list[list[str]]:
        path = self.calls_dir / name
        if not path.exists():
            return []
        return [line.split(SEP)[:-1] for line in path.read_text().splitlines()]

    def pytest_argv(self) -> list[str] | None:
        runs = [c for c in self.calls("python") if c[:2] == ["-m", "pytest"]]
        assert len(runs) <= 1
        return runs[0] if runs else None

    @property
    def summary(self) -> str:
        return (self.report_dir / "summary.md").read_text()

    def shard_summary(self, k: int) -> str:
        return (self.shard_root / f"shard-{k}" / "summary.md").read_text()

    @property
    def annotation(self) -> str | None:
        path = self.calls_dir / "annotation.md"
        return path.read_text() if path.exists() else None

    @property
    def annotation_style(self) -> str | None:
        calls = [c for c in self.calls("buildkite-agent") if c[:1] == ["annotate"]]
        return calls[-1][calls[-1].index("--style") + 1] if calls else None

    @property
    def recorded(self) -> str | None:
        path = self.state_dir / "last-qualified"
        return path.read_text().strip() if path.exists() else None


class NightlyRunner:
    """Runs ci/nightly.sh with exactly the given environment (plus the stand-ins), as a CI agent would; the
    report, shard and state directories and the model cache are this test's (under ``base``): a CI definition's
    paths (``MACHINE_PATHS``) are its agents', and a test that means another passes it as a ``fake`` keyword."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.venv = base / "venv"
        (self.venv / "bin").mkdir(parents=True)
        _write(self.venv / "bin" / "python", FAKE_PYTHON)
        _write(self.venv / "bin" / "vsnap-qual", FAKE_VSNAP_QUAL)
        self.shim = base / "shim"
        self.shim.mkdir()
        _write(self.shim / "python3", RECORDER)  # `python3 -m venv`: recorded; the stand-in venv is the result
        _write(self.shim / "buildkite-agent", FAKE_AGENT)
        _write(self.shim / "docker", FAKE_DOCKER)
        self.calls = base / "calls"
        self.calls.mkdir()
        self.cache = base / "hf"
        self.cache.mkdir()
        self.report, self.shards, self.state = base / "report", base / "shards", base / "state"

    def __call__(self, env: dict[str, str], *args: str, **fake: str) -> Nightly:
        self.reset_calls()  # each run's own calls (a Nightly reads them until the next run)
        full = {
            "PATH": f"{self.shim}:/usr/bin:/bin",
            "HOME": str(self.base),
            "CALLS": str(self.calls),
            "VENV": str(self.venv),
            "REPORT_DIR": str(self.report),
            "VSNAP_SHARD_ROOT": str(self.shards),
            "VSNAP_NIGHTLY_STATE": str(self.state),
            "VSNAP_MODEL_CACHE": str(self.cache),
            "PYTHON": sys.executable,
            "PYTHONPATH": str(ROOT),
            **{k: v for k, v in env.items() if k not in MACHINE_PATHS},
            **fake,
        }
        done = subprocess.run(
            ["bash", str(SCRIPT), *args], env=full, capture_output=True, text=True, timeout=120, check=False
        )
        return Nightly(done.returncode, done.stdout, done.stderr, self.calls, self.report, self.shards, self.state)

    def reset_calls(self) -> None:
        for path in self.calls.iterdir():
            path.unlink()
