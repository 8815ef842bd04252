#!/usr/bin/python3
"""cuda-checkpoint stand-in of the vsnap reference image (the simulated GPU keeps no device state to move)."""

import sys

USAGE = """Usage: cuda-checkpoint --action {lock,checkpoint,restore,unlock} --pid PID [--timeout MS]
  --action ACTION   lock, checkpoint, restore or unlock the CUDA state of PID (stand-in: no-op)
  --pid PID         process to act on
  --get-state       print the CUDA state of PID
  --help            this text
"""

if __name__ == "__main__":
    arguments = sys.argv[1:]
    if not arguments or "--help" in arguments or "-h" in arguments:
        print(USAGE, end="")
        sys.exit(0)
    if "--get-state" in arguments:
        print("running")
    sys.exit(0)
