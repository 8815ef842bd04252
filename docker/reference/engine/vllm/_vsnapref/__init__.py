"""Reference-only plumbing (simulated device, checkpoint agent). Real vLLM has no such package."""
