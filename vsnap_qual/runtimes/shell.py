"""The process-level operations of :class:`vsnap_qual.box.Box` for any box with a POSIX shell and ``/proc``: each
one shell script run through the box's own ``exec`` (one round trip each), so a runtime only brings ``exec``,
``read_bytes``, ``processes``, ``restart``, ``remove`` and ``endpoint``. The Docker and host runtimes build on it;
a runtime that can do better (the host runtime reads the host's ``/proc`` directly) overrides a method.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import shlex
from collections.abc import Mapping
from pathlib import Path

from vsnap_qual.box import (
    BoxFacts,
    ControlDir,
    DirEntry,
    ExecResult,
    GpuRow,
    ProcessRow,
    RuntimeFailure,
    ShmEntry,
    ShmHolders,
    Termination,
    ThreadWaits,
    TreeEntry,
    listening_ports,
)
from vsnap_qual.model import CpuSample
from vsnap_qual.runtimes.procfs import parse_cpu_sample

#: state and start time of process $p (after the comm field, which may hold spaces and parentheses)
_IDENT = "sed 's/.*) //' /proc/$p/stat | cut -d' ' -f1,20"
#: process $p's CPU ticks so far, utime + stime (USER_HZ)
_TICKS = "sed 's/.*) //' /proc/$p/stat | awk '{print $12 + $13}'"
_GPU_APPS = "nvidia-smi --query-compute-apps=pid --format=csv,noheader"
_GPU_MEMORY = "nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits"
_GPUS = "nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv,noheader"
#: the /dev/shm files process $p holds open or mapped and that still have a name (not "(deleted)"), a path a line
_SHM_OF_PROCESS = (
    "ls -l /proc/$p/fd 2>/dev/null | sed -n 's|.* -> \\(/dev/shm/[^ ]*\\)$|\\1|p'; "
    "awk 'NF == 6 && $6 ~ /^\\/dev\\/shm\\// {print $6}' /proc/$p/maps 2>/dev/null"
)
#: the box's processes' tasks' schedstat and CPUs allowed (those in this shell's own cgroup: the box's, even with
#: pid=host), their processes' memory, and the
#: machine's /proc/stat, read with shell builtins only (a fork per process would cost a second on a busy host)
_CPU_SAMPLE = r"""
me=; read -r me < /proc/self/cgroup
n=0
while read -r name rest; do
  case $name in cpu) echo "stat $rest" ;; cpu[0-9]*) n=$((n+1)) ;; esac
done < /proc/stat
echo "cpus $n"
echo "ticks $(getconf CLK_TCK 2>/dev/null)"
for d in /proc/[0-9]*; do
  c=; { read -r c < "$d/cgroup"; } 2>/dev/null || continue
  [ "$c" = "$me" ] || continue
  for t in "$d"/task/*; do
    s=; { read -r s < "$t/schedstat"; } 2>/dev/null && echo "task ${t##*/} $s"
    { while read -r k v; do
        [ "$k" = Cpus_allowed_list: ] && { echo "aff ${t##*/} $v"; break; }
      done < "$t/status"; } 2>/dev/null
  done
  r=; h=
  { while read -r k v u; do
      case $k in Rss:) r=$v ;; AnonHugePages:) h=$v ;; esac
    done < "$d/smaps_rollup"; } 2>/dev/null
  [ -n "$r" ] && echo "mem ${d##*/} $r ${h:-0}"
done
true
"""
_SHM = "find /dev/shm -mindepth 1 -maxdepth 1 -printf '%f|%D|%i|%m|%s\\n' | sort"


def _pids(pids: list[int]) -> str:
    return " ".join(str(int(p)) for p in pids)


#: the last line of a look's output (:meth:`ShellBox.answered`): an answer that ends without it was cut short on its
#: way back. Docker's daemon waits at most 2 s after an exec's process exited for its output to be copied, then
#: closes the streams and still reports exit code 0: on a loaded host a look's whole output can be lost, and "no
#: ``pid`` line" would read as "every watched process is gone" (issue 44 item 6).
ANSWER_END = "vsnap-answer-end"


def parse_shm(text: str) -> list[ShmEntry]:
    """``find -printf '%f|%D|%i|%m|%s'`` lines as entries (malformed lines are left out)."""
    entries = []
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) == 5 and parts[4].isdigit():
            entries.append(ShmEntry(parts[0], parts[1], parts[2], parts[3], int(parts[4])))
    return entries


#: every process's /dev/shm fds and mappings in one pass (``held PATH``), and the processes whose maps cannot be
#: opened (``unread PID comm``: the fds are under the same access rule); a process gone meanwhile is neither
_SHM_HOLDERS = (
    "for d in /proc/[0-9]*; do p=${d##*/}; "
    'if ! { true < "$d/maps"; } 2>/dev/null; then [ -d "$d" ] && echo "unread $p $(cat "$d/comm" 2>/dev/null)"; '
    f"continue; fi; {_SHM_OF_PROCESS}; done | sed 's|^/dev/shm/|held /dev/shm/|'; true"
)


def parse_shm_holders(names: list[str], text: str) -> ShmHolders:
    """The ``_SHM_HOLDERS`` script's lines as which of ``names`` no process holds (a path held matches its whole
    name, never a prefix) and which processes could not be read."""
    held: set[str] = set()
    unread: list[str] = []
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "held" and rest.startswith("/dev/shm/"):
            held.add(rest[len("/dev/shm/") :])
        elif kind == "unread" and rest.strip():
            unread.append(rest.strip())
    return ShmHolders([n for n in names if n not in held], unread)


def parse_gpu_memory(text: str) -> dict[int, int]:
    """``nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits`` rows: MiB by PID (a row
    whose memory is not a number, ``[N/A]``, is left out)."""
    used: dict[int, int] = {}
    for line in text.splitlines():
        pid, _, mib = (part.strip() for part in line.partition(","))
        if pid.isdigit() and mib.isdigit():
            used[int(pid)] = used.get(int(pid), 0) + int(mib)
    return used


def parse_gpus(csv: str) -> list[GpuRow]:
    """``nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv,noheader`` rows."""
    rows = []
    for line in csv.strip().splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) >= 4 and cols[1].startswith("GPU-"):
            mib = cols[3].split()[0] if cols[3].split() else ""
            rows.append(GpuRow(cols[0], cols[1], cols[2], int(mib) if mib.isdigit() else None))
    return rows


def parse_termination(stdout: str) -> Termination:
    """The strict stop script's report: ``gpu PID`` lines (compute apps as it began), ``id PID STATE START
    CMDLINE`` (the tree), ``shm PATH`` (a /dev/shm file the tree held), ``gone MS`` (the tree was gone that many
    milliseconds after SIGTERM), ``cpu PID TICKS`` (its CPU ticks as SIGTERM was sent), ``left PID STATE START
    TICKS`` (alive after the grace, before any SIGKILL)."""
    gpu: set[int] = set()
    tree: dict[int, TreeEntry] = {}
    left: list[tuple[int, str, str]] = []
    held: set[str] = set()
    gone: float | None = None
    at_term: dict[int, int] = {}
    at_grace: dict[int, int] = {}
    for line in stdout.splitlines():
        parts = line.split()
        if parts[:1] == ["cpu"] and len(parts) == 3 and (parts[1] + parts[2]).isdigit():
            at_term[int(parts[1])] = int(parts[2])
        elif parts[:1] == ["gone"] and len(parts) == 2 and parts[1].isdigit():
            gone = int(parts[1]) / 1000
        elif parts[:1] == ["shm"] and len(parts) == 2 and parts[1].startswith("/dev/shm/"):
            held.add(parts[1])
        elif parts[:1] == ["gpu"] and len(parts) > 1 and parts[1].isdigit():
            gpu.add(int(parts[1]))
        elif parts[:1] == ["id"] and len(parts) >= 4 and parts[1].isdigit():
            tree[int(parts[1])] = TreeEntry(int(parts[1]), parts[3], " ".join(parts[4:]))
        elif parts[:1] == ["left"] and len(parts) >= 4 and parts[1].isdigit():
            left.append((int(parts[1]), parts[2], parts[3]))
            if len(parts) == 5 and parts[4].isdigit():
                at_grace[int(parts[1])] = int(parts[4])
    return Termination(frozenset(gpu), tuple(tree.values()), tuple(left), tuple(sorted(held)), gone, at_term, at_grace)


#: for each process $p: its CPU ticks (utime stime) and every thread's wchan, in one line (gone ones left out)
_THREAD_WAITS = (
    "[ -r /proc/$p/stat ] || continue; "
    "t=$(sed 's/.*) //' /proc/$p/stat 2>/dev/null | cut -d' ' -f12,13); "
    'w=""; for d in /proc/$p/task/*; do w="$w,$(cat $d/wchan 2>/dev/null)"; done; '
    'echo "$p $t $w"'
)


def parse_thread_waits(stdout: str) -> dict[int, ThreadWaits]:
    """``_THREAD_WAITS``' lines (``PID UTIME STIME ,WCHAN,WCHAN…``) as each process's thread waits and ticks."""
    out: dict[int, ThreadWaits] = {}
    for line in stdout.splitlines():
        words = line.split()
        if len(words) != 4 or not (words[0] + words[1] + words[2]).isdigit():
            continue
        waits = tuple(sorted(w for w in words[3].split(",") if w))
        out[int(words[0])] = ThreadWaits(waits, int(words[1]) + int(words[2]))
    return out


def parse_entries(stdout: str) -> list[DirEntry]:
    """``find -printf '%y %s %P\\0'`` records as entries, sorted by path."""
    entries = []
    for record in stdout.split("\0"):
        kind, size, path = (record.lstrip("\n").split(" ", 2) + ["", ""])[:3]
        if path and size.isdigit():
            entries.append(DirEntry(path, kind, int(size)))
    return sorted(entries, key=lambda e: e.path)


#: the port blocker (:meth:`ShellBox.hold_port`): listens on the port and accepts nothing
_BLOCKER = (
    "import socket,time; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
    "s.bind(('127.0.0.1', {port})); s.listen(1); time.sleep(900)"
)
#: the listener watch (:meth:`ShellBox.watch_listener`): ``/proc/net/tcp*`` every 10 ms for a LISTEN socket on the
#: port; the marker gets the time it saw one
_LISTENER_SCAN = (
    "import time,sys\n"
    "needle=':{port:04X} '\n"
    "while True:\n"
    "    for f in ('/proc/net/tcp','/proc/net/tcp6'):\n"
    "        try:\n"
    "            rows=open(f).read().splitlines()[1:]\n"
    "        except OSError:\n"
    "            continue\n"
    "        if any(needle in r.split()[1]+' ' and r.split()[3]=='0A' for r in rows):\n"
    "            open({marker!r},'a').write(repr(time.time())+'\\n'); sys.exit(0)\n"
    "    time.sleep(0.01)\n"
)
#: how much :meth:`ShellBox.write_bytes` writes through one command's arguments (Linux's limit per argument is
#: 128 KiB; base64 takes a third more)
WRITE_LIMIT = 96 * 1024


class ShellBox:
    """A box's process-level operations as shell scripts over its ``exec``. Subclasses implement ``exec``,
    ``read_bytes``, ``processes``, ``restart``, ``remove``, ``endpoint`` and ``control``."""

    def exec(
        self, argv: list[str], timeout: float, *, env: Mapping[str, str] | None = None, log: Path | None = None
    ) -> ExecResult:
        raise NotImplementedError

    def read_bytes(self, path: str) -> bytes | None:
        raise NotImplementedError

    def processes(self) -> list[ProcessRow]:
        raise NotImplementedError

    def control(self) -> ControlDir:
        raise NotImplementedError

    @property
    def name(self) -> str:
        raise NotImplementedError

    # -- commands -------------------------------------------------------------------------------------------------
    def sh(self, script: str, timeout: float = 60.0, env: Mapping[str, str] | None = None) -> ExecResult:
        return self.exec(["sh", "-c", script], timeout, env=env)

    def spawn(self, argv: list[str], log_path: str, *, env: Mapping[str, str] | None = None) -> int:
        pidfile = f"{log_path}.pid"
        script = (
            f'mkdir -p "$(dirname {shlex.quote(log_path)})"; '
            f"setsid {shlex.join(argv)} </dev/null >>{shlex.quote(log_path)} 2>&1 & "
            f"echo $! > {shlex.quote(pidfile)}"
        )
        result = self.exec(["sh", "-c", script], 30.0, env=env)
        if result.exit_code != 0:
            raise RuntimeFailure(f"could not start {argv[0]} in {self.name}: {result.tail()}")
        return int(self.read_text(pidfile).strip())

    def read_text(self, path: str) -> str:
        data = self.read_bytes(path)
        return "" if data is None else data.decode("utf-8", "replace")

    def ensure_dir(self, path: str, mode: int = 0o700) -> None:
        done = self.sh(f"mkdir -p -m {mode:o} {shlex.quote(path)}", 30)
        if done.exit_code != 0:
            raise RuntimeFailure(f"cannot create {path} in {self.name}: {done.tail()}")

    def remove_path(self, path: str) -> None:
        done = self.sh(f"rm -rf {shlex.quote(path)}", 120)
        if done.exit_code != 0:
            raise RuntimeFailure(f"cannot remove {path} in {self.name}: {done.tail()}")

    has_shell = True

    # -- named operations ------------------------------------------------------------------------------------------
    def exists(self, path: str) -> bool:
        return self.sh(f"test -e {shlex.quote(path)}", 10).exit_code == 0

    def list_dir(self, path: str, glob: str = "*", depth: int | None = 1) -> list[DirEntry]:
        limits = ("" if depth is None else f" -maxdepth {int(depth)}") + (
            "" if glob == "*" else f" -name {shlex.quote(glob)}"
        )
        done = self.sh(f"cd {shlex.quote(path)} && find . -mindepth 1{limits} -printf '%y %s %P\\0'", 60)
        if done.exit_code != 0:
            raise RuntimeFailure(f"cannot list {path} in {self.name}: {done.tail()}")
        return parse_entries(done.stdout)

    def copy_tree(self, source: str, target: str, *, replace: bool = False) -> None:
        src, dst = shlex.quote(source), shlex.quote(target)
        done = self.sh(f"rm -rf {dst} && cp -a {src} {dst}" if replace else f"cp -a {src} {dst}", 300)
        if done.exit_code != 0:
            raise RuntimeFailure(done.tail() or f"cp -a {source} {target} exited {done.exit_code} in {self.name}")

    def truncate(self, path: str, size: int) -> None:
        done = self.sh(f"truncate -s {int(size)} {shlex.quote(path)}", 30)
        if done.exit_code != 0:
            raise RuntimeFailure(f"cannot truncate {path} in {self.name}: {done.tail()}")

    def write_bytes(self, path: str, data: bytes) -> None:
        if len(data) > WRITE_LIMIT:
            raise RuntimeFailure(f"cannot write {len(data)} bytes to {path} in one command (at most {WRITE_LIMIT})")
        encoded = base64.b64encode(data).decode()
        done = self.exec(["sh", "-c", 'printf %s "$1" | base64 -d > "$2"', "sh", encoded, path], 30)
        if done.exit_code != 0:
            raise RuntimeFailure(f"cannot write {path} in {self.name}: {done.tail()}")

    def digest_tree(self, path: str) -> str:
        result = self.sh(
            f"cd {path} 2>/dev/null && find . -type f -print0 | sort -z | xargs -0 -r sha256sum; "
            "find . -printf '%p %m\\n' | sort",
            120,
        )
        return hashlib.sha256(result.stdout.encode()).hexdigest()

    def signal(self, pids: list[int], signame: str, *, strict: bool = False) -> bool:
        if not pids:
            return True
        kill = f"kill -{signame} {_pids(pids)}"
        return self.sh(kill if strict else f"{kill} 2>/dev/null; true", 15).exit_code == 0

    def wchan(self, pids: list[int]) -> dict[int, str]:
        if not pids:
            return {}
        script = " ".join(f"{int(pid)}:$(cat /proc/{int(pid)}/wchan 2>/dev/null || echo gone)" for pid in pids)
        done = self.sh(f"echo {script}", 15)
        pairs = (word.partition(":") for word in done.stdout.split()) if done.exit_code == 0 else ()
        return {int(pid): wchan for pid, _, wchan in pairs if pid.isdigit()}

    def thread_waits(self, pids: list[int]) -> dict[int, ThreadWaits]:
        if not pids:
            return {}
        done = self.sh(f"for p in {_pids(pids)}; do {_THREAD_WAITS}; done", 15)
        return parse_thread_waits(done.stdout) if done.exit_code == 0 else {}

    def hold_port(self, port: int, log_path: str) -> int:
        return self.spawn(["python3", "-c", _BLOCKER.format(port=int(port))], log_path)

    def watch_listener(self, port: int, marker: str, log_path: str) -> int:
        return self.spawn(["python3", "-c", _LISTENER_SCAN.format(port=int(port), marker=marker)], log_path)

    # -- processes and listeners ------------------------------------------------------------------------------
    def listening_ports(self) -> set[int]:
        return listening_ports(self.sh("cat /proc/net/tcp /proc/net/tcp6 2>/dev/null", 20.0).stdout)

    def answered(self, script: str, timeout: float) -> ExecResult:
        """``script``'s whole answer, for a look that reads absence from missing lines: its output must end with
        :data:`ANSWER_END` (stripped here). An answer without it (exit code 0, output cut short on the way back) is
        asked again once; cut short twice, it fails (:class:`RuntimeFailure`) rather than say what it never said.
        A command that failed is returned as it is, for its caller to judge."""
        for _ in range(2):
            result = self.sh(f"{script}\necho {ANSWER_END}", timeout)
            if result.exit_code != 0:
                return result
            lines = result.stdout.splitlines(keepends=True)
            if lines and lines[-1].rstrip("\n") == ANSWER_END:
                return dataclasses.replace(result, stdout="".join(lines[:-1]))
        raise RuntimeFailure(
            f"{self.name}: the answer to a look came back without its last line twice (output lost on its way "
            f"back, exit code 0); last: {len(result.stdout)} bytes"
        )

    def look(self, pids: list[int]) -> tuple[list[int], set[int]]:
        script = (
            f"for p in {_pids(pids)}; do [ -d /proc/$p ] && echo pid $p; done; "
            "cat /proc/net/tcp /proc/net/tcp6 2>/dev/null; true"
        )
        result = self.answered(script, 30)
        if result.exit_code != 0:
            raise RuntimeFailure(f"cannot probe processes and ports in {self.name}: {result.tail()}")
        alive = [int(line.split()[1]) for line in result.stdout.splitlines() if line.startswith("pid ")]
        return alive, listening_ports(result.stdout)

    def identify(self, pids: list[int]) -> dict[int, str]:
        if not pids:
            return {}
        start = "$(sed 's/.*) //' /proc/$p/stat | cut -d' ' -f20)"
        script = f'for p in {_pids(pids)}; do [ -r /proc/$p/stat ] && echo "$p {start}"; done; true'
        found = {}
        for line in self.answered(script, 30).stdout.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0].isdigit():
                found[int(parts[0])] = parts[1]
        return found

    def terminate(self, pids: list[int], grace: float, *, kill: bool = True) -> Termination:
        if not pids:
            return Termination(frozenset(), (), ())
        listed = _pids(pids)
        script = (
            f"command -v nvidia-smi >/dev/null 2>&1 && {_GPU_APPS} 2>/dev/null | sed 's/^ */gpu /'; "
            f"for p in {listed}; do [ -r /proc/$p/stat ] && echo \"id $p $({_IDENT}) $(tr '\\0' ' ' "
            '< /proc/$p/cmdline)"; done; '
            f"for p in {listed}; do {_SHM_OF_PROCESS}; done | sort -u | sed 's/^/shm /'; "
            f'for p in {listed}; do [ -r /proc/$p/stat ] && echo "cpu $p $({_TICKS})"; done; '
            "t0=$(( $(date +%s%N) / 1000000 )); "
            f"end=$(( t0 + {int(grace * 1000)} )); kill -TERM {listed} 2>/dev/null; "
            "while [ $(( $(date +%s%N) / 1000000 )) -lt $end ]; do left=; "
            f'for p in {listed}; do [ -r /proc/$p/stat ] && [ "$({_IDENT} | cut -c1)" != Z ] && left=1; done; '
            '[ -z "$left" ] && { echo "gone $(( $(date +%s%N) / 1000000 - t0 ))"; break; }; sleep 0.05; done; '
            f'for p in {listed}; do [ -r /proc/$p/stat ] && echo "left $p $({_IDENT}) $({_TICKS})"; done; '
            + (f"kill -KILL {listed} 2>/dev/null; " if kill else "")
            + "true"
        )
        return parse_termination(self.sh(script, grace + 30).stdout)

    def tasks_held(self, ids: set[int]) -> list[str]:
        if not ids:
            return []
        script = (
            f"for p in {_pids(sorted(ids))}; do [ -e /proc/$p ] && "
            "{ printf '%s ' $p; awk -F'\t' '/^(Name|State|Tgid|PPid):/{printf \"%s \", $2}' /proc/$p/status "
            "2>/dev/null; echo; }; done; true"
        )
        return [line.strip() for line in self.sh(script, 15).stdout.splitlines() if line.strip()]

    def shm(self) -> list[ShmEntry]:
        listing = self.sh(_SHM, 30)
        if listing.exit_code != 0:
            raise RuntimeFailure(f"cannot list /dev/shm in {self.name}: exit {listing.exit_code} {listing.tail()}")
        return parse_shm(listing.stdout)

    def shm_unheld(self, names: list[str]) -> ShmHolders:
        if not names:
            return ShmHolders([], [])
        done = self.sh(_SHM_HOLDERS, 60)
        if done.exit_code != 0:
            why = f"exit {done.exit_code} {done.tail()}"
            raise RuntimeFailure(f"cannot look for /dev/shm holders in {self.name}: {why}")
        return parse_shm_holders(names, done.stdout)

    def cpu_sample(self) -> CpuSample | None:
        result = self.sh(_CPU_SAMPLE, 30)
        return parse_cpu_sample(result.stdout) if result.exit_code == 0 else None

    def gpu_apps(self) -> set[int] | None:
        listing = self.sh(f"command -v nvidia-smi >/dev/null || exit 127; {_GPU_APPS}", 30)
        if listing.exit_code == 127:
            return None
        if listing.exit_code != 0:
            raise RuntimeFailure(f"nvidia-smi cannot list compute apps: exit {listing.exit_code} {listing.tail()}")
        return {int(x) for x in listing.stdout.split() if x.strip().isdigit()}

    def gpu_memory(self) -> dict[int, int] | None:
        listing = self.sh(f"command -v nvidia-smi >/dev/null || exit 127; {_GPU_MEMORY}", 30)
        return parse_gpu_memory(listing.stdout) if listing.exit_code == 0 else None

    def facts(self, gpus: bool) -> BoxFacts:
        script = (
            "printf '%s\\n' \"$(criu --version 2>/dev/null | head -n1)\"; printenv CUDA_VERSION || echo; "
            + (f"{_GPUS} 2>/dev/null; " if gpus else "")
            + "true"
        )
        lines = self.sh(script, 30).stdout.splitlines()
        criu = lines[0].strip() if lines and lines[0].strip() else None
        cuda = lines[1].strip() if len(lines) > 1 and lines[1].strip() else None
        return BoxFacts(criu, cuda, tuple(parse_gpus("\n".join(lines[2:]))) if gpus else ())
