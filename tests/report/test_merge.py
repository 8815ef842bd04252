"""``vsnap-qual merge`` (issue 46): the shards of one matrix give the one-machine run's coverage, steps and verdict;
a shard missing, twice present, of another matrix or interrupted makes the verdict INCOMPLETE naming its lanes;
setups that differ between shards are named per lane. The shards are a committed one-machine run (the reference
engine's 16-lane variants qualification, PASS, evidence/variants/2026-12-04-reference-98ac549) rebuilt as evidence
and split by the harness's own assignment (``run.shards``), each shard's session record as the plugin writes it."""

from __future__ import annotations

import copy
import gzip
import json
import tarfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from vsnap_qual.cli import main as cli_main
from vsnap_qual.evidence import Evidence
from vsnap_qual.report.assemble import assemble
from vsnap_qual.report.merge import merge_into
from vsnap_qual.run import shards

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "evidence" / "variants" / "2026-12-04-reference-98ac549" / "results.json.gz"
MATRIX = {"image": "vsnap-reference:head", "image_ids": {"vsnap-reference:head": "sha256:1"}, "faults": ["f"]}
N = 4


def _one_machine() -> list[dict[str, Any]]:
    """The committed run's evidence records, rebuilt from its results.json: session, environments, plans, steps,
    end."""
    results = json.loads(gzip.decompress(RUN.read_bytes()))
    run = results["run"]
    coverage = {k: v for k, v in results["coverage"].items() if k not in ("selected", "deselected", "selection")}
    session = {
        "kind": "session",
        "time": run["started"],
        "run_id": run["run_id"],
        "harness_version": run["harness_version"],
        "started": run["started"],
        "options": run["options"],
        "coverage": coverage,
        "host": run["host"],
    }
    records: list[dict[str, Any]] = [session]
    for lane in results["lanes"]:
        for env in [lane["environment"], *lane.get("other_environments", [])]:
            records.append({"kind": "environment", **env})
    plan = {
        "kind": "plan",
        "time": run["started"],
        "worker": "main",
        "selected": results["coverage"]["selected"],
        "deselected": results["coverage"]["deselected"],
        "selection": results["coverage"]["selection"],
    }
    records.append(plan)
    records += [{"kind": "step", **step} for step in results["steps"]]
    end = {"kind": "session_end", "time": run["ended"], "ended": run["ended"], "exitstatus": 0, "complete": True}
    records.append(end)
    return records


def _lane(record: dict[str, Any]) -> str:
    return str(record["lane"])


def _split(records: list[dict[str, Any]], n: int = N, matrix: dict[str, Any] = MATRIX) -> list[list[dict[str, Any]]]:
    """The run as its ``n`` shards would have written it: each shard's lanes' records, its session record with the
    shard's part of the matrix (what ``plugin.session.shard_info`` records) and its coverage its own lanes'."""
    session = records[0]
    envs = [r for r in records if r["kind"] == "environment" and r.get("purpose") == "lifecycle"]
    lanes = list(dict.fromkeys((_lane(r), str(r["runner"])) for r in envs))
    arms = {_lane(r): str(r["arm"]) for r in envs}
    plan = shards.plan(shards.ShardId(1, n, "test"), lanes, None, "")
    required = session["coverage"]["required"]
    out = []
    for k in range(1, n + 1):
        mine = {lane for lane, shard in plan.assignment.items() if shard == k}
        prefixes = tuple(f"{column}/{arms[lane]}/" for lane, column in lanes if lane in mine)
        shard_session = copy.deepcopy(session)
        shard_session["run_id"] = f"shard-run-{k}"
        shard_session["coverage"]["required"] = [label for label in required if label.startswith(prefixes)]
        shard_session["shard"] = {
            "k": k,
            "n": n,
            "source": f"--vsnap-shard={k}/{n}",
            "matrix_id": shards.matrix_id(matrix),
            "matrix": matrix,
            "lanes": [lane for lane, _ in lanes if lane in mine],
            "matrix_lanes": [
                {"name": lane, "column": column, "arm": arms[lane], "shard": plan.assignment[lane]}
                for lane, column in lanes
            ],
            "balanced_by": plan.balanced_by,
            "required": required,
        }
        body = [
            r
            for r in records[1:-1]
            if r["kind"] == "plan" or (r["kind"] in ("environment", "step") and _lane(r) in mine)
        ]
        out.append([shard_session, *copy.deepcopy(body), dict(records[-1])])
    return out


def _write(directory: Path, records: list[dict[str, Any]]) -> Path:
    directory.mkdir(parents=True)
    (directory / "evidence.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return directory


def _merged(tmp_path: Path, parts: list[list[dict[str, Any]]], *, n: int | None = None) -> dict[str, Any]:
    dirs = [_write(tmp_path / f"shard-{i + 1}", part) for i, part in enumerate(parts)]
    merged = merge_into(dirs, tmp_path / "merged", n)
    return dict(assemble(merged.evidence).results)


@pytest.fixture(scope="module")
def whole() -> list[dict[str, Any]]:
    return _one_machine()


def _digest(results: Mapping[str, Any]) -> tuple[Any, ...]:
    cov = results["verdict"]["coverage"]
    steps = [(s["runner"], s["arm"], s["step"], s["outcome"], s["results"]) for s in results["steps"]]
    return (
        results["verdict"]["status"],
        results["verdict"]["headline"],
        cov["required"],
        sorted(cov["passed"]),
        cov["failed"],
        cov["not_reached"],
        steps,
        [c["id"] for c in results["verdict"]["checks"]],
        [(c["id"], c["status"], sorted(i["id"] for i in c["items"])) for c in results["verdict"]["checks"]],
    )


def test_merging_the_shards_of_a_one_machine_run_gives_its_coverage_steps_and_verdict(
    whole: list[dict[str, Any]], tmp_path: Path
) -> None:
    one = assemble(Evidence(copy.deepcopy(whole))).results
    assert one["verdict"]["status"] == "pass" and one["verdict"]["coverage"]["required"] == 536
    parts = _split(whole)
    assert [len(p[0]["shard"]["lanes"]) for p in parts] == [4, 4, 4, 4]
    merged = _merged(tmp_path, parts)
    assert _digest(merged) == _digest(one)
    assert [s["status"] for s in merged["run"]["merge"]["shards"]] == ["ok"] * 4
    assert (tmp_path / "merged" / "evidence.jsonl").is_file()


def test_a_missing_shard_makes_the_verdict_incomplete_naming_its_lanes(
    whole: list[dict[str, Any]], tmp_path: Path
) -> None:
    parts = _split(whole)
    lost = parts.pop(2)
    merged = _merged(tmp_path, parts)
    verdict = merged["verdict"]
    assert verdict["status"] == "incomplete"
    lanes = lost[0]["shard"]["lanes"]
    assert verdict["headline"] == f"INCOMPLETE (shard 3/4 missing: lanes {', '.join(lanes)})"
    assert any(r.startswith("shard 3/4 is missing") and all(lane in r for lane in lanes) for r in verdict["reasons"])
    assert len(verdict["coverage"]["not_reached"]) == len([x for x in lost[1:] if x["kind"] == "step"])


def test_the_last_shard_missing_is_told_by_the_count_given(whole: list[dict[str, Any]], tmp_path: Path) -> None:
    """Without ``--shards``, the shards' own records say N; a shard missing at the end is still named."""
    parts = _split(whole)[:3]
    assert _merged(tmp_path / "a", parts)["verdict"]["headline"].startswith("INCOMPLETE (shard 4/4 missing")
    assert _merged(tmp_path / "b", parts, n=4)["verdict"]["status"] == "incomplete"


def test_a_shard_twice_another_matrix_or_interrupted_each_make_it_incomplete(
    whole: list[dict[str, Any]], tmp_path: Path
) -> None:
    parts = _split(whole)
    twice = _merged(tmp_path / "twice", [*parts, copy.deepcopy(parts[1])])
    assert twice["verdict"]["status"] == "incomplete"
    assert "shard 2/4 duplicate" in twice["verdict"]["headline"]
    assert _digest(twice)[2:7] == _digest(_merged(tmp_path / "once", parts))[2:7]  # the first copy counts, once

    other = _split(whole, matrix={**MATRIX, "image_ids": {"vsnap-reference:head": "sha256:2"}})
    foreign = _merged(tmp_path / "foreign", [*parts[:3], other[3]])
    assert foreign["verdict"]["status"] == "incomplete"
    shard4 = [s for s in foreign["run"]["merge"]["shards"] if s["status"] != "ok"]
    assert {s["status"] for s in shard4} == {"foreign", "missing"}
    assert "shard 4/4 missing" in foreign["verdict"]["headline"]

    killed = copy.deepcopy(parts)
    killed[0] = killed[0][:-1]  # no session_end: killed
    stopped = copy.deepcopy(parts)
    stopped[1][-1]["interrupted"] = "SIGTERM"
    for name, broken, k in (("killed", killed, 1), ("stopped", stopped, 2)):
        verdict = _merged(tmp_path / name, broken)["verdict"]
        assert verdict["status"] == "incomplete", name
        assert f"shard {k}/4 interrupted: lanes {', '.join(broken[k - 1][0]['shard']['lanes'])}" in verdict["headline"]


def test_setups_that_differ_between_shards_are_named_per_lane(whole: list[dict[str, Any]], tmp_path: Path) -> None:
    parts = _split(whole)
    parts[3][0]["host"] = {**parts[3][0]["host"], "kernel": "6.99.0-other"}
    for record in parts[2]:
        if record["kind"] == "environment":
            record["versions"]["criu"] = "Version: 9.9"
    verdict = _merged(tmp_path, parts)["verdict"]
    assert verdict["status"] == "pass"
    assert verdict["headline"] == "PASS (setups differ between shards: host kernel, CRIU)"
    kernel = next(r for r in verdict["reasons"] if r.startswith("setups differ between shards: host kernel"))
    assert "6.99.0-other on " + ", ".join(parts[3][0]["shard"]["lanes"]) in kernel
    assert "CRIU: " in next(r for r in verdict["reasons"] if "CRIU" in r)


def test_the_command_takes_directories_and_archives_and_exits_with_the_verdict(
    whole: list[dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parts = _split(whole)
    dirs = [_write(tmp_path / f"shard-{i + 1}", part) for i, part in enumerate(parts)]
    archive = tmp_path / "shard-4.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(dirs[3], arcname="shard-4")
    out = tmp_path / "merged"
    assert cli_main(["merge", *map(str, dirs[:3]), str(archive), "--out", str(out)]) == 0
    assert "PASS" in capsys.readouterr().out
    for name in ("results.json", "report.html", "summary.md", "junit.xml", "evidence.jsonl"):
        assert (out / name).is_file(), name
    assert json.loads((out / "results.json").read_text())["verdict"]["status"] == "pass"
    assert cli_main(["merge", *map(str, dirs[:3]), "--shards", "4", "--out", str(tmp_path / "m3")]) == 4
    assert cli_main(["merge", str(dirs[0]), "--out", str(dirs[0])]) == 2
