"""The criu kit (docker/criu) in real containers on trixie and bookworm: Debian sid's criu 4.2.1 through the kit's
wrapper, real dumps and restores, CRIU's CUDA plugin on a CPU host, and our cuda-checkpoint's command line."""

from __future__ import annotations

import pytest

from tests.criu.kitsupport import KIT, PLUGIN_DIR, RunIn

pytestmark = pytest.mark.docker

DRIVER = "python3 /t/criu_driver.py"


def test_criu_version_is_sid_4_2_1(image: str, run_in: RunIn) -> None:
    r = run_in(image, "criu --version && cat /opt/vsnap-criu/VERSION")
    assert r.rc == 0, r.output
    assert "Version: 4.2.1" in r.output.splitlines()[0]
    assert "debian_criu=4.2.1-1 (sid)" in r.output


def test_criu_check_looks_good(image: str, run_in: RunIn) -> None:
    r = run_in(image, "criu check")
    assert r.rc == 0, r.output
    assert "Looks good." in r.output


def test_wrapper_runs_criu_on_the_kits_own_loader(image: str, run_in: RunIn) -> None:
    """criu's exe must be a file no restored process maps (the kit's ld.so, not the system's: PR_SET_MM_MAP fails
    with EBUSY otherwise on a bare host), and nothing of the kit leaks into the programs criu starts."""
    r = run_in(
        image,
        "VSNAP_CRIU_WRAPPER_DEBUG=1 criu --version && mkdir /tmp/i && "
        "{ setsid sleep 100 </dev/null >/dev/null 2>&1 & } && sleep 0.3 && "
        "criu dump -t $! -D /tmp/i -o d.log --action-script /t/action_script.sh && cat /tmp/actions",
    )
    assert r.rc == 0, r.output
    assert "kit loader" in r.output
    actions = [line for line in r.output.splitlines() if "LDLP=" in line]
    assert any(line.startswith("post-dump ") for line in actions), r.output
    for line in actions:
        assert "LDLP=none" in line, line
        chain = line.split("CHAIN=", 1)[1].split()
        assert f"{KIT}/lib/glibc/ld-linux-x86-64.so.2" in chain, line
        assert not any(exe.endswith("ld-linux-x86-64.so.2") and not exe.startswith(KIT) for exe in chain), line


def test_round_trip_keeps_pid_and_state(image: str, run_in: RunIn) -> None:
    res = run_in(image, f"{DRIVER} --dump-plugin-dir {PLUGIN_DIR} --restore-plugin-dir {PLUGIN_DIR}").json()
    assert res["dump_rc"] == 0, res
    assert res["gone_after_dump"] and res["answer_after_dump"] is None, res  # really dumped, not left running
    assert res["restore_rc"] == 0, res
    assert res["alive_after_restore"], res
    token, pid, counter = res["before"].split()
    assert int(pid) == res["target_pid"]
    assert res["after"] == f"{token} {pid} {int(counter) + 1}", res  # same process, same memory, same socket


def test_cuda_plugin_loads_on_a_cpu_host_and_the_dump_succeeds(image: str, run_in: RunIn) -> None:
    res = run_in(image, f"{DRIVER} --dump-plugin-dir {PLUGIN_DIR} --no-restore").json()
    assert res["dump_rc"] == 0, res
    log = "\n".join(res["dump_log"])
    assert 'Plugin "cuda_plugin"' in log, log
    assert "cuda_plugin: No GPU device found; CUDA plugin is disabled" in log, log


def test_forced_plugin_asks_our_cuda_checkpoint_and_treats_the_process_as_non_cuda(image: str, run_in: RunIn) -> None:
    """CRIU_FAULT=138 makes the plugin run as on a GPU host: it runs `cuda-checkpoint -h` (ours: lists --action),
    then `--get-restore-tid` per process; ours fails without a driver, so the plugin skips the process."""
    res = run_in(image, f"{DRIVER} --dump-plugin-dir {PLUGIN_DIR} --dump-env CRIU_FAULT=138").json()
    assert res["dump_rc"] == 0, res
    log = "\n".join(res["dump_log"])
    pid = res["target_pid"]
    assert "cuda_plugin: initialized: cuda_plugin stage 0" in log, log  # -h answered with --action
    assert "no NVIDIA driver on this host" in log, log  # our message, as the plugin captured it
    assert f"cuda_plugin: no need to pause devices on pid {pid}" in log, log
    assert f"cuda_plugin: No need to checkpoint devices on pid {pid}" in log, log
    assert res["restore_rc"] == 0 and res["after"] is not None, res


def test_cuda_checkpoint_help_lists_action(image: str, run_in: RunIn) -> None:
    long_help = run_in(image, "cuda-checkpoint --help")
    short_help = run_in(image, "cuda-checkpoint -h")  # what the plugin runs
    assert long_help.rc == 0 and short_help.rc == 0, (long_help, short_help)
    assert long_help.output == short_help.output
    for option in (
        "--action ACTION",
        "lock, checkpoint, restore, unlock",
        "--get-state",
        "--get-restore-tid",
        "--toggle",
        "--timeout MS",
    ):
        assert option in long_help.output, (option, long_help.output)


def test_cuda_checkpoint_without_driver_fails_clearly(image: str, run_in: RunIn) -> None:
    r = run_in(
        image, "cuda-checkpoint --get-state --pid 1 >/tmp/o 2>/tmp/e; echo rc=$?; echo out=$(cat /tmp/o); cat /tmp/e"
    )
    assert "rc=1" in r.output, r.output
    assert "out=\n" in r.output + "\n"  # nothing on stdout: the plugin reads it as the answer
    assert "cuda-checkpoint: no NVIDIA driver on this host (libcuda.so.1 cannot be loaded" in r.output, r.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ("--action freeze --pid 1", "--action must be one of lock, checkpoint, restore, unlock, not 'freeze'"),
        ("--get-state", "--pid PID is required"),
        ("--get-state --pid abc", "--pid wants a process id, not 'abc'"),
        ("--action checkpoint --pid 1 --timeout 5", "--timeout applies to --action lock only"),
        ("--pid 1", "give one of --get-state, --get-restore-tid, --action, --toggle"),
    ],
)
def test_cuda_checkpoint_bad_command_line(kit_image: str, run_in: RunIn, args: str, message: str) -> None:
    r = run_in(kit_image, f"cuda-checkpoint {args}; echo rc=$?")
    assert r.output.strip().endswith("rc=2"), r.output
    assert message in r.output, r.output


def test_plugin_dir_missing_fails_in_criu(kit_image: str, run_in: RunIn) -> None:
    res = run_in(kit_image, f"{DRIVER} --dump-plugin-dir /nonexistent-plugins").json()
    assert res["dump_rc"] == 1, res
    assert any("Unable to open directory /nonexistent-plugins" in line for line in res["dump_log"]), res
    assert res["alive_after_failed_dump"] and res["answer_after_failed_dump"], res  # left running


def test_corrupt_plugin_fails_in_criu(kit_image: str, run_in: RunIn) -> None:
    res = run_in(
        kit_image,
        f"mkdir /tmp/bad && head -c 4096 /dev/urandom >/tmp/bad/cuda_plugin.so && {DRIVER} --dump-plugin-dir /tmp/bad",
    ).json()
    assert res["dump_rc"] == 1, res
    assert any("Unable to load /tmp/bad/cuda_plugin.so" in line for line in res["dump_log"]), res
    assert any("Dumping FAILED." in line for line in res["dump_log"]), res
    assert res["alive_after_failed_dump"] and res["answer_after_failed_dump"], res


@pytest.mark.parametrize("with_plugin", [True, False], ids=["with-plugin", "without-plugin"])
def test_restore_needs_the_plugin_when_the_dump_recorded_it(kit_image: str, run_in: RunIn, with_plugin: bool) -> None:
    """A dump whose inventory lists cuda_plugin (made on this CPU host with a stand-in for the NVIDIA side, see
    driver_standin/) restores with the kit's plugin dir and fails in criu itself with a plugin dir without it."""
    restore_dir = PLUGIN_DIR if with_plugin else "/tmp/empty"
    res = run_in(
        kit_image,
        f"mkdir /tmp/empty && {DRIVER} --dump-plugin-dir {PLUGIN_DIR} --dump-env CRIU_FAULT=138 "
        f"--dump-path-prepend /t/driver_standin --restore-plugin-dir {restore_dir}",
    ).json()
    assert res["dump_rc"] == 0, res
    assert any("already in a checkpointed state" in line for line in res["dump_log"]), res["dump_log"]
    if with_plugin:
        assert res["restore_rc"] == 0 and res["after"] is not None, res
    else:
        assert res["restore_rc"] == 1, res
        assert any("Missing required plugin: cuda_plugin" in line for line in res["restore_log"]), res
        assert not res["alive_after_restore"], res
