#!/usr/bin/env bash
# Build the criu kit image vsnap-criu-kit:4.2.1 with no registry (see README.md beside this file):
#   1. fetch the pinned inputs of kit.lock into docker/criu/.cache/ (Debian sid's criu and the libraries it links,
#      the upstream source tarball of Debian's criu source package, cuda-bindings wheels), each checked by sha256;
#   2. stage the prefix /opt/vsnap-criu on the host (dpkg -x, wrappers, cuda-bindings per Python, VERSION);
#   3. vsnap-criu-base:trixie (debootstrap minbase + python3 -> docker import) unless up to date;
#   4. docker build: a builder stage compiles CRIU's CUDA plugin from the tarball, the final stage holds the prefix
#      and checks itself (prefix/libexec/selfcheck.sh).
# Idempotent: skipped when the image's ai.vsnap.input-hash label equals the hash of every input. One build at a time.
# Env: VSNAP_DEBIAN_MIRROR (default http://deb.debian.org/debian), VSNAP_CRIU_CACHE (default docker/criu/.cache),
#      VSNAP_DEBOOTSTRAP_CACHE (default /var/cache/vsnap-debootstrap), VSNAP_FORCE=1 to rebuild, VSNAP_JOBS (make -j).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
image=vsnap-criu-kit:4.2.1
base_image=vsnap-criu-base:trixie
mirror="${VSNAP_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
cache="${VSNAP_CRIU_CACHE:-$here/.cache}"
lock="$here/kit.lock"
log() { echo "criu-kit: $*" >&2; }
die() { log "$*"; exit 1; }

mkdir -p "$cache"
exec 9>"${TMPDIR:-/tmp}/vsnap-criu-kit-build.lock"
flock 9

input_hash="$(
  {
    printf 'mirror=%s\n' "$mirror"
    cd "$here" && find build.sh Dockerfile kit.lock prefix -type f -not -path "*/__pycache__/*" -print0 | sort -z \
      | xargs -0 sha256sum
  } | sha256sum | cut -d' ' -f1
)"
if [[ "${VSNAP_FORCE:-0}" != 1 ]]; then
  have="$(docker image inspect --format '{{ index .Config.Labels "ai.vsnap.input-hash" }}' "$image" 2>/dev/null || true)"
  if [[ "$have" == "$input_hash" ]]; then
    log "$image is up to date (input hash ${input_hash:0:12})"
    exit 0
  fi
fi
start=$(date +%s)

# ---- 1. inputs -------------------------------------------------------------------------------------------------
criu_version="$(awk '$1=="deb" && $2=="criu" {print $3}' "$lock")"
[[ -n "$criu_version" ]] || die "kit.lock names no criu package"
fetch() {  # fetch URL DEST SHA256: download (unless already cached with that hash), then verify
  local url=$1 dest=$2 sum=$3
  if [[ -f "$dest" ]] && echo "$sum  $dest" | sha256sum -c --status; then return 0; fi
  mkdir -p "$(dirname "$dest")"
  if command -v curl >/dev/null; then
    curl -fsS --retry 3 -o "$dest.part" "$url"
  else
    python3 -c 'import shutil, sys, urllib.request; shutil.copyfileobj(urllib.request.urlopen(sys.argv[1], timeout=60), open(sys.argv[2], "wb"))' "$url" "$dest.part"
  fi || die "cannot download $url (sid moved on? re-pin with docker/criu/lock.sh)"
  echo "$sum  $dest.part" | sha256sum -c --status || { rm -f "$dest.part"; die "sha256 mismatch for $url"; }
  mv "$dest.part" "$dest"
}
while read -r kind name version sum path; do
  fetch "$mirror/$path" "$cache/debs/$(basename "$path")" "$sum"
done < <(awk '$1=="deb"' "$lock")
read -r _ orig_name orig_sum orig_path < <(awk '$1=="orig"' "$lock")
fetch "$mirror/$orig_path" "$cache/src/$orig_name" "$orig_sum"
pip=(python3 -m pip)
"${pip[@]}" --version >/dev/null 2>&1 || pip=("$here/../../.venv/bin/python" -m pip)
"${pip[@]}" --version >/dev/null 2>&1 || die "no pip for downloading cuda-bindings (apt-get install python3-pip, or make install)"
while read -r _ file sum pyver; do
  dest="$cache/wheels/$file"
  if ! { [[ -f "$dest" ]] && echo "$sum  $dest" | sha256sum -c --status; }; then
    name="${file%%-*}"; version="${file#*-}"; version="${version%%-*}"
    args=(--no-deps --only-binary=:all: -d "$cache/wheels")
    [[ "$pyver" == any ]] || args+=(--python-version "$pyver" --implementation cp --platform manylinux_2_28_x86_64
      --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64)
    "${pip[@]}" download -q "${args[@]}" "${name//_/-}==$version" 2>&1 | grep -v '^WARNING: Location' >&2 || true
    [[ -f "$dest" ]] || die "pip did not download $file"
    echo "$sum  $dest" | sha256sum -c --status || die "sha256 mismatch for $file"
  fi
done < <(awk '$1=="wheel"' "$lock")
log "inputs ready in $cache ($(( $(date +%s) - start )) s)"

# ---- 2. stage the prefix ---------------------------------------------------------------------------------------
ctx="$cache/context"
rm -rf "$ctx"
mkdir -p "$ctx/src" "$ctx/prefix"
cp "$cache/src/$orig_name" "$ctx/src/"
cp "$here/Dockerfile" "$ctx/"
p="$ctx/prefix"
cp -a "$here/prefix/." "$p/"
find "$p" -name __pycache__ -prune -exec rm -rf {} +
x="$ctx/x"
while read -r _ name version _ path; do
  mkdir -p "$x/$name"
  dpkg -x "$cache/debs/$(basename "$path")" "$x/$name"
done < <(awk '$1=="deb"' "$lock")
install -D -m 0755 "$x/criu/usr/sbin/criu" "$p/libexec/criu"
mkdir -p "$p/lib/sid" "$p/lib/glibc"
while read -r _ name _; do
  [[ "$name" == criu || "$name" == libc6 ]] && continue
  cp -a "$x/$name"/usr/lib/x86_64-linux-gnu/*.so.* "$p/lib/sid/"
done < <(awk '$1=="deb"' "$lock")
# libc6 only for the kit-loader mode: its loader and libc.so.6 (the only glibc library criu's closure links).
cp -aL "$x/libc6/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" "$x/libc6/usr/lib/x86_64-linux-gnu/libc.so.6" \
  "$p/lib/glibc/"
# cuda-bindings: only what `cuda.bindings.driver` imports (no runtime/nvrtc/nvml/... modules, no sources).
while read -r _ file _ pyver; do
  dir="$p/lib/python/$pyver"
  [[ "$pyver" == any ]] && continue
  mkdir -p "$dir"
  python3 -m zipfile -e "$cache/wheels/$file" "$dir"
  for any in $(awk '$1=="wheel" && $4=="any" {print $2}' "$lock"); do
    python3 -m zipfile -e "$cache/wheels/$any" "$dir"
  done
  find "$dir" -maxdepth 1 -name '*.dist-info' -exec rm -rf {} +
  find "$dir" \( -name '*.pyx' -o -name '*.pxd' -o -name '*.in' -o -name '*.pyi' -o -name '*.cpp' -o -name '*.h' \) -delete
  find "$dir/cuda/bindings" -name '*.so' \( -name 'runtime*' -o -name 'cyruntime*' -o -name '*nvml*' -o -name '*nvrtc*' \
    -o -name '*nvjitlink*' -o -name '*nvvm*' -o -name '*cufile*' -o -name '*nvfatbin*' \) -delete
  find "$dir" -name '__pycache__' -prune -exec rm -rf {} +
done < <(awk '$1=="wheel"' "$lock")
{
  echo "criu_version=${criu_version%%-*}"
  echo "debian_criu=$criu_version (sid)"
  awk '$1=="deb" {print "deb_" $2 "=" $3}' "$lock"
  echo "orig_tarball=$orig_name"
  echo "orig_tarball_sha256=$orig_sum"
  awk '$1=="wheel" {print "wheel_" $4 "=" $2}' "$lock"
  echo "input_hash=$input_hash"
} >"$p/VERSION"
rm -rf "$x"
log "prefix staged: $(du -sh "$p" | cut -f1)"

# ---- 3. base image ---------------------------------------------------------------------------------------------
base_hash="$(printf 'suite=trixie\nmirror=%s\npackages=python3\n' "$mirror" | sha256sum | cut -d' ' -f1)"
have="$(docker image inspect --format '{{ index .Config.Labels "ai.vsnap.input-hash" }}' "$base_image" 2>/dev/null || true)"
if [[ "$have" != "$base_hash" ]]; then
  command -v debootstrap >/dev/null || die "debootstrap not found (apt-get install debootstrap; scripts/docker-up.sh does)"
  [[ "$(id -u)" == 0 ]] || die "debootstrap needs root"
  dcache="${VSNAP_DEBOOTSTRAP_CACHE:-/var/cache/vsnap-debootstrap}/criu-trixie"
  rootfs="$(mktemp -d /tmp/vsnap-criu-rootfs.XXXXXX)"
  trap 'rm -rf "$rootfs"' EXIT
  mkdir -p "$dcache"
  log "debootstrap trixie (minbase + python3) for $base_image"
  debootstrap --variant=minbase --cache-dir="$dcache" --include=python3 trixie "$rootfs/r" "$mirror" \
    >"$rootfs/debootstrap.log" 2>&1 || { tail -n 40 "$rootfs/debootstrap.log" >&2; exit 1; }
  rm -rf "$rootfs"/r/var/lib/apt/lists/* "$rootfs"/r/var/cache/apt/*.bin "$rootfs"/r/var/cache/apt/archives/*.deb \
    "$rootfs"/r/usr/share/doc/* "$rootfs"/r/usr/share/man/* "$rootfs"/r/usr/share/info/* "$rootfs"/r/var/log/*.log
  printf 'deb %s trixie main\n' "$mirror" >"$rootfs/r/etc/apt/sources.list"
  tar -C "$rootfs/r" --numeric-owner -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' --change 'ENV LANG=C.UTF-8' \
    --change "LABEL ai.vsnap.input-hash=$base_hash" --change 'LABEL org.opencontainers.image.title=vsnap-criu-base' \
    --change 'CMD ["/bin/bash"]' - "$base_image" >/dev/null
  rm -rf "$rootfs"
  trap - EXIT
  log "built $base_image ($(( $(date +%s) - start )) s so far)"
fi

# ---- 4. the kit image ------------------------------------------------------------------------------------------
log "docker build $image"
DOCKER_BUILDKIT=0 docker build --build-arg "BASE=$base_image" --build-arg "MIRROR=$mirror" \
  --build-arg "JOBS=${VSNAP_JOBS:-$(nproc)}" --label "ai.vsnap.input-hash=$input_hash" \
  --label "org.opencontainers.image.title=vsnap-criu-kit" --label "ai.vsnap.criu-version=${criu_version%%-*}" \
  -t "$image" "$ctx" >"$cache/docker-build.log" 2>&1 || { tail -n 60 "$cache/docker-build.log" >&2; die "docker build failed"; }
log "built $image in $(( $(date +%s) - start )) s (input hash ${input_hash:0:12})"
