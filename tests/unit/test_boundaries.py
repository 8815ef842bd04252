"""Requests across the lifecycle's boundaries (``vsnap_qual.engine.boundaries``, issue 44 item 3): what came of a
request (a real HTTP request to a port nothing listens on, and to a server that answers), the judgements of the
request sent while recovery was held and of the one in flight at the graceful stop, and the lifecycle's restore
and stop steps recording and judging them (on the unit tests' fake lane)."""

from __future__ import annotations

import dataclasses
import http.server
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.fake_lane import FakeLane, lifecycle_lane
from vsnap_qual import procedure, steps
from vsnap_qual.engine import boundaries
from vsnap_qual.lane.snapshot_cli import fired_at
from vsnap_qual.lane.state import LifecycleState
from vsnap_qual.model import BoundaryRequest, DecodeSpeed
from vsnap_qual.recorder import StepEvidence
from vsnap_qual.runtimes.shell import parse_gpu_memory
from vsnap_qual.vllm_words import StepFailed


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def answering() -> Iterator[tuple[int, list[bytes]]]:
    """A local HTTP server that answers each POST with the next scripted body (status 200)."""
    bodies: list[bytes] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers["Content-Length"]))
            body = bodies.pop(0)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1], bodies
    server.shutdown()
    server.server_close()


def test_a_request_to_a_port_nothing_listens_on_is_refused_and_an_answer_is_read_with_its_tokens(
    answering: tuple[int, list[bytes]],
) -> None:
    started = time.time()
    refused, ids = boundaries.send(f"http://127.0.0.1:{_closed_port()}/v1/completions", {}, 5.0, started)
    assert (refused["outcome"], refused["accepted"], ids) == ("refused", False, None)
    assert refused["detail"].startswith("nothing listened: ")
    port, bodies = answering
    bodies += [json.dumps({"choices": [{"token_ids": [1, 2, 3]}]}).encode(), b'{"choices": []}']
    answered, ids = boundaries.send(f"http://127.0.0.1:{port}/v1/completions", {}, 5.0, started)
    assert (answered["outcome"], answered["status"], answered["tokens"], ids) == ("answered", 200, 3, [1, 2, 3])
    cut, ids = boundaries.send(f"http://127.0.0.1:{port}/v1/completions", {}, 5.0, started)
    assert ids is None and "tokens" not in cut and cut["detail"].startswith("HTTP 200 whose body is no whole answer")


def _held(**fields: Any) -> BoundaryRequest:
    record = BoundaryRequest(boundary="recovery", held=True, hold_s=1.5, sent_s=0.05, ended_s=0.06)
    record.update(fields)  # type: ignore[typeddict-item]
    return record


def test_a_request_sent_while_recovery_is_held_must_find_nothing_listening() -> None:
    refused = boundaries.judge_recovery(_held(accepted=False, outcome="refused"))
    assert refused == {"boundary": "recovery", "ok": True,
                       "detail": "refused while recovery was held (1.5 s): nothing listened"}  # fmt: skip
    early = boundaries.judge_recovery(_held(accepted=True, outcome="answered", status=200, ended_s=0.4, answer_ok=True))
    assert early["ok"] is False and "answered HTTP 200 0.40 s after the hold began, before it ended" in early["detail"]
    assert early["detail"].endswith("(the ordinary engine's answer)")
    later = boundaries.judge_recovery(_held(accepted=True, outcome="answered", status=200, ended_s=2.0))
    assert later["ok"] is False and "0.50 s after the 1.5 s hold ended" in later["detail"]
    assert "taken by a listener bound before recovery and its private check completed" in later["detail"]
    # not judged: the hold never began, or the request went out after it ended
    assert boundaries.judge_recovery(BoundaryRequest(held=False, outcome="not sent", detail="no point"))["ok"] is None
    late = boundaries.judge_recovery(_held(sent_s=1.7, accepted=False, outcome="refused"))
    assert late["ok"] is None and late["detail"].startswith("not judged: sent 1.70 s after the hold began")


def test_a_request_in_flight_at_the_stop_completes_or_is_refused_and_a_cut_answer_is_a_finding() -> None:
    def stop(**fields: Any) -> bool | None:
        record = BoundaryRequest(boundary="stop", in_flight=True)
        record.update(fields)  # type: ignore[typeddict-item]
        return boundaries.judge_stop(record, 48)["ok"]

    assert stop(outcome="answered", status=200, tokens=48) is True
    assert stop(outcome="answered", status=503, detail="HTTP 503: shutting down") is True
    assert stop(outcome="closed", detail="taken, then closed with no answer") is True
    assert stop(outcome="refused", detail="nothing listened") is True
    assert stop(outcome="answered", status=200, tokens=20) is False
    assert stop(outcome="timed out", detail="taken, no answer in 30 s") is False
    done_before = BoundaryRequest(boundary="stop", in_flight=False, outcome="answered", status=200, tokens=48)
    assert boundaries.judge_stop(done_before, 48)["ok"] is None


def test_the_probe_records_time_and_nvidia_smis_memory_rows_are_read() -> None:
    assert fired_at("2026-12-07T10:00:00.250000Z") == pytest.approx(1796637600.25)
    assert fired_at("garbled") is None and fired_at(None) is None
    assert fired_at(1796637600.25) == 1796637600.25  # an engine of a runtime's own may write the epoch second
    assert parse_gpu_memory("123, 4000\n124, [N/A]\n123, 96\n") == {123: 4096}


def _lane(**change: Any) -> FakeLane[LifecycleState]:
    lane = lifecycle_lane()
    for key, value in change.items():
        setattr(lane, key, value)
    steps.ordinary_reference(lane, StepEvidence.of(procedure.ORDINARY))
    steps.inspect(lane, StepEvidence.of(procedure.INSPECT))
    return lane


def test_the_first_restore_holds_its_recovery_and_a_request_taken_then_fails_it_alone() -> None:
    lane = _lane()
    rec = StepEvidence.of(procedure.RESTORE_1)
    steps.restore(lane, rec)
    (judged,) = rec.results["boundary_judgements"]
    assert judged["ok"] is True and rec.results["boundary_requests"][0]["held"] is True
    assert rec.results["serving_judgement"]["ok"] is True
    taken = _lane(recovery_taken=True)
    rec = StepEvidence.of(procedure.RESTORE_1)
    with pytest.raises(StepFailed) as failure:
        steps.restore(taken, rec)
    assert " | " not in str(failure.value) and "restore-1: a request sent while the restore was recovering" in str(
        failure.value
    )
    assert rec.results["boundary_requests"][0]["answer_ok"] is True  # the canary's answer, only too early
    # the other restores are not held
    again = StepEvidence.of(procedure.RESTORE_2)
    steps.restore(taken, again)
    assert "boundary_requests" not in again.results


def test_restore_2s_stop_sends_a_request_in_flight_and_a_cut_answer_fails_the_step() -> None:
    lane = _lane()
    rec = StepEvidence.of(procedure.RESTORE_2)
    steps.restore_then_stop(lane, rec)
    (judged,) = rec.results["boundary_judgements"]
    assert judged == {"boundary": "stop", "ok": True, "detail": "completed (48 tokens) as it stopped"}
    assert lane.boundary_calls[-1][2] == boundaries.STOP_TOKENS
    cut = _lane(stop_answer=("answered", 200, 20))
    rec = StepEvidence.of(procedure.RESTORE_2)
    with pytest.raises(StepFailed) as failure:
        steps.restore_then_stop(cut, rec)
    assert "restore-2: a request in flight at the graceful stop was answered HTTP 200 with a cut answer: 20 of 48" in (
        str(failure.value)
    )
    assert rec.delivered  # stopped cleanly: restore-after-stop runs after it
    after = StepEvidence.of(procedure.RESTORE_AFTER_STOP)
    steps.restore_then_stop(cut, after)
    assert "boundary_requests" not in after.results


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"counters_frozen_after": {"requests"}}, "vllm:request_success_total moved by 0 after restore, 6 on the"),
        ({"rss_growth_after_kb": 8192}, "resident memory grows 8.03 MiB per request after restore, 0.03 on the"),
    ],
)
def test_a_restore_whose_counters_stay_or_memory_grows_fails_the_serving_series_alone(
    change: dict[str, Any], said: str
) -> None:
    lane = _lane(**change)
    rec = StepEvidence.of(procedure.RESTORE_1)
    with pytest.raises(StepFailed) as failure:
        steps.restore(lane, rec)
    assert f"restore-1: {said}" in str(failure.value) and " | " not in str(failure.value), str(failure.value)
    assert rec.results["serving_judgement"]["ok"] is False


def test_an_engine_without_metrics_has_the_series_not_applicable_and_passes() -> None:
    lane = _lane(metrics_served=False)
    rec = StepEvidence.of(procedure.RESTORE_1)
    steps.restore(lane, rec)
    judged = rec.results["serving_judgement"]
    assert judged["status"] == "not applicable" and judged["detail"].startswith("GET /metrics: HTTP 404")


def test_the_stop_request_lasts_about_a_second_of_the_ordinary_engines_decoding() -> None:
    """48 tokens took the reference engine under 0.2 s, so at the stop of 3 of 4 lanes the request had ended before
    the engine was first asked whether it ran and went unjudged: the request is sized by the measured speed."""
    assert boundaries.stop_tokens(300.0, 512) == 256  # a fast engine: capped
    assert boundaries.stop_tokens(120.0, 512) == 120  # about a second of it
    assert boundaries.stop_tokens(20.0, 512) == boundaries.STOP_TOKENS  # a slow one: the floor
    assert boundaries.stop_tokens(None, 512) == boundaries.STOP_TOKENS  # nothing measured
    assert boundaries.stop_tokens(300.0, 160) == 80  # never more than half the model length


def test_the_stop_request_asks_the_sized_count_and_judges_against_it() -> None:
    config = dataclasses.replace(lifecycle_lane().config, max_model_len=512)
    lane = _lane(stop_answer=("answered", 200, 150), config=config)
    assert lane.state.ordinary is not None
    lane.state.ordinary.decode = DecodeSpeed(tokens=64, runs_tps=[150.0], median_tps=150.0)
    rec = StepEvidence.of(procedure.RESTORE_2)
    steps.restore_then_stop(lane, rec)
    assert lane.boundary_calls[-1][2] == 150
    (judged,) = rec.results["boundary_judgements"]
    assert judged == {"boundary": "stop", "ok": True, "detail": "completed (150 tokens) as it stopped"}
