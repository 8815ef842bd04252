"""cuda-checkpoint of the vsnap criu kit, on the CUDA driver API (cuda.bindings.driver, cuCheckpointProcess*).

The command line is the one CRIU's CUDA plugin (plugins/cuda/cuda_plugin.c of CRIU 4.2.1) runs, plus NVIDIA's
--toggle. The plugin reads stdout and stderr together: on success this command prints only the answer (a state
word, a thread id) or nothing; every failure prints one line on stderr and exits non-zero.

  cuda-checkpoint -h | --help
  cuda-checkpoint --get-state --pid PID          -> running | locked | checkpointed | failed
  cuda-checkpoint --get-restore-tid --pid PID    -> the TID of the process's CUDA restore thread
  cuda-checkpoint --action lock --pid PID [--timeout MS]
  cuda-checkpoint --action checkpoint|restore|unlock --pid PID
  cuda-checkpoint --toggle --pid PID             running -> lock + checkpoint; checkpointed -> restore + unlock

Exit status: 0 done; 1 the driver refused or is missing (no NVIDIA driver, a process without CUDA: CRIU's plugin
then treats the process as one without CUDA state); 2 bad command line.
"""

from __future__ import annotations

import os
import sys

USAGE = """\
Usage: cuda-checkpoint [-h] --pid PID (--get-state | --get-restore-tid | --action ACTION [--timeout MS] | --toggle)

Checkpoint and restore the CUDA state of a process through the CUDA driver API (vsnap criu kit).

Options:
  -h, --help            show this help and exit
  -p, --pid PID         the process (or, for --get-state, the restore thread) to act on
  -g, --get-state       print the CUDA state of PID: running, locked, checkpointed or failed
  -r, --get-restore-tid print the thread id of PID's CUDA restore thread
  -a, --action ACTION   one of: lock, checkpoint, restore, unlock
  -t, --timeout MS      lock only: give up after MS milliseconds (0: wait without limit)
  -s, --toggle          running -> lock and checkpoint; checkpointed -> restore and unlock
"""

ACTIONS = ("lock", "checkpoint", "restore", "unlock")
STATE_WORDS = {
    "CU_PROCESS_STATE_RUNNING": "running",
    "CU_PROCESS_STATE_LOCKED": "locked",
    "CU_PROCESS_STATE_CHECKPOINTED": "checkpointed",
    "CU_PROCESS_STATE_FAILED": "failed",
}


class Failure(Exception):
    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def parse(argv: list[str]) -> dict[str, object]:
    opts: dict[str, object] = {"pid": None, "timeout": 0, "op": None}
    aliases = {
        "-p": "--pid",
        "-g": "--get-state",
        "-r": "--get-restore-tid",
        "-a": "--action",
        "-t": "--timeout",
        "-s": "--toggle",
        "-h": "--help",
    }
    takes_value = ("--pid", "--timeout", "--action")
    words = list(argv)
    while words:
        raw = words.pop(0)
        name, eq, text = raw.partition("=") if raw.startswith("--") else (raw, "", "")
        name = aliases.get(name, name)
        if name in takes_value and not eq:
            if not words:
                raise Failure(f"cuda-checkpoint: {name} needs a value (see --help)", 2)
            text = words.pop(0)
        if name == "--help":
            opts["op"] = "help"
            return opts
        if name == "--pid":
            if not text.isdigit() or int(text) <= 0:
                raise Failure(f"cuda-checkpoint: --pid wants a process id, not '{text}'", 2)
            opts["pid"] = int(text)
        elif name == "--timeout":
            if not text.isdigit():
                raise Failure(f"cuda-checkpoint: --timeout wants milliseconds (an integer >= 0), not '{text}'", 2)
            opts["timeout"] = int(text)
        elif name in ("--get-state", "--get-restore-tid", "--toggle", "--action"):
            op = text if name == "--action" else name[2:]
            if name == "--action" and op not in ACTIONS:
                raise Failure(f"cuda-checkpoint: --action must be one of {', '.join(ACTIONS)}, not '{op}'", 2)
            if opts["op"] is not None:
                raise Failure("cuda-checkpoint: give one of --get-state, --get-restore-tid, --action, --toggle", 2)
            opts["op"] = op
        else:
            raise Failure(f"cuda-checkpoint: unknown argument '{raw}' (see --help)", 2)
    if opts["op"] is None:
        raise Failure("cuda-checkpoint: give one of --get-state, --get-restore-tid, --action, --toggle (see --help)", 2)
    if opts["pid"] is None:
        raise Failure("cuda-checkpoint: --pid PID is required", 2)
    if opts["timeout"] and opts["op"] != "lock":
        raise Failure("cuda-checkpoint: --timeout applies to --action lock only", 2)
    return opts


def load_driver():  # -> the cuda.bindings.driver module, initialised
    kit = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
    carried = os.path.join(kit, "lib", "python", f"{sys.version_info[0]}.{sys.version_info[1]}")
    if os.path.isdir(carried):
        sys.path.insert(0, carried)
    try:
        from cuda.bindings import driver
    except ImportError as exc:
        raise Failure(
            f"cuda-checkpoint: cuda-bindings for Python {sys.version_info[0]}.{sys.version_info[1]} is neither in "
            f"the kit ({carried}) nor installed ({exc})"
        ) from exc
    try:
        (err,) = driver.cuInit(0)
    except Exception as exc:  # cuda.pathfinder's DynamicLibNotFoundError, RuntimeError, OSError
        raise Failure(
            "cuda-checkpoint: no NVIDIA driver on this host (libcuda.so.1 cannot be loaded; CUDA checkpointing "
            f"needs the NVIDIA driver r555 or newer): {type(exc).__name__}: {exc}"
        ) from exc
    if err != driver.CUresult.CUDA_SUCCESS:
        raise Failure(f"cuda-checkpoint: cuInit failed: {describe(driver, err)}")
    return driver


def describe(driver, err) -> str:
    name = getattr(err, "name", str(err))
    try:
        _, text = driver.cuGetErrorString(err)
        return f"{name} ({text.decode() if isinstance(text, bytes) else text})"
    except Exception:
        return name


def call(driver, what: str, pid: int, fn, *args):
    result = fn(pid, *args)
    err = result[0]
    if err != driver.CUresult.CUDA_SUCCESS:
        raise Failure(f"cuda-checkpoint: {what} of pid {pid} failed: {describe(driver, err)}")
    return result[1] if len(result) > 1 else None


def state_of(driver, pid: int) -> str:
    state = call(driver, "get-state", pid, driver.cuCheckpointProcessGetState)
    return STATE_WORDS.get(getattr(state, "name", ""), str(state))


def act(driver, action: str, pid: int, timeout_ms: int = 0) -> None:
    if action == "lock":
        args = None
        if timeout_ms:
            args = driver.CUcheckpointLockArgs()
            args.timeoutMs = timeout_ms
        call(driver, "lock", pid, driver.cuCheckpointProcessLock, args)
    elif action == "checkpoint":
        call(driver, "checkpoint", pid, driver.cuCheckpointProcessCheckpoint, None)
    elif action == "restore":
        call(driver, "restore", pid, driver.cuCheckpointProcessRestore, None)
    else:
        call(driver, "unlock", pid, driver.cuCheckpointProcessUnlock, None)


def main(argv: list[str]) -> int:
    try:
        opts = parse(argv)
        if opts["op"] == "help":
            sys.stdout.write(USAGE)
            return 0
        pid = int(opts["pid"])  # type: ignore[call-overload]
        driver = load_driver()
        op = opts["op"]
        if op == "get-state":
            print(state_of(driver, pid))
        elif op == "get-restore-tid":
            print(call(driver, "get-restore-tid", pid, driver.cuCheckpointProcessGetRestoreThreadId))
        elif op == "toggle":
            state = state_of(driver, pid)
            if state == "running":
                act(driver, "lock", pid)
                act(driver, "checkpoint", pid)
            elif state == "checkpointed":
                act(driver, "restore", pid)
                act(driver, "unlock", pid)
            else:
                raise Failure(f"cuda-checkpoint: --toggle: pid {pid} is {state}, neither running nor checkpointed")
        else:
            act(driver, str(op), pid, int(opts["timeout"]))  # type: ignore[call-overload]
        return 0
    except Failure as exc:
        sys.stdout.flush()
        print(exc, file=sys.stderr)
        return exc.code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
