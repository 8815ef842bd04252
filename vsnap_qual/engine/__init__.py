"""What the harness asks of an engine and how it reads the answers: its HTTP API (:mod:`.client`: completions, the
``/collective_rpc`` digests, ``/metrics``, the KV capacity, the listener watch), the request shapes and the canary
plan (:mod:`.shapes`), the decode speed (:mod:`.decode_speed`), the prefix cache (:mod:`.prefix_cache`) and the LoRA
adapters (:mod:`.adapters`). Nothing here knows a lane or a box: each takes an address, or a function that asks."""
