#!/usr/bin/env bash
# The unit-command row by hand, as the harness's --vsnap-unit-command will do it: run one command from an overlay
# checkout inside the head image (with the checkout's changed vllm/ files bound over the image's, like
# --vsnap-overlay) and inside the base image (unchanged), record pass/fail per test id (JUnit), and judge only the
# failures that are new on the head arm.
# Usage: unit-both.sh CHECKOUT [REF]      (REF default HEAD~1: the files `git diff --name-only REF HEAD` changes)
# Env: VSNAP_UNIT_HEAD (default vsnap-vllm-cpu:0.32.0), VSNAP_UNIT_BASE (default vsnap-vllm-cpu:0.31.0),
#      VSNAP_UNIT_COMMAND (default: the command below), VSNAP_UNIT_OUT (default build/unit-<checkout name>).
# Exit: 0 when no failure is new on head, 1 otherwise, 2 on a usage or setup error.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
checkout="$(cd "${1:?usage: unit-both.sh CHECKOUT [REF]}" && pwd)"
ref="${2:-HEAD~1}"
head_image="${VSNAP_UNIT_HEAD:-vsnap-vllm-cpu:0.32.0}"
base_image="${VSNAP_UNIT_BASE:-vsnap-vllm-cpu:0.31.0}"
command="${VSNAP_UNIT_COMMAND:-PYTHONDONTWRITEBYTECODE=1 pytest tests/vsnap_snapshot -q -rA -p no:cacheprovider --junitxml=\"\$VSNAP_JUNIT\"}"
out="${VSNAP_UNIT_OUT:-$repo/build/unit-$(basename "$checkout")}"
site=/opt/vllm/lib/python3.11/site-packages
rm -rf "$out" && mkdir -p "$out"

mapfile -t changed < <(git -C "$checkout" diff --name-only "$ref" HEAD -- 'vllm/*.py')
overlay=()
for f in "${changed[@]}"; do overlay+=(-v "$checkout/$f:$site/$f:ro"); done
echo "unit-both: checkout $checkout, overlay on head: ${changed[*]:-(none)}" >&2

for arm in head base; do
  image="$head_image"; mounts=("${overlay[@]}")
  if [[ "$arm" == base ]]; then image="$base_image"; mounts=(); fi
  start=$SECONDS
  set +e
  docker run --rm --network none --label ai.vsnap.owner=vsnap-h1-unit --name "vsnap-h1-unit-$arm-$$" \
    -v "$checkout:/vsnap/checkout:ro" -v "$out:/vsnap/out" "${mounts[@]}" -w /vsnap/checkout \
    -e VSNAP_JUNIT="/vsnap/out/junit-$arm.xml" "$image" sh -c "$command" >"$out/$arm.log" 2>&1
  rc=$?
  set -e
  printf '%s\t%s\texit %s\t%s s\n' "$arm" "$image" "$rc" "$((SECONDS - start))" | tee -a "$out/arms.tsv" >&2
  tail -n 3 "$out/$arm.log" >&2
done

python3 - "$out" <<'PY'
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

out = Path(sys.argv[1])


def outcomes(arm: str) -> dict[str, str]:
    path = out / f"junit-{arm}.xml"
    if not path.exists():
        sys.exit(f"unit-both: no JUnit from the {arm} arm (see {out}/{arm}.log)")
    result = {}
    for case in ET.parse(path).iter("testcase"):
        test_id = f"{case.get('classname')}::{case.get('name')}"
        kinds = {child.tag for child in case}
        result[test_id] = (
            "failed" if kinds & {"failure", "error"} else "skipped" if "skipped" in kinds else "passed"
        )
    return result


head, base = outcomes("head"), outcomes("base")
new = sorted(t for t, o in head.items() if o == "failed" and base.get(t) != "failed")
pre = sorted(t for t, o in head.items() if o == "failed" and base.get(t) == "failed")
fixed = sorted(t for t, o in base.items() if o == "failed" and head.get(t) == "passed")
lines = [
    f"head: {sum(o == 'passed' for o in head.values())} passed, {sum(o == 'failed' for o in head.values())} failed",
    f"base: {sum(o == 'passed' for o in base.values())} passed, {sum(o == 'failed' for o in base.values())} failed",
    f"new failures on head ({len(new)}): " + (", ".join(new) or "none"),
    f"pre-existing (failing on base too) ({len(pre)}): " + (", ".join(pre) or "none"),
    f"failing on base, passing on head ({len(fixed)}): " + (", ".join(fixed) or "none"),
]
(out / "verdict.txt").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
sys.exit(1 if new else 0)
PY
