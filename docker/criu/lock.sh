#!/usr/bin/env bash
# Re-pin the criu kit: resolve Debian sid's current criu, the libraries it links (from the list in LIBS below)
# and the source package's upstream tarball, plus the cuda-bindings wheels, and write kit.lock.
# Uses a private apt configuration (nothing of the host's apt setup changes) and the host's pip.
# Usage: lock.sh [CRIU_VERSION]   (default: the criu version sid has now; fails if it differs from the argument)
# Env: VSNAP_DEBIAN_MIRROR (default http://deb.debian.org/debian), VSNAP_CUDA_BINDINGS (default 12.9.10),
#      VSNAP_CUDA_PATHFINDER (default 1.9.1).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mirror="${VSNAP_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
want="${1:-}"
bindings="${VSNAP_CUDA_BINDINGS:-12.9.10}"
pathfinder="${VSNAP_CUDA_PATHFINDER:-1.9.1}"  # cuda-bindings needs it (pure Python) to find libcuda
pythons="3.11 3.12 3.13"
# criu's NEEDED closure in sid (checked again at build time: every library the loader resolves must be one of these
# or glibc). libc6 is carried too, used only through its own loader on hosts whose glibc is older than the kit needs.
LIBS="libbsd0 libmd0 libgnutls30t64 libp11-kit0 libffi8 libidn2-0 libunistring5 libtasn1-6 libhogweed6t64
libnettle8t64 libgmp10 libnftables1 libmnl0 libnftnl11 libxtables12 libjansson4 libprotobuf-c1 libnl-3-200 libnet9
libuuid1 libc6"

work="$(mktemp -d /tmp/vsnap-criu-lock.XXXXXX)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial"
printf 'deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] %s sid main\ndeb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] %s sid main\n' \
  "$mirror" "$mirror" >"$work/sources.list"
apt_opts=(-oDir::Etc::SourceList="$work/sources.list" -oDir::Etc::SourceParts=/dev/null -oDir::State::Lists="$work/lists"
  -oDir::Cache="$work/cache" -oDir::State::status=/dev/null -oAPT::Architecture=amd64 -oAPT::Architectures::=amd64)
mkdir -p "$work/cache"
apt-get "${apt_opts[@]}" -qq update 2>&1 | grep -v "unsandboxed" >&2 || true

field() {  # field PKG NAME: a field of the sid amd64 record of PKG (the highest version)
  apt-cache "${apt_opts[@]}" show "$1" | awk -v f="$2" 'BEGIN{n=0} /^$/{n++} n==0 && $1==f":"{print $2}'
}
criu_version="$(field criu Version)"
[[ -z "$want" || "$criu_version" == "$want"-* ]] || { echo "lock: sid has criu $criu_version, not $want" >&2; exit 1; }

out="$work/kit.lock"
{
  echo "# criu kit lock, written by docker/criu/lock.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ) from $mirror (sid)."
  echo "# deb NAME VERSION SHA256 POOL-PATH | orig NAME SHA256 POOL-PATH | wheel FILENAME SHA256 PYTHON"
  for p in criu $LIBS; do
    printf 'deb %s %s %s %s\n' "$p" "$(field "$p" Version)" "$(field "$p" SHA256)" "$(field "$p" Filename)"
  done
  apt-cache "${apt_opts[@]}" showsrc criu | awk -v want="$criu_version" '
    function emit() { if (ok && name != "" && dir != "") { print "orig", name, sum, dir "/" name; done=1 } }
    /^$/ { emit(); ok=0; name=""; dir="" }
    /^Version:/ { ok=($2==want) }
    /^Directory:/ { dir=$2 }
    /^Checksums-Sha256:/ { s=1; next } /^[^ ]/ { s=0 }
    s && $3 ~ /\.orig\.tar\./ { name=$3; sum=$1 }
    END { if (!done) emit() }' | head -n1
  for v in $pythons; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$v" --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
      -d "$work/wheels/$v" "cuda-bindings==$bindings" 2>&1 | grep -v "^WARNING: Location" >&2 || true
    f="$(ls "$work/wheels/$v")"
    printf 'wheel %s %s %s\n' "$f" "$(sha256sum "$work/wheels/$v/$f" | cut -d' ' -f1)" "$v"
  done
  python3 -m pip download -q --no-deps --only-binary=:all: -d "$work/wheels/any" "cuda-pathfinder==$pathfinder" 2>&1 \
    | grep -v "^WARNING: Location" >&2 || true
  f="$(ls "$work/wheels/any")"
  printf 'wheel %s %s any\n' "$f" "$(sha256sum "$work/wheels/any/$f" | cut -d' ' -f1)"
} >"$out"
grep -q "^orig " "$out" || { echo "lock: no orig tarball for criu $criu_version in sid's Sources" >&2; exit 1; }
[[ "$(grep -c "^wheel " "$out")" == 4 ]] || { echo "lock: cuda-bindings wheels missing" >&2; exit 1; }
cp "$out" "$here/kit.lock"
echo "lock: wrote $here/kit.lock (criu $criu_version, cuda-bindings $bindings)" >&2
