"""Install the reference `vllm` package the way pip would: package files, a `vllm-<version>.dist-info`
(METADATA, entry_points.txt, RECORD) and a `vllm` console script.

The dist-info also holds `vsnap-labels.json`: the same `ai.vsnap.*` labels the reference image carries (what the
engine is, what it simulates), so a Python with this package installed (the host runtime's target) says what it is
as the image does; vsnap-qual reads them (`vsnap_qual/run/package_probe.py`) as it reads any target's labels.

Usage: python3 install_engine.py ENGINE_DIR FLAVOUR SITE_PACKAGES BIN_DIR
The flavour overlay (engine/flavours/<flavour>/vllm/...) replaces or adds modules of the common package.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import sys
from pathlib import Path

VERSIONS = {"base": "0.33.0+vsnapref", "head": "0.33.1.dev0+vsnapref"}
#: as the image's LABELs (docker/reference/Dockerfile; a test keeps them equal)
LABELS = {
    "ai.vsnap.engine": "vsnap reference engine, a miniature vLLM written for vsnap-qual (not vLLM)",
    "ai.vsnap.simulated": "gpu",
}


def record_line(path: Path, root: Path) -> str:
    payload = path.read_bytes()
    digest = base64.urlsafe_b64encode(hashlib.sha256(payload).digest()).rstrip(b"=").decode()
    return f"{path.relative_to(root).as_posix()},sha256={digest},{len(payload)}"


def main() -> None:
    engine, flavour, site, bin_dir = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4])
    version = VERSIONS[flavour]
    target = site / "vllm"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(engine / "vllm", target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    overlay = engine / "flavours" / flavour / "vllm"
    shutil.copytree(overlay, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (target / "version.py").write_text(
        f'"""Generated at image build."""\n\n__version__ = "{version}"\nFLAVOUR = "{flavour}"\n'
    )
    for stale in site.glob("vllm-*.dist-info"):
        shutil.rmtree(stale)
    dist_info = site / f"vllm-{version}.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(
        "Metadata-Version: 2.1\n"
        "Name: vllm\n"
        f"Version: {version}\n"
        "Summary: vsnap reference engine: a miniature vLLM honouring the initialized-snapshot contract\n"
        "Requires-Python: >=3.11\n"
    )
    (dist_info / "entry_points.txt").write_text("[console_scripts]\nvllm = vllm.entrypoints.cli.main:main\n")
    (dist_info / "INSTALLER").write_text("vsnap-reference\n")
    (dist_info / "vsnap-labels.json").write_text(json.dumps(LABELS, indent=1, sort_keys=True) + "\n")
    (dist_info / "top_level.txt").write_text("vllm\n")
    (dist_info / "WHEEL").write_text(
        "Wheel-Version: 1.0\nGenerator: vsnap-reference\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "vllm"
    script.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        "from vllm.entrypoints.cli.main import main\n"
        "if __name__ == '__main__':\n"
        "    sys.argv[0] = sys.argv[0].removesuffix('.exe')\n"
        "    sys.exit(main())\n"
    )
    script.chmod(0o755)
    files = sorted(path for path in [*target.rglob("*"), *dist_info.iterdir()] if path.is_file())
    lines = [record_line(path, site) for path in files if path.name != "RECORD"]
    lines.append(f"{dist_info.name}/RECORD,,")
    (dist_info / "RECORD").write_text("\n".join(lines) + "\n")
    print(f"installed vllm {version} ({flavour}) into {site}")


if __name__ == "__main__":
    main()
