"""Model runner V2 (`VLLM_USE_V2_MODEL_RUNNER=1`): persistent input buffers sized for the largest batch, and a
sampler that keeps float32 logits and logprobs for every request slot. It therefore leaves less memory for the
KV cache than V1 does."""

from __future__ import annotations

from vllm.logger import init_logger
from vllm.v1.worker.gpu_model_runner import FP32_BYTES
from vllm.v1.worker.gpu_model_runner import GPUModelRunner as V1ModelRunner

logger = init_logger(__name__)

INT32_BYTES = 4
INT64_BYTES = 8


class GPUModelRunner(V1ModelRunner):
    def load_model(self) -> None:
        super().load_model()
        self.device.allocate("input_buffers", self.persistent_buffer_bytes())

    def persistent_buffer_bytes(self) -> int:
        config = self.vllm_config
        # token ids of every request slot over the whole context, plus positions/slot mappings of one batch
        token_ids = config.max_num_seqs * config.max_model_len * INT32_BYTES
        per_batch = config.max_num_batched_tokens * (2 * INT64_BYTES + INT32_BYTES)
        return token_ids + per_batch

    def profile_run(self) -> int:
        tokens = min(16, self.vllm_config.max_model_len)
        self.execute(list(range(tokens)))
        config = self.vllm_config
        activations = config.max_num_batched_tokens * self.activation_bytes_per_token()
        sampler = 2 * config.max_num_seqs * self.hf_config["vocab_size"] * FP32_BYTES
        return activations + sampler
