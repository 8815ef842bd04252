"""The random-kill kind's pure parts (issue 29): the seeded draw, the tree a signal goes to, the phase reached,
and what the judge says of the artifact and the sweep. The kind's run against the reference engine is
``tests/broken`` (a restore that trusts a half-written artifact) and the committed chaos run."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from vsnap_qual import model
from vsnap_qual.box import ProcessRow
from vsnap_qual.faults import BUILTIN_FAULTS as FAULTS
from vsnap_qual.faults import BUILTIN_INJECTORS, FAULTS_BY_ID, FaultCatalogue, Observation, parked
from vsnap_qual.faults.kinds import kill as kills
from vsnap_qual.faults.kinds.kill import KillParams
from vsnap_qual.lane.artifact_files import Entry
from vsnap_qual.model import KilledCanaries
from vsnap_qual.report import chaos


def _row(pid: int, ppid: int, sid: int, args: str) -> ProcessRow:
    return {"pid": pid, "ppid": ppid, "sid": sid, "stat": "S", "args": args}


def test_a_draw_replays_from_its_seed_lane_fault_and_attempt() -> None:
    first = kills.draw(7, "v1/head", "kill-create", 1, 10.0)
    assert kills.draw(7, "v1/head", "kill-create", 1, 10.0) == first  # the same four: the same moment
    others = {
        kills.draw(8, "v1/head", "kill-create", 1, 10.0),
        kills.draw(7, "v2/head", "kill-create", 1, 10.0),
        kills.draw(7, "v1/head", "kill-create.2", 1, 10.0),
        kills.draw(7, "v1/head", "kill-create", 2, 10.0),
    }
    assert first not in others and len(others) == 4
    offsets = [kills.draw(3, "l", "f", a, 4.0) for a in range(1, 200)]
    span = kills.SPAN * 4.0  # a margin for the command's own jitter: a draw past its end tests nothing
    assert all(0 <= off < span and off == pytest.approx(frac * span, abs=1e-3) for off, frac in offsets)
    assert min(f for _, f in offsets) < 0.1 and max(f for _, f in offsets) > 0.9  # over the whole span


def test_a_kill_is_drawn_over_the_shortest_duration_the_command_took_in_the_lane() -> None:
    from vsnap_qual.lane.state import FaultState

    state = FaultState()
    for seconds in (0.62, 0.5504, 0.71):
        state.timed("restore", seconds)
    state.timed("create", 3.0)
    assert state.timings == {"restore": 0.55, "create": 3.0}


PROCS = [
    _row(100, 1, 100, "sleep infinity"),  # the box's own
    _row(200, 1, 200, "timeout --signal=TERM --kill-after=10 900s vllm snapshot restore /vsnap/work/artifact"),
    _row(201, 200, 200, "/usr/bin/python3 /usr/local/bin/vllm snapshot restore /vsnap/work/artifact --port 5"),
    _row(202, 201, 200, "/opt/vsnap-criu/lib/ld-linux.so.2 --library-path /x /opt/vsnap-criu/bin/criu restore -D i"),
    _row(203, 1, 200, "[ld-linux-x86-64]"),  # reparented, same session: still the command's
    _row(300, 1, 300, "timeout --signal=TERM 900s vllm snapshot restore /vsnap/work/other"),  # another target
    _row(301, 300, 300, "/usr/bin/python3 /usr/local/bin/vllm snapshot restore /vsnap/work/other"),
]  # fmt: skip


def test_the_signal_goes_to_the_commands_whole_tree_never_to_the_harness_wrapper_or_another_target() -> None:
    root, tree = kills.command_tree(PROCS, "restore", "/vsnap/work/artifact")
    assert root == 201
    assert sorted(p["pid"] for p in tree) == [201, 202, 203]  # descendants and session, wrapper (200) left out
    assert kills.command_tree(PROCS, "create", "/vsnap/work/artifact") == (None, [])


def test_a_session_the_command_only_joined_is_not_its_tree() -> None:
    """The host runtime runs every command of a lane in the session of its namespace holder: a kill of that
    session took the lane down (the first H200 chaos run: "its namespace holder is gone"). Only the command's
    descendants are its tree there."""
    lane = [
        _row(10, 1, 10, "vsnap-lane-holder sleep"),  # the lane's namespace holder leads the session
        _row(11, 10, 10, "sh -c exec"),
        _row(12, 11, 10, "timeout --signal=TERM 900s vllm snapshot create --snapshot-dir /vsnap/work/fault-create"),
        _row(
            13, 12, 10, "/usr/bin/python3 /usr/local/bin/vllm snapshot create --snapshot-dir /vsnap/work/fault-create"
        ),
        _row(14, 13, 14, "/usr/bin/python3 -m vllm.snapshot.server"),  # its child, a session of its own
        _row(15, 14, 14, "/usr/bin/python3 -m vllm.v1.engine.core"),
        _row(16, 10, 10, "python3 listener-scan"),  # the harness's helper in the lane
    ]
    root, tree = kills.command_tree(lane, "create", "/vsnap/work/fault-create")
    assert root == 13 and sorted(p["pid"] for p in tree) == [13, 14, 15]


def test_the_phase_reached_is_read_from_the_process_names() -> None:
    _, tree = kills.command_tree(PROCS, "restore", "/vsnap/work/artifact")
    assert kills.phase_reached("restore", tree, captured_alive=True) == "criu restore"
    assert parked.criu_action("/usr/sbin/criu dump -t 5 -D x") == "dump"
    assert parked.criu_action("/opt/vsnap-criu/x/ld.so --library-path /opt/vsnap-criu/lib criu.txt") is None
    controller = [PROCS[2]]
    assert kills.phase_reached("restore", controller, captured_alive=False) == "before criu restore"
    assert kills.phase_reached("restore", controller, captured_alive=True) == "restored tree up, recovery running"
    assert kills.phase_reached("create", controller, captured_alive=False) == "controller only"
    assert kills.phase_reached("create", [*controller, PROCS[0]], captured_alive=False) == "engine child running"


@pytest.mark.parametrize(
    ("killed", "problem"),
    [
        ({"outcome": "absent"}, None),
        ({"outcome": "refused by inspect", "message": "manifest does not exist"}, None),
        ({"outcome": "refused by restore", "message": ""}, "refused by restore without a message"),
        ({"outcome": "restored", "canaries": {"ok": True}}, None),
        ({"outcome": "restored", "canaries": {"ok": False, "compared": [{"ok": False}]}}, "half-written artifact"),
        (  # vLLM's pre-check twice: a refusal with words, but of the host's PIDs, not of the artifact
            {"outcome": "refused by restore", "message": "captured PID is already occupied: 7", "ids_taken": "x"},
            "was never tried",
        ),
    ],
)
def test_a_killed_creates_artifact_is_absent_refused_with_words_or_answers_as_the_ordinary_engine(
    killed: dict[str, Any], problem: str | None
) -> None:
    said = kills.killed_artifact_problems(killed)
    assert (said == []) if problem is None else (len(said) == 1 and problem in said[0]), said


def _judged(results: dict[str, Any]) -> list[str]:
    return BUILTIN_INJECTORS["kill"].problems(Observation(exit_code=137), cast(model.FaultResults, results))


def test_the_kill_kind_judges_the_sweep_and_the_artifact_whatever_the_command_did() -> None:
    clean: dict[str, Any] = {
        "cleanup": {"after_sweep": {"ok": True}},
        "followup_restore": {"exit_code": 0, "canary_ok": True},
    }
    assert _judged(clean) == []
    leaked = {**clean, "cleanup": {"after_sweep": {"ok": False, "pids_alive": [9], "gpu_idle": False}}}
    assert "outlived the harness's sweep" in _judged(leaked)[0]
    # issue 44: the artifact was whole before a killed restore, so a refusal of it is a finding, with words or not,
    # naming what the kill changed in it against the pristine listing
    changes = ["renamed images/pages-1.img -> images/pages-1.img.tmp", "added restore.log"]
    refused = {
        **clean,
        "followup_restore": {"exit_code": 1, "stderr_tail": "Error: CRIU restore failed"},
        "injected": {"command": "restore", "artifact_changes": changes},
    }
    (said,) = _judged(refused)
    assert said.startswith("a killed restore left the artifact unrestorable: the follow-up restore"), said
    assert (
        "exited 1: Error: CRIU restore failed" in said and f"against its pristine listing: {'; '.join(changes)}" in said
    )
    silent = {**clean, "followup_restore": {"exit_code": 1, "stderr_tail": ""}}
    (said,) = _judged(silent)
    assert "exited 1 without a message" in said and "nothing (the listing is the pristine copy's)" in said
    # an artifact whose outside files are gone is the self-contained check's one finding, not this fault's
    assert _judged({**clean, "followup_restore": {"exit_code": 1, "consumed": ["/dev/shm/psm_1"]}}) == []
    wrong = {**clean, "followup_restore": {"exit_code": 0, "canary_ok": False}}
    assert "does not answer vLLM's canary" in _judged(wrong)[0]
    taken = "vLLM's pre-check found a captured PID taken (another process held it): ... occupied: 7"
    occupied = {
        **clean,
        "followup_restore": {"exit_code": 1, "stderr_tail": "SnapshotRestoreError: x", "ids_taken": taken},
    }
    said_taken = _judged(occupied)
    assert len(said_taken) == 1 and "was never tried" in said_taken[0] and taken in said_taken[0], said_taken


def _entry(kind: str, size: int, mode: str = "644") -> Entry:
    return Entry(kind, mode, f"1 {size} 1.0 1.0")


def test_what_a_killed_restore_changed_in_the_artifact_is_named_against_its_pristine_listing() -> None:
    pristine = {
        "images": _entry("d", 4096, "755"),
        "images/pages-1.img": _entry("f", 800),
        "images/core-7.img": _entry("f", 300),
        "manifest.json": _entry("f", 90),
        "weights.bin": _entry("f", 50),
    }
    now = {
        "images": _entry("d", 4096, "700"),
        "images/pages-1.img.part": _entry("f", 800),  # the same size: renamed
        "images/core-7.img": _entry("f", 120),
        "manifest.json": _entry("f", 90, "000"),
        "restore.log": _entry("f", 10),
    }
    assert kills.listing_changes(pristine, now) == [
        "renamed images/pages-1.img -> images/pages-1.img.part",
        "removed weights.bin",
        "mode of images 755 -> 700",
        "truncated images/core-7.img (300 -> 120 bytes)",
        "mode of manifest.json 644 -> 000",
        "added restore.log",
    ]
    assert kills.listing_changes(pristine, pristine) == []


def test_the_chaos_option_repeats_only_the_kill_faults_each_with_its_own_id() -> None:
    catalogue = FaultCatalogue.builtin()
    catalogue.repeat_kills(3)
    kinds = [f for f in catalogue.faults if f.kind == "kill"]
    assert [f.id for f in kinds if f.id.startswith("kill-create")] == ["kill-create", "kill-create.2", "kill-create.3"]
    assert len(kinds) == 3 * len([f for f in FAULTS if f.kind == "kill"])
    assert len(catalogue.faults) == len(FAULTS) + 2 * len(kinds) // 3
    assert catalogue.injector_for(FAULTS_BY_ID["kill-restore"]) is catalogue.injector_for(kinds[-1])


def _step(name: str, outcome: str, injected: dict[str, Any], **results: Any) -> dict[str, Any]:
    return {"lane": "v1-head", "step": name, "outcome": outcome, "results": {"injected": injected, **results}}


def test_the_chaos_figures_count_per_phase_and_name_the_seed_of_each_failure() -> None:
    base = {"seed": 11, "command": "create", "signal": "SIGKILL", "offset_s": 1.0, "attempt": 1}
    ok_sweep = {"after_sweep": {"ok": True}}
    run = {
        "steps": [
            _step("fault:kill-create", "passed", {**base, "sent": ["x"], "phase": "criu dump"},
                  cleanup={**ok_sweep, "leftover_processes": ["5 python"], "leftover_states": {"5": "Ssl"},
                           "leftover_wchan": {"5": "futex_do_wait"}},
                  killed_artifact={"outcome": "refused by inspect", "message": "no manifest"}),
            _step("fault:kill-create.2", "failed", {**base, "sent": ["x"], "phase": "criu dump", "attempt": 2},
                  cleanup={"after_sweep": {"ok": False}}, mismatches=["something outlived the harness's sweep"],
                  killed_artifact={"outcome": "restored", "canaries": {"ok": False}}),
            _step("fault:kill-create.3", "failed", {**base, "sent": []}, mismatches=["ineffective injection"]),
            _step("fault:wake-raise", "passed", {}),
        ]
    }  # fmt: skip
    fig = chaos.figures(cast(model.RunEvidence, run))  # the fields the chaos figures read
    row = fig["rows"][("create", "SIGKILL", "criu dump")]
    assert (row["runs"], row["left by the command"], row["leaks after the sweep"], row["failed"]) == (2, 1, 1, 1)
    assert dict(row["artifact"]) == {"refused by inspect": 1, "restored, WRONG": 1}
    assert dict(row["left_how"]) == {"parked": 1}  # every process on a futex: CRIU's restorer
    assert chaos.left_how({"leftover_states": {"5": "T"}}) == "stopped"
    assert chaos.left_how({"leftover_states": {"5": "S"}, "leftover_wchan": {"5": "do_epoll_wait"}}) == "running"
    assert fig["missed"] == 1 and fig["seeds"] == [11]
    assert [f["step"] for f in fig["failed"]] == ["fault:kill-create.2", "fault:kill-create.3"]
    text = chaos.render(fig)
    assert "--vsnap-kill-seed=11 (attempt 2" in text and "every draw missed: 1" in text
    assert "; left: parked 1" in text


def test_vllms_own_cleanup_is_not_judged_where_the_signal_reached_criu_mid_restore() -> None:
    """The first H200 chaos run: SIGTERM to the restore's tree while CRIU restored left the restored engine core
    stopped, holding GPU memory, in 9 of 18; vLLM never signals a PID it has not pinned (its contract), so there is
    no cleanup of vLLM's to judge there: what was left is recorded, the harness's sweep is judged."""
    from types import SimpleNamespace

    from vsnap_qual.faults import judge
    from vsnap_qual.procedure import ANY, Expect

    kind = BUILTIN_INJECTORS["kill"]
    for phase, expected, judged in (
        ("criu restore", True, False),
        ("restored tree up, recovery running", True, True),
        ("before criu restore", True, True),
        ("criu restore", False, False),
    ):
        at = SimpleNamespace(injected={"phase": phase}, fault=FAULTS_BY_ID["term-restore"])
        assert kind.own_cleanup_judged(at, expected, [], {}) is judged, (phase, expected)  # type: ignore[arg-type]
        assert ("own_cleanup" in at.injected) is (expected and not judged)
    # the CPU chaos run: CRIU spawned after the listing, killed by vLLM's error path, left the tree stopped
    restore = FAULTS_BY_ID["term-restore"]
    at = SimpleNamespace(injected={"phase": "before criu restore"}, fault=restore)
    stopped = [_row(21524, 1, 21524, "python3 -m vllm.snapshot.server") | {"stat": "T"}]
    assert kind.own_cleanup_judged(at, True, stopped, {}) is False  # type: ignore[arg-type]
    assert "CRIU left [21524] stopped" in at.injected["own_cleanup"]
    # and parked on a futex in CRIU's restorer, as every such leftover of a later CPU run waited (futex_do_wait)
    running = [_row(21524, 1, 21524, "python3 -m vllm.snapshot.server") | {"stat": "Ssl"}]
    at = SimpleNamespace(injected={"phase": "before criu restore"}, fault=restore)
    assert kind.own_cleanup_judged(at, True, running, {"21524": "futex_do_wait"}) is False  # type: ignore[arg-type]
    assert "parked in its restorer" in at.injected["own_cleanup"]
    serving = SimpleNamespace(injected={}, fault=restore)
    assert kind.own_cleanup_judged(serving, True, running, {"21524": "do_epoll_wait"}) is True  # type: ignore[arg-type]
    left: model.CleanupAudit = {"ok": False, "leftover_processes": ["731 engine core"], "after_sweep": {"ok": True}}
    results: model.FaultResults = {"followup_restore": {"exit_code": 0, "canary_ok": True}}
    fault, expect = FAULTS_BY_ID["term-restore"], Expect(ANY, None, None, None, followup_restore=False)
    obs = Observation(exit_code=1, fired=True)
    assert judge(fault, expect, obs, {**results, "cleanup": {**left, "judged": False}}, kind) == []
    said = judge(fault, expect, obs, {**results, "cleanup": {**left, "judged": True}}, kind)
    assert len(said) == 1 and said[0].startswith("cleanup incomplete"), said


def test_a_restore_that_completed_before_the_signal_took_effect_leaves_its_server_by_design() -> None:
    """The CPU chaos run: SIGTERM near the end of a restore killed the controller after it had completed (exit
    143, no error path of vLLM's ran) and the restored server, serving, was judged a leftover. A server that
    serves on the port after an exit by the signal itself (or 0) runs by design: the harness stops it first."""
    from types import SimpleNamespace

    kind = BUILTIN_INJECTORS["kill"]

    def attempt(signal: str, command: str, listening: set[int]) -> Any:
        box = SimpleNamespace(listening_ports=lambda: listening, connect_proves_listener=False)
        fault = SimpleNamespace(id="f", kind="kill", params=KillParams(command, signal.removeprefix("SIG")))
        return SimpleNamespace(lane=SimpleNamespace(box=box), port=8000, fault=fault, injected={"signal": signal})

    serving: set[int] = {8000}
    silent: set[int] = set()
    for signal, command, code, ports, left in (
        ("SIGTERM", "restore", 143, serving, True),
        ("SIGKILL", "restore", 137, serving, True),
        ("SIGTERM", "restore", 0, serving, True),
        ("SIGTERM", "restore", 1, serving, False),  # vLLM's error path ran: its own cleanup is judged
        ("SIGTERM", "restore", 143, silent, False),
        ("SIGTERM", "create", 143, serving, False),
    ):
        at = attempt(signal, command, ports)
        assert kind.left_serving(at, Observation(exit_code=code)) is left, (signal, command, code, ports)
        assert ("completed" in at.injected) is left


def _asked(tmp_path: Path, answers: list[Any], ordinary: list[Any] | None) -> KilledCanaries:
    """What ``ask_canaries`` says of a fake fault lane whose server answers ``answers``, compared with the ordinary
    engine's ``ordinary`` answers (None: no ordinary reference)."""
    from tests.support.fake_lane import fault_lane
    from vsnap_qual.lane.state import OrdinaryReference

    lane = fault_lane(tmp_path / f"lane-{len(list(tmp_path.iterdir()))}" / "control")
    lane.state.manifest = {"oracle_token_ids": [5], "oracle_text": " a", "oracle_sampled_token_logprob": -0.5}
    lane.configure(logprob_tolerance=0.01)
    lane.canary_answers = answers
    reference = None if ordinary is None else OrdinaryReference([c.as_dict() for c in ordinary], {}, None)
    return kills.ask_canaries(lane, 1, reference)


def test_a_restored_killed_create_is_asked_the_lanes_canaries_and_each_compared_with_the_ordinary_engine(
    tmp_path: Path,
) -> None:
    from vsnap_qual.contract import VLLM_CANARY_PROMPT
    from vsnap_qual.engine.client import CanaryOutput

    first = CanaryOutput(VLLM_CANARY_PROMPT, [5], " a", -0.5)
    second = CanaryOutput("p", [1, 2], " b c", -0.1, [-0.1, -0.2])
    assert _asked(tmp_path, [first, second], [first, second])["ok"] is True
    wrong = CanaryOutput("p", [1, 3], " b d", -0.1, [-0.1, -0.2])
    said = _asked(tmp_path, [first, wrong], [first, second])
    assert said["ok"] is False and [c["ok"] for c in said["compared"]] == [True, False]
    assert _asked(tmp_path, [first], [first, second])["ok"] is False  # an answer missing
    # no ordinary reference in the lane: vLLM's canary against the fault artifact's oracle
    alone = _asked(tmp_path, [first, wrong], None)
    assert alone["ok"] is True and alone["against"] == "the fault artifact's oracle"
    assert _asked(tmp_path, [wrong], None)["ok"] is False
