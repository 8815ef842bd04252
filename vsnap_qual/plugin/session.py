"""The controller's part of an active session (also the only process of a run without xdist): preflight and the
session record before anything starts, what xdist's workers are handed, the lane scheduler, the harness errors
every process reports, an interrupt, and at the end the session's end record, the reports and the verdict folded
into the exit status. Only this process writes the session's end and the reports."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import socket
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from vsnap_qual import __version__, model, options, procedure, progress, runtimes
from vsnap_qual.box import RuntimeFailure
from vsnap_qual.clock import utc_now
from vsnap_qual.config import QualConfig
from vsnap_qual.evidence import EvidenceStore, ReportDirInUse, redact_tree, refuse_used_report_dir
from vsnap_qual.faults import FaultCatalogue
from vsnap_qual.plugin.items import item_step
from vsnap_qual.plugin.lane_scheduling import lane_scheduling, overlap_plan, xdist_workers
from vsnap_qual.plugin.process import VsnapProcess, log
from vsnap_qual.run import invocation, probe_copy
from vsnap_qual.run.preflight import check_report_dir, run_preflight
from vsnap_qual.run.preflight_result import PreflightError, PreflightResult
from vsnap_qual.timing import plan

if TYPE_CHECKING:
    from vsnap_qual.report import ReportPaths


class VsnapSession(VsnapProcess):
    """The controller's session object (see the module docstring); registered as :attr:`NAME`."""

    NAME = "vsnap_qual-session"

    def __init__(self, config: pytest.Config, why: str, qual: QualConfig, catalogue: FaultCatalogue) -> None:
        try:  # a run into a directory that holds another run's files is refused before anything starts
            refuse_used_report_dir(qual.report_dir)
            check_report_dir(qual.report_dir)
        except (PreflightError, ReportDirInUse) as exc:
            raise pytest.UsageError(str(exc)) from None
        super().__init__(config, why, qual, catalogue)
        self.interrupted: str | None = None  # what stopped the run (pytest_keyboard_interrupt)
        self.report_paths: ReportPaths | None = None  # what pytest_sessionfinish wrote
        self.empty_shard = ""  # what an empty shard said (issue 46)
        self.plan_dir: str | None = None  # where xdist's workers hand over what they collected (the plan line)
        self.plan_said = False

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        qual = self.qual
        lines = [
            f"vsnap-qual {__version__}: image {qual.image}, model {qual.model}@{qual.revision[:12]}, "
            f"lanes {_lane_list(qual) or 'none'}, report {qual.report_dir}",
        ]
        if qual.shard is not None:
            lines.append(f"vsnap-qual {shard_line(qual)}")
        return lines

    def selected(self, labels: list[str], deselected: int) -> None:
        """The plan line, once the selection is known (without xdist: this process collected)."""
        self._say_plan(labels, deselected)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        """xdist hook: a worker collected; the plan line from the steps it handed over (``VsnapWorker.selected``),
        once (every worker collects the same items)."""
        if self.plan_said or self.plan_dir is None:
            return
        handed = Path(self.plan_dir) / f"{node.gateway.id}.json"
        try:
            found = json.loads(handed.read_text())
        except (OSError, ValueError):
            return
        self._say_plan(list(found["selected"]), int(found["deselected"]))

    def _say_plan(self, labels: list[str], deselected: int) -> None:
        qual = self.qual
        overlap = self.session_record.get("overlap") if self.session_record else None
        if overlap and overlap["scope"] == "lane":  # each lane a worker of its own, as the scheduler does (issue 45)
            units = {"/".join(label.split("/", 2)[:2]) for label in labels}
        else:  # a runner's lanes share a worker
            units = {label.split("/", 1)[0].split("+", 1)[0] for label in labels}
        parallel = min(max(1, xdist_workers(self.config)), max(1, len(units)))
        found = plan.estimate(qual.plan_history, qual.image, qual.cpu_smoke)
        line = plan.plan_line(labels, qual.fault_timeout, qual.observe_s, parallel, found, deselected=deselected)
        self.plan_said = True
        log.info("%s", line)
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"vsnap-qual {line}")

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        config = self.config
        qual = self.qual
        self.register_junit_names()
        progress.register(config, [lane.name for lane in qual.lanes])  # the step lines, after the terminal's
        log.info("active (%s): run %s, lanes %s, report %s", self.why, qual.run_id, _lane_list(qual), qual.report_dir)
        if qual.doctor:
            _doctor_or_usage_error(config)
        runtime = runtimes.create(qual.runtime, runtimes.settings_for(qual, say=progress.say_line(config)))
        try:
            result = run_preflight(qual, runtime)
        except PreflightError as exc:
            raise pytest.UsageError(str(exc)) from None
        log.info("preflight passed: images %s; GPUs %s; overlay files %d", result.images, result.gpus,
                 len(result.overlay))  # fmt: skip
        self.hold_session(result, self._session_record(result, runtime))

    def _session_record(self, result: PreflightResult, runtime: runtimes.Runtime) -> model.SessionRecord:
        """The run's first record: its options, what preflight learned, the coverage a full qualification
        requires, the probe every lane binds, the host; the runtime's boxes left by sessions that are gone are
        swept first."""
        config = self.config
        qual = self.qual
        probe = probe_copy.describe_probe(qual.probe_dir)  # what every lane binds: copied when the first starts
        smoke = probe_copy.describe_smoke() if qual.cpu_smoke else None
        swept = runtime.sweep()  # boxes of owners that are gone
        facts = runtime.host_facts()
        runtime.close()
        if swept:
            log.info("removed %d lane(s) left by sessions that are gone: %s", len(swept), ", ".join(map(str, swept)))
        record = model.SessionRecord(
            kind="session",
            time=utc_now(),
            run_id=qual.run_id,
            harness_version=__version__,
            started=utc_now(),
            options=qual.public_options(),
            preflight={
                "gpus": result.gpus,
                "lane_gpus": result.lane_gpus,
                "images": result.images,
                "packages": result.packages,
                "pulls": result.pulls,
            },
            coverage=_required_coverage(qual, result, self.catalogue),
            probe=probe,
            host={
                "kernel": platform.release(),
                "hostname": socket.gethostname(),
                "python": platform.python_version(),
                "docker_version": facts.get("docker_version"),
                "machine": platform.machine(),
                "cpus": os.cpu_count(),
            },
        )
        if smoke is not None:
            record["smoke"] = smoke
        record["overlap"] = overlap_plan(qual.overlap, qual.workers, qual.lanes, result.lane_gpus)
        if qual.shard is not None:
            record["shard"] = shard_info(qual, result, self.catalogue, config)
        # how to run it again (summary.md): the command as given, and the harness's own commit
        record["invocation"] = invocation.invocation(
            config.invocation_params.args, config.invocation_params.dir, os.environ
        )
        source = invocation.harness_source()
        if source is not None:
            record["harness_source"] = source
        return record

    @pytest.hookimpl(optionalhook=True, tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        """With ``-n``: each lane on a worker of its own where lanes overlap, else each runner's lanes on one
        (:func:`~vsnap_qual.plugin.lane_scheduling.lane_scheduling`; the session record's ``overlap``)."""
        overlap = self.session_record.get("overlap") if self.session_record else None
        return lane_scheduling(config, log, self.qual.lanes, overlap["scope"] if overlap else "runner")

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """xdist hook: hand the run id, what preflight learned and the session record to the workers (after the
        controller's preflight: xdist starts its workers in its own, later, ``pytest_sessionstart``)."""
        node.workerinput["vsnap_run_id"] = self.qual.run_id
        if self.plan_dir is None:
            self.plan_dir = tempfile.mkdtemp(prefix="vsnap-plan-")
        node.workerinput["vsnap_plan_dir"] = self.plan_dir
        if self.preflight is not None:
            node.workerinput["vsnap_preflight"] = self.preflight.to_json()
            node.workerinput["vsnap_session"] = json.dumps(self.session_record, default=str)

    @pytest.hookimpl(tryfirst=True, specname="pytest_collection_modifyitems")
    def pytest_collection_modifyitems_deselect(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """A ``--deselect`` that names no collected test is refused before any lane starts (pytest would ignore it
        and run what the user meant to leave out). Under xdist the workers collect: checked only here."""
        from vsnap_qual.run.selection import unmatched_deselects

        if not items:
            return  # xdist's controller collects nothing (its workers do), or a collection error said enough
        unmatched = unmatched_deselects(config.getoption("deselect", None) or [], [item.nodeid for item in items])
        if unmatched:
            raise pytest.UsageError(unmatched)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self._harness_error("collection", report.nodeid, _failure_message(report))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed and report.when in ("setup", "teardown"):
            phase: model.HarnessPhase = "setup" if report.when == "setup" else "teardown"
            self._harness_error(phase, report.nodeid, _failure_message(report))

    def _harness_error(self, phase: model.HarnessPhase, nodeid: str, message: str) -> None:
        """A collection, setup or teardown error goes into the evidence (the controller sees every worker's)."""
        self.store.write(
            model.HarnessErrorRecord(kind="harness_error", time=utc_now(), phase=phase, nodeid=nodeid, message=message)
        )

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        """Ctrl-C, or SIGTERM (made an interrupt in ``pytest_configure``): the run was stopped, not failed; its
        ``session_end`` says so and the verdict is INTERRUPTED."""
        self.interrupted = str(excinfo.value) or "Ctrl-C"

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        config = self.config
        if self.plan_dir is not None:
            shutil.rmtree(self.plan_dir, ignore_errors=True)
        qual = self.qual
        store = self.store
        if qual.shard is not None and not qual.lanes and not config.option.collectonly:
            self._empty_shard(session)
            return
        with contextlib.suppress(RuntimeFailure):
            runtime = runtimes.create(qual.runtime, runtimes.settings_for(qual))
            runtime.sweep(session=qual.run_id)
            runtime.close()
        if config.option.collectonly or not (store.started or store.holds("harness_error")):
            # nothing ran (refused, --co, nothing selected, stopped before the first lane): the report directory is
            # left as it was, no verdict is rendered and nothing is appended to a CI summary. A harness error (a
            # suite that does not collect, a fixture that breaks) is a failed run: its evidence is written.
            return
        store.open()
        redact_tree(qual.report_dir, store.redact)  # engine logs were written by the engine, unfiltered
        limited = _environment_limitations(store)
        end = model.SessionEndRecord(
            kind="session_end",
            time=utc_now(),
            ended=utc_now(),
            exitstatus=int(session.exitstatus),
            complete=True,
            environment_limitations=limited,
        )
        if self.interrupted is not None:
            end["interrupted"] = self.interrupted
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:  # what pytest's summary line will say: the report's header says the same
            end["pytest_counts"] = progress.pytest_counts(reporter.stats)
        store.write(end)
        from vsnap_qual.report import write_reports

        paths = write_reports(
            qual.report_dir, github_step_summary=True, annotate=qual.annotate, extra_secret_names=qual.secret_names
        )
        self.report_paths = paths
        log.info("verdict %s; reports written to %s", paths.verdict, qual.report_dir)
        if paths.verdict != "pass" and session.exitstatus == 0:
            # a PARTIAL (a required step skipped or not reached) or failed verdict is not a qualification
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        elif paths.verdict == "pass" and session.exitstatus == pytest.ExitCode.TESTS_FAILED:
            # the verdict passed although steps failed: each failed on a known finding (report.known), which
            # does not fail the run by itself (the verdict counted pytest's failed tests against them)
            session.exitstatus = pytest.ExitCode.OK

    def _empty_shard(self, session: pytest.Session) -> None:
        """A shard that holds no lane of the matrix (more shards than lane columns): it says so, writes its shard
        record (the session record and its end, nothing run) and exits 0."""
        qual = self.qual
        shard = qual.shard
        assert shard is not None
        store = self.store
        if self.session_record is None:  # refused before preflight: nothing to record
            return
        store.open()
        store.write(
            model.SessionEndRecord(kind="session_end", time=utc_now(), ended=utc_now(), exitstatus=0, complete=True)
        )
        said = (
            f"shard {shard.shard} of matrix {self.session_record['shard']['matrix_id']} holds no lane: nothing to run"
        )
        (qual.report_dir / "summary.md").write_text(f"## vsnap-qual: {said}\n", encoding="utf-8")
        self.empty_shard = said
        session.exitstatus = pytest.ExitCode.OK

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        if self.empty_shard:
            terminalreporter.section("vsnap-qual")
            terminalreporter.write_line(self.empty_shard)
            return
        if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
            self._nothing_selected(terminalreporter)
        paths = self.report_paths
        if paths is None:
            return
        from vsnap_qual.report.terminal import terminal_summary_lines

        terminalreporter.section("vsnap-qual")
        counts = progress.pytest_counts(terminalreporter.stats)
        for line in terminal_summary_lines(paths.results, paths, pytest_counts=counts):
            terminalreporter.write_line(line)
        for report in terminalreporter.stats.get("skipped", []):  # by-design skips are "not applicable", not here
            if getattr(report, "vsnap_step", None) is not None:
                reason = progress.without_lane(progress.skip_reason(report), report.vsnap_lane)
                terminalreporter.write_line(f"skipped: {report.vsnap_lane} {report.vsnap_step}: {reason}", yellow=True)
        for note in paths.notes:
            terminalreporter.write_line(f"note: {note}")
        for line in _environment_limitations(self.store):
            terminalreporter.write_line(f"not qualified (environment limitation): {line}", red=True)

    def _nothing_selected(self, terminalreporter: Any) -> None:
        """pytest's exit 5 on the suites: say what the selection could have chosen."""
        from vsnap_qual.run.selection import nothing_selected_lines

        config = self.config
        terminalreporter.section("vsnap-qual")
        for line in nothing_selected_lines(
            lanes=[lane.name for lane in self.qual.lanes],
            faults=self.catalogue.ids,
            tests=[getattr(item, "originalname", item.name) for item in self.deselected if item_step(item)],
            keyword=config.option.keyword or "",
            markexpr=config.option.markexpr or "",
        ):
            terminalreporter.write_line(line, yellow=True)


def shard_line(qual: QualConfig) -> str:
    """The header's shard line: which shard, where that was read, its lanes and how the shards were balanced."""
    plan_ = qual.shard
    assert plan_ is not None
    loads = ", ".join(f"{k}: {load:g}" for k, load in plan_.loads.items())
    return (
        f"shard {plan_.shard} (from {plan_.shard.source}): lanes {', '.join(plan_.lanes) or 'none (an empty shard)'} "
        f"of {len(plan_.assignment)}; balanced by {plan_.balanced_by} (loads {loads})"
    )


def matrix_inputs(
    qual: QualConfig, pre: PreflightResult, catalogue: FaultCatalogue, config: pytest.Config
) -> dict[str, object]:
    """What defines the matrix, and so its id (issue 46): the images and their IDs, the model, runners, variants,
    engine arguments, the faults and the selection; never the clock, the host or where the report goes."""
    return {
        "runtime": qual.runtime,
        "image": qual.image,
        "base_image": qual.base_image,
        "image_ids": dict(sorted(pre.images.items())),
        "model": qual.model,
        "revision": qual.revision,
        "tokenizer_revision": qual.tokenizer_revision,
        "dtype": qual.dtype,
        "max_model_len": qual.max_model_len,
        "engine_args": list(qual.engine_args),
        "runners": list(qual.runners),
        "variants": {variant.name: list(variant.args) for variant in qual.variants},
        "overlay": sorted(f"{f.relative}:{f.sha256}" for f in pre.overlay),
        "unit_command": qual.unit_command,
        "cpu_smoke": qual.cpu_smoke,
        "expect": [qual.expect, qual.base_expect],
        "faults": list(catalogue.ids),
        # issue 45: where the kinds refused before any engine starts run (said only where it is not the default,
        # so a matrix's id stays what it was)
        **({"fault_runners": qual.fault_runners} if qual.fault_runners != "once" else {}),
        "selection": {
            "keyword": config.option.keyword or "",
            "markexpr": config.option.markexpr or "",
            "deselect": sorted(str(d) for d in (config.getoption("deselect", None) or [])),
        },
    }


def shard_info(
    qual: QualConfig, pre: PreflightResult, catalogue: FaultCatalogue, config: pytest.Config
) -> model.ShardInfo:
    """The session record's ``shard``: this shard, the matrix's id and assignment, and what the whole matrix
    requires (the merge's coverage)."""
    from vsnap_qual.run.shards import matrix_id

    plan_ = qual.shard
    assert plan_ is not None
    inputs = matrix_inputs(qual, pre, catalogue, config)
    lanes = [(lane.column, lane.arm, lane.overlaid and bool(pre.overlay)) for lane in qual.matrix_lanes]
    return model.ShardInfo(
        k=plan_.shard.k,
        n=plan_.shard.n,
        source=plan_.shard.source,
        matrix_id=matrix_id(inputs),
        matrix=inputs,
        lanes=list(plan_.lanes),
        matrix_lanes=[
            model.ShardLane(name=lane.name, column=lane.column, arm=lane.arm, shard=plan_.assignment[lane.name])
            for lane in qual.matrix_lanes
        ],
        balanced_by=plan_.balanced_by,
        required=procedure.required(lanes, catalogue.ids, unit=bool(qual.unit_command)),
    )


def _lane_list(qual: QualConfig) -> str:
    return ", ".join(lane.name for lane in qual.lanes)


def _failure_message(report: pytest.CollectReport | pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    message = getattr(crash, "message", None)
    if not message:
        lines = [line for line in str(report.longreprtext or "").splitlines() if line.strip()]
        message = lines[-1] if lines else "(no message)"
    return str(message)[:2000]


def _required_coverage(qual: QualConfig, pre: PreflightResult, catalogue: FaultCatalogue) -> model.Coverage:
    """What a full qualification of this configuration runs: the verdict is a PASS only when all of it passed
    (or the user narrowed the selection, and then the verdict says what was left out)."""
    lanes = [(lane.column, lane.arm, lane.overlaid and bool(pre.overlay)) for lane in qual.lanes]
    return {
        "runners": list(qual.columns),
        "arms": list(dict.fromkeys(lane.arm for lane in qual.lanes)),
        "overlay": bool(pre.overlay),
        "faults": catalogue.ids,
        "observe_s": qual.observe_s,
        "request_shapes": list(qual.request_shapes),
        "required": procedure.required(lanes, catalogue.ids, unit=bool(qual.unit_command)),
    }


def _doctor_or_usage_error(config: pytest.Config) -> None:
    """``--vsnap-doctor``: the doctor's checks first; a failed required check stops the run before any lane."""
    from vsnap_qual.cli import doctor

    results = doctor.run_checks(options.resolve(config))
    failed = [r for r in results if r.status == "FAIL" and r.required]
    if failed:
        raise pytest.UsageError("vsnap-qual doctor: " + "; ".join(r.line() for r in failed))


def _environment_limitations(store: EvidenceStore) -> list[str]:
    """Steps skipped because vLLM said this host or image cannot do them (see ``steps.LIMITATIONS``)."""
    from vsnap_qual.evidence import read_records

    return [
        f"{r.get('lane')} {r.get('step')}: {r.get('message')}"
        for r in read_records(store.path)
        if r.get("kind") == "step"
        and r.get("outcome") == "skipped"
        and str(r.get("message", "")).startswith("environment limitation")
    ]
