"""The user's checkout in a lane: its overlaid files as the engine processes imported them (the probe's reports
in the control directory) and as a fresh interpreter imports them, and the unit command run from the checkout with
its JUnit kept. Implements :class:`vsnap_qual.lane.protocols.OverlayUnit` over a box."""

from __future__ import annotations

from dataclasses import dataclass

from vsnap_qual import overlay
from vsnap_qual.box import Box, ControlDir, ExecResult
from vsnap_qual.config import LaneSpec, QualConfig
from vsnap_qual.contract import CHECKOUT, CONTROL
from vsnap_qual.control import read_json_files
from vsnap_qual.lane.snapshot_cli import recorded_command
from vsnap_qual.model import FreshImport, OverlayFileResult
from vsnap_qual.overlay import OverlayFile
from vsnap_qual.probe.vsnap_probe import control_files
from vsnap_qual.recorder import StepEvidence, StepRecorder


@dataclass(frozen=True, kw_only=True)
class LaneOverlayUnit:
    """The checkout's files and unit command in one lane's box."""

    box: Box
    control: ControlDir
    recorder: StepRecorder
    config: QualConfig
    spec: LaneSpec
    #: the overlaid files (none on an arm without the overlay)
    files: list[OverlayFile]
    #: where the image's ``vllm`` package is ("" when the probe did not say)
    package_dir: str

    def imports(self) -> list[OverlayFileResult]:
        """The overlaid modules as actually imported in each engine process (from the probe's reports)."""
        return overlay.imported(read_json_files(self.control, control_files.IMPORTS_GLOB), self.files, self.package_dir)

    def fresh_import(self, module: str) -> FreshImport:
        """A fresh interpreter's import of ``module``: exit code, its file and the file's sha256."""
        script = (
            f"import importlib, hashlib; m = importlib.import_module({module!r}); "
            "print(m.__file__); print(hashlib.sha256(open(m.__file__, 'rb').read()).hexdigest())"
        )
        fresh = self.box.exec(["python3", "-c", script], self.config.timeouts["exec"])
        lines = fresh.stdout.strip().splitlines()
        return FreshImport(
            exit_code=fresh.exit_code,
            path=lines[0] if lines else None,
            sha256=lines[1] if len(lines) > 1 else None,
        )

    def probe_loaded_pids(self) -> list[int]:
        names = self.control.names(control_files.LOADED_GLOB)
        return sorted(pid for pid in (control_files.pid_of(n) for n in names) if pid is not None)

    def run_unit_command(self, rec: StepEvidence[object]) -> tuple[ExecResult, str | None, str | None]:
        """The unit command with ``sh -c`` from the checkout, JUnit to the control directory: its result, the
        JUnit's text and where it is kept with the evidence (None, None when the command wrote none)."""
        name = "unit-junit.xml"
        self.control.remove(name)
        env = {"VSNAP_JUNIT": f"{CONTROL}/{name}", "PYTHONDONTWRITEBYTECODE": "1"}
        argv = ["sh", "-c", f"cd {CHECKOUT} && {self.config.unit_command}"]
        result = recorded_command(self.box, self.recorder, self.config, rec, argv, "exec", env, "unit")
        text = self.control.read_text(name)
        if text is None or not text.strip():
            return result, None, None
        kept = self.recorder.store.log_path(f"{self.spec.name}-{self.recorder.purpose}", "unit-junit", "xml")
        self.recorder.keep_log(rec, self.recorder.store.write_text(kept, text))
        return result, text, self.recorder.store.relative(kept)
