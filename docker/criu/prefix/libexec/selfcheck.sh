#!/bin/sh
# Build-time checks of a staged kit prefix (run inside the image build; also usable on a host: selfcheck.sh PREFIX).
set -eu
kit=$1
fail() { echo "selfcheck: $*" >&2; exit 1; }
want=$(sed -n 's/^criu_version=//p' "$kit/VERSION")
# Everything criu links, glibc included, resolves inside the kit.
out=$("$kit/lib/glibc/ld-linux-x86-64.so.2" --library-path "$kit/lib/glibc:$kit/lib/sid" --list "$kit/libexec/criu")
echo "$out" | grep '=>' | grep -v "=> $kit/" && fail "criu resolves libraries outside the kit"
v=$("$kit/sbin/criu" --version | sed -n 's/^Version: //p')
[ "$v" = "$want" ] || fail "criu --version says '$v', not '$want'"
[ -f "$kit/lib/criu/cuda_plugin.so" ] || fail "no lib/criu/cuda_plugin.so"
[ "$(ls "$kit/lib/criu")" = cuda_plugin.so ] || fail "lib/criu holds more than the plugin (criu -L loads every .so)"
"$kit/bin/cuda-checkpoint" --help | grep -q -- '--action' || fail "cuda-checkpoint --help lists no --action"
echo "selfcheck: ok (criu $v)"
