"""The README's screenshot (``docs/report-screenshot.png``) shows the report as the templates render it now:
``scripts/report-screenshot.sh`` records the templates' sha256 beside it, and a template changed since then fails
here until the screenshot is made again (``make qualify && make screenshot``)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.report.synthetic_runs import write_evidence
from vsnap_qual.report import write_reports

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "vsnap_qual" / "report" / "templates"
RECORD = ROOT / "docs" / "report-screenshot.json"


def _templates() -> dict[str, str]:
    return {
        p.relative_to(ROOT).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(TEMPLATES.rglob("*"))
        if p.is_file()
    }


def test_the_screenshot_is_not_older_than_the_report_templates() -> None:
    record = json.loads(RECORD.read_text())
    changed = sorted(set(record["templates"].items()) ^ set(_templates().items()))
    assert not changed, (
        f"the report templates changed since docs/report-screenshot.png was made ({changed}): make it again with "
        "`make qualify && make screenshot` (scripts/report-screenshot.sh)"
    )
    png = (ROOT / "docs" / "report-screenshot.png").read_bytes()
    assert png.startswith(b"\x89PNG") and hashlib.sha256(png).hexdigest() == record["png_sha256"], (
        "docs/report-screenshot.png is not the one its record describes"
    )
    assert record["run"]["run_id"] and record["run"]["verdict"], "the run it came from"


FAKE_BROWSER = """#!/bin/sh
for arg in "$@"; do
  case "$arg" in --screenshot=*) out="${arg#--screenshot=}" ;; file://*) page="${arg#file://}" ;; esac
done
cp "$page" "$out.page.html"
printf '\\211PNG\\r\\n\\032\\nfake' > "$out"
"""


def test_the_script_renders_a_copy_with_these_templates_and_records_them(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_evidence(run)
    write_reports(run, github_step_summary=False)
    rendered_before = (run / "report.html").read_bytes()
    (run / "report.html").write_text("<html>rendered by an older harness</html>")
    browser = tmp_path / "chromium"
    browser.write_text(FAKE_BROWSER)
    browser.chmod(0o755)
    out = tmp_path / "docs" / "shot.png"
    env = {
        **os.environ,
        "CHROMIUM": str(browser),
        "OUT": str(out),
        "VSNAP_QUAL": str(Path(sys.executable).parent / "vsnap-qual"),
        "PYTHON": sys.executable,
    }
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "report-screenshot.sh"), str(run)],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "docs" / "shot.png.page.html").read_text()
    assert "rendered by an older harness" not in page and "snapshot qualification report" in page
    assert (run / "report.html").read_text() == "<html>rendered by an older harness</html>", "the run is left alone"
    record = json.loads((tmp_path / "docs" / "shot.json").read_text())
    assert record["templates"] == _templates()
    assert record["png_sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
    results = json.loads((run / "results.json").read_text())
    assert record["run"]["run_id"] == results["run"]["run_id"] and record["run"]["source"] == str(run)
    assert rendered_before  # the synthetic run rendered at all
