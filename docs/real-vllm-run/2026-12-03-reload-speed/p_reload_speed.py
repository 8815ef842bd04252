"""Decode speed of vLLM's CPU build before and after sleep(2) + wake_up + reload_weights, in one process: the
restore path of ``vllm snapshot`` without CRIU. Does ``reload_weights`` alone slow decoding down?"""

import os
import statistics
import time

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

from vllm import LLM, SamplingParams  # noqa: E402  (after the environment it reads)

REVISION = "b04193068dc9e2d037b36de7fec6ef00cdea53c5"
llm = LLM(
    model="vsnap/tiny-qwen3",
    revision=REVISION,
    tokenizer_revision=REVISION,
    dtype="float32",
    max_model_len=512,
    enforce_eager=True,
    seed=0,
)
PARAMS = SamplingParams(temperature=0, max_tokens=64, min_tokens=64)
PROMPT = "The capital of France is"


def speed(runs: int = 7) -> tuple[float, list[float]]:
    llm.generate([PROMPT], PARAMS, use_tqdm=False)  # warm-up
    rates = []
    for _ in range(runs):
        started = time.perf_counter()
        llm.generate([PROMPT], PARAMS, use_tqdm=False)
        rates.append(round(64 / (time.perf_counter() - started), 1))
    return statistics.median(rates), rates


for i in range(2):
    print("BEFORE", i, speed(), flush=True)
print("sleep/wake/reload", flush=True)
llm.sleep(level=2)
llm.wake_up()
llm.collective_rpc("reload_weights")
for i in range(2):
    print("AFTER_RELOAD", i, speed(), flush=True)
