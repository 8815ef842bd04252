#!/usr/bin/env bash
# Build vsnap-debian:bookworm with no registry: debootstrap (minbase) -> docker import.
# Idempotent: skipped when an image with the same input-hash label already exists.
# Env: VSNAP_BASE_IMAGE (default vsnap-debian:bookworm), VSNAP_DEBIAN_MIRROR (default http://deb.debian.org/debian),
#      VSNAP_DEBOOTSTRAP_CACHE (a .deb cache dir reused across builds), VSNAP_FORCE=1 to rebuild.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
image="${VSNAP_BASE_IMAGE:-vsnap-debian:bookworm}"
mirror="${VSNAP_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
suite=bookworm
cache="${VSNAP_DEBOOTSTRAP_CACHE:-/var/cache/vsnap-debootstrap}"
log() { echo "base: $*" >&2; }
# One build at a time (parallel test workers may call this concurrently); the second one then finds the
# image up to date.
exec 9>"${TMPDIR:-/tmp}/vsnap-base-build.lock"
flock 9

packages="$(grep -v '^[[:space:]]*#' "$here/packages.txt" | grep -v '^[[:space:]]*$' | sort -u | paste -sd, -)"
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
  --change 'CMD ["/bin/bash"]' \
  - "$image" >/dev/null
log "built $image in $(( $(date +%s) - start )) s (input hash ${input_hash:0:12})"
