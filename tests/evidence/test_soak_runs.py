"""The committed false-alarm soak backs what evidence/soak/README.md and docs/measured.md say about it."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOAK = ROOT / "evidence" / "soak"


def test_the_latest_soak_is_ten_clean_full_qualifications_as_the_docs_say() -> None:
    soak = json.loads((SOAK / "2026-12-03-qualify-x10-cb485e7" / "soak.json").read_text())
    runs = soak["runs"]
    assert soak["target"] == 10 and len(runs) == 10
    assert all(r["verdict"] == "pass" and r["exit_code"] == 0 and not r["failed"] for r in runs)
    assert all(r["coverage"].startswith("134/134 required steps passed") for r in runs)
    assert all("24 fault points per lane" in r["coverage"] for r in runs)
    walls = [r["wall_s"] for r in runs]
    said = f"{min(walls):.0f}–{max(walls):.0f} s"
    assert "**10 of 10 PASS**" in (SOAK / "README.md").read_text()
    assert said in (SOAK / "README.md").read_text() and said in (ROOT / "docs" / "measured.md").read_text()


def test_the_latest_soaks_decode_speeds_are_what_the_docs_say() -> None:
    """The decode-speed check, the one most exposed to a shared CPU: every restore of the ten runs judged, none over
    the tolerance, none measured twice; the range the docs give is the evidence's."""
    restores = json.loads((SOAK / "2026-12-03-qualify-x10-cb485e7" / "decode.json").read_text())["restores"]
    assert len(restores) == 160 and all(r["ok"] and not r["retried"] for r in restores)
    slowdowns = [r["slowdown"] for r in restores]
    readme = (SOAK / "README.md").read_text()
    assert f"{min(slowdowns):.3f}–{max(slowdowns):.3f}×" in readme
    assert f"{min(slowdowns):.2f}–{max(slowdowns):.2f}×" in (ROOT / "docs" / "measured.md").read_text()


def test_the_soak_after_the_parked_tree_cut_is_ten_clean_runs_and_its_parked_waits_as_the_docs_say() -> None:
    """Issue 27's must-show after the audit's wait for a parked tree was cut: 10 of 10 PASS, and the parked case
    (routine on CPU) ended early every time, as evidence/soak/README.md gives it."""
    folder = SOAK / "2026-12-03-qualify-x10-1cfee7b"
    runs = json.loads((folder / "soak.json").read_text())["runs"]
    assert len(runs) == 10 and all(r["verdict"] == "pass" and r["exit_code"] == 0 and not r["failed"] for r in runs)
    assert all(r["coverage"].startswith("134/134 required steps passed") for r in runs)
    walls = [r["wall_s"] for r in runs]
    said = f"{min(walls):.0f}–{max(walls):.0f} s"
    docs = (SOAK / "README.md").read_text()
    section = docs.split("(`2026-12-03-qualify-x10-1cfee7b/`)", 1)[1].split("\n## ", 1)[0]
    assert "**10 of 10 PASS**" in section and said in section
    assert f"10 of 10, {said}" in (ROOT / "docs" / "measured.md").read_text()
    parked = json.loads((folder / "parked.json").read_text())
    assert parked and all(p["judged"] is False and p["after_sweep_ok"] and p["outcome"] == "passed" for p in parked)
    waits, audits = [p["parked_for_good_after_s"] for p in parked], [p["audit_s"] for p in parked]
    assert f"{len(parked)} times in {len({p['run'] for p in parked})} of the 10 runs" in section
    assert f"{min(waits):.1f}–{max(waits):.1f} s after it began" in section
    assert f"audit took {min(audits):.1f}–{max(audits):.1f} s" in section and max(audits) < 5.0


def test_the_co_tenant_soak_is_what_its_section_says_and_every_decode_judgement_passed() -> None:
    """Issue 44 item 6: the soak with 2 busy host processes beside it, cut short at a deadline: the runs, the one
    failure (not the decode check) and every restore's decode judgement as evidence/soak/README.md gives them."""
    folder = SOAK / "2026-12-07-lifecycle-stress2-da6e619"
    soak = json.loads((folder / "soak.json").read_text())
    runs, restores = soak["runs"], json.loads((folder / "decode.json").read_text())["restores"]
    docs = (SOAK / "README.md").read_text()
    section = docs.split("(`2026-12-07-lifecycle-stress2-da6e619/`)", 1)[1].split("\n## ", 1)[0]
    assert all(r["machine"]["cotenant"] == "stress:2" and r["machine"]["cotenant_cpus"] > 0 for r in runs)
    clean = sum(r["verdict"] == "pass" and r["exit_code"] == 0 for r in runs)
    assert f"{len(runs)} of 10 runs done, {clean} PASS" in docs and "not the 10 clean" in section
    failed = [f for r in runs for f in r["failed"]]
    assert [(f["lane"], f["step"]) for f in failed] == [("v1-base", "fresh-box")] and "died" in failed[0]["message"]
    assert len(restores) == 32 and all(r["ok"] and not r["retried"] for r in restores)
    judged, measured = [r["slowdown"] for r in restores], [r["measured_slowdown"] for r in restores]
    assert f"{len(restores)} of {len(restores)} restores passed" in section
    assert f"judged {min(judged):.3f}–{max(judged):.3f}×, measured {min(measured):.3f}–{max(measured):.3f}×" in section


def test_the_soak_after_the_liveness_fix_is_what_its_section_says() -> None:
    """Issue 44 item 6, after the liveness fix: the co-tenant soak's runs (cut to the lock's holds), each a PASS, and
    every watched restore alive through its window, as evidence/soak/README.md gives them."""
    folder = SOAK / "2026-12-07-lifecycle-v1-stress2-7e41dfb"
    runs = [r for part in sorted(folder.glob("part-*")) for r in json.loads((part / "soak.json").read_text())["runs"]]
    docs = (SOAK / "README.md").read_text()
    section = docs.split("(`2026-12-07-lifecycle-v1-stress2-7e41dfb/`)", 1)[1].split("\n## ", 1)[0]
    assert all(r["machine"]["cotenant"] == "stress:2" and r["machine"]["cotenant_cpus"] > 0 for r in runs)
    assert all(r["verdict"] == "pass" and r["exit_code"] == 0 and not r["failed"] for r in runs)
    assert all("runners v1;" in r["coverage"] and "watched 30 s" in r["coverage"] for r in runs)
    assert f"{len(runs)} of {len(runs)} PASS, not the 10 clean runs" in section
    watches = json.loads((folder / "liveness.json").read_text())["watches"]
    assert len(watches) == 8 * len(runs) and all(w["alive"] and w["observed_after_restore_s"] >= 30 for w in watches)
    second = sum(w["second_looks_count"] for w in watches)
    assert ("no second look needed" in section) == (second == 0)
    slowest = [w["slowest_health_s"] for w in watches]
    assert f"the slowest `/health` answer {min(slowest):.3f}–{max(slowest):.3f} s" in section
