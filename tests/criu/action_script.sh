#!/bin/sh
# criu --action-script for tests/criu/test_kit.py: records what a program started by criu sees (its environment's
# LD_LIBRARY_PATH and the exe of every ancestor, criu's among them).
p=$$
chain=""
while [ "$p" -gt 1 ]; do
  chain="$chain $(readlink /proc/$p/exe)"
  p=$(sed -n 's/^PPid:[[:space:]]*//p' /proc/$p/status)
done
echo "$CRTOOLS_SCRIPT_ACTION LDLP=${LD_LIBRARY_PATH:-none} CHAIN=$chain" >>/tmp/actions
