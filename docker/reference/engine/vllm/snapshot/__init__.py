"""Create and restore explicitly compatible vLLM engine snapshots."""
