"""Break, one at a time, each behaviour tests/vsnap_snapshot guards, and show which tests then fail.

Usage: python3 docker/vllm-cpu/overlay-tests/mutate.py CHECKOUT [IMAGE]   (default vsnap-vllm-cpu:0.32.0)

Each mutation replaces one exact piece of an installed vLLM file (taken from the overlay checkout, which holds the
image's own files) and binds the changed copy over the image's module, as an overlay would; the suite then runs in
a throwaway container. A mutation whose text is not found exactly once is reported and skipped, never guessed.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

SITE = "/opt/vllm/lib/python3.11/site-packages"
MUTATIONS: list[tuple[str, str, str, str]] = [
    # (what breaks, file, exact text, replacement)
    ("manifest accepts unknown fields", "vllm/snapshot/manifest.py", 'extra="forbid"', 'extra="ignore"'),
    (
        "schema_version check gone",
        "vllm/snapshot/manifest.py",
        "if type(value) is not int or value != 1:",
        "if False:",
    ),
    (
        "cuda_holders subset check gone",
        "vllm/snapshot/manifest.py",
        "if not set(self.cuda_holders).issubset(self.process_tree):",
        "if False:",
    ),
    (
        "duplicate PIDs accepted",
        "vllm/snapshot/manifest.py",
        "if len(set(self.process_tree)) != len(",
        "if False and (",
    ),
    ("manifest written 0644", "vllm/snapshot/manifest.py", "flags, 0o600)", "flags, 0o644)"),
    ("artifact dir mode unchecked", "vllm/snapshot/manifest.py", "& 0o077:", "& 0o000:"),
    ("symlinked artifact accepted", "vllm/snapshot/manifest.py", "if path.is_symlink():\n", "if False:\n"),
    ("identity never compared", "vllm/snapshot/manifest.py", "    if differing:\n", "    if False:\n"),
    (
        "read_manifest no longer names the field",
        "vllm/snapshot/manifest.py",
        'f"invalid snapshot manifest: {_validation_path(error)}"',
        '"invalid snapshot manifest"',
    ),
    ("manifest overwritten", "vllm/snapshot/manifest.py", "elif path.exists() or path.is_symlink():", "elif False:"),
    (
        "abbreviated --snapshot-dir passed to the child",
        "vllm/snapshot/controller.py",
        '"--snapshot-dir".startswith(option)',
        'option == "--snapshot-dir"',
    ),
    (
        "sleep mode not appended",
        "vllm/snapshot/controller.py",
        'child_argv.append("--enable-sleep-mode")',
        "pass",
    ),
    (
        "API key values kept",
        "vllm/snapshot/runtime.py",
        '                redacted_argv[index] = "***"\n',
        "                pass\n",
    ),
    (
        "VLLM_API_KEY in the identity",
        "vllm/snapshot/runtime.py",
        'and key not in {"VLLM_API_KEY", "VLLM_SNAPSHOT_TIMEOUT_S"}',
        "and True",
    ),
    (
        "worker method default not counted",
        "vllm/snapshot/runtime.py",
        '\n        environment.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")\n',
        "\n",
    ),
    ("timeout unchecked", "vllm/snapshot/runtime.py", 'if not 0 < self.timeout_s < float("inf"):', "if False:"),
    (
        "any link_remap.* counted",
        "vllm/snapshot/runtime.py",
        'and path.name.removeprefix("link_remap.").isdigit()\n        }',
        "\n        }",
    ),
    ("oracle of two tokens accepted", "vllm/snapshot/types.py", "if len(self.token_ids) != 1:", "if False:"),
    ("oracle text not compared", "vllm/snapshot/types.py", "and expected.text == actual.text", ""),
    ("oracle tolerance 1e-2", "vllm/snapshot/types.py", "abs_tol=1e-3,", "abs_tol=1e-2,"),
    (
        "any revision accepted",
        "vllm/entrypoints/cli/snapshot.py",
        "or len(revision) != 40\n",
        "or len(revision) < 4\n",
    ),
    ("parallel sizes unchecked", "vllm/entrypoints/cli/snapshot.py", "if size != 1:", "if False:"),
    ("VLLM_API_KEY env ignored", "vllm/entrypoints/cli/snapshot.py", 'or os.environ.get("VLLM_API_KEY")', ""),
    (
        "raw logits accepted",
        "vllm/entrypoints/cli/snapshot.py",
        'if args.logprobs_mode in {"raw_logits", "processed_logits"}:',
        "if False:",
    ),
    (
        "restore port default 8001",
        "vllm/entrypoints/cli/snapshot.py",
        "type=int, default=8000",
        "type=int, default=8001",
    ),
]


def main(checkout: Path, image: str) -> int:
    failed_any = True
    rows = []
    with tempfile.TemporaryDirectory(prefix="vsnap-h1-mutate-") as tmp:
        for index, (what, rel, old, new) in enumerate(MUTATIONS):
            text = (checkout / rel).read_text()
            if text.count(old) != 1:
                rows.append((what, rel, f"SKIPPED: text found {text.count(old)} times"))
                failed_any = False
                continue
            mutant = Path(tmp) / str(index) / rel
            mutant.parent.mkdir(parents=True)
            mutant.write_text(text.replace(old, new))
            run = subprocess.run(
                [
                    "docker", "run", "--rm", "--network", "none", "--label", "ai.vsnap.owner=vsnap-h1-mutate",
                    "-v", f"{checkout}:/vsnap/checkout:ro", "-v", f"{mutant}:{SITE}/{rel}:ro", "-w", "/vsnap/checkout",
                    "-e", "PYTHONDONTWRITEBYTECODE=1", image,
                    "pytest", "tests/vsnap_snapshot", "-q", "-p", "no:cacheprovider", "-rf",
                ],
                capture_output=True, text=True, timeout=600,
            )  # fmt: skip
            failing = sorted(set(re.findall(r"^FAILED (.+?)(?: - .*)?$", run.stdout, re.M)))
            if not failing:
                failed_any = False
            rows.append((what, rel, ", ".join(f.split("::", 1)[1] for f in failing) or "NOTHING FAILED"))
            print(f"{what}: {rows[-1][2]}", file=sys.stderr)
    print("| broken behaviour | file | tests that fail |\n|---|---|---|")
    for what, rel, failing in rows:
        print(f"| {what} | `{rel}` | {failing} |")
    return 0 if failed_any else 1


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    sys.exit(main(Path(sys.argv[1]).resolve(), sys.argv[2] if len(sys.argv) == 3 else "vsnap-vllm-cpu:0.32.0"))
