"""Running the qualification suites, as a user would, against locally built images."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests import harness_child

if TYPE_CHECKING:
    from docker.client import DockerClient

ROOT = Path(__file__).resolve().parents[2]
REFERENCE_HEAD = "vsnap-reference:head"
REFERENCE_BASE = "vsnap-reference:base"
REFERENCE_PROFILE = "@suites/profiles/reference.args"  # the reference engine's options (pytest @file), as make qualify


@dataclass
class SuiteRun:
    """One `pytest suites/ ...` run in a subprocess and what it left in its report directory."""

    returncode: int
    output: str
    report_dir: Path

    @property
    def records(self) -> list[dict[str, Any]]:
        from vsnap_qual.evidence import read_records

        path = self.report_dir / "evidence.jsonl"
        return list(read_records(path)) if path.exists() else []

    def steps(self, **match: Any) -> list[dict[str, Any]]:
        return [r for r in self.records if r["kind"] == "step" and all(r.get(k) == v for k, v in match.items())]

    def step(self, **match: Any) -> dict[str, Any]:
        found = self.steps(**match)
        assert len(found) == 1, f"expected one step matching {match}, found {len(found)}:\n{self.output[-3000:]}"
        return found[0]

    @property
    def session(self) -> str:
        """The run's session id (its containers' ``ai.vsnap.session`` label)."""
        return next(str(r["run_id"]) for r in self.records if r["kind"] == "session")

    @property
    def results(self) -> dict[str, Any]:
        results: dict[str, Any] = json.loads((self.report_dir / "results.json").read_text())
        return results


def run_suite(
    report_dir: Path,
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 2400,
    suite: str = "suites/",
    observe: float | None = 0,
) -> SuiteRun:
    """Run the qualification suites exactly as a user would (subprocess, from the repository root). ``observe``:
    the observation window after each restore, 0 here unless a test asks (its own tests judge it; 30 s a restore
    would add minutes to every run of the tier); None keeps the option's default, as ``make qualify`` does."""
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        suite,
        REFERENCE_PROFILE,
        "-p",
        "no:cacheprovider",
        f"--vsnap-report-dir={report_dir}",
        *([] if observe is None else [f"--vsnap-observe={observe:g}"]),
        *args,
    ]
    done = harness_child.run(cmd, cwd=ROOT, timeout=timeout, env={**os.environ, **(env or {})})
    return SuiteRun(done.returncode, done.stdout + done.stderr, report_dir)


def labelled_containers(client: DockerClient, session: str | None = None) -> list[str]:
    from vsnap_qual import box as vbox

    label = f"{vbox.LABEL_SESSION}={session}" if session else vbox.LABEL_SESSION
    return [c.name for c in client.containers.list(all=True, filters={"label": label})]


def image_file(client: DockerClient, image: str, module: str) -> str:
    """The source of one module of the image's installed vllm package (read without importing it)."""
    code = f"import importlib.util; s = importlib.util.find_spec({module!r}); print(open(s.origin).read(), end='')"
    output: bytes = client.containers.run(
        image, ["python3", "-c", code], entrypoint=[], remove=True, network_mode="none"
    )
    return output.decode()


def make_overlay(tmp_path: Path, files: dict[str, str]) -> Path:
    """A minimal 'vLLM checkout' holding the given vllm/**.py files."""
    checkout = tmp_path / "vllm-checkout"
    for relative, text in files.items():
        path = checkout / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return checkout


def check_items(results: dict[str, Any]) -> dict[str, Any]:
    """What a qualification concluded, less times and ids: the verdict's status and counts, every check with its
    items' judgements, every step's outcome, the coverage. Two runs of the same configuration on the same images
    must agree on all of it."""
    verdict = results["verdict"]
    return {
        "status": verdict["status"],
        "counts": verdict["counts"],
        "checks": [
            {"id": c["id"], "ok": c["ok"], "status": c["status"], "items": [[i["id"], i["ok"]] for i in c["items"]]}
            for c in verdict["checks"]
        ],
        "steps": sorted([s["runner"], s["arm"], s.get("purpose"), s["step"], s["outcome"]] for s in results["steps"]),
        "coverage": {k: verdict["coverage"][k] for k in ("required", "passed", "failed", "not_reached", "left_out")},
    }
