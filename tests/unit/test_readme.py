"""The README (issue 47 item 5): what the tool is in its first lines, then the two commands, then the one pytest
invocation that the GPU guide and the nightly use too; at most 12 KB (detail lives in docs/); one exit-code table
that is the code's."""

from __future__ import annotations

import re
from pathlib import Path

from vsnap_qual import cli

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
INVOCATION = re.compile(r"python\"? -m pytest suites/ ")


def test_the_readme_is_at_most_12_kb() -> None:
    assert len(README.encode("utf-8")) <= 12 * 1024, f"README.md is {len(README.encode())} bytes: move detail to docs/"


def test_its_first_five_lines_say_what_the_tool_is_then_the_two_commands() -> None:
    lines = README.splitlines()
    assert lines[0] == "# vsnap-qual"
    first = " ".join(lines[1:6])
    assert "qualifies vLLM's initialized-engine snapshots" in first and "pytest plugin" in first
    assert "verdict" in first and "report.html" in first
    blocks = re.findall(r"^```bash\n(.*?)^```", README, re.M | re.S)
    commands = [line for line in blocks[0].splitlines() if line.strip()]
    assert len(commands) == 2 and commands[0].startswith("apt-get ") and "make qualify" in commands[0]
    assert commands[1].startswith("make test")
    assert README.index("## Two commands") < README.index("## The one invocation") < README.index("## What it checks")


def _invocations(text: str) -> list[str]:
    return [line for line in text.splitlines() if re.search(r"-m pytest\b|^\s*pytest ", line)]


def test_one_pytest_invocation_in_the_readme_the_gpu_guide_and_the_nightly() -> None:
    block = re.findall(r"^```bash\n(.*?)^```", README, re.M | re.S)[1]
    guide = (ROOT / "docs" / "gpu-guide.md").read_text()
    nightly = (ROOT / "ci" / "nightly.sh").read_text()
    for name, text in (("README.md", block), ("docs/gpu-guide.md", guide), ("ci/nightly.sh", nightly)):
        found = _invocations(text)
        assert found and all(INVOCATION.search(line) for line in found), (name, found)
        assert "-c /dev/null" not in text and "-p vsnap_qual" not in text, name
        assert "--vsnap-report-dir=" in text and "--junitxml=" in text, name


def test_no_stale_words() -> None:
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text()
        assert "huggingface-cli" not in text, f"{path.name}: the hub's CLI is `hf`"
        assert "not re-measured" not in text, f"{path.name}: a stand-in figure"


def test_the_exit_code_table_is_the_codes() -> None:
    rows = {}
    for line in README.split("## Exit codes", 1)[1].split("\n## ", 1)[0].splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 4 and cells[1] != "---":
            rows[cells[0].split(" ")[0]] = cells[1:]
    for verdict in ("pass", "fail", "partial", "interrupted", "incomplete"):
        _pytest, report, as_pytest = rows[verdict.upper()]
        assert report == str(cli.EXIT_BY_VERDICT[verdict]), verdict
        assert as_pytest == str(cli.EXIT_AS_PYTEST[verdict]), verdict
        if _pytest != "–":
            assert _pytest == as_pytest, f"--exit=pytest is not pytest's own status for {verdict}"
    assert rows["bad"] == ["4", str(cli.EXIT_BAD_INPUT), str(cli.EXIT_PYTEST_USAGE)]
