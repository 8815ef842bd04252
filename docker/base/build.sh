#!/usr/bin/env bash
# Build vsnap-debian:<suite> with no registry: debootstrap (minbase) -> docker import.
# Suites: bookworm (docker/vllm-cpu, Python 3.11) and trixie (docker/reference, Python 3.13, torch 2.6); the packages
# of each are listed in packages-<suite>.txt.
# Idempotent: skipped when an image with the same input-hash label already exists.
# Usage: build.sh [SUITE]   (default: $VSNAP_DEBIAN_SUITE, else bookworm)
# Env: VSNAP_DEBIAN_SUITE, VSNAP_BASE_IMAGE (default vsnap-debian:<suite>),
#      VSNAP_DEBIAN_MIRROR (default http://deb.debian.org/debian),
#      VSNAP_DEBOOTSTRAP_CACHE (a .deb cache dir reused across builds; one subdirectory per suite), VSNAP_FORCE=1.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
suite="${1:-${VSNAP_DEBIAN_SUITE:-bookworm}}"
log() { echo "base: $*" >&2; }
list="$here/packages-$suite.txt"
[[ -f "$list" ]] || { log "unknown suite '$suite': no $list (known: $(cd "$here" && ls packages-*.txt | sed 's/packages-//; s/\.txt//' | paste -sd' '))"; exit 2; }
image="${VSNAP_BASE_IMAGE:-vsnap-debian:$suite}"
mirror="${VSNAP_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
cache="${VSNAP_DEBOOTSTRAP_CACHE:-/var/cache/vsnap-debootstrap}/$suite"
# One build at a time (parallel test workers may call this concurrently); the second one then finds the
# image up to date.
exec 9>"${TMPDIR:-/tmp}/vsnap-base-build-$suite.lock"
flock 9

packages="$(grep -v '^[[:space:]]*#' "$list" | grep -v '^[[:space:]]*$' | sort -u | paste -sd, -)"
input_hash="$(
  { printf 'suite=%s\nmirror=%s\npackages=%s\n' "$suite" "$mirror" "$packages"; cat "$here/build.sh"; } \
    | sha256sum | cut -d' ' -f1
)"

if [[ "${VSNAP_FORCE:-0}" != 1 ]]; then
  have="$(docker image inspect --format '{{ index .Config.Labels "ai.vsnap.input-hash" }}' "$image" 2>/dev/null || true)"
  if [[ "$have" == "$input_hash" ]]; then
    log "$image is up to date (input hash ${input_hash:0:12})"
    exit 0
  fi
fi

command -v debootstrap >/dev/null || { log "debootstrap not found (apt-get install debootstrap)"; exit 1; }
[[ "$(id -u)" == 0 ]] || { log "debootstrap needs root"; exit 1; }

work="$(mktemp -d /tmp/vsnap-base.XXXXXX)"
trap 'rm -rf "$work"' EXIT
rootfs="$work/rootfs"
mkdir -p "$cache"
start=$(date +%s)
log "debootstrap $suite ($packages) from $mirror"
debootstrap --variant=minbase --cache-dir="$cache" --include="$packages" "$suite" "$rootfs" "$mirror" \
  >"$work/debootstrap.log" 2>&1 || { tail -n 40 "$work/debootstrap.log" >&2; exit 1; }

# Slim the rootfs: apt lists and caches, docs, man pages, locales other than C (none of them used at runtime).
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb \
  "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/var/log/*.log
printf 'deb %s %s main\n' "$mirror" "$suite" >"$rootfs/etc/apt/sources.list"
log "debootstrap took $(( $(date +%s) - start )) s; importing"

tar -C "$rootfs" --numeric-owner -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change "LABEL ai.vsnap.input-hash=$input_hash" \
  --change "LABEL org.opencontainers.image.title=vsnap-debian" \
  --change "LABEL ai.vsnap.debian-suite=$suite" \
  --change 'CMD ["/bin/bash"]' \
  - "$image" >/dev/null
log "built $image in $(( $(date +%s) - start )) s (input hash ${input_hash:0:12})"
