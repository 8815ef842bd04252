"""A died restored server's log tail is what the restored tree wrote, never the create's own output."""

from __future__ import annotations

from vsnap_qual.lane.servers import written_since_snapshot

CREATE = b"INFO create: loading weights\nINFO KV cache size: 1,048,576 tokens\nINFO sleeping\n"


def test_only_the_bytes_past_the_snapshot_size() -> None:
    data = CREATE + b"INFO woke up\nERROR EngineCore died: SIGSEGV\n"
    tail = written_since_snapshot(data, f"{len(CREATE)}\n", 40)
    assert tail == "INFO woke up\nERROR EngineCore died: SIGSEGV"
    assert "loading weights" not in tail
    assert written_since_snapshot(data, str(len(CREATE)), 1) == "ERROR EngineCore died: SIGSEGV"


def test_nothing_written_since_is_said_not_filled_with_create_output() -> None:
    assert written_since_snapshot(CREATE, str(len(CREATE)), 40) == (
        "(the restored tree wrote nothing to child.log after the restore)"
    )


def test_an_unreadable_size_says_the_tail_is_the_whole_logs() -> None:
    tail = written_since_snapshot(CREATE, "", 2)
    assert tail.startswith("(child.log.snapshot-size unreadable") and tail.endswith("INFO sleeping")
    assert written_since_snapshot(None, "12", 5) == "(no child.log in the artifact)"
