#!/bin/sh
# Build-time checks of a staged kit prefix (run inside the image build; also usable on a host: selfcheck.sh PREFIX).
set -eu
kit=$1
fail() { echo "selfcheck: $*" >&2; exit 1; }
need=$(sed -n 's/^glibc_min=//p' "$kit/VERSION")
[ -n "$need" ] || fail "VERSION has no glibc_min"
# Kit mode: everything, glibc included, comes from the kit.
out=$("$kit/lib/glibc/ld-linux-x86-64.so.2" --library-path "$kit/lib/glibc:$kit/lib/sid" --list "$kit/libexec/criu")
echo "$out" | grep '=>' | grep -v "=> $kit/" && fail "kit mode resolves libraries outside the kit"
# Host mode (this image's glibc): only glibc's own libraries come from the system.
if [ "$(printf '%s\n%s\n' "$need" "$(getconf GNU_LIBC_VERSION | sed 's/^glibc //')" | sort -V | head -n1)" = "$need" ]; then
  out=$(/lib64/ld-linux-x86-64.so.2 --library-path "$kit/lib/sid" --list "$kit/libexec/criu")
  echo "$out" | grep '=>' | grep -v "=> $kit/" | grep -v -E '/(libc\.so\.6|ld-linux-x86-64\.so\.2) ' \
    && fail "host mode resolves non-glibc libraries outside the kit"
fi
for mode in host kit; do
  v=$(VSNAP_CRIU_LOADER=$mode "$kit/sbin/criu" --version | sed -n 's/^Version: //p')
  [ "$v" = "$(sed -n 's/^criu_version=//p' "$kit/VERSION")" ] || fail "criu --version ($mode loader) says '$v'"
done
[ -f "$kit/lib/criu/cuda_plugin.so" ] || fail "no lib/criu/cuda_plugin.so"
[ "$(ls "$kit/lib/criu")" = cuda_plugin.so ] || fail "lib/criu holds more than the plugin (criu -L loads every .so)"
"$kit/bin/cuda-checkpoint" --help | grep -q -- '--action' || fail "cuda-checkpoint --help lists no --action"
echo "selfcheck: ok (criu $(sed -n 's/^criu_version=//p' "$kit/VERSION"), glibc_min $need)"
