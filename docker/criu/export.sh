#!/usr/bin/env bash
# Write DEST_DIR/vsnap-criu-kit.tar.gz: the kit prefix (/opt/vsnap-criu of vsnap-criu-kit:4.2.1, built first if
# needed) for hosts without Docker, e.g. the lent GPU machine (carried there by the device tool). The tarball holds
# one top folder, vsnap-criu/; unpack it anywhere (the wrappers find the prefix from their own path).
# Only the cuda-bindings of the Pythons named in VSNAP_CRIU_EXPORT_PYTHONS (default 3.12: the GPU host's) go in.
# Usage: export.sh DEST_DIR
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
image=vsnap-criu-kit:4.2.1
max_bytes=$((40 * 1024 * 1024))
pythons="${VSNAP_CRIU_EXPORT_PYTHONS:-3.12}"
log() { echo "criu-kit export: $*" >&2; }
[[ $# == 1 ]] || { log "usage: export.sh DEST_DIR"; exit 2; }
dest="$1"
for v in $pythons; do
  [[ "$v" =~ ^3\.[0-9]+$ ]] || { log "VSNAP_CRIU_EXPORT_PYTHONS: '$v' is not a Python version like 3.12"; exit 2; }
done
bash "$here/build.sh"
mkdir -p "$dest"
work="$(mktemp -d /tmp/vsnap-criu-export.XXXXXX)"
name="vsnap-criu-export-$$"
trap 'rm -rf "$work"; docker rm -f "$name" >/dev/null 2>&1 || true' EXIT
docker create --name "$name" --label ai.vsnap.owner=criu-kit-export "$image" >/dev/null
docker cp "$name:/opt/vsnap-criu" "$work/vsnap-criu"
for dir in "$work"/vsnap-criu/lib/python/*; do
  keep=0
  for v in $pythons; do [[ "$(basename "$dir")" == "$v" ]] && keep=1; done
  if [[ $keep == 0 ]]; then rm -rf "$dir"; fi
done
for v in $pythons; do
  [[ -d "$work/vsnap-criu/lib/python/$v" ]] || { log "the kit carries no cuda-bindings for Python $v"; exit 1; }
done
tar -C "$work" --owner=0 --group=0 -czf "$dest/vsnap-criu-kit.tar.gz.part" vsnap-criu
size=$(stat -c %s "$dest/vsnap-criu-kit.tar.gz.part")
if (( size > max_bytes )); then
  rm -f "$dest/vsnap-criu-kit.tar.gz.part"
  log "the tarball is $size bytes, over the 40 MiB limit"
  exit 1
fi
mv "$dest/vsnap-criu-kit.tar.gz.part" "$dest/vsnap-criu-kit.tar.gz"
log "wrote $dest/vsnap-criu-kit.tar.gz ($((size / 1024)) KiB; cuda-bindings for Python $pythons)"
