"""Deliberately broken engine variants of the reference engine: one snapshot defect each, as a small overlay.

Each variant patches one module of the image's installed ``vllm`` package, read from the image at test time
(``suite_helpers.image_file``), so a variant follows the engine as it changes; a patch whose anchor is gone fails
with the module named (update the variant, never the harness). The overlay is a minimal "vLLM checkout" that the
qualification mounts with ``--vsnap-overlay``/``--vsnap-overlay-files``, exactly as a user's change.

What every variant breaks, and what the qualification must then say, is in :data:`VARIANTS`; the tests are
``tests/broken/test_broken_variants.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

#: The marker every injected line carries (grep-able in a report's overlay table).
MARK = "# vsnap-qual broken variant"
#: The file a leaking variant leaves in /dev/shm (digits only: the shape of CRIU's own link remaps). With host
#: IPC namespaces /dev/shm is the host's: the tests remove it whatever happens.
LEAKED_REMAP = "/dev/shm/link_remap.4242424242"
#: The prefix of the /dev/shm segment the shm-dependent variant's engine core holds (real vLLM's ``psm_*``); the
#: tests remove any left (host IPC: the host's /dev/shm).
SHM_SEGMENT_PREFIX = "/dev/shm/psm_vsnapvariant"
#: The prefix of the segment the leaking variant's engine core never unlinks.
LEAKED_SEGMENT_PREFIX = "/dev/shm/psm_vsnapleak"


@dataclass(frozen=True)
class Patch:
    """Insert ``text`` into one module: before ``anchor`` (or after it), or replace ``anchor`` with it."""

    module: str  # dotted module name in the image
    anchor: str
    text: str
    where: str = "after"  # "after" | "before" | "replace"

    @property
    def relative(self) -> str:
        return self.module.replace(".", "/") + ".py"

    def apply(self, source: str) -> str:
        count = source.count(self.anchor)
        if count != 1:
            raise AssertionError(
                f"{self.module}: the anchor {self.anchor!r} occurs {count} times in the image's source "
                "(the reference engine changed): update tests/broken/variants.py"
            )
        if self.where == "replace":
            return source.replace(self.anchor, self.text)
        if self.where == "before":
            return source.replace(self.anchor, self.text + self.anchor)
        return source.replace(self.anchor, self.anchor + self.text)


@dataclass(frozen=True)
class Variant:
    name: str
    defect: str  # what is broken, in words
    patches: tuple[Patch, ...]

    @property
    def files(self) -> list[str]:
        return sorted({p.relative for p in self.patches})


_CORE = "vllm.v1.engine.core"

VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant(
            "kv-shrunk",
            "the KV pool is re-sized on wake from what is left: a restored engine serves with 3/4 of the blocks "
            "it was created with",
            (
                Patch(
                    _CORE,
                    "    def wake_up(self, tags: list[str] | None = None) -> None:\n"
                    "        self.model_executor.wake_up(tags)\n",
                    f"        if tags is None or 'kv_cache' in tags:  {MARK}: KV pool shrunk on wake\n"
                    "            import dataclasses\n"
                    "            if not hasattr(self, '_vsnap_blocks'):\n"
                    "                self._vsnap_blocks = self.kv_cache_config.num_blocks\n"
                    "            self.kv_cache_config = dataclasses.replace(\n"
                    "                self.kv_cache_config, num_blocks=self._vsnap_blocks * 3 // 4\n"
                    "            )\n",
                ),
            ),
        ),
        Variant(
            "dies-after-restore",
            "the restored server dies about 2 s after `vllm snapshot restore` exited 0 (the API server and the "
            "engine core are killed by a timer started when the restored session begins to serve)",
            (
                Patch(
                    "vllm.snapshot.server",
                    '            phase = "serve"\n',
                    f"            import os, signal, threading  {MARK}: dies after restore\n"
                    "            _t = threading.Timer(3.0, lambda: os.killpg(os.getpgrp(), signal.SIGKILL))\n"
                    "            _t.daemon = True\n"
                    "            _t.start()\n",
                ),
            ),
        ),
        Variant(
            "dies-later",
            "the restored server dies about 25 s after `vllm snapshot restore` exited 0, long after a 3 s soak (a "
            "timer started when the restored session begins to serve kills its process group)",
            (
                Patch(
                    "vllm.snapshot.server",
                    '            phase = "serve"\n',
                    f"            import os, signal, threading  {MARK}: dies 25 s after restore\n"
                    "            _t = threading.Timer(25.0, lambda: os.killpg(os.getpgrp(), signal.SIGKILL))\n"
                    "            _t.daemon = True\n"
                    "            _t.start()\n",
                ),
            ),
        ),
        Variant(
            "seeded-drifts-after-wake",
            "after a wake-up (every restore) the engine core seeds each sampled request one off: greedy answers, "
            "digests and KV are unchanged, only seeded sampling differs from the ordinary engine",
            (
                Patch(
                    _CORE,
                    "        self.model_executor.wake_up(tags)\n",
                    f"        self._vsnap_woken = 1  {MARK}: seeds one off after a wake-up\n",
                ),
                Patch(
                    _CORE,
                    "generator = torch.Generator().manual_seed(int(seed)) if seed is not None else None",
                    "generator = torch.Generator().manual_seed(int(seed) + getattr(self, '_vsnap_woken', 0)) "
                    f"if seed is not None else None  {MARK}",
                    where="replace",
                ),
            ),
        ),
        Variant(
            "lingers-after-stop",
            "the engine core (the GPU holder) keeps running for 12 s after SIGTERM or after its API server is gone",
            (
                Patch(  # SIGTERM ignored from the start (a handler racing the shutdown would make it flaky)
                    _CORE,
                    "    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(SystemExit(0)))\n",
                    f"    signal.signal(signal.SIGTERM, signal.SIG_IGN)  {MARK}: SIGTERM ignored\n",
                    where="replace",
                ),
                Patch(
                    _CORE,
                    "    try:\n        _serve_requests(engine, connection)\n    finally:\n",
                    f"        signal.signal(signal.SIGTERM, signal.SIG_IGN)  {MARK}\n        time.sleep(12.0)\n",
                ),
            ),
        ),
        Variant(
            "corrupt-after-first-token",
            "after a sleep/wake cycle (every snapshot create and restore) every token after the first is the "
            "second-best one: one-token canaries pass, multi-token output is corrupted from position 1",
            (
                Patch(
                    _CORE,
                    "            if temperature <= 1e-5:\n                token = int(logits.argmax())\n",
                    f"                if step >= 1 and getattr(self, '_vsnap_woken', False):  {MARK}\n"
                    "                    token = int(logits.topk(2).indices[1])\n",
                ),
                Patch(
                    _CORE,
                    "    def wake_up(self, tags: list[str] | None = None) -> None:\n"
                    "        self.model_executor.wake_up(tags)\n",
                    f"        self._vsnap_woken = True  {MARK}: corrupted after the first token\n",
                ),
            ),
        ),
        Variant(
            "leaks-link-remap",
            f"`vllm snapshot restore` leaves a CRIU link remap behind ({LEAKED_REMAP}) after a successful restore",
            (
                Patch(
                    "vllm.snapshot.runtime",
                    "            restored = self._read_restored_pid(pidfile)\n",
                    f"            open({LEAKED_REMAP!r}, 'ab').close()  {MARK}: leaked link remap\n",
                ),
            ),
        ),
        Variant(
            "inspect-changes-after-restore",
            "a successful restore rewrites the manifest's artifact_bytes (recounted with the restore's own "
            "files), so `vllm snapshot inspect` prints something else after restore 1",
            (
                Patch(
                    "vllm.snapshot.controller",
                    "        toolset.complete_restore(root_pid)\n",
                    f"        import json  {MARK}: manifest rewritten by restore\n"
                    "        from vllm.snapshot.manifest import _write_json_atomic\n"
                    "        _payload = json.loads((artifact / 'manifest.json').read_text())\n"
                    "        _payload['artifact_bytes'] = sum(\n"
                    "            p.stat().st_size for p in artifact.rglob('*') if p.is_file() and not p.is_symlink()\n"
                    "        )\n"
                    "        _write_json_atomic(artifact / 'manifest.json', _payload, overwrite=True)\n",
                ),
            ),
        ),
        Variant(
            "needs-shm-segment",
            "the engine core holds a /dev/shm segment open and unlinks it on its graceful shutdown, as real vLLM's "
            "multiprocessing segments: the artifact names the segment and does not carry it, so it stops restoring "
            "once a restored engine has stopped gracefully, and never restores in a fresh box",
            (
                Patch(
                    _CORE,
                    '    connection.send(("ready", engine.info()))\n',
                    f"    import os as _os  {MARK}: a segment held open, outside the artifact\n"
                    f"    engine._vsnap_segment = open(f'{SHM_SEGMENT_PREFIX}{{_os.getpid()}}', 'w+b')\n",
                    where="before",
                ),
                Patch(
                    _CORE,
                    "    def shutdown(self) -> None:\n        self.model_executor.shutdown()\n",
                    f"        import os as _os  {MARK}: unlinked on the graceful way out\n"
                    "        segment = getattr(self, '_vsnap_segment', None)\n"
                    "        if segment is not None and _os.path.exists(segment.name):\n"
                    "            _os.unlink(segment.name)\n",
                ),
            ),
        ),
        Variant(
            "leaks-shm-segment",
            "the engine core holds a /dev/shm segment open and never unlinks it: every stopped server leaves one "
            "behind in /dev/shm (with host IPC, the host's, until reboot)",
            (
                Patch(
                    _CORE,
                    '    connection.send(("ready", engine.info()))\n',
                    f"    import os as _os  {MARK}: a segment held open and never unlinked\n"
                    f"    engine._vsnap_segment = open(f'{LEAKED_SEGMENT_PREFIX}{{_os.getpid()}}', 'w+b')\n",
                    where="before",
                ),
            ),
        ),
        Variant(
            "concurrent-wrong-after-restore",
            "after a restore, a completion that arrives while another is in flight loses its prompt's first "
            "character: requests sent one at a time (every canary, digest and KV check) are right, only the "
            "batched path answers wrong",
            (
                Patch(
                    "vllm.entrypoints.openai.api_server",
                    "def _completion(engine: LLMEngine, body: dict[str, Any]) -> dict[str, Any]:\n"
                    "    config = engine.vllm_config\n",
                    f"_VSNAP_FLIGHT: list[Any] = [0, threading.Lock(), False]  {MARK}: in flight, lock, restored\n"
                    "\n\n"
                    "def _completion(engine: LLMEngine, body: dict[str, Any]) -> dict[str, Any]:\n"
                    "    with _VSNAP_FLIGHT[1]:\n"
                    "        _VSNAP_FLIGHT[0] += 1\n"
                    "        batched = _VSNAP_FLIGHT[0] > 1\n"
                    "    try:\n"
                    "        if batched and _VSNAP_FLIGHT[2] and isinstance(body.get('prompt'), str):\n"
                    "            body = {**body, 'prompt': body['prompt'][1:]}\n"
                    "        return _vsnap_completion(engine, body)\n"
                    "    finally:\n"
                    "        with _VSNAP_FLIGHT[1]:\n"
                    "            _VSNAP_FLIGHT[0] -= 1\n"
                    "\n\n"
                    "def _vsnap_completion(engine: LLMEngine, body: dict[str, Any]) -> dict[str, Any]:\n"
                    "    config = engine.vllm_config\n",
                    where="replace",
                ),
                Patch(
                    "vllm.snapshot.server",
                    '            phase = "serve"\n',
                    f"            import vllm.entrypoints.openai.api_server as _vsnap_api  {MARK}: restored\n"
                    "            _vsnap_api._VSNAP_FLIGHT[2] = True\n",
                ),
            ),
        ),
        Variant(
            "long-prompt-cut-after-wake",
            "after a wake-up (every restore) the engine core keeps only the last 64 tokens of a prompt: short "
            "prompts (every canary) are right, a prompt near max-model-len is answered from a cut context",
            (
                Patch(
                    _CORE,
                    "        self.model_executor.wake_up(tags)\n",
                    f"        self._vsnap_woken = 1  {MARK}: prompts cut after a wake-up\n",
                ),
                Patch(
                    _CORE,
                    "        ids = list(prompt_token_ids)\n",
                    f"        if getattr(self, '_vsnap_woken', 0) and len(ids) > 64:  {MARK}\n"
                    "            ids = ids[-64:]\n",
                ),
            ),
        ),
        Variant(
            "ignores-host-and-versions",
            "restore compares the environment and the GPU's UUID but not the host, the kernel, the vLLM, driver "
            "or CRIU version: a snapshot restores on another machine or stack",
            (
                Patch(
                    "vllm.snapshot.manifest",
                    "    differing = [name for name in IDENTITY_FIELDS"
                    " if expected_values[name] != actual_values[name]]\n",
                    "    ignored = {'host_id', 'kernel_release', 'vllm_version', 'driver_version', 'criu_version'}"
                    f"  {MARK}\n"
                    "    differing = [\n"
                    "        name\n"
                    "        for name in IDENTITY_FIELDS\n"
                    "        if name not in ignored and expected_values[name] != actual_values[name]\n"
                    "    ]\n",
                    where="replace",
                ),
            ),
        ),
        Variant(
            "ignores-env-drift",
            "restore compares every identity field except the environment fingerprint: a snapshot restores "
            "under a drifted VLLM_* environment",
            (
                Patch(
                    "vllm.snapshot.manifest",
                    "    differing = [name for name in IDENTITY_FIELDS"
                    " if expected_values[name] != actual_values[name]]\n",
                    "    differing = [  " + MARK + ": environment drift ignored\n"
                    "        name\n"
                    "        for name in IDENTITY_FIELDS\n"
                    "        if name != 'environment' and expected_values[name] != actual_values[name]\n"
                    "    ]\n",
                    where="replace",
                ),
            ),
        ),
        Variant(
            "kv-scales-rederived-on-wake",
            "a wake puts the saved buffers back, then re-derives the per-layer KV scales (``k_scale``/``v_scale``) "
            "instead of keeping them: they come back one part in a million off (the shape of vLLM #57163, where a "
            "level-2 sleep zeroed them); answers stay within tolerance, only the buffer digests see it",
            (
                Patch(
                    "vllm.v1.worker.gpu_worker",
                    "                    buffer.data.copy_(self._sleep_saved_buffers[name])\n",
                    f"                if name.endswith(('k_scale', 'v_scale')):  {MARK}: KV scales re-derived\n"
                    "                    buffer.data.mul_(1.0 + 2.0**-20)\n",
                ),
            ),
        ),
        Variant(
            "stale-weights-on-reload",
            "the weights read at start-up are kept in memory and every `reload_weights` (each restore's) is served "
            "from that copy instead of the model files (the shape of vLLM #32718): a restore never sees a change "
            "of the weight files since create",
            (
                Patch(
                    "vllm.v1.worker.gpu_model_runner",
                    '        return load_file(Path(self.vllm_config.model_dir) / "model.safetensors")\n',
                    f"        if not hasattr(self, '_vsnap_cached'):  {MARK}: reloads served from the first load\n"
                    "            _file = Path(self.vllm_config.model_dir) / 'model.safetensors'\n"
                    "            self._vsnap_cached = load_file(_file)\n"
                    "        return {name: tensor.clone() for name, tensor in self._vsnap_cached.items()}\n",
                    where="replace",
                ),
            ),
        ),
        Variant(
            "adapters-dropped-on-wake",
            "a wake-up's weight reload (every restore's) drops the loaded LoRA adapters and forgets them: a request "
            "through an adapter is then answered by the base model, with no error (the shape of vLLM #53888)",
            (
                Patch(
                    "vllm.v1.worker.gpu_model_runner",
                    "        self.remove_all_adapters()\n",
                    f"        self._vsnap_dropped = True  {MARK}: adapters forgotten after a reload\n",
                ),
                Patch(
                    "vllm.v1.worker.gpu_model_runner",
                    "        if name is None:\n            yield\n            return\n",
                    f"        if name is None or getattr(self, '_vsnap_dropped', False):  {MARK}\n"
                    "            yield\n            return\n",
                    where="replace",
                ),
            ),
        ),
        Variant(
            "decodes-slowly-after-wake",
            "after a wake-up (every restore) each decode step takes three times as long (the engine sleeps twice "
            "the step's time after it): every answer right, only slow (the shape of vLLM #52479, where a wake left "
            "the draft model unloaded and decoding about 2x slower)",
            (
                Patch(
                    _CORE,
                    "        self.model_executor.wake_up(tags)\n",
                    f"        self._vsnap_slow = True  {MARK}: decodes 3x slower after a wake\n",
                ),
                Patch(
                    _CORE,
                    "            logits = self._pass(ids, lora_name, planned if step == 0 else None, prompt)\n",
                    f"            _t0 = __import__('time').perf_counter()  {MARK}\n"
                    "            logits = self._pass(ids, lora_name, planned if step == 0 else None, prompt)\n"
                    "            if getattr(self, '_vsnap_slow', False):\n"
                    "                __import__('time').sleep(2 * (__import__('time').perf_counter() - _t0))\n",
                    where="replace",
                ),
            ),
        ),
        Variant(
            "trusts-half-written-artifact",
            "create publishes its manifest, then copies the model's weights into the artifact, slowly (4 s); a "
            "restore reloads the weights from that copy, zero-filling whatever a killed create never wrote, and "
            "trusts its output (no oracle check): a create killed during the copy leaves an artifact that restores "
            "and serves wrong answers",
            (
                Patch(
                    "vllm.snapshot.runtime",
                    '        with (workdir / "child.log").open("wb") as log_file:\n',
                    f"            environment['VSNAP_VARIANT_ARTIFACT'] = str(workdir)  {MARK}: weights copy\n",
                ),
                Patch(
                    "vllm.snapshot.runtime",
                    "        write_manifest_atomic(workdir, manifest)\n",
                    f"        import time as _time  {MARK}: the weights copied after the manifest, slowly\n"
                    "        _source = Path((workdir / 'model-dir').read_text()) / 'model.safetensors'\n"
                    "        _data = _source.read_bytes()\n"
                    "        with open(workdir / 'weights.safetensors', 'wb') as _out:\n"
                    "            for _i in range(16):\n"
                    "                _out.write(_data[_i * len(_data) // 16 : (_i + 1) * len(_data) // 16])\n"
                    "                _out.flush()\n"
                    "                _time.sleep(0.25)\n",
                ),
                Patch(
                    "vllm.v1.worker.gpu_model_runner",
                    '        return load_file(Path(self.vllm_config.model_dir) / "model.safetensors")\n',
                    f"        import os, tempfile  {MARK}: the artifact's weights copy trusted as it is\n"
                    "        _source = Path(self.vllm_config.model_dir) / 'model.safetensors'\n"
                    "        _artifact = os.environ.get('VSNAP_VARIANT_ARTIFACT')\n"
                    "        _copy = Path(_artifact) / 'weights.safetensors' if _artifact else None\n"
                    "        if _artifact and not _copy.exists():\n"
                    "            (Path(_artifact) / 'model-dir').write_text(str(self.vllm_config.model_dir))\n"
                    "        if _copy is None or not _copy.exists():\n"
                    "            return load_file(_source)\n"
                    "        _data = _copy.read_bytes().ljust(_source.stat().st_size, bytes(1))\n"
                    "        with tempfile.NamedTemporaryFile(suffix='.safetensors') as _tmp:\n"
                    "            _tmp.write(_data)\n"
                    "            _tmp.flush()\n"
                    "            return load_file(Path(_tmp.name))\n",
                    where="replace",
                ),
                Patch(
                    "vllm.snapshot.types",
                    '    """Same token ids and text, logprobs within 1e-3 (absolute)."""\n',
                    f"    return True  {MARK}: the restored output trusted\n",
                ),
            ),
        ),
        Variant(
            "prefix-cache-lost-on-wake",
            "a wake-up (every restore's) turns automatic prefix caching off: every answer right, every prompt's "
            "prefill computed again (a restored server slower than the one it replaces on repeated prompts)",
            (
                Patch(
                    _CORE,
                    "        self.model_executor.wake_up(tags)\n",
                    f"        self.prefix_cache.enabled = False  {MARK}: prefix caching off after a wake\n",
                ),
            ),
        ),
        Variant(
            "prefix-cache-wrong-blocks-after-wake",
            "after a wake-up (every restore's) the prefix cache files each prompt block under the next block's "
            "number: a repeated prompt hits as often as before, and reads K/V of other positions (the shape of a "
            "block table rebuilt out of step with the KV cache it indexes)",
            (
                Patch(
                    _CORE,
                    "        self.model_executor.wake_up(tags)\n",
                    f"        self.prefix_cache.skew = 1  {MARK}: blocks filed one off after a wake\n",
                ),
                Patch(
                    "vllm.v1.core.block_pool",
                    "                self.cached[hashes[index]] = block\n",
                    f"                self.cached[hashes[index]] = block + getattr(self, 'skew', 0)  {MARK}\n",
                    where="replace",
                ),
            ),
        ),
        # ---- issue 44: the OpenAI API after restore, and a killed restore ----------------------------------------
        Variant(
            "stream-drops-last-chunk-after-restore",
            "after a restore, a streamed completion loses the chunk that finishes it (its last token and "
            "finish_reason): the usage chunk and data: [DONE] still come; every whole answer is right",
            (
                Patch(
                    "vllm.entrypoints.openai.serving_completion",
                    "            yield sse(chunk)\n",
                    f"            if _VSNAP_RESTORED[0] and part['finish_reason'] is not None:  {MARK}\n"
                    "                continue\n"
                    "            yield sse(chunk)\n",
                    where="replace",
                ),
                Patch(
                    "vllm.entrypoints.openai.serving_completion",
                    "def completion_events(",
                    f"_VSNAP_RESTORED = [False]  {MARK}: set once the restored server serves\n\n\n",
                    where="before",
                ),
                Patch(
                    "vllm.snapshot.server",
                    '            phase = "serve"\n',
                    f"            import vllm.entrypoints.openai.serving_completion as _vsnap_c  {MARK}: restored\n"
                    "            _vsnap_c._VSNAP_RESTORED[0] = True\n",
                ),
            ),
        ),
        Variant(
            "chat-template-lost-after-restore",
            "after a restore, /v1/chat/completions answers the last message's text as a plain prompt, without the "
            "model's chat template (as if the template were not restored); /tokenize and the completions are right",
            (
                Patch(
                    "vllm.entrypoints.openai.serving_chat",
                    "    prompt_ids = chat_prompt_ids(engine, body)\n",
                    f"    prompt_ids = chat_prompt_ids(engine, body)\n"
                    f"    if _VSNAP_RESTORED[0]:  {MARK}: the template lost\n"
                    "        prompt_ids = engine.tokenizer.encode(str(body['messages'][-1]['content']))\n",
                    where="replace",
                ),
                Patch(
                    "vllm.entrypoints.openai.serving_chat",
                    "def plan_chat(",
                    f"_VSNAP_RESTORED = [False]  {MARK}: set once the restored server serves\n\n\n",
                    where="before",
                ),
                Patch(
                    "vllm.snapshot.server",
                    '            phase = "serve"\n',
                    f"            import vllm.entrypoints.openai.serving_chat as _vsnap_chat  {MARK}: restored\n"
                    "            _vsnap_chat._VSNAP_RESTORED[0] = True\n",
                ),
            ),
        ),
        Variant(
            "logprobs-alternatives-off-after-wake",
            "after a wake-up (every restore) the logprob alternatives past the second best (logprobs N > 2) are "
            "reported 0.05 too high: every sampled token's logprob and every answer right",
            (
                Patch(
                    _CORE,
                    "    def wake_up(self, tags: list[str] | None = None) -> None:\n"
                    "        self.model_executor.wake_up(tags)\n",
                    f"        self._vsnap_woken = True  {MARK}: alternatives off after a wake\n",
                ),
                Patch(
                    _CORE,
                    "                        entry.setdefault(int(index), float(value))\n",
                    f"                    if getattr(self, '_vsnap_woken', False):  {MARK}\n"
                    "                        for _index in ranked.indices[2:].tolist():\n"
                    "                            if int(_index) != token:\n"
                    "                                entry[int(_index)] += 0.05\n",
                ),
            ),
        ),
        Variant(
            "stop-string-finish-reason-lost-after-wake",
            "after a wake-up (every restore) an answer ended by a stop string reports finish_reason 'length' and no "
            "stop_reason: its text and tokens are right, and answers ended by max_tokens or EOS are too",
            (
                Patch(
                    _CORE,
                    "    def wake_up(self, tags: list[str] | None = None) -> None:\n"
                    "        self.model_executor.wake_up(tags)\n",
                    f"        self._vsnap_woken = True  {MARK}: stop strings reported as length after a wake\n",
                ),
                Patch(
                    _CORE,
                    '                state.finish_reason, state.stop_reason = "stop", stop_string\n',
                    f"                if getattr(self, '_vsnap_woken', False):  {MARK}\n"
                    "                    state.finish_reason, state.stop_reason = 'length', None\n",
                ),
            ),
        ),
        Variant(
            "killed-restore-leaves-manifest-aside",
            "a restore moves the artifact's manifest.json aside (manifest.json.restoring) while it restores and "
            "puts it back when it is done or fails: a restore SIGKILLed in between leaves an artifact that no "
            "restore accepts again",
            (
                Patch(
                    "vllm.snapshot.controller",
                    "    manifest = read_manifest(artifact)\n    validate_identity(",
                    "    manifest = read_manifest(artifact)\n"
                    f"    (artifact / 'manifest.json').rename(artifact / 'manifest.json.restoring')  {MARK}\n"
                    "    try:\n"
                    "        _vsnap_restore(args, artifact, toolset, manifest)\n"
                    "    finally:\n"
                    f"        (artifact / 'manifest.json.restoring').rename(artifact / 'manifest.json')  {MARK}\n"
                    "\n\n"
                    "def _vsnap_restore(args, artifact, toolset, manifest) -> None:\n"
                    "    validate_identity(",
                    where="replace",
                ),
            ),
        ),
        # ---- issue 44 items 2 and 3: serving counters and memory over a series, a request during recovery -------
        Variant(
            "counters-stop-after-restore",
            "after a restore, /metrics keeps vllm:prompt_tokens_total, vllm:generation_tokens_total and "
            "vllm:request_success_total at the values it first reported (as a stats logger not re-attached after "
            "the wake): every answer right, the prefix-cache counters and the KV gauge still move and read right",
            (
                Patch(
                    "vllm.entrypoints.openai.api_server",
                    '    info = engine.client.call("info")\n',
                    f"    if _VSNAP_RESTORED[0]:  {MARK}: request counters kept still after restore\n"
                    "        if not _VSNAP_STILL:\n"
                    "            _VSNAP_STILL.update({key: info[key] for key in "
                    "('num_prompt_tokens', 'num_generation_tokens')})\n"
                    "            _VSNAP_STILL['request_success'] = dict(info['request_success'])\n"
                    "        info = {**info, **_VSNAP_STILL}\n",
                ),
                Patch(
                    "vllm.entrypoints.openai.api_server",
                    "def _metrics(engine: LLMEngine) -> str:\n",
                    f"_VSNAP_RESTORED = [False]  {MARK}: set once the restored server serves\n"
                    "_VSNAP_STILL: dict[str, Any] = {}\n\n\n",
                    where="before",
                ),
                Patch(
                    "vllm.snapshot.server",
                    '            phase = "serve"\n',
                    f"            import vllm.entrypoints.openai.api_server as _vsnap_api  {MARK}: restored\n"
                    "            _vsnap_api._VSNAP_RESTORED[0] = True\n",
                ),
            ),
        ),
        Variant(
            "memory-grows-per-request-after-restore",
            "after a restore, the API server keeps 8 MiB for every completion it answers (a per-request buffer "
            "never freed, the shape of vLLM's memory that grows after a wake, #47654): every answer right",
            (
                Patch(
                    "vllm.entrypoints.openai.api_server",
                    "    plan = plan_completion(engine, body)\n",
                    f"    if _VSNAP_RESTORED[0]:  {MARK}: 8 MiB kept per completion after restore\n"
                    "        _VSNAP_KEPT.append(b'\\x01' * (8 << 20))\n",
                ),
                Patch(
                    "vllm.entrypoints.openai.api_server",
                    "def _completion(engine: LLMEngine, body: dict[str, Any]) -> dict[str, Any]:\n",
                    f"_VSNAP_RESTORED = [False]  {MARK}: set once the restored server serves\n"
                    "_VSNAP_KEPT: list[bytes] = []\n\n\n",
                    where="before",
                ),
                Patch(
                    "vllm.snapshot.server",
                    '            phase = "serve"\n',
                    f"            import vllm.entrypoints.openai.api_server as _vsnap_api  {MARK}: restored\n"
                    "            _vsnap_api._VSNAP_RESTORED[0] = True\n",
                ),
            ),
        ),
        Variant(
            "serves-while-recovering",
            "the restored child binds its HTTP listener and serves before it recovers (communicators, memory, the "
            "private canary), instead of after: a request that arrives during recovery is taken and answered as "
            "soon as generation resumes, before the private canary has passed; every answer right",
            (
                Patch(
                    "vllm.snapshot.server",
                    "            error_file.unlink(missing_ok=True)\n",
                    f"            import threading as _vsnap_threading  {MARK}: HTTP served while recovering\n"
                    "            from vllm.entrypoints.openai.api_server import build_http_server as _vsnap_build\n"
                    "            _vsnap_address, _vsnap_sock = bind_server_socket(args, reuse_port=False)\n"
                    "            _vsnap_early = _vsnap_build(engine, _vsnap_sock, args)\n"
                    "            _vsnap_threading.Thread(target=_vsnap_early.serve_forever, daemon=True).start()\n",
                ),
                Patch(
                    "vllm.snapshot.server",
                    "            listen_address, sock = bind_server_socket(args, reuse_port=False)\n",
                    f"            _vsnap_early.shutdown()  {MARK}: the same listener from here on\n"
                    "            listen_address, sock = _vsnap_address, _vsnap_sock\n",
                    where="replace",
                ),
            ),
        ),
    )
}


def build_overlay(variant: Variant, read_module: Callable[[str], str], checkout: Path) -> Path:
    """Write the variant's patched modules under ``checkout/vllm/...`` (``read_module(name)`` gives the image's
    source of a module) and return the checkout."""
    sources: dict[str, str] = {}
    for patch in variant.patches:
        sources.setdefault(patch.module, read_module(patch.module))
        sources[patch.module] = patch.apply(sources[patch.module])
    for module, text in sources.items():
        path = checkout / (module.replace(".", "/") + ".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return checkout
