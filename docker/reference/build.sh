#!/usr/bin/env bash
# Build vsnap-reference:head and vsnap-reference:base FROM the local Debian trixie base, with real CRIU from the
# local criu kit image (no registry).
# A flavour is rebuilt only when the content hash of its inputs (base image ID + criu kit image ID + every
# recipe/engine file + flavour) differs from the image's ai.vsnap.input-hash label; a no-op rebuild takes seconds.
# Env: VSNAP_REFERENCE_IMAGE (default vsnap-reference), VSNAP_BASE_IMAGE (default vsnap-debian:trixie),
#      VSNAP_CRIU_KIT_IMAGE (default vsnap-criu-kit:4.2.1, built by docker/criu/build.sh),
#      VSNAP_REFERENCE_FLAVOURS (default "head base"), VSNAP_FORCE=1 to rebuild.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="${VSNAP_REFERENCE_IMAGE:-vsnap-reference}"
base="${VSNAP_BASE_IMAGE:-vsnap-debian:trixie}"
kit="${VSNAP_CRIU_KIT_IMAGE:-vsnap-criu-kit:4.2.1}"
flavours="${VSNAP_REFERENCE_FLAVOURS:-head base}"
log() { echo "reference: $*" >&2; }
# One build at a time (parallel test workers may call this concurrently); the second one then finds the
# image up to date.
exec 9>"${TMPDIR:-/tmp}/vsnap-reference-build.lock"
flock 9

VSNAP_BASE_IMAGE="$base" bash "$here/../base/build.sh" trixie
base_id="$(docker image inspect --format '{{.Id}}' "$base")"
# The criu kit: built (idempotently) by its own script; another kit named by VSNAP_CRIU_KIT_IMAGE must exist.
if [[ "$kit" == vsnap-criu-kit:4.2.1 && -f "$here/../criu/build.sh" ]]; then
  bash "$here/../criu/build.sh"
fi
kit_id="$(docker image inspect --format '{{.Id}}' "$kit" 2>/dev/null)" || {
  log "criu kit image $kit not found (build it with: bash docker/criu/build.sh, or set VSNAP_CRIU_KIT_IMAGE)"
  exit 1
}

# Every input file except documentation, the registry-pull recipe and the recorded API transcripts (the engine's
# specification, not part of the image), in a stable order.
inputs_hash="$(
  cd "$here" && find . -type f ! -name 'README.md' ! -name 'Dockerfile.pull' ! -path './api-transcripts/*' \
    ! -path '*/__pycache__/*' ! -path '*/.*_cache/*' \
    ! -name '*.pyc' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1
)"

for flavour in $flavours; do
  image="$repo:$flavour"
  input_hash="$(printf '%s\n%s\n%s\n%s\n' "$base_id" "$kit_id" "$inputs_hash" "$flavour" | sha256sum | cut -d' ' -f1)"
  have="$(docker image inspect --format '{{ index .Config.Labels "ai.vsnap.input-hash" }}' "$image" 2>/dev/null || true)"
  if [[ "${VSNAP_FORCE:-0}" != 1 && "$have" == "$input_hash" ]]; then
    log "$image is up to date (input hash ${input_hash:0:12})"
    continue
  fi
  start=$(date +%s)
  log "building $image (input hash ${input_hash:0:12}, criu kit $kit)"
  # The classic builder: the engine ships no buildx; its deprecation notice is noise here.
  DOCKER_BUILDKIT=0 docker build --quiet \
    --build-arg "BASE_IMAGE=$base" --build-arg "CRIU_KIT_IMAGE=$kit" --build-arg "FLAVOUR=$flavour" \
    --build-arg "INPUT_HASH=$input_hash" \
    -t "$image" -f "$here/Dockerfile" "$here" 2> >(grep -v -e DEPRECATED -e 'BuildKit is currently' \
      -e 'environment-variable' -e '^ *$' >&2) >/dev/null
  log "built $image in $(( $(date +%s) - start )) s"
done
