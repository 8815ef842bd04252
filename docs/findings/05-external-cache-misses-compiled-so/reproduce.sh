#!/usr/bin/env bash
# Finding 05: the artifact's record of the files it needs outside itself (the manifest's external_cache_files)
# misses the compiled kernels the dumped processes map: torch Inductor's .so files under /tmp/torchinductor_<user>
# (vLLM's sampler compiles one even with --enforce-eager). CRIU names mapped files by path without their content;
# when the cache is cleared (a new box, a tmp cleaner, a reboot with /tmp on tmpfs), restore passes vLLM's own
# checks and fails late, in CRIU, on the missing .so.
# Steps: create; the manifest's external_cache_files; the compile-cache files CRIU's files.img names; restore
# (control: works), SIGKILL the restored tree; remove the compile cache; restore again.
# Exit 0: files.img names compile-cache files the manifest does not list, and the restore without them fails in
# CRIU on one of them. 1: the manifest lists them, or vLLM refuses up front, or the restore works. 2: cannot run.
# About 3-5 minutes on 2 cores.
FINDING=05
# shellcheck source-path=SCRIPTDIR source=../common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"

b="$TAG"
box "$b" --network=host --ipc=private --shm-size=2g
create "$b"
say "the manifest's external_cache_files:"
x "$b" "python3 -c 'import json;m=json.load(open(\"$ART/manifest.json\"));print(\"  \", m.get(\"external_cache_files\", \"(no such field)\"))'"
mapfile -t mapped < <(x "$b" "python3 -c \"import re;d=open('$ART/images/files.img','rb').read();print('\\n'.join(sorted({'/'+m.decode().lstrip('/') for m in re.findall(rb'/?tmp/torchinductor_[A-Za-z0-9_.-]+/[\\x21-\\x7e]+?[.]so', d)})))\"")
((${#mapped[@]})) || verdict 1 "CRIU's files.img names no Inductor .so under /tmp/torchinductor_*"
say "compile-cache files CRIU's files.img names (reopened by path at restore):"
for f in "${mapped[@]}"; do say "  $f"; done
unlisted=()
for f in "${mapped[@]}"; do
  x "$b" "python3 -c 'import json,sys;m=json.load(open(\"$ART/manifest.json\"));sys.exit(any(\"$f\" in str(e) for e in m.get(\"external_cache_files\") or []))'" && unlisted+=("$f")
done
say "of those, not in external_cache_files: ${#unlisted[@]} of ${#mapped[@]}"
((${#unlisted[@]})) || verdict 1 "the manifest lists every compile-cache file the dump maps"

port="$(free_port)"
restore "$b" "$port" || verdict 2 "the first restore of a fresh artifact failed"
canary "$b" "$port"
kill_tree "$b"
cache="$(cut -d/ -f1-3 <<<"${unlisted[0]}")"
say "removing the compile cache $cache (what a new box or a tmp cleaner does)"
x "$b" "rm -rf $cache"
port="$(free_port)"
if restore "$b" "$port"; then
  kill_tree "$b"
  verdict 1 "the artifact restored without the compile cache"
fi
if x "$b" "grep -qhE \"Can't open file ${cache#/}/\" /tmp/restore.out $ART/images/restore.log"; then
  verdict 0 "external_cache_files misses ${#unlisted[@]} mapped Inductor .so file(s); without them the restore fails late, in CRIU"
fi
verdict 1 "the restore without the compile cache failed, but not in CRIU on a file of $cache"
