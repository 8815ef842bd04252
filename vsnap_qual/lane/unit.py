"""The unit step's pure part: a JUnit file's outcome per test id, and the head arm's failures judged against the
base arm's (a failure the unchanged image shares is pre-existing, listed, not the change's)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Mapping

from vsnap_qual.model import UnitOutcome


def outcomes(junit_xml: str) -> dict[str, UnitOutcome]:
    """``classname::name`` → passed / failed / skipped, for every test case of a JUnit file (``failure`` and
    ``error`` are failed). Raises ``ValueError`` when the text is not JUnit XML."""
    try:
        root = ET.fromstring(junit_xml)
    except ET.ParseError as exc:
        raise ValueError(f"not JUnit XML: {exc}") from None
    found: dict[str, UnitOutcome] = {}
    for case in root.iter("testcase"):
        test_id = f"{case.get('classname') or ''}::{case.get('name') or ''}"
        kinds = {child.tag for child in case}
        found[test_id] = "failed" if kinds & {"failure", "error"} else "skipped" if "skipped" in kinds else "passed"
    return found


def counts(found: Mapping[str, UnitOutcome]) -> dict[str, int]:
    tally = Counter(found.values())
    return {kind: tally.get(kind, 0) for kind in ("passed", "failed", "skipped")}


def failed(found: Mapping[str, UnitOutcome]) -> list[str]:
    return [test for test, outcome in found.items() if outcome == "failed"]


def against_base(
    head: Mapping[str, UnitOutcome], base: Mapping[str, UnitOutcome]
) -> tuple[list[str], list[str], list[str]]:
    """(new on head, pre-existing, fixed on head): head failures the base arm does not share (passed, skipped or
    absent there), head failures it shares, and base failures that pass on head."""
    new = [t for t, o in head.items() if o == "failed" and base.get(t) != "failed"]
    pre = [t for t, o in head.items() if o == "failed" and base.get(t) == "failed"]
    fixed = [t for t, o in base.items() if o == "failed" and head.get(t) == "passed"]
    return new, pre, fixed
