"""Run a command as a child subreaper that reaps every orphan (what Docker's shim does for a lane), so that
processes CRIU killed do not linger as zombies under a host init that never reaps. Usage: reaper.py CMD..."""

import ctypes
import os
import subprocess
import sys

PR_SET_CHILD_SUBREAPER = 36
ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
main = subprocess.Popen(sys.argv[1:])
code = None
while code is None:
    pid, status = os.wait()
    if pid == main.pid:
        code = os.waitstatus_to_exitcode(status)
sys.exit(code)
