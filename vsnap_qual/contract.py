"""What the system under test and the harness agree on, written once: the model runners, vLLM's own canary prompt,
the default prompts and timeouts, the secret variables, the paths a lane's box offers its engine, and vLLM's own
words for "this host or image cannot do that" (``../vllm-snapshot-contract.md`` in the design notes; a clone reads
``docs/design.md``). Pure constants: every layer may import this module, it imports nothing of the harness.
"""

from __future__ import annotations

from typing import Literal

Runner = Literal["v1", "v2"]
Arm = Literal["head", "base"]
#: What a lane's box is for: the lifecycle, the injected failures on an artifact of its own, or the restore of the
#: lifecycle's artifact in a fresh box.
Purpose = Literal["lifecycle", "faults", "fresh-box"]

#: Model runner name -> ``VLLM_USE_V2_MODEL_RUNNER``.
RUNNERS: dict[str, str] = {"v1": "0", "v2": "1"}
#: vLLM's own snapshot canary prompt (contract §3.5): the manifest's oracle is the engine's output for it.
VLLM_CANARY_PROMPT = "The capital of France is"
DEFAULT_PROMPTS: tuple[str, ...] = (
    VLLM_CANARY_PROMPT,
    "The largest planet in the solar system is",
    "Water is made of hydrogen and",
    "One, two, three,",
    "The opposite of hot is",
)
DEFAULT_TIMEOUTS: dict[str, float] = {
    "serve": 900.0,
    "create": 1800.0,
    "inspect": 120.0,
    "restore": 900.0,
    "stop": 60.0,
    "exec": 120.0,
    "http": 120.0,
}
SECRET_ENV_NAMES: tuple[str, ...] = (
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "HUGGINGFACE_HUB_TOKEN",
    "VLLM_API_KEY",
)

# ---- the paths every lane box offers (a container's filesystem, or a host lane's mount namespace) --------------
#: The session's copy of the probe package, read-only (vLLM finds its general plugin through ``PYTHONPATH``).
PROBE = "/vsnap/probe"
#: CPU smoke mode only: vsnap-qual's platform plugin declaring sleep mode on vLLM's CPU platform, read-only.
SMOKE = "/vsnap/smoke"
#: With ``--vsnap-unit-command``: the overlay checkout, read-only; the unit command runs from it.
CHECKOUT = "/vsnap/checkout"
#: The lane's control directory, read-write: probe reports, fault arming, engine logs.
CONTROL = "/vsnap/control"
#: The model cache, read-only, when ``--vsnap-model-cache`` is given.
MODEL_CACHE = "/vsnap/hf"
#: A private (0700) working directory: vLLM requires the artifact's parent to be private.
WORK = "/vsnap/work"
ARTIFACT = f"{WORK}/artifact"

# vLLM's own words for "this host or image cannot do that" (not a defect of the change under test). A step that
# meets one is skipped as an environment limitation, quoting vLLM verbatim; the run's verdict is still not a pass.
LIMITATIONS: tuple[str, ...] = (
    "snapshot dependency not found",
    "CRIU_CUDA_PLUGIN_DIR is required",
    "snapshot requires Linux pidfd support",
    "snapshot create requires Linux x86_64",
    "Model Runner V2 requires Triton",
    "No CUDA GPUs are available",
    "snapshot tree has no CUDA-holding process",
    "Sleep mode is not supported on current platform",  # vLLM on a CPU: snapshots need sleep mode (model.py:657)
)
#: Of those, vLLM's words for a model runner its CPU build does not have at all: in CPU smoke mode that runner's
#: steps are not applicable (quoted), not a gap in the qualification (the CPU build has no Triton, so no runner V2).
#: On a GPU image the same words are a limitation of that image: skipped, and the run is not a pass.
CPU_NOT_APPLICABLE: tuple[str, ...] = ("Model Runner V2 requires Triton",)
#: vLLM's words when it refuses an engine feature (``snapshot create does not support speculative decoding``,
#: ``LoRA is not supported on ...``): in an engine-feature variant's lane (``--vsnap-variant``) the step, and the
#: steps after it, are not applicable, quoted; in the plain configuration they are a failure like any other
FEATURE_REFUSALS: tuple[str, ...] = ("does not support", "is not supported", "not supported on", "not yet supported")


def column(runner: str, variant: str | None) -> str:
    """A lane's column in the evidence and every view: its model runner, ``+<variant>`` for a variant's lane."""
    return runner + (f"+{variant}" if variant else "")


def restore_argv(port: int, artifact: str = ARTIFACT) -> list[str]:
    """``vllm snapshot restore`` exactly as a user types it, on ``port`` of the lane's loopback."""
    return ["vllm", "snapshot", "restore", artifact, "--host", "127.0.0.1", "--port", str(port)]


#: Tokens of the fixed generation whose speed is timed on the ordinary engine and after each restore (issue 28).
DECODE_TOKENS = 64

#: The request shapes a restored engine is compared on beyond one greedy prompt alone (vsnap_qual.engine.shapes).
REQUEST_SHAPES = ("repeated", "seeded", "concurrent", "long")
