"""The kinds that damage the fault artifact's own files before the restore, each verified as it is made (the step
fails otherwise) and undone before the follow-up restore: ``manifest`` (a field of ``manifest.json`` changed) and
``image`` (a CRIU core image truncated). Both through the box's named operations: any box."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, cast

from vsnap_qual.box import BoxFiles, RuntimeFailure
from vsnap_qual.contract import ARTIFACT
from vsnap_qual.faults.injector import Injector, Kind, Observation
from vsnap_qual.faults.lane import FaultLane
from vsnap_qual.model import ImageInjected, ManifestInjected
from vsnap_qual.procedure import Expect, Fault, before_mutation
from vsnap_qual.vllm_words import StepFailed

MANIFEST = f"{ARTIFACT}/manifest.json"


def corrupt_manifest(box: BoxFiles) -> None:
    """``schema_version`` 1 → 2, the manifest written back in place (same inode), compact with sorted keys as vLLM
    writes it."""
    try:
        manifest = json.loads(box.read_bytes(MANIFEST) or b"")
        manifest["schema_version"] = 2
        box.write_bytes(MANIFEST, json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode())
    except (RuntimeFailure, ValueError, TypeError) as exc:
        raise StepFailed(f"could not change the manifest: {exc}") from None


def truncate_image(box: BoxFiles) -> str:
    """Truncate the largest process core image to half; its path. A core image, not a pages image: CRIU 4.2.1 fails
    a short core image cleanly (``Read N bytes while M expected``, ``Restoring FAILED.``), but its restorer spins
    on a short pages image instead of failing, and vLLM passes CRIU no timeout (README: findings)."""
    images = f"{ARTIFACT}/images"
    try:
        cores = [e for e in box.list_dir(images, "core-*.img", depth=None) if e.type == "f"]
        if not cores:
            raise RuntimeFailure(f"no core-*.img under {images}")
        largest = max(cores, key=lambda e: (e.size, e.path))
        path = f"{images}/{largest.path}"
        box.truncate(path, largest.size // 2)
    except RuntimeFailure as exc:
        raise StepFailed(f"no images/ file to truncate: {exc}") from None
    return path


class ManifestInjector(Injector):
    """``manifest``: a manifest field changed (``schema_version`` 1 → 2), verified when made (it fails the step
    otherwise); undone before the follow-up restore."""

    undo_before_followup = True

    def inject(self, lane: FaultLane, injected: dict[str, object], env: dict[str, str]) -> None:
        corrupt_manifest(lane.box)
        cast(ManifestInjected, injected)["manifest"] = "schema_version=2"

    def fired(self, obs: Observation, injected: Mapping[str, Any]) -> bool:
        return bool(injected.get("manifest"))


class ImageInjector(Injector):
    """``image``: the largest core image truncated to half, verified when made (it fails the step otherwise);
    undone before the follow-up restore."""

    undo_before_followup = True

    def inject(self, lane: FaultLane, injected: dict[str, object], env: dict[str, str]) -> None:
        cast(ImageInjected, injected)["truncated"] = truncate_image(lane.box)

    def fired(self, obs: Observation, injected: Mapping[str, Any]) -> bool:
        return bool(injected.get("truncated"))


KINDS = (
    Kind(
        "manifest",
        ManifestInjector(),
        injected=ManifestInjected,
        faults=(
            Fault(
                "manifest-field", "a manifest field changed (schema_version 1 → 2)", "manifest",
                head=before_mutation("invalid snapshot manifest"),
            ),
        ),
    ),
    Kind(
        "image",
        ImageInjector(),
        injected=ImageInjected,
        faults=(Fault("image-truncated", "an images/ file truncated", "image", head=Expect(1, False, None, None)),),
    ),
)  # fmt: skip
