"""``docker top`` lists host PIDs; with the container's own PID namespace (``all-caps-own-pid``) the box speaks the
container's numbers (``spawn``'s ``$!``, ``/proc`` inside), so the listing is mapped through ``NSpid``/``NSsid``
(seen with real vLLM: the box printed 14, ``docker top`` showed 13361, ``NSpid: 13361 14``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vsnap_qual.box import ProcessRow, RuntimeFailure
from vsnap_qual.runtimes import procfs
from vsnap_qual.runtimes.docker import container_pids


def _status(proc: Path, pid: int, lines: str) -> None:
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "status").write_text(f"Name:\tpython\nPid:\t{pid}\n{lines}")


def test_host_pids_are_mapped_to_the_container_namespace(tmp_path: Path) -> None:
    _status(tmp_path, 13300, "NSpid:\t13300\t1\nNSsid:\t13300\t1\n")  # the container's init
    _status(tmp_path, 13361, "NSpid:\t13361\t14\nNSsid:\t13361\t14\n")  # a spawned server (its own session)
    _status(tmp_path, 13370, "NSpid:\t13370\t20\nNSsid:\t13361\t14\n")  # its engine core
    top: list[ProcessRow] = [
        {"pid": 13300, "ppid": 13250, "sid": 13300, "stat": "Ss", "args": "sleep infinity"},
        {"pid": 13361, "ppid": 13300, "sid": 13361, "stat": "Ss", "args": "vllm serve"},
        {"pid": 13370, "ppid": 13361, "sid": 13361, "stat": "S", "args": "engine core"},
        {"pid": 13399, "ppid": 13361, "sid": 13361, "stat": "Z", "args": "gone meanwhile"},
    ]
    mapped = [(p["pid"], p["ppid"], p["sid"]) for p in container_pids(top, tmp_path)]
    assert mapped == [(1, 0, 1), (14, 1, 14), (20, 14, 14)]


def test_a_shared_pid_namespace_maps_each_pid_to_itself() -> None:
    me = os.getpid()
    assert procfs.innermost_ids(me)[0] == me  # type: ignore[index]  # this test runs in the host's namespace


def test_no_nspid_line_fails_closed(tmp_path: Path) -> None:
    _status(tmp_path, 5, "PPid:\t1\n")
    with pytest.raises(RuntimeFailure, match="no NSpid line"):
        container_pids([{"pid": 5, "ppid": 1, "sid": 5, "stat": "S", "args": "x"}], tmp_path)
