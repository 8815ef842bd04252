"""The qualification run's own plumbing around its lanes: what it was started with (``invocation``, ``ci_build``),
what it selected (``selection``), its preflight (``preflight``, ``preflight_result``, ``gpus``, ``package_probe``)
and the probe package it copies into every lane (``probe_copy``)."""
