"""Requests across the lifecycle's boundaries (issue 44 item 3): one request sent while a restore is recovering,
and one in flight when a restored server is stopped gracefully; how one is sent and what came of it, and the
judgement of each. Pure but for the sender (HTTP at the address the lane gives).

**Recovery.** The first restore's recovery is held for :data:`HOLD_S` seconds at the probe's :data:`HOLD_POINT`
(``wake_up`` of the KV cache, in the worker, before the engine resumes generation and runs its private canary; the
hook is armed through the lane's control directory as a fault's is, and its record says when the hold began). Once
the hold began, the canary request is sent to the restore's port. Nothing may take it while recovery runs: vLLM binds
its HTTP listener only once recovery and its private canary passed (the head behaviour; the released one binds after
recovering memory, before the held point too), so the request must be refused (nothing listens). A request taken by
a listener during the hold can be answered before the private canary passed (it waits at most for the engine to
resume generation, which comes before the canary): a finding, named with when it was answered, as is an answer
before the hold ended. A request sent after the hold ended (a slow harness) is not judged; a hook that never fired
(an engine without the point, a box whose probe is not loaded) is not judged either, in those words.

**Stop.** Before ``restore-2``'s restored server is stopped (SIGTERM to its session, as a scale-down stops it), a
greedy request for about a second of the ordinary engine's decoding (:func:`stop_tokens`) is
sent; the stop begins once the engine reports it running
(``vllm:num_requests_running``; where the engine reports no such gauge, at once). It must complete (HTTP 200 with
every token asked) or be refused (an HTTP error with its words, or the connection closed with no answer): a 200
whose answer is cut short, or no answer and no close within the HTTP timeout, is a finding. That the next restore
still works is ``restore-after-stop``'s own check, the step after it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import requests
import urllib3

from vsnap_qual.checks import Finding
from vsnap_qual.model import BoundaryJudgement, BoundaryRequest

#: the probe's point that holds a restore's recovery, and for how long
HOLD_POINT = "wake-stall"
HOLD_S = 1.5
#: how long after the restore command ended the harness still looks for the hold's record (an engine that bound
#: before recovering lets the command end before recovery reached the point)
HOLD_LATE_S = 5.0
#: the request in flight at the graceful stop, greedy, ``min_tokens`` equal: about ``STOP_SECONDS`` of the ordinary
#: engine's measured decoding, at least ``STOP_TOKENS``, at most ``STOP_TOKENS_MAX`` (:func:`stop_tokens`)
STOP_TOKENS = 48
STOP_TOKENS_MAX = 256
STOP_SECONDS = 1.0


def stop_tokens(ordinary_tps: float | None, max_model_len: int) -> int:
    """How many tokens the request in flight at the stop asks: about :data:`STOP_SECONDS` of the ordinary engine's
    measured decoding, so that it is still running when the engine reports it and the stop begins (a fixed 48
    tokens took the reference engine under 0.2 s: on 3 of 4 lanes it had ended before the first look and went
    unjudged); at least :data:`STOP_TOKENS` (without a measurement too, and before the cap of half the model
    length, as the fixed count was), at most :data:`STOP_TOKENS_MAX` (a slow engine's stop is not kept waiting)."""
    wanted = round(ordinary_tps * STOP_SECONDS) if ordinary_tps else STOP_TOKENS
    return max(STOP_TOKENS, min(wanted, STOP_TOKENS_MAX, max_model_len // 2))


def send(url: str, body: dict[str, object], timeout: float, started: float) -> tuple[BoundaryRequest, list[int] | None]:
    """One request, and what came of it (times from ``started``): refused at connect (nothing listened), answered
    (its status; a 200's token ids), the connection closed with no answer, or no answer within ``timeout``."""
    sent = time.time()
    record = BoundaryRequest(sent_s=round(sent - started, 3))
    token_ids: list[int] | None = None
    try:
        response = requests.post(url, json=body, timeout=timeout)
    except requests.ConnectTimeout as exc:
        record.update({"accepted": False, "outcome": "timed out", "detail": f"no connection in {timeout:g} s: {exc}"})
    except requests.Timeout:
        record.update({"accepted": True, "outcome": "timed out", "detail": f"taken, no answer in {timeout:g} s"})
    except requests.ConnectionError as exc:
        refused = _refused(exc)
        said = ("nothing listened: " if refused else "taken, then closed with no answer: ") + _short(exc)
        record.update({"accepted": not refused, "outcome": "refused" if refused else "closed", "detail": said})
    else:
        record.update({"accepted": True, "outcome": "answered", "status": response.status_code})
        if response.status_code == 200:
            try:
                ids = response.json()["choices"][0]["token_ids"]
                token_ids = [int(t) for t in ids]
                record["tokens"] = len(token_ids)
            except (ValueError, KeyError, IndexError, TypeError) as exc:
                record["detail"] = (
                    f"HTTP 200 whose body is no whole answer ({type(exc).__name__}): {response.text[:160]}"
                )
        else:
            record["detail"] = f"HTTP {response.status_code}: {response.text.strip()[:160]}"
    record["ended_s"] = round(time.time() - started, 3)
    return record, token_ids


def _refused(exc: requests.ConnectionError) -> bool:
    """Whether the connection itself was refused (urllib3's new-connection error), not taken and then dropped."""
    reason = getattr(exc.args[0], "reason", None) if exc.args else None
    return isinstance(reason, urllib3.exceptions.NewConnectionError)


def _short(exc: BaseException) -> str:
    text = str(exc)
    return text if len(text) <= 200 else text[:200] + "…"


def judge_recovery(record: BoundaryRequest) -> BoundaryJudgement:
    """The request sent while the restore's recovery was held (the module docstring's rules; ``answer_ok``, where
    the record has it, says whether a 200's tokens are the ordinary engine's)."""
    hold = record.get("hold_s", HOLD_S)
    if not record.get("held"):
        why = record.get("detail") or f"the probe's {HOLD_POINT} point did not fire during the restore"
        return BoundaryJudgement(boundary="recovery", ok=None, detail=f"not judged: {why}")
    if record.get("outcome") == "not sent" or record.get("sent_s", hold) >= hold:
        return BoundaryJudgement(
            boundary="recovery", ok=None,
            detail=f"not judged: sent {record.get('sent_s', 0.0):.2f} s after the hold began, past its {hold:g} s",
        )  # fmt: skip
    outcome, ended = record.get("outcome"), record.get("ended_s", 0.0)
    if not record.get("accepted"):
        if outcome == "refused":
            return BoundaryJudgement(
                boundary="recovery", ok=True, detail=f"refused while recovery was held ({hold:g} s): nothing listened"
            )
        return BoundaryJudgement(boundary="recovery", ok=None, detail=f"not judged: {record.get('detail')}")
    record["accepted_during_hold"] = True
    when = (
        f"{ended:.2f} s after the hold began, before it ended"
        if ended < hold
        else f"{ended - hold:.2f} s after the {hold:g} s hold ended, when the engine had resumed generation "
        "and its private canary had not necessarily run"
    )
    if outcome == "answered":
        said = f"answered HTTP {record.get('status')} {when}"
        if "answer_ok" in record:
            said += " (the ordinary engine's answer)" if record["answer_ok"] else " (not the ordinary engine's answer)"
    else:
        said = f"{outcome} {when}: {record.get('detail')}"
    return BoundaryJudgement(
        boundary="recovery",
        ok=False,
        detail=f"a request sent while the restore was recovering (held {hold:g} s at {HOLD_POINT}) was taken by a "
        f"listener bound before recovery and its private check completed, and {said}",
    )


def judge_stop(record: BoundaryRequest, max_tokens: int) -> BoundaryJudgement:
    """The request in flight at the graceful stop: completed, or refused cleanly (the module docstring's rules)."""
    outcome, status = record.get("outcome"), record.get("status")
    if record.get("in_flight") is False:
        return BoundaryJudgement(
            boundary="stop", ok=None, detail=f"not judged: it {outcome} before the engine reported it running"
        )
    if outcome == "answered" and status == 200:
        if record.get("tokens") == max_tokens:
            return BoundaryJudgement(boundary="stop", ok=True, detail=f"completed ({max_tokens} tokens) as it stopped")
        cut = f"{record['tokens']} of {max_tokens} tokens" if "tokens" in record else record.get("detail", "")
        return BoundaryJudgement(
            boundary="stop", ok=False,
            detail=f"a request in flight at the graceful stop was answered HTTP 200 with a cut answer: {cut}",
        )  # fmt: skip
    if outcome in ("answered", "refused", "closed"):
        return BoundaryJudgement(boundary="stop", ok=True, detail=f"refused as it stopped: {record.get('detail')}")
    return BoundaryJudgement(
        boundary="stop", ok=False,
        detail=f"a request in flight at the graceful stop was neither answered nor refused: {record.get('detail')}",
    )  # fmt: skip


def findings(judgements: Sequence[BoundaryJudgement], step: str) -> list[Finding]:
    return [Finding("boundaries", False, f"{step}: {j['detail']}") for j in judgements if j["ok"] is False]
